"""`GigastepEnv`: a config's pure `reset` and `step`, compiled, as methods.

The game itself is in `gigastep.game`: its phases, one module each, composed into one game's
`reset` and `step` (`gigastep.game.step`) and their batched forms (`gigastep.game.batched`).
This module compiles them with the config as static argument and offers them as the methods of
a thin, stateless holder of a config (unbatched, batched with `vmap`, and auto-resetting),
checking the inputs first. The functional forms stay importable from here: they are the
library's public names of the engine's functions.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from gigastep._util import checks as _checks
from gigastep.game import dynamics
from gigastep.game.batched import batched_reset, batched_step, batched_step_autoreset
from gigastep.game.batching import reset_where, select_games, where_masked
from gigastep.game.observations import global_view, observe
from gigastep.game.observations.global_state import state_vector, state_vector_size
from gigastep.game.reset import reset_state
from gigastep.game.state_checks import check_batch, check_batched_state, check_single_state
from gigastep.game.step import Advanced as Advanced  # re-exported (the class does not use it)
from gigastep.game.step import (
    AutoresetResult,
    StepResult,
    episode_winner,
    reset,
    sample_noise,
    step,
    step_autoreset,
    team_outcome,
    transition,
)
from gigastep.game.step import advance as advance  # re-exported
from gigastep.game.step import score_rewards as score_rewards  # re-exported
from gigastep.game.types import EnvConfig, EnvState, Observation, StepNoise, check_fields
from gigastep.spaces import Box, Discrete, Tuple, entity_bounds, vector_bounds

if TYPE_CHECKING:
    from jax.typing import ArrayLike

    from gigastep.scenarios import ScenarioSpec

__all__ = [
    "GigastepEnv",
    "batched_reset",
    "batched_step",
    "batched_step_autoreset",
    "check_batched_state",
    "episode_winner",
    "observe",
    "reset",
    "reset_state",
    "reset_where",
    "sample_noise",
    "step",
    "step_autoreset",
    "team_outcome",
    "transition",
    "where_masked",
]

# ------------------------------------------------------------------------------------------
# Compiled forms (config static; shared by every env with an equal config)
# ------------------------------------------------------------------------------------------


_reset = jax.jit(reset, static_argnums=0)
_step = jax.jit(step, static_argnums=0)
_transition = jax.jit(transition, static_argnums=0)
_step_autoreset = jax.jit(step_autoreset, static_argnums=(0, 4))
_global_view = jax.jit(global_view, static_argnums=0)


@partial(jax.jit, static_argnums=0)
def _v_reset(config: EnvConfig, keys: jax.Array) -> tuple[Observation, EnvState]:
    return batched_reset(config, keys)


@partial(jax.jit, static_argnums=0)
def _v_step(config: EnvConfig, states: EnvState, actions: ArrayLike, keys: jax.Array) -> StepResult:
    return batched_step(config, states, actions, keys)


@partial(jax.jit, static_argnums=(0, 4))
def _v_step_autoreset(
    config: EnvConfig, states: EnvState, actions: ArrayLike, keys: jax.Array, final_obs: bool
) -> AutoresetResult:
    return batched_step_autoreset(config, states, actions, keys, final_obs)


@partial(jax.jit, static_argnums=0)
def _reset_done_episodes(
    config: EnvConfig, obs: Observation, states: EnvState, ep_dones: jax.Array, key: jax.Array
) -> tuple[Observation, EnvState]:
    keys = jax.random.split(key, ep_dones.shape[0])
    new_obs, new_states = jax.vmap(partial(reset, config))(keys)
    return select_games(ep_dones, new_obs, obs), select_games(ep_dones, new_states, states)


@partial(jax.jit, static_argnums=0)
def _v_global_view(config: EnvConfig, states: EnvState) -> jax.Array:
    return jax.vmap(partial(global_view, config))(states)


@partial(jax.jit, static_argnums=(0, 2))
def _state_vector(config: EnvConfig, state: EnvState, team: int) -> jax.Array:
    return state_vector(config, state, team)


@partial(jax.jit, static_argnums=(0, 2))
def _v_state_vector(config: EnvConfig, states: EnvState, team: int) -> jax.Array:
    return jax.vmap(partial(state_vector, config, team=team))(states)


class GigastepEnv:
    """A Gigastep game: two teams of 3D aircraft-like agents that detect and shoot each other.

    Observation (per agent, leading axis n = `n_agents`):
        "vector": float32 (n, L) — ego row, nearest seen agents, waypoint and box features.
        "rgb": uint8 (n, res_x, res_y, 3) — ego-centred top view (first image axis = world x).
        "rgb_vector": the tuple (rgb, vector).
        "entity": float32 (n, entity_size) — self, ally, enemy, box (and waypoint) slots of
        equal width in the ego's frame (`gigastep.game.observations.entity.entity_groups`).
        A dead agent's observation is all zeros.
    Action (per agent): continuous float32 (n, 3) (heading, dive, throttle) in [-1, 1], NaN
        acting as 0; or discrete int (n,) in 0..26 (clipped), see
        `gigastep.game.dynamics.ACTION_TABLE`.
    Reward: float32 (n,), see `gigastep.game.rewards`. Dones: bool (n,), True for dead agents.
    State: `EnvState` (agents struct-of-arrays and episode fields), a pytree of arrays.

    `reset(key) -> (obs, state)` and `step(state, actions, key) -> (obs, state, rewards, dones,
    episode_done)` are pure and can be jitted, vmapped and pmapped; `v_reset` / `v_step` are
    their compiled batched forms.

    Example:
        >>> import jax, gigastep
        >>> env = gigastep.make("identical_5_vs_5_fobs_vec_void_disc")
        >>> keys = jax.random.split(jax.random.key(0), 8)
        >>> obs, states = env.v_reset(keys)
        >>> actions = jax.random.randint(jax.random.key(1), (8, env.n_agents), 0, 27)
        >>> obs, states, rewards, dones, ep_done = env.v_step(states, actions, keys)
        >>> obs.shape
        (8, 10, 90)
    """

    def __init__(self, config: EnvConfig | None = None, **fields: Any) -> None:
        if config is None:
            check_fields(fields, "GigastepEnv")
            config = EnvConfig(**fields)
        elif not isinstance(config, EnvConfig):
            raise TypeError(f"config must be an EnvConfig, got {type(config).__name__}")
        elif fields:
            config = config.replace(**fields)
        self.config = config
        self.spec: ScenarioSpec | None = None  # the ScenarioSpec of an env built by gigastep.make

    # --- attributes ---------------------------------------------------------------------
    @property
    def n_agents(self) -> int:
        return self.config.n_agents

    @property
    def teams(self) -> np.ndarray:
        """Team id of each agent, int32 (n,)."""
        return np.asarray(self.config.teams, np.int32)

    @property
    def team_sizes(self) -> tuple[int, int]:
        return self.config.team_sizes

    @property
    def discrete_actions(self) -> bool:
        return self.config.discrete_actions

    @property
    def obs_type(self) -> str:
        return self.config.obs_type

    @property
    def action_space(self) -> Discrete | Box:
        """Per-agent action space."""
        if self.config.discrete_actions:
            return Discrete(dynamics.N_DISCRETE_ACTIONS)
        return Box.create(-1.0, 1.0, (3,), np.float32)

    @property
    def observation_space(self) -> Box | Tuple:
        """Per-agent observation space."""
        c = self.config
        if c.obs_type == "entity":
            return Box.create(*entity_bounds(c), (c.entity_size,), np.float32)
        rgb = Box.create(0, 255, (c.resolution_x, c.resolution_y, 3), np.uint8)
        vec = Box.create(*vector_bounds(c), (c.vector_size,), np.float32)  # finite, derived
        spaces: dict[str, Box | Tuple] = {
            "rgb": rgb,
            "vector": vec,
            "rgb_vector": Tuple((rgb, vec)),
        }
        return spaces[c.obs_type]

    @property
    def n_actions(self) -> int:
        if not self.config.discrete_actions:
            raise ValueError("n_actions is only defined for discrete actions")
        return dynamics.N_DISCRETE_ACTIONS

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GigastepEnv) and other.config == self.config

    def __hash__(self) -> int:
        return hash(self.config)

    def __repr__(self) -> str:
        name = self.spec.name if self.spec is not None else "custom"
        return (
            f"GigastepEnv({name}: {self.team_sizes[0]} vs {self.team_sizes[1]}, "
            f"obs={self.obs_type}, discrete={self.discrete_actions})"
        )

    # --- pure functions (compiled once per config; they also trace inside a caller's jit,
    # vmap or scan, and run eagerly under jax.disable_jit) --------------------------------
    def reset(self, key: jax.Array) -> tuple[Observation, EnvState]:
        return _reset(self.config, key)

    def step(self, state: EnvState, actions: ArrayLike, key: jax.Array) -> StepResult:
        return _step(self.config, state, _checks.as_actions(actions), key)

    def sample_noise(self, key: jax.Array) -> StepNoise:
        return sample_noise(self.config, key)

    def transition(self, state: EnvState, actions: ArrayLike, noise: StepNoise) -> StepResult:
        return _transition(self.config, state, _checks.as_actions(actions), noise)

    def step_autoreset(
        self, state: EnvState, actions: ArrayLike, key: jax.Array, final_obs: bool = True
    ) -> AutoresetResult:
        return _step_autoreset(self.config, state, _checks.as_actions(actions), key, final_obs)

    def global_view(self, state: EnvState) -> jax.Array:
        check_single_state(self.config, state, "v_global_view")
        return _global_view(self.config, state)

    # --- compiled batched forms ---------------------------------------------------------
    def v_reset(self, keys: jax.Array) -> tuple[Observation, EnvState]:
        _checks.check_keys(keys)
        return _v_reset(self.config, keys)

    def v_step(self, states: EnvState, actions: ArrayLike, keys: jax.Array) -> StepResult:
        actions = _checks.as_actions(actions)
        check_batch(self.config, states, actions, keys, "step")
        return _v_step(self.config, states, actions, keys)

    def v_step_autoreset(
        self, states: EnvState, actions: ArrayLike, keys: jax.Array, final_obs: bool = True
    ) -> AutoresetResult:
        actions = _checks.as_actions(actions)
        check_batch(self.config, states, actions, keys, "step_autoreset")
        return _v_step_autoreset(self.config, states, actions, keys, final_obs)

    def reset_done_episodes(
        self, obs: Observation, states: EnvState, ep_dones: ArrayLike, key: jax.Array
    ) -> tuple[Observation, EnvState]:
        """Reset only the finished games of a batch, inside one compiled call."""
        _checks.check_key(key)
        check_batched_state(self.config, states, "reset")
        return _reset_done_episodes(self.config, obs, states, jnp.asarray(ep_dones), key)

    def v_global_view(self, states: EnvState) -> jax.Array:
        check_batched_state(self.config, states, "global_view")
        return _v_global_view(self.config, states)

    @property
    def state_vector_size(self) -> int:
        """Length S of `state_vector` (layout: `gigastep.game.observations.global_state`)."""
        return state_vector_size(self.config)

    def state_vector(self, state: EnvState, team: int = 0) -> jax.Array:
        """The global state of one game as a float32 (S,) vector seen from `team` (its
        agents first), for centralised critics; layout in
        `gigastep.game.observations.global_state`."""
        _checks.check_team(team)
        check_single_state(self.config, state, "v_state_vector")
        return _state_vector(self.config, state, team)

    def v_state_vector(self, states: EnvState, team: int = 0) -> jax.Array:
        """`state_vector` of every game of a batch: (B, S) float32."""
        _checks.check_team(team)
        check_batched_state(self.config, states, "state_vector")
        return _v_state_vector(self.config, states, team)

    @staticmethod
    def set_aux_reward_factor(state: EnvState, factor: ArrayLike) -> EnvState:
        """A copy of `state` (single or batched) with the curriculum factor set to `factor`."""
        f = jnp.broadcast_to(
            jnp.asarray(factor, jnp.float32), state.episode.aux_rewards_factor.shape
        )
        return state.replace(episode=state.episode.replace(aux_rewards_factor=f))
