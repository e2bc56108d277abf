"""Gymnasium adapters (gigastep.adapters.gymnasium): TeamEnv and TeamVectorEnv."""

from __future__ import annotations

import warnings

import gymnasium
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from gigastep.adapters.gymnasium import ENV_ID, TeamEnv, TeamVectorEnv
from gigastep.types import EnvConfig

SMALL_RGB = dict(resolution_x=16, resolution_y=16)


def noop_opponent(config, state, key):
    """Every agent flies straight on (discrete no-op 13, or zeros)."""
    n = config.n_agents
    return jnp.full((n,), 13, jnp.int32) if config.discrete_actions else jnp.zeros((n, 3))


# A 2-vs-2 game that cannot end before its 3-step time limit: with no-op actions the teams fly
# straight toward each other from start regions at least 2 apart (x in [1, 4] and [6, 9]),
# closing at most 2 x (0.096 + 0.123 + 0.123) = 0.68 in 3 steps (collision radius 0.4), and a
# damage lock needs more than 3 steps. Rewards: idle reward 1 per agent and step, nothing else.
SHORT = EnvConfig(
    teams=(0, 0, 1, 1),
    obs_type="vector",
    map_set="empty",
    discrete_actions=True,
    max_episode_length=3,
    idle_reward=(1.0,) * 4,
    reward_game_won=0.0,
    reward_defeat_one_opponent=0.0,
    divide_reward_by_team_size=False,
)
NOOP = np.full((2, 2), 13, np.int64)


# ------------------------------------------------------------------------------------------
# TeamEnv
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("identical_2_vs_2_fobs_vec_void_disc", {}),
        ("identical_5_vs_1_pobs_rgb_maps_cont", SMALL_RGB),
        ("identical_1_vs_1_fobs_vec_void_disc", dict(obs_type="rgb_vector", **SMALL_RGB)),
    ],
)
def test_team_env_passes_gymnasium_check_env(name, overrides):
    env = TeamEnv(name, team=0, opponent="pursuit", render_mode="rgb_array", **overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unbounded vector Box; no registered spec
        check_env(env)
    frame = env.render()
    config = env.versus.config
    assert frame.shape == (config.resolution_y, config.resolution_x, 3)
    assert frame.dtype == np.uint8


def test_registered_id_builds_both_envs_and_passes_check_env_with_its_spec():
    # Through gymnasium.make the env has a spec, so check_env also builds it in every declared
    # render mode.
    kwargs = dict(name_or_env="identical_2_vs_2_fobs_vec_void_disc", opponent="pursuit")
    env = gymnasium.make(ENV_ID, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unbounded vector Box
        check_env(env.unwrapped)
    envs = gymnasium.make_vec(ENV_ID, num_envs=3, vectorization_mode="vector_entry_point", **kwargs)
    assert isinstance(envs, TeamVectorEnv) and envs.num_envs == 3


def test_team_env_reward_is_the_sum_over_the_team():
    # Idle reward 1 for each of the 2 agents of team 1, alive at the start of every step.
    env = TeamEnv(SHORT, team=1, opponent=noop_opponent)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, SHORT.vector_size) and obs.dtype == np.float32
    results = [env.step(np.full(2, 13)) for _ in range(3)]
    assert [r[1] for r in results] == [2.0, 2.0, 2.0]
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (False, True)]
    np.testing.assert_array_equal(results[0][4]["agent_rewards"], [1.0, 1.0])


def test_team_env_rejects_a_wrong_action_shape():
    env = TeamEnv(SHORT, opponent=noop_opponent)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(np.zeros(4, np.int64))


def test_unknown_opponent_name_is_a_clear_error():
    with pytest.raises(ValueError, match="closest"):
        TeamEnv(SHORT, opponent="persuit")


# ------------------------------------------------------------------------------------------
# TeamVectorEnv
# ------------------------------------------------------------------------------------------


def _truncation_pattern(envs, steps):
    out = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = envs.step(NOOP)
        assert not terminated.any()
        out.append((truncated.tolist(), reward.tolist(), info))
    return out


@pytest.fixture(scope="module")
def vector_envs():
    return {
        mode: TeamVectorEnv(SHORT, 2, team=0, opponent=noop_opponent, autoreset_mode=mode)
        for mode in AutoresetMode
    }


def test_vector_env_declares_its_autoreset_mode_and_spaces(vector_envs):
    for mode, envs in vector_envs.items():
        assert envs.metadata["autoreset_mode"] == mode
        assert envs.action_space.shape == (2, 2)
        obs, info = envs.reset(seed=0)
        assert obs.shape == (2, 2, SHORT.vector_size) and obs in envs.observation_space
        assert info == {}


def test_next_step_mode_resets_on_the_call_after_the_end(vector_envs):
    envs = vector_envs[AutoresetMode.NEXT_STEP]
    envs.reset(seed=0)
    steps = _truncation_pattern(envs, 7)
    # Ends at step 3; step 4 is the reset (reward 0, no flags); the new game ends 3 steps later.
    assert [s[0] for s in steps] == [[False] * 2] * 2 + [[True] * 2] + [[False] * 2] * 3 + [
        [True] * 2
    ]
    assert steps[3][1] == [0.0, 0.0] and steps[4][1] == [2.0, 2.0]
    info = steps[2][2]
    np.testing.assert_allclose(info["episode_return"], [6.0, 6.0])
    assert info["episode_length"].tolist() == [3, 3] and info["_episode_return"].all()


def test_same_step_mode_resets_in_the_ending_call_and_keeps_the_final_obs(vector_envs):
    envs = vector_envs[AutoresetMode.SAME_STEP]
    obs0, _ = envs.reset(seed=0)
    obs = [envs.step(NOOP) for _ in range(6)]
    assert [o[3].tolist() for o in obs] == ([[False] * 2] * 2 + [[True] * 2]) * 2
    info = obs[2][4]
    assert info["_final_obs"].all() and info["_final_info"].all()
    final, after_reset = info["final_obs"], obs[2][0]
    assert final.shape == obs0.shape and not np.allclose(final, after_reset)
    np.testing.assert_allclose(info["final_info"]["episode_return"], [6.0, 6.0])
    assert obs[3][1].tolist() == [2.0, 2.0]  # the new game's first step


def test_disabled_mode_waits_for_a_masked_reset(vector_envs):
    envs = vector_envs[AutoresetMode.DISABLED]
    envs.reset(seed=0)
    envs.step(NOOP)
    envs.reset(options={"reset_mask": np.array([True, False])})  # game 0 restarts
    envs.step(NOOP)
    _, _, _, truncated, _ = envs.step(NOOP)
    assert truncated.tolist() == [False, True]  # game 1 at its step 3, game 0 at its step 2
    with pytest.raises(RuntimeError, match=r"games \[1\]"):
        envs.step(NOOP)
    envs.reset(options={"reset_mask": np.array([False, True])})
    _, _, _, truncated, _ = envs.step(NOOP)
    assert truncated.tolist() == [True, False]


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_gymnasium_benchmark_loop_runs_in_every_mode(vector_envs, mode):
    # Gymnasium's own vector loop: random actions, its reading of the autoreset mode, and
    # reset_mask resets in DISABLED mode.
    from gymnasium.utils import performance

    if not hasattr(performance, "benchmark_vector_step"):
        pytest.skip(f"gymnasium {gymnasium.__version__} has no benchmark_vector_step (1.4 has)")
    assert performance.benchmark_vector_step(vector_envs[mode], target_duration=0.3, seed=0) > 0


def test_vector_env_rejects_a_wrong_action_shape(vector_envs):
    envs = vector_envs[AutoresetMode.NEXT_STEP]
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        envs.step(np.zeros((2, 4), np.int64))
    with pytest.raises(ValueError, match="integers"):
        envs.step(np.zeros((2, 2), np.float32))


def test_vector_env_reset_is_reproducible(vector_envs):
    envs = vector_envs[AutoresetMode.SAME_STEP]
    a, _ = envs.reset(seed=3)
    b, _ = envs.reset(seed=3)
    c, _ = envs.reset(seed=4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.slow  # an RGB vector env (minutes on 2 cores); the vector tests cover the adapter
def test_vector_env_with_rgb_observations():
    envs = TeamVectorEnv(
        "identical_1_vs_1_fobs_rgb_void_cont",
        3,
        opponent="random",
        render_mode="rgb_array",
        **SMALL_RGB,
    )
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (3, 1, 16, 16, 3) and obs.dtype == np.uint8
    envs.action_space.seed(0)
    obs, reward, *_ = envs.step(envs.action_space.sample())
    assert obs in envs.observation_space and reward.shape == (3,)
    frames = envs.render()
    assert len(frames) == 3 and frames[0].shape == (16, 16, 3)


# ------------------------------------------------------------------------------------------
# The last step of an episode (rules §4.9): the terminal observation, the flags and info
# ------------------------------------------------------------------------------------------

# SHORT's episodes end by the time limit at step 3. With no-op actions every agent keeps its
# reset heading h (0 or pi, the ego row's feature 6, index 5) and moves by dt * v2 per step:
# 0.1 * (1 - 0.04 * 1^2) = 0.096, then 0.1 * (1.3 - 0.04 * 1.3^2) = 0.12324 twice: 0.34248 in
# all, so the ego row's x / 10 (index 2) of the terminal observation is the reset one plus
# cos(h) * 0.034248, y / 10 (index 3) is unchanged, and the speed (index 6) is 1.3 / diag
# (a fresh game's is 1 / diag, rules §6.4).
DIAG = np.sqrt(200.0)


def _assert_terminal(final, first):
    """`final` is the observation 3 no-op steps after the reset observation `first`."""
    final, first = np.asarray(final), np.asarray(first)
    shift = np.cos(first[..., 5]) * 0.034248
    np.testing.assert_allclose(final[..., 2], first[..., 2] + shift, atol=1e-5)
    np.testing.assert_allclose(final[..., 3], first[..., 3], atol=1e-5)
    np.testing.assert_allclose(final[..., 6], 1.3 / DIAG, atol=1e-6)


def test_last_step_team_env_returns_the_terminal_observation_truncated_and_its_info():
    env = TeamEnv(SHORT, team=1, opponent=noop_opponent)
    first, _ = env.reset(seed=5)
    for _ in range(2):
        env.step(np.full(2, 13))
    obs, reward, terminated, truncated, info = env.step(np.full(2, 13))
    assert (terminated, truncated) == (False, True)
    _assert_terminal(obs, first)
    assert set(info) == {"agent_rewards", "agent_dones"}
    np.testing.assert_array_equal(info["agent_rewards"], [1.0, 1.0])  # idle reward 1 each
    np.testing.assert_array_equal(info["agent_dones"], [False, False])
    assert reward == 2.0


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_last_step_vector_env_exposes_the_terminal_observation_in_every_mode(vector_envs, mode):
    # NEXT_STEP and DISABLED return the terminal observation itself (the reset comes later);
    # SAME_STEP returns the fresh game's and puts the terminal one in info["final_obs"].
    envs = vector_envs[mode]
    first, _ = envs.reset(seed=6)
    for _ in range(2):
        envs.step(NOOP)
    obs, reward, terminated, truncated, info = envs.step(NOOP)
    assert truncated.tolist() == [True, True] and terminated.tolist() == [False, False]
    np.testing.assert_allclose(info["episode_return"], [6.0, 6.0])  # 2 agents x 3 steps x 1
    assert info["episode_length"].tolist() == [3, 3]
    assert info["_episode_return"].all() and info["_episode_length"].all()
    if mode == AutoresetMode.SAME_STEP:
        assert info["_final_obs"].all() and info["_final_info"].all()
        _assert_terminal(info["final_obs"], first)
        np.testing.assert_allclose(obs[..., 6], 1.0 / DIAG, atol=1e-7)  # the new games
        assert info["final_info"]["episode_length"].tolist() == [3, 3]
    else:
        assert "final_obs" not in info
        _assert_terminal(obs, first)
