import jax
import numpy as np
import pytest
from PIL import Image

from gigastep import EnvConfig, GigastepEnv
from gigastep.render import frame, save_gif, tile, upscale


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
