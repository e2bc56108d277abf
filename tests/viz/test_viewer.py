"""The live viewer (gigastep.viz.viewer), headless: SDL's dummy video driver and synthetic keys."""

from __future__ import annotations

import numpy as np
import pytest

pygame = pytest.importorskip("pygame")

from gigastep.game.dynamics import ACTION_TABLE  # noqa: E402
from gigastep.viz.replay import GameRunner  # noqa: E402
from gigastep.viz.viewer import HELP_HEIGHT, Viewer  # noqa: E402

SCENARIO = "identical_2_vs_2_fobs_vec_void_disc"


@pytest.fixture(autouse=True)
def headless(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


def _key(key, char=""):
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=key, unicode=char))


def _run(viewer, keys_at: dict, max_frames=40):
    """Run the viewer, posting keys_at[k] (a list of (key, char)) after frame k."""

    def on_frame(v, k):
        for key, char in keys_at.get(k, ()):
            _key(key, char)

    return viewer.run(max_frames=max_frames, on_frame=on_frame)


def test_play_flies_the_human_agent_with_the_keys_and_quits_on_q():
    game = GameRunner(SCENARIO, ("pursuit", "pursuit"), seed=0)
    viewer = Viewer(game, human=0, fps=200)
    frames = _run(viewer, {2: [(pygame.K_LEFT, "")], 4: [(pygame.K_q, "q")]})
    assert frames == 4 and game.t == 4  # quit before a fifth frame
    # Left arrow: turn left on the screen = heading -1, no dive, hold the throttle.
    assert tuple(ACTION_TABLE[game.actions[0][0]]) == (0, 0, 0)
    assert tuple(ACTION_TABLE[game.actions[-1][0]]) == (-1, 0, 0)


def test_escape_also_quits_and_the_window_shows_the_frame_and_the_help_line():
    game = GameRunner(SCENARIO, ("circle", "circle"), seed=0)
    viewer = Viewer(game, human=None, fps=200)
    picture = viewer.picture()
    assert picture.shape == (viewer.renderer.shape[0] + HELP_HEIGHT,) + viewer.renderer.shape[1:]
    assert _run(viewer, {1: [(pygame.K_ESCAPE, "")]}) == 1


def test_pause_step_speed_and_restart_keys():
    game = GameRunner(SCENARIO, ("circle", "circle"), seed=0)
    viewer = Viewer(game, fps=64)
    seen = {}

    def on_frame(v, k):
        seen[k] = (game.t, v.paused, v.fps)
        keys = {
            1: [(pygame.K_SPACE, " ")],
            3: [(pygame.K_n, "n")],
            5: [(pygame.K_PLUS, "+"), (pygame.K_PLUS, "+")],
            6: [(pygame.K_MINUS, "-")],
            7: [(pygame.K_r, "r")],
            8: [(pygame.K_q, "q")],
        }
        for key, char in keys.get(k, ()):
            _key(key, char)

    assert viewer.run(max_frames=30, on_frame=on_frame) == 8
    assert seen[1] == (1, False, 64)
    assert seen[2][:2] == (1, True) and seen[3][0] == 1  # paused: no step
    assert seen[4][0] == 2  # N: exactly one step
    assert seen[6][2] == 120  # x2 twice, capped at 120
    assert seen[7][2] == 60
    assert seen[8][0] == 0  # R: back to the start


def test_view_plays_a_replay_back_step_for_step():
    played = GameRunner(SCENARIO, ("pursuit", "random"), seed=2)
    for _ in range(6):
        played.step()
    viewer = Viewer.for_replay(played.replay(), fps=200)
    assert viewer.renderer.names == ("pursuit", "random")
    frames = viewer.run(max_frames=10)
    assert frames == 10 and viewer.game.t == 6 and viewer.game.done
    np.testing.assert_array_equal(np.stack(viewer.game.actions), np.stack(played.actions))
    for a, b in zip(viewer.game.state.agents.x, played.state.agents.x, strict=True):
        assert a == b


def test_the_human_agent_must_exist():
    game = GameRunner(SCENARIO, ("circle", "circle"), seed=0)
    with pytest.raises(ValueError, match="one of 0..3, got 7"):
        Viewer(game, human=7)
