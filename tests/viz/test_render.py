import warnings

import jax
import numpy as np
import pytest
from PIL import Image

from gigastep import EnvConfig, GigastepEnv
from gigastep.viz.render import frame, render_episode, save_gif, save_video, tile, upscale


def test_upscale_repeats_each_pixel_scale_times_per_axis():
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    big = upscale(image, 2)
    assert big.shape == (4, 6, 3)
    np.testing.assert_array_equal(big[2:4, 4:6], np.broadcast_to(image[1, 2], (2, 2, 3)))


def test_tile_places_images_row_by_row_with_gaps():
    a = np.full((2, 2, 3), 10, np.uint8)
    b = np.full((2, 2, 3), 20, np.uint8)
    c = np.full((2, 2, 3), 30, np.uint8)
    out = tile([a, b, c], columns=2, gap=1)
    # 2 rows x 2 columns of 2x2 images with 1-pixel gaps: 5 x 5.
    assert out.shape == (5, 5, 3)
    assert out[0, 0, 0] == 10 and out[0, 3, 0] == 20 and out[3, 0, 0] == 30
    assert out[2, 2, 0] == 64  # gap colour
    assert out[3, 3, 0] == 64  # empty cell


def test_tile_rejects_mixed_shapes():
    with pytest.raises(ValueError, match="one shape"):
        tile([np.zeros((2, 2, 3), np.uint8), np.zeros((3, 2, 3), np.uint8)])


def test_frame_and_gif_round_trip(tmp_path):
    env = GigastepEnv(EnvConfig(teams=(0, 1), obs_type="rgb", resolution_x=12, resolution_y=10))
    obs, state = env.reset(jax.random.key(0))
    picture = frame(env, state, obs, agents=2, scale=2)
    # global view + 2 ego views of 12 x 10, upscaled x2, tiled in one row with 2-pixel gaps,
    # transposed to (height = y, width = x).
    assert picture.shape == (20, 3 * 24 + 2 * 2, 3)
    obs, state, *_ = env.step(state, np.ones((2, 3), np.float32), jax.random.key(1))
    later = frame(env, state, obs, agents=2, scale=2)
    assert not np.array_equal(picture, later)
    path = tmp_path / "game.gif"
    save_gif([picture, later], path, fps=5)
    with Image.open(path) as gif:
        assert gif.n_frames == 2
        assert gif.size == (picture.shape[1], picture.shape[0])
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


# ------------------------------------------------------------------------------------------
# Video frames (render_episode, FrameRenderer) and video files
# ------------------------------------------------------------------------------------------

RGB_2V2 = "identical_2_vs_2_fobs_rgb_void_cont"
SMALL = {"resolution_x": 24, "resolution_y": 24}


@pytest.fixture(scope="module")
def circle_frames():
    # circle vs circle never ends early: 6 steps give the start plus 6 frames.
    return render_episode(
        RGB_2V2, ("circle", "circle"), steps=6, seed=1, agents=(0, 3), scale=2, overrides=SMALL
    )


@pytest.mark.slow
def test_a_rendered_gif_has_a_frame_per_state_and_the_renderers_size(circle_frames, tmp_path):
    from gigastep.registry import make
    from gigastep.viz.render import FrameRenderer

    shape = FrameRenderer(make(RGB_2V2, **SMALL), agents=(0, 3), scale=2).shape
    assert len(circle_frames) == 7
    assert all(f.shape == shape and f.dtype == np.uint8 for f in circle_frames)
    assert shape[0] % 2 == 0 and shape[1] % 2 == 0
    # legend + global view + 2 ego views of 24 x 24 pixels at scale 2, with gaps
    assert shape[1] >= 3 * 48
    path = tmp_path / "game.gif"
    save_video(circle_frames, path, fps=5)
    with Image.open(path) as gif:
        assert gif.n_frames == 7 and gif.size == (shape[1], shape[0])
    assert not np.array_equal(circle_frames[0], circle_frames[-1])


def _region(frame, renderer, view, x0, x1, y0, y1):
    """Pixels of `view` between view pixels [x0, x1) and [y0, y1) (world x across)."""
    r, c = renderer.view_origin(view)
    s = renderer.scale
    return frame[r + y0 * s : r + y1 * s, c + x0 * s : c + x1 * s]


def test_frames_show_team_colours_and_health_bars():
    from gigastep.env import GigastepEnv
    from gigastep.types import EnvState
    from gigastep.viz.render import HEALTH_EMPTY, HEALTH_FULL, TEAM_RGB, FrameRenderer

    env = GigastepEnv(
        EnvConfig(
            teams=(0, 0, 1, 1),
            obs_type="rgb",
            resolution_x=40,
            resolution_y=40,
            limit_x=10.0,
            limit_y=10.0,
        )
    )
    # 4 pixels per world unit: agents at view pixels (8, 12), (28, 12), (8, 28), (28, 28).
    state = EnvState.create(
        env.config,
        x=[2.0, 7.0, 2.0, 7.0],
        y=[3.0, 3.0, 7.0, 7.0],
        health=[0.5, 1.0, 1.0, 1.0],
        alive=[True, True, True, False],
    )
    batch = jax.tree_util.tree_map(lambda x: x[None], state)
    renderer = FrameRenderer(env, names=("blue", "red"), scale=4)  # bars 12 pixels wide
    frame = renderer.frames(batch)[0]
    # Alive agents in their team's colour (z = 0: no green), the dead one not drawn.
    assert tuple(_region(frame, renderer, 0, 8, 9, 12, 13)[1, 1]) == TEAM_RGB[0]
    assert tuple(_region(frame, renderer, 0, 8, 9, 28, 29)[1, 1]) == TEAM_RGB[1]
    assert not _region(frame, renderer, 0, 27, 30, 27, 30).any()

    # Health bars just above each alive agent: half green for agent 0, all green for agent 1,
    # none over the dead agent.
    def bar(x, y):
        above = _region(frame, renderer, 0, x - 2, x + 3, y - 3, y - 1).reshape(-1, 3)
        return (np.all(above == HEALTH_FULL, 1).sum(), np.all(above == HEALTH_EMPTY, 1).sum())

    green, grey = bar(8, 12)
    assert green > 0 and green == grey
    green, grey = bar(28, 12)
    assert green > 0 and grey == 0
    assert bar(28, 28) == (0, 0)
    # The legend has both team swatches and a half-full bar for agent 0.
    legend = frame[:, :200].reshape(-1, 3)
    for colour in TEAM_RGB:
        assert np.all(legend == colour, 1).sum() >= 100


def test_an_mp4_is_written_when_the_video_extra_is_installed(circle_frames, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v2 as imageio

    path = tmp_path / "game.mp4"
    save_video(circle_frames, path, fps=5)
    with warnings.catch_warnings():  # the reader runs ffmpeg: JAX warns about the fork
        warnings.simplefilter("ignore", RuntimeWarning)
        with imageio.get_reader(path) as reader:
            assert reader.count_frames() == len(circle_frames)
            first = reader.get_data(0)
    assert first.shape == circle_frames[0].shape
    assert list(tmp_path.iterdir()) == [path]


def test_save_video_needs_a_gif_or_mp4_name(circle_frames, tmp_path):
    with pytest.raises(ValueError, match="must end in .gif or .mp4"):
        save_video(circle_frames, tmp_path / "game.avi")
    with pytest.raises(ValueError, match="one shape"):
        save_video(
            [np.zeros((4, 4, 3), np.uint8), np.zeros((4, 6, 3), np.uint8)], tmp_path / "x.gif"
        )


def test_ego_views_need_rgb_observations():
    from gigastep.viz.render import FrameRenderer

    env = GigastepEnv(EnvConfig(teams=(0, 1), obs_type="vector"))
    with pytest.raises(ValueError, match="ego views need RGB observations"):
        FrameRenderer(env, agents=(0,))
    with pytest.raises(ValueError, match="agents \\[5\\] do not exist"):
        FrameRenderer(GigastepEnv(EnvConfig(teams=(0, 1))), agents=(5,))
