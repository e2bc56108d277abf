"""FrameStack: the stack lives in the state, starts as the reset frame repeated, drops the
oldest frame each step, and restarts per game."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep import EnvConfig, FrameStack, GigastepEnv

CONFIG = EnvConfig(teams=(0, 1), obs_type="vector", stochastic_obs=False, stochastic_comm=False)
K = 3


@pytest.fixture(scope="module")
def stacked():
    return FrameStack(GigastepEnv(CONFIG), K)


def _actions(t):
    return jnp.full((2, 3), 0.5 if t % 2 else -0.5, jnp.float32)


def test_reset_stack_is_the_first_frame_repeated(stacked):
    frames, state = stacked.reset(jax.random.key(0))
    obs, _ = stacked.env.reset(jax.random.key(0))
    assert frames.shape == (2, K, CONFIG.vector_size)
    for k in range(K):
        np.testing.assert_array_equal(frames[:, k], obs)


def test_each_step_drops_the_oldest_frame_and_appends_the_newest(stacked):
    frames, state = stacked.reset(jax.random.key(0))
    env_state = state.env_state
    history = [np.asarray(frames[:, -1])] * K
    for t in range(4):
        key = jax.random.key(10 + t)
        frames, state, *_ = stacked.step(state, _actions(t), key)
        obs, env_state, *_ = stacked.env.step(env_state, _actions(t), key)
        history.append(np.asarray(obs))
        np.testing.assert_array_equal(frames, np.stack(history[-K:], axis=1))


def test_batched_forms_equal_the_single_game_ones(stacked):
    keys = jax.random.split(jax.random.key(1), 2)
    frames, states = stacked.v_reset(keys)
    frames, states, rewards, dones, done = stacked.v_step(
        states, jnp.stack([_actions(0), _actions(1)]), keys
    )
    for b in range(2):
        f0, s0 = stacked.reset(keys[b])
        f1, *_ = stacked.step(s0, _actions(b), keys[b])
        np.testing.assert_allclose(frames[b], f1, rtol=0, atol=1e-6)


def test_reset_done_episodes_restarts_only_the_masked_games_with_their_first_frame(stacked):
    keys = jax.random.split(jax.random.key(2), 2)
    frames, states = stacked.v_reset(keys)
    frames, states, *_ = stacked.v_step(states, jnp.stack([_actions(0), _actions(0)]), keys)
    new_frames, new_states = stacked.reset_done_episodes(
        frames, states, jnp.array([True, False]), jax.random.key(3)
    )
    np.testing.assert_array_equal(new_frames[1], frames[1])  # untouched game
    for k in range(1, K):  # the restarted game's stack is one frame repeated
        np.testing.assert_array_equal(new_frames[0, :, k], new_frames[0, :, 0])
    assert int(new_states.env_state.episode.step[0]) == 0
    assert int(new_states.env_state.episode.step[1]) == 1


def test_observation_space_has_the_stack_axis(stacked):
    space = stacked.observation_space
    assert space.shape == (K, CONFIG.vector_size)
    frames, _ = stacked.reset(jax.random.key(0))
    assert space.contains(np.asarray(frames[0]))


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_num_frames_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="num_frames"):
        FrameStack(GigastepEnv(CONFIG), bad)
