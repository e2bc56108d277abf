"""What the auto-resetting step and the frame stack return on the last step of an episode (rules
§4.9, §7.1, §7.3): the final observation is the terminal one (not the fresh game's), the episode
flags, and the episode statistics of `info`. The adapters' last steps are tested beside their
other tests, to share their compiled steps (`-k last_step` selects them all):
tests/adapters/: test_torch_bridge.py (TorchVecEnv, whose CPU step is the batched auto-reset
step behind `v_step_autoreset`), test_gymnasium.py, test_pettingzoo.py and test_torchrl.py.

One deterministic 1-vs-1 game (deterministic detection and communication, no waypoints, so its
observation does not depend on the step's key) with a time limit of 5 steps. Agent 0 starts at
(2, 2), agent 1 at (8, 8), both heading 0 at v = 1: far apart (d > 8), they see nobody but
themselves. One no-op step moves each by 0.1 * (1 - 0.1 * 0.4 * 1^2) = 0.096 along +x and
leaves it at speed 1.3, so the terminal observation of ego e is, by hand (rules §5.2),
    [1, 1, x_e / 10, y_e / 10, 0, 0, 1.3 / diag, 1, 1] + 9 zeros,  diag = sqrt(200),
with x = (2.096, 8.096), y = (2, 8): (0.2096, 0.2) and (0.8096, 0.8). A fresh game's first
observation has the reset speed 1 (rules §6.4): speed feature 1 / diag, never 1.3 / diag.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep import EnvConfig, FrameStack, GigastepEnv
from gigastep.types import EnvState
from gigastep.wrappers import FrameStackState

TIMED = EnvConfig(
    teams=(0, 1),
    obs_type="vector",
    map_set="empty",
    stochastic_obs=False,
    stochastic_comm=False,
    max_episode_length=5,
)
DIAG = math.sqrt(200.0)
FRESH_SPEED = 1.0 / DIAG
TERMINAL = np.array(
    [
        [1, 1, 0.2096, 0.2, 0, 0, 1.3 / DIAG, 1, 1] + [0] * 9,
        [1, 1, 0.8096, 0.8, 0, 0, 1.3 / DIAG, 1, 1] + [0] * 9,
    ],
    np.float32,
)
ATOL = 1e-5
NOOP = np.zeros((2, 3), np.float32)


def _state(step: int, returns=(0.0, 0.0)) -> EnvState:
    state = EnvState.create(TIMED, x=[2.0, 8.0], y=[2.0, 8.0], step=step)
    return state.replace(episode=state.episode.replace(returns=jnp.asarray(returns, jnp.float32)))


def _batch(*states: EnvState) -> EnvState:
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *states)


def _assert_fresh(obs, state=None):
    """A first observation: every ego alive at the reset speed (and, given its state, at the
    state's positions)."""
    obs = np.asarray(obs)
    np.testing.assert_array_equal(obs[..., 0], 1.0)
    np.testing.assert_allclose(obs[..., 6], FRESH_SPEED, atol=1e-7)
    if state is not None:
        np.testing.assert_allclose(obs[..., 2], np.asarray(state.agents.x) / 10, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# GigastepEnv.step_autoreset (§7.1). FrameStack below wraps the same compiled function.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def timed_env():
    return GigastepEnv(TIMED)


def test_last_step_step_autoreset_truncated_keeps_the_terminal_observation_in_info(timed_env):
    """rules §4.9 and §7.1: the 5th step of a 5-step episode is truncated (not terminated, no
    winner); `info.final_obs` is its terminal observation, `episode_length` 5 and
    `episode_return` the returns before the step (3, -2) plus its rewards (0: nobody died);
    the returned state and observation are the fresh game's."""
    obs, nxt, rewards, dones, done, info = timed_env.step_autoreset(
        _state(step=4, returns=(3.0, -2.0)), jnp.asarray(NOOP), jax.random.key(0)
    )
    assert bool(done) and bool(info.truncated) and not bool(info.terminated)
    assert int(info.winner) == -1
    np.testing.assert_allclose(np.asarray(info.final_obs), TERMINAL, atol=ATOL)
    assert int(info.episode_length) == 5
    np.testing.assert_allclose(np.asarray(info.episode_return), [3.0, -2.0], atol=ATOL)
    np.testing.assert_array_equal(np.asarray(rewards), [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(dones), [False, False])
    assert int(nxt.episode.step) == 0 and bool(nxt.agents.alive.all())
    np.testing.assert_array_equal(np.asarray(nxt.episode.returns), [0.0, 0.0])
    _assert_fresh(obs, nxt)


def test_last_step_step_autoreset_terminated_keeps_the_dead_agents_zero_observation(timed_env):
    """rules §4.9, §5 and §7.1: agent 1 leaves the map at step 2 (x 9.95 -> 10.046): the
    episode is terminated, team 0 wins; the final observation of the dead agent 1 is zeros and
    agent 0's shows it alone at (2.096, 2); the fresh game's agent 1 is alive again."""
    state = EnvState.create(TIMED, x=[2.0, 9.95], y=[2.0, 8.0], step=1)
    obs, nxt, _, dones, done, info = timed_env.step_autoreset(
        state, jnp.asarray(NOOP), jax.random.key(0)
    )
    assert bool(done) and bool(info.terminated) and not bool(info.truncated)
    assert int(info.winner) == 0 and int(info.episode_length) == 2
    np.testing.assert_array_equal(np.asarray(dones), [False, True])
    final = np.asarray(info.final_obs)
    np.testing.assert_array_equal(final[1], np.zeros(18))
    np.testing.assert_allclose(final[0], TERMINAL[0], atol=ATOL)
    _assert_fresh(obs, nxt)


# ---------------------------------------------------------------------------------------------
# FrameStack (§7.3)
# ---------------------------------------------------------------------------------------------

K = 3


def _filler():
    """A stack of K recognisable frames per agent: frame k holds the value 10 + k."""
    return jnp.broadcast_to((10.0 + jnp.arange(K))[None, :, None], (2, K, 18)).astype(jnp.float32)


@pytest.fixture(scope="module")
def stacked(timed_env):
    return FrameStack(timed_env, K)


def test_last_step_frame_stack_step_autoreset_final_obs_is_the_stack_ending_in_the_terminal_frame(
    stacked,
):
    """rules §7.3 with §7.1: on the last step `info.final_obs` is the old stack without its
    oldest frame plus the terminal frame; the returned stack (and the state's) is the fresh
    game's first frame repeated K times."""
    state = FrameStackState(env_state=_state(step=4), frames=_filler())
    frames, new_state, _, _, done, info = stacked.step_autoreset(
        state, jnp.asarray(NOOP), jax.random.key(1)
    )
    assert bool(done) and bool(info.truncated)
    final = np.asarray(info.final_obs)
    assert final.shape == (2, K, 18)
    np.testing.assert_array_equal(final[:, : K - 1], np.asarray(_filler())[:, 1:])
    np.testing.assert_allclose(final[:, K - 1], TERMINAL, atol=ATOL)
    frames = np.asarray(frames)
    for k in range(K):
        np.testing.assert_array_equal(frames[:, k], frames[:, 0])
    np.testing.assert_array_equal(np.asarray(new_state.frames), frames)
    _assert_fresh(frames[:, 0], new_state.env_state)


def test_last_step_frame_stack_step_ends_with_the_terminal_frame_and_does_not_reset(stacked):
    """rules §4 and §7.3: the plain step never resets: on the last step the stack ends with
    the terminal frame and the episode is done."""
    state = FrameStackState(env_state=_state(step=4), frames=_filler())
    frames, new_state, _, _, done = stacked.step(state, jnp.asarray(NOOP), jax.random.key(1))
    assert bool(done) and int(new_state.env_state.episode.step) == 5
    np.testing.assert_allclose(np.asarray(frames)[:, K - 1], TERMINAL, atol=ATOL)
    np.testing.assert_array_equal(np.asarray(frames)[:, : K - 1], np.asarray(_filler())[:, 1:])
