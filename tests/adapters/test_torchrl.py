"""`gigastep.adapters.torchrl.GigastepTorchRLEnv`: TorchRL's spec check, the multi-agent layout, and
auto-reset the TorchRL way.

Resets are recognised by a rule of the game (rules §3): every agent starts a game at speed 1.0
and moves at least at `min_speed` = 1.3 after a step, so the ego row's speed feature
(v / diagonal, feature 6) is 1 / diagonal exactly on a game's first observation only.
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")

from torchrl.envs.utils import check_env_specs  # noqa: E402

import gigastep  # noqa: E402
from gigastep.adapters.torchrl import GigastepTorchRLEnv  # noqa: E402

B = 3
FRESH_SPEED = 1.0 / math.sqrt(10.0**2 + 10.0**2)  # v / diagonal at reset, 10 x 10 world


@functools.cache
def _env(name: str, **overrides) -> GigastepTorchRLEnv:
    return GigastepTorchRLEnv(name, num_envs=B, **overrides)


SPEC_CASES = {
    # one compiled game each; docs/adapters.md's TorchRL example checks a continuous vector game
    "vector-discrete": ("identical_2_vs_2_fobs_vec_void_disc", {"max_episode_length": 3}),
    "rgb_vector-continuous-boxes": (
        "special_5_vs_1_pobs_vec_maps_cont",
        {"obs_type": "rgb_vector", "resolution_x": 12, "resolution_y": 12},
    ),
}


# the RGB case compiles the largest game of this file (minutes on 2 cores): slow tier only
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if c.startswith("rgb") else c for c in SPEC_CASES],
)
def test_check_env_specs_passes(case):
    name, overrides = SPEC_CASES[case]
    env = _env(name, **overrides)
    check_env_specs(env, break_when_any_done="both", seed=0)


@pytest.mark.slow
def test_each_team_is_a_group_with_its_own_agents():
    env = _env(
        "special_5_vs_1_pobs_vec_maps_cont", obs_type="rgb_vector", resolution_x=12, resolution_y=12
    )
    assert env.group_map == {
        "team0": [f"team0_agent{i}" for i in range(5)],
        "team1": ["team1_agent0"],
    }
    td = env.reset()
    assert td.batch_size == torch.Size([B])
    assert td["team0", "observation"].shape == (B, 5, env.config.vector_size)
    assert td["team1", "pixels"].shape == (B, 1, 12, 12, 3)
    assert td["team1", "pixels"].dtype == torch.uint8
    assert td["team0", "info", "mask"].all()
    action = env.action_spec.rand()
    assert action["team0", "action"].shape == (B, 5, 3)
    out = env.step(td.update(action))
    assert out["next", "team0", "reward"].shape == (B, 5, 1)
    for key in ("done", "terminated", "truncated"):
        assert out["next", key].shape == (B, 1)
        assert out["next", "team1", key].shape == (B, 1, 1)


def test_groups_view_one_observation_buffer_without_copies():
    env = _env("identical_2_vs_2_fobs_vec_void_disc", max_episode_length=3)
    td = env.reset()
    out = env.step(td.update(env.action_spec.rand()))["next"]
    team0, team1 = out["team0", "observation"], out["team1", "observation"]
    assert team0.untyped_storage().data_ptr() == team1.untyped_storage().data_ptr()


def test_rollout_resets_finished_games_with_their_fresh_first_observation():
    env = _env("identical_2_vs_2_fobs_vec_void_disc", max_episode_length=3)
    env.set_seed(1)
    data = env.rollout(7, break_when_any_done=False)  # episodes end after steps 3 and 6
    ended = [False, False, True, False, False, True, False]
    truncated = data["next", "truncated"][..., 0]
    assert (truncated == torch.tensor(ended)).all()
    assert not data["next", "terminated"].any()
    assert (data["next", "team1", "done"][..., 0, 0] == torch.tensor(ended)).all()
    speed = data["team0", "observation"][:, :, 0, 6]  # agent 0's own speed, at each step
    next_speed = data["next", "team0", "observation"][:, :, 0, 6]
    for t, first in enumerate([True, False, False, True, False, False, True]):
        if first:  # a game's first observation (after reset)
            torch.testing.assert_close(speed[:, t], torch.full((B,), FRESH_SPEED))
        else:  # continues the step before
            assert (speed[:, t] >= 1.3 * FRESH_SPEED - 1e-6).all()
            torch.testing.assert_close(speed[:, t], next_speed[:, t - 1])
    # the final observation of an episode ends it (not the next game's first one)
    assert (next_speed[:, 2] >= 1.3 * FRESH_SPEED - 1e-6).all()


def test_a_partial_reset_of_a_running_game_restarts_only_that_game():
    env = _env("identical_2_vs_2_fobs_vec_void_disc", max_episode_length=3)
    td = env.reset()
    for _ in range(2):
        td = env.step(td.update(env.action_spec.rand()))["next"].clone()
    before = td["team0", "observation"].clone()
    # TorchRL's convention: the input holds the data of the games that are not reset
    out = env.reset(td.set("_reset", torch.tensor([[True], [False], [False]])))
    obs = out["team0", "observation"]
    torch.testing.assert_close(obs[0, :, 6], torch.full((2,), FRESH_SPEED))  # restarted
    torch.testing.assert_close(obs[1:], before[1:])  # the others go on as they were
    after = env.step(out.update(env.action_spec.rand()))["next"]
    # the others reach the limit of 3 steps now; the restarted game has taken one step
    assert after["truncated"][:, 0].tolist() == [False, True, True]


def test_a_scripted_opponent_leaves_one_group():
    # built, not stepped (TorchVecEnv's own tests step scripted opponents)
    env = GigastepTorchRLEnv(
        "identical_5_vs_1_fobs_vec_void_disc", num_envs=B, opponent="pursuit", team=1
    )
    assert env.group_map == {"team1": ["team1_agent0"]}
    assert env.action_spec["team1", "action"].shape == (B, 1)
    assert env.observation_spec["team1", "observation"].shape == (B, 1, env.config.vector_size)


def test_last_step_next_holds_the_final_observation_and_the_episode_flags():
    """The last step of an episode (rules §4.9), TorchRL's way (docs/adapters.md): the step
    that ends a game holds in "next" its final observation, done = truncated = True (time limit
    3) at the root and for every agent of each group, terminated False, all agents alive in
    the mask. With no-op actions every agent keeps its reset heading h (feature 5) and moves
    0.096 + 2 * 0.12324 = 0.34248 in 3 steps: the final x / 10 is the first one plus
    cos(h) * 0.034248 (no damage or collision can happen in 3 steps, see SHORT in
    test_gymnasium.py)."""
    env = _env("identical_2_vs_2_fobs_vec_void_disc", max_episode_length=3)
    env.set_seed(4)

    def noop(td):
        for group in env.group_map:
            td.set((group, "action"), torch.full((B, 2), 13, dtype=torch.int64))
        return td

    data = env.rollout(3, noop, break_when_any_done=False)
    nxt = data["next"]
    for key in ("done", "truncated"):
        assert nxt[key][:, 2].all() and not nxt[key][:, :2].any()
        for group in env.group_map:
            assert nxt[group, key][:, 2].all()
    assert not nxt["terminated"].any()
    for group in env.group_map:
        assert not nxt[group, "terminated"].any() and nxt[group, "info", "mask"].all()
        first, final = data[group, "observation"][:, 0], nxt[group, "observation"][:, 2]
        shift = torch.cos(first[..., 5]) * 0.034248
        torch.testing.assert_close(final[..., 2], first[..., 2] + shift, atol=1e-5, rtol=0)
        torch.testing.assert_close(final[..., 6], torch.full_like(final[..., 6], 1.3 * FRESH_SPEED))
        assert nxt[group, "reward"].shape == (B, 3, 2, 1)


def test_the_observations_are_the_observation_alone_and_the_mask_is_an_info():
    # BenchMARL's models read every leaf of a group's observations; the alive mask sits in
    # the group's "info", where TorchRL's VMAS environments keep per-agent extras
    env = _env("identical_2_vs_2_fobs_vec_void_disc", max_episode_length=3)
    spec = env.observation_spec
    assert set(spec.keys(True, True)) == {
        ("team0", "observation"),
        ("team0", "info", "mask"),
        ("team1", "observation"),
        ("team1", "info", "mask"),
    }
    assert spec["team0", "info", "mask"].dtype == torch.bool
    assert spec["team0", "info", "mask"].shape == (B, 2)


def test_the_state_is_the_global_state_vector_final_at_an_episode_end():
    """Layout of `gigastep.game.observations.global_state` for 2 vs 2 without boxes or
    waypoints: 9 features per agent (alive first), 4 x 4 locks, then step / max length."""
    env = _env("identical_2_vs_2_fobs_vec_void_disc", max_episode_length=3, state=True)
    check_env_specs(env, seed=0)
    env.set_seed(2)
    td = env.reset()
    expected = env._venv.state_vector()[:, 0]  # test-only look inside: team 0's view
    torch.testing.assert_close(td["state"], expected)
    assert td["state"].shape == (B, 9 * 4 + 16 + 1)
    data = env.rollout(4, break_when_any_done=False)
    step = 9 * 4 + 16
    # the state a step ends in: 1/3, 2/3, then 3/3 (the final state, not the next game's)
    torch.testing.assert_close(
        data["next", "state"][:, :, step], torch.tensor([[1 / 3, 2 / 3, 1.0, 1 / 3]] * B)
    )
    torch.testing.assert_close(data["state"][:, 3, step], torch.zeros(B))  # a fresh game
    assert (data["state"][:, :, 0:36:9] == 1).all()  # everyone alive in 4 steps


def test_render_draws_one_games_top_view():
    env = _env("identical_2_vs_2_fobs_vec_void_disc", max_episode_length=3)
    env.reset()
    frame = env.render(env_index=1)
    c = env.config
    assert frame.shape == (c.resolution_y, c.resolution_x, 3) and frame.dtype.name == "uint8"
    one = jax.tree_util.tree_map(lambda x: x[1], env._venv.states)  # test-only look inside
    view = np.asarray(gigastep.GigastepEnv(c).global_view(one))
    np.testing.assert_array_equal(frame, np.swapaxes(view, 0, 1))
    assert env.render(mode="rgb_array").shape == frame.shape  # BenchMARL's first call
    with pytest.raises(ValueError, match="mode='rgb_array' only"):
        env.render(mode="human")
    with pytest.raises(ValueError, match="env_index must be a game of this batch, 0..2"):
        env.render(env_index=B)
