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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- per-game restart: the fresh game's first observation repeated k times -------------------

RESTART_CONFIGS = {  # every step ends the game (time limit 1), so every step restarts it
    "vector": EnvConfig(teams=(0, 1), obs_type="vector", max_episode_length=1),
    "rgb": EnvConfig(
        teams=(0, 1), obs_type="rgb", resolution_x=16, resolution_y=12, max_episode_length=1
    ),
}


@pytest.fixture(scope="module", params=list(RESTART_CONFIGS))
def restarting(request):
    """(FrameStack, a batch of 2 stacked games). The stacks are overwritten with a filler
    pattern (the wrapper is pure, so any stack is a valid state) so that a restart that keeps
    old frames, or writes zeros, shows."""
    stacked = FrameStack(GigastepEnv(RESTART_CONFIGS[request.param]), K)
    _, states = stacked.v_reset(jax.random.split(jax.random.key(4), 2))
    filler = jax.tree_util.tree_map(
        lambda f: (jnp.arange(f.size).reshape(f.shape) % 7 + 3).astype(f.dtype), states.frames
    )
    return stacked, states.replace(frames=filler)


def _assert_first_frame_repeated(frames, first):
    frames, first = np.asarray(frames), np.asarray(first)
    assert frames.shape == (first.shape[0], K, *first.shape[1:])
    assert first.any(), "the fresh observation is all zeros: the check would be vacuous"
    for k in range(K):
        np.testing.assert_array_equal(frames[:, k], first)


def test_step_autoreset_restarts_the_stack_with_the_fresh_first_frame(restarting):
    """Unbatched: the step ends the game; the stack is the new game's first observation (the
    unwrapped env's step_autoreset observation from the same state and key) repeated K times."""
    stacked, states = restarting
    state = jax.tree_util.tree_map(lambda x: x[0], states)

    @jax.jit  # one compiled program for both: XLA shares the common step
    def both(state, actions, key):
        wrapped = stacked.step_autoreset(state, actions, key)
        return wrapped, stacked.env.step_autoreset(state.env_state, actions, key)

    (frames, new_state, _, _, done, _), (first, env_state, *_) = both(
        state, _actions(0), jax.random.key(11)
    )
    assert bool(done) and int(env_state.episode.step) == 0
    _assert_first_frame_repeated(frames, first)
    _assert_first_frame_repeated(new_state.frames, first)


def test_reset_done_episodes_fills_the_restarted_stack_with_its_first_frame(restarting):
    """Batched restart of game 0 only: its stack is the new game's first observation (the
    unwrapped env's reset_done_episodes with the same key) repeated K times; game 1 is kept."""
    stacked, states = restarting
    done, key = jnp.array([True, False]), jax.random.key(13)

    @jax.jit  # one compiled program for both: XLA shares the common reset
    def both(states, done, key):
        last = jax.tree_util.tree_map(lambda f: f[:, :, -1], states.frames)
        wrapped = stacked.reset_done_episodes(states.frames, states, done, key)
        return wrapped, stacked.env.reset_done_episodes(last, states.env_state, done, key)

    (frames, new_states), (first, _) = both(states, done, key)
    _assert_first_frame_repeated(frames[0], first[0])
    _assert_first_frame_repeated(new_states.frames[0], first[0])
    np.testing.assert_array_equal(frames[1], states.frames[1])
    np.testing.assert_array_equal(new_states.frames[1], states.frames[1])
