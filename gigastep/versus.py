"""One team of a game played by a scripted policy inside the step: `VersusEnv`.

`VersusEnv(env, opponent="pursuit", opponent_team=1)` plays the opponent team with a policy of
`gigastep.opponents` (or any `policy(config, state, key) -> actions`) inside the same pure,
jittable step, so the learner passes only its own team's actions and receives its own team's
observations, rewards and dones.

Also here, for the wrappers and adapters that build on a game: `resolve_env` (a scenario name,
config or env -> `GigastepEnv`) and `observe_state` (the observation of a given state as at a
reset).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeAlias, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from gigastep import env as _env
from gigastep._util.checks import check_actions, check_keys, check_team
from gigastep.env import AutoresetResult, StepResult
from gigastep.game.batching import select_games
from gigastep.game.interactions import geometry
from gigastep.game.types import EnvConfig, EnvState, Observation, StepInfo
from gigastep.opponents import Policy, get_policy
from gigastep.spaces import Box, Discrete, Tuple

_T = TypeVar("_T")

__all__ = ["EnvLike", "VersusEnv", "observe_state", "resolve_env"]

EnvLike: TypeAlias = "_env.GigastepEnv | EnvConfig | str"
"""What `resolve_env` turns into a `GigastepEnv`: the env itself, its config or a scenario name."""


def observe_state(config: EnvConfig, state: EnvState, key: jax.Array) -> Observation:
    """The observation of a given (e.g. hand-built) state as at a reset: nothing detected yet,
    fresh communication draws from `key`. Per-agent observations of all n agents."""
    n = config.n_agents
    comm = jax.random.uniform(key, (n, n)) if config.stochastic_comm else jnp.zeros((n, n))
    zeros = jnp.zeros((n, n), bool)
    return _env.observe(config, state, geometry(state.agents), zeros, jnp.zeros(n, bool), comm)


def resolve_env(name_or_env: EnvLike, **overrides: Any) -> _env.GigastepEnv:
    """A `GigastepEnv` from a scenario name (`gigastep.make`), an `EnvConfig` or a
    `GigastepEnv`, with EnvConfig field `overrides` applied."""
    if isinstance(name_or_env, str):
        from gigastep.registry import make

        return make(name_or_env, **overrides)
    if isinstance(name_or_env, _env.GigastepEnv):
        if not overrides:
            return name_or_env
        return _env.GigastepEnv(name_or_env.config.replace(**overrides))
    if isinstance(name_or_env, EnvConfig):
        return _env.GigastepEnv(name_or_env.replace(**overrides) if overrides else name_or_env)
    raise TypeError(
        f"expected a scenario name, a GigastepEnv or an EnvConfig; got {type(name_or_env).__name__}"
    )


def _team_take(index: np.ndarray) -> Callable[[jax.Array], jax.Array]:
    """A function selecting the rows `index` (a slice when they are contiguous)."""
    lo, hi = int(index[0]), int(index[-1]) + 1
    if hi - lo == len(index):
        return lambda x: x[lo:hi]
    idx = jnp.asarray(index)
    return lambda x: x[idx]


class VersusEnv:
    """A Gigastep game in which one team is played by a scripted policy.

    The learner controls team `1 - opponent_team`; its actions have shape (n_team, 3) float
    (continuous) or (n_team,) int (discrete). Observations, rewards and dones are the learner
    team's rows (n_team, ...). Every method is pure and reuses the environment's own `step`,
    `step_autoreset` and `reset` (the opponent acts on the state before the step, i.e. on the
    same information as the learner's observation).

    Equal `VersusEnv`s (same config, opponent team and policy) compare and hash equal, so that
    compiled functions are shared.

    Example:
        >>> env = VersusEnv(gigastep.make("identical_5_vs_5_fobs_vec_void_disc"), "pursuit")
        >>> obs, state = env.reset(jax.random.key(0))            # obs (5, L)
        >>> obs, state, r, d, done = env.step(state, jnp.full(5, 13), jax.random.key(1))
    """

    def __init__(
        self, env: EnvLike, opponent: str | Policy = "pursuit", opponent_team: int = 1
    ) -> None:
        if isinstance(env, VersusEnv):
            raise TypeError("env is already a VersusEnv; wrap the underlying GigastepEnv")
        env = resolve_env(env)
        check_team(opponent_team, "opponent_team")
        self.env = env
        self.config = env.config
        self.policy = get_policy(opponent)
        self.opponent_team = int(opponent_team)
        self.team = 1 - self.opponent_team
        self.team_indices = np.flatnonzero(np.asarray(env.config.teams) == self.team)
        if len(self.team_indices) == 0:
            raise ValueError(f"team {self.team} has no agents in this environment")
        self._take = _team_take(self.team_indices)

    # --- identity (static argument of the compiled forms) -------------------------------
    def _key(self) -> tuple[EnvConfig, int, Policy]:
        return (self.config, self.team, self.policy)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VersusEnv) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        name = getattr(self.policy, "__name__", repr(self.policy))
        return f"VersusEnv({self.env!r}, learner team {self.team}, opponent {name})"

    # --- attributes ---------------------------------------------------------------------
    @property
    def n_agents(self) -> int:
        """Agents the learner controls (its team size)."""
        return len(self.team_indices)

    @property
    def discrete_actions(self) -> bool:
        return self.config.discrete_actions

    @property
    def obs_type(self) -> str:
        return self.config.obs_type

    @property
    def action_space(self) -> Discrete | Box:
        """Per-agent action space (as the environment's)."""
        return self.env.action_space

    @property
    def observation_space(self) -> Box | Tuple:
        """Per-agent observation space (as the environment's)."""
        return self.env.observation_space

    # --- pure functions -----------------------------------------------------------------
    def team_view(self, x: _T) -> _T:
        """The learner team's rows of a per-agent pytree (leading axis n)."""
        return jax.tree_util.tree_map(self._take, x)

    def joint_actions(self, state: EnvState, team_actions: ArrayLike, key: jax.Array) -> jax.Array:
        """All agents' actions: the learner's rows from `team_actions`, the rest scripted."""
        self._check_team_actions(team_actions)
        scripted = self.policy(self.config, state, key)
        dtype = jnp.int32 if self.discrete_actions else jnp.float32
        own = jnp.asarray(team_actions).astype(dtype)
        return scripted.astype(dtype).at[jnp.asarray(self.team_indices)].set(own)

    def reset(self, key: jax.Array) -> tuple[Observation, EnvState]:
        obs, state = _env.reset(self.config, key)
        return self.team_view(obs), state

    def step(self, state: EnvState, team_actions: ArrayLike, key: jax.Array) -> StepResult:
        """(obs (n_team, ...), state, rewards (n_team,), dones (n_team,), episode_done ())."""
        k_opponent, k_env = jax.random.split(key)
        actions = self.joint_actions(state, team_actions, k_opponent)
        obs, state, rewards, dones, done = _env.step(self.config, state, actions, k_env)
        return self.team_view(obs), state, self._take(rewards), self._take(dones), done

    def step_autoreset(
        self,
        state: EnvState,
        team_actions: ArrayLike,
        key: jax.Array,
        final_obs: bool = True,
        final_state: bool = False,
        score: EnvConfig | None = None,
    ) -> AutoresetResult:
        """As `GigastepEnv.step_autoreset`, restricted to the learner team (info included;
        `info.final_state` is the whole game's state)."""
        k_opponent, k_env = jax.random.split(key)
        actions = self.joint_actions(state, team_actions, k_opponent)
        obs, state, rewards, dones, done, info = _env.step_autoreset(
            self.config, state, actions, k_env, final_obs, final_state, score
        )
        info = StepInfo(
            terminated=info.terminated,
            truncated=info.truncated,
            final_obs=self.team_view(info.final_obs),
            episode_return=self._take(info.episode_return),
            episode_length=info.episode_length,
            winner=info.winner,
            final_state=info.final_state,
            score=None if info.score is None else self._take(info.score),
        )
        return self.team_view(obs), state, self._take(rewards), self._take(dones), done, info

    def batched_step_autoreset(
        self,
        states: EnvState,
        team_actions: ArrayLike,
        keys: jax.Array,
        final_obs: bool = True,
        final_state: bool = False,
        score: EnvConfig | None = None,
    ) -> AutoresetResult:
        """`jax.vmap(step_autoreset)` over a batch (leading axis B on every argument), with
        the finished games reset by `env.batched_step_autoreset` instead of every game.

        Pure, for a caller's jit or scan on CPU; under a further vmap, or where XLA reads a
        conditional's branch index on the host (GPU), prefer the vmapped `step_autoreset`.
        """
        split = jax.vmap(jax.random.split)(keys)
        actions = jax.vmap(self.joint_actions)(states, team_actions, split[:, 0])
        obs, states, rewards, dones, done, info = _env.batched_step_autoreset(
            self.config, states, actions, split[:, 1], final_obs, final_state, score
        )
        team = jax.vmap(self.team_view)
        info = StepInfo(
            terminated=info.terminated,
            truncated=info.truncated,
            final_obs=team(info.final_obs),
            episode_return=team(info.episode_return),
            episode_length=info.episode_length,
            winner=info.winner,
            final_state=info.final_state,
            score=None if info.score is None else team(info.score),
        )
        return team(obs), states, team(rewards), team(dones), done, info

    # --- compiled batched forms ---------------------------------------------------------
    def v_reset(self, keys: jax.Array) -> tuple[Observation, EnvState]:
        check_keys(keys)
        return _v_reset(self, keys)

    def v_step(self, states: EnvState, team_actions: ArrayLike, keys: jax.Array) -> StepResult:
        check_keys(keys)
        return _v_step(self, states, team_actions, keys)

    def v_step_autoreset(
        self, states: EnvState, team_actions: ArrayLike, keys: jax.Array, final_obs: bool = True
    ) -> AutoresetResult:
        check_keys(keys)
        return _v_step_autoreset(self, states, team_actions, keys, final_obs)

    def reset_done_episodes(
        self, obs: Observation, states: EnvState, ep_dones: ArrayLike, key: jax.Array
    ) -> tuple[Observation, EnvState]:
        """Reset only the finished games of a batch (obs are team observations)."""
        return _reset_done_episodes(self, obs, states, jnp.asarray(ep_dones), key)

    # --- checks -------------------------------------------------------------------------
    def _check_team_actions(self, team_actions: ArrayLike) -> None:
        check_actions(team_actions, self.n_agents, self.discrete_actions, f"team {self.team} ")


@partial(jax.jit, static_argnums=0)
def _v_reset(versus: VersusEnv, keys: jax.Array) -> tuple[Observation, EnvState]:
    return jax.vmap(versus.reset)(keys)


@partial(jax.jit, static_argnums=0)
def _v_step(
    versus: VersusEnv, states: EnvState, team_actions: ArrayLike, keys: jax.Array
) -> StepResult:
    return jax.vmap(versus.step)(states, team_actions, keys)


@partial(jax.jit, static_argnums=(0, 4))
def _v_step_autoreset(
    versus: VersusEnv,
    states: EnvState,
    team_actions: ArrayLike,
    keys: jax.Array,
    final_obs: bool,
) -> AutoresetResult:
    return versus.batched_step_autoreset(states, team_actions, keys, final_obs)


@partial(jax.jit, static_argnums=0)
def _reset_done_episodes(
    versus: VersusEnv, obs: Observation, states: EnvState, ep_dones: jax.Array, key: jax.Array
) -> tuple[Observation, EnvState]:
    keys = jax.random.split(key, ep_dones.shape[0])
    new_obs, new_states = jax.vmap(versus.reset)(keys)
    return select_games(ep_dones, new_obs, obs), select_games(ep_dones, new_states, states)
