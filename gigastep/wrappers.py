"""Pure wrappers around `GigastepEnv` whose extra state lives in the traced state."""

from __future__ import annotations

from functools import partial
from typing import Any, TypeAlias, cast

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from gigastep._util.checks import check_positive_int
from gigastep._util.pytree import PytreeData, pytree_dataclass
from gigastep.env import GigastepEnv
from gigastep.game.types import EnvConfig, EnvState, Observation, StepInfo
from gigastep.spaces import Box, Tuple

_StackStep: TypeAlias = "tuple[Observation, FrameStackState, jax.Array, jax.Array, jax.Array]"
_StackAutoreset: TypeAlias = (
    "tuple[Observation, FrameStackState, jax.Array, jax.Array, jax.Array, StepInfo]"
)

__all__ = ["FrameStack", "FrameStackState"]


@pytree_dataclass
class FrameStackState(PytreeData):
    env_state: EnvState
    frames: Observation  # obs pytree with a stack axis after the agent axis: (n, k, ...)


def _push(frames: Observation, obs: Observation) -> Observation:
    """Drop the oldest frame (index 0) and append `obs` as the newest (index k - 1)."""
    return jax.tree_util.tree_map(
        lambda f, o: jnp.concatenate([f[:, 1:], o[:, None]], axis=1), frames, obs
    )


def _repeat(obs: Observation, k: int) -> Observation:
    return jax.tree_util.tree_map(lambda o: jnp.repeat(o[:, None], k, axis=1), obs)


class FrameStack:
    """Stack the last `num_frames` observations of each agent along a new axis.

    Observations become (n, num_frames, *obs_shape), oldest first; at reset the stack is the
    first frame repeated. Pure: the stack lives in `FrameStackState`, so `reset`/`step` jit,
    vmap and scan like the wrapped env's.

    Example:
        >>> env = FrameStack(gigastep.make("identical_2_vs_2_fobs_vec_void_cont"), 4)
        >>> obs, state = env.reset(jax.random.key(0))   # obs: (4, 4, L)
    """

    def __init__(self, env: GigastepEnv, num_frames: int) -> None:
        check_positive_int(num_frames, "num_frames")
        self.env = env
        self.num_frames = num_frames

    def __getattr__(self, name: str) -> Any:
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def observation_space(self) -> Box | Tuple:
        space = self.env.observation_space
        if isinstance(space, Tuple):
            # an observation Tuple holds Boxes (rgb, vector)
            return Tuple(tuple(self._stack_space(cast(Box, s)) for s in space.spaces))
        return self._stack_space(space)

    def _stack_space(self, space: Box) -> Box:
        shape = (self.num_frames, *space.shape)
        return Box.create(space.low, space.high, shape, space.dtype)  # bounds per element

    def reset(self, key: jax.Array) -> tuple[Observation, FrameStackState]:
        obs, state = self.env.reset(key)
        frames = _repeat(obs, self.num_frames)
        return frames, FrameStackState(env_state=state, frames=frames)

    def step(self, state: FrameStackState, actions: ArrayLike, key: jax.Array) -> _StackStep:
        obs, env_state, rewards, dones, ep_done = self.env.step(state.env_state, actions, key)
        frames = _push(state.frames, obs)
        return frames, FrameStackState(env_state=env_state, frames=frames), rewards, dones, ep_done

    def step_autoreset(
        self, state: FrameStackState, actions: ArrayLike, key: jax.Array, final_obs: bool = True
    ) -> _StackAutoreset:
        obs, env_state, rewards, dones, done, info = self.env.step_autoreset(
            state.env_state, actions, key, final_obs
        )
        frames = jax.tree_util.tree_map(
            lambda new, old: jnp.where(done, new, old),
            _repeat(obs, self.num_frames),
            _push(state.frames, obs),
        )
        final = _push(state.frames, info.final_obs)
        info = info.replace(final_obs=final)
        return (
            frames,
            FrameStackState(env_state=env_state, frames=frames),
            rewards,
            dones,
            done,
            info,
        )

    def v_reset(self, keys: jax.Array) -> tuple[Observation, FrameStackState]:
        return _v_reset(self.env.config, self.num_frames, keys)

    def v_step(self, states: FrameStackState, actions: ArrayLike, keys: jax.Array) -> _StackStep:
        return _v_step(self.env.config, self.num_frames, states, actions, keys)

    def reset_done_episodes(
        self, obs: Observation, states: FrameStackState, ep_dones: ArrayLike, key: jax.Array
    ) -> tuple[Observation, FrameStackState]:
        """Restart the finished games of a batch with a stack of their first frame."""
        return _reset_done(self.env.config, self.num_frames, obs, states, ep_dones, key)


def _wrapper(config: EnvConfig, num_frames: int) -> FrameStack:
    return FrameStack(GigastepEnv(config), num_frames)


@partial(jax.jit, static_argnums=(0, 1))
def _v_reset(
    config: EnvConfig, num_frames: int, keys: jax.Array
) -> tuple[Observation, FrameStackState]:
    return jax.vmap(_wrapper(config, num_frames).reset)(keys)


@partial(jax.jit, static_argnums=(0, 1))
def _v_step(
    config: EnvConfig,
    num_frames: int,
    states: FrameStackState,
    actions: ArrayLike,
    keys: jax.Array,
) -> _StackStep:
    return jax.vmap(_wrapper(config, num_frames).step)(states, actions, keys)


@partial(jax.jit, static_argnums=(0, 1))
def _reset_done(
    config: EnvConfig,
    num_frames: int,
    obs: Observation,
    states: FrameStackState,
    ep_dones: jax.Array,
    key: jax.Array,
) -> tuple[Observation, FrameStackState]:
    keys = jax.random.split(key, ep_dones.shape[0])
    new_obs, new_states = jax.vmap(_wrapper(config, num_frames).reset)(keys)

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(jnp.reshape(ep_dones, (-1,) + (1,) * (a.ndim - 1)), a, b)

    return (
        jax.tree_util.tree_map(pick, new_obs, obs),
        jax.tree_util.tree_map(pick, new_states, states),
    )
