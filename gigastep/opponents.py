"""Scripted opponents as pure JAX policies, and the cooperative (versus-a-script) mode.

A policy is a pure function `policy(config, state, key) -> actions` that returns the actions of
ALL agents of one game, in the environment's action format (continuous float32 (n, 3) in
[-1, 1], or discrete int32 (n,) in 0..26); the caller keeps the rows of the team it scripts.
Policies read the full `EnvState` (they are scripts, not learners) and can be jitted and
vmapped like the environment.

Built-in policies (`get_policy(name)`):

- `random`: uniform actions (continuous: uniform in [-1, 1]^3; discrete: uniform in 0..26).
- `circle`: the constant action (heading +1, dive 0, throttle 0): every agent turns
  counter-clockwise at full rate; discrete action 16.
- `pursuit`: turn toward the target, climb or dive to its altitude, full throttle. The target
  is the nearest enemy the agent *sees*, and if it sees none, the nearest alive enemy.
  An agent e sees an alive enemy j when j is inside e's own deterministic detection zone:
  distance <= cone_depth * detection_range[e] and |bearing of j from e's heading| <
  cone_angle, or distance < very_close_depth (the detection rule of
  `gigastep.game.interactions.combat` without noise, with e as the observer). Distances are planar.
- `evade`: turn away from the nearest threatening enemy at full throttle, staying inside the
  map. An alive enemy j threatens e when e is inside j's detection zone (the rule above with j
  as the observer). Within `EVADE_WALL_MARGIN` x the world size of a map edge the agent is
  also pushed back toward the inside, growing linearly to twice the flee weight at the edge,
  so close to the edge the wall wins. With no threat and no wall near, it flies straight on.
  Obstacle boxes are ignored.

Heading and altitude use proportional control: the control is the error divided by what one
step at full rate achieves, clipped to [-1, 1]. Discrete actions are the `ACTION_TABLE` entry
whose (heading, dive, throttle) signs match the rounded continuous controls.

Cooperative mode: `VersusEnv(env, opponent="pursuit", opponent_team=1)` plays the opponent team
with a policy inside the same pure, jittable step, so the learner passes only its own team's
actions and receives its own team's observations, rewards and dones.
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
from gigastep.game.dynamics import N_DISCRETE_ACTIONS, wrap_angle
from gigastep.game.interactions import Geometry, geometry, in_cone
from gigastep.game.types import EnvConfig, EnvState, Observation, StepInfo, closest
from gigastep.spaces import Box, Discrete, Tuple

_T = TypeVar("_T")

__all__ = [
    "EVADE_WALL_MARGIN",
    "POLICIES",
    "Policy",
    "VersusEnv",
    "circle",
    "evade",
    "get_policy",
    "observe_state",
    "pursuit",
    "random",
    "resolve_env",
    "team_outcome",
    "to_discrete",
]

Policy = Callable[[EnvConfig, EnvState, jax.Array], jax.Array]
"""`policy(config, state, key) -> actions` of all n agents of one game."""

EnvLike: TypeAlias = "_env.GigastepEnv | EnvConfig | str"
"""What `resolve_env` turns into a `GigastepEnv`: the env itself, its config or a scenario name."""

EVADE_WALL_MARGIN = 0.15
"""Fraction of the world size within which `evade` turns back from a map edge."""

# ------------------------------------------------------------------------------------------
# Action helpers
# ------------------------------------------------------------------------------------------


def to_discrete(controls: ArrayLike) -> jax.Array:
    """(n, 3) float controls -> (n,) int32 index of the `ACTION_TABLE` row with the same signs.

    Each control is rounded to -1, 0 or +1 (|c| <= 0.5 -> 0); the table row r has heading
    level (r // 3) % 3, dive level r % 3 and throttle level r // 9 (levels -1, 0, 1).
    """
    level = jnp.round(jnp.clip(controls, -1.0, 1.0)).astype(jnp.int32) + 1  # 0, 1, 2
    return 9 * level[:, 2] + 3 * level[:, 0] + level[:, 1]


def _emit(config: EnvConfig, controls: jax.Array) -> jax.Array:
    """Continuous controls (n, 3) in the config's action format."""
    controls = jnp.clip(controls.astype(jnp.float32), -1.0, 1.0)
    return to_discrete(controls) if config.discrete_actions else controls


def _heading_control(
    config: EnvConfig, heading: jax.Array, dx: jax.Array, dy: jax.Array
) -> jax.Array:
    """Turn toward direction (dx, dy): the heading error over one full-rate step, clipped."""
    error = wrap_angle(jnp.arctan2(dy, dx) - heading)
    return jnp.clip(error / np.float32(config.dt * config.heading_rate), -1.0, 1.0)


def _detection_zone(config: EnvConfig, state: EnvState) -> tuple[jax.Array, Geometry]:
    """zone[i, j]: i is inside j's deterministic detection zone (row target, column observer),
    and the (n, n) planar geometry it was computed from."""
    geo = geometry(state.agents)
    radius = config.cone_depth * np.asarray(config.detection_range, np.float64)
    within = geo.d2 <= jnp.asarray(radius**2, jnp.float32)[None, :]
    very_close = geo.d2 < np.float32(config.very_close_depth**2)
    return (within & in_cone(config.cone_angle, geo, state.agents.heading)) | very_close, geo


def _alive_enemies(config: EnvConfig, state: EnvState) -> jax.Array:
    """enemy[e, j]: j is an alive agent of the other team than e."""
    teams = np.asarray(config.teams)
    return jnp.asarray(teams[:, None] != teams[None, :]) & state.agents.alive[None, :]


# ------------------------------------------------------------------------------------------
# Policies
# ------------------------------------------------------------------------------------------


def random(config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
    """Uniform random actions."""
    n = config.n_agents
    if config.discrete_actions:
        return jax.random.randint(key, (n,), 0, N_DISCRETE_ACTIONS, jnp.int32)
    return jax.random.uniform(key, (n, 3), jnp.float32, -1.0, 1.0)


def circle(config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
    """Constant (heading +1, dive 0, throttle 0): every agent turns counter-clockwise."""
    controls = jnp.broadcast_to(jnp.asarray([1.0, 0.0, 0.0], jnp.float32), (config.n_agents, 3))
    return _emit(config, controls)


def pursuit(config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
    """Chase the nearest seen enemy (else the nearest alive one) at full throttle."""
    agents = state.agents
    zone, geo = _detection_zone(config, state)
    enemy = _alive_enemies(config, state)  # [e, j]
    seen = enemy & zone.T  # zone[j, e]: j inside e's zone
    d2 = geo.d2.T  # symmetric; [e, j]
    any_seen = jnp.any(seen, axis=1, keepdims=True)
    candidates = jnp.where(any_seen, seen, enemy)
    target = jnp.argmin(jnp.where(candidates, d2, jnp.inf), axis=1)  # (n,)
    has_target = jnp.any(candidates, axis=1)
    dx = agents.x[target] - agents.x
    dy = agents.y[target] - agents.y
    turn = _heading_control(config, agents.heading, dx, dy)
    dive = jnp.clip(
        (agents.z[target] - agents.z) / np.float32(config.dt * config.dive_rate), -1.0, 1.0
    )
    controls = jnp.stack(
        [jnp.where(has_target, turn, 0.0), jnp.where(has_target, dive, 0.0), jnp.ones_like(turn)],
        axis=-1,
    )
    return _emit(config, controls)


def evade(config: EnvConfig, state: EnvState, key: jax.Array) -> jax.Array:
    """Flee the nearest enemy whose detection zone holds the agent, staying inside the map."""
    agents = state.agents
    zone, geo = _detection_zone(config, state)
    threat = _alive_enemies(config, state) & zone  # zone[e, j]: e inside j's zone
    d2 = geo.d2
    nearest = jnp.argmin(jnp.where(threat, d2, jnp.inf), axis=1)
    threatened = jnp.any(threat, axis=1)
    away_x = agents.x - agents.x[nearest]
    away_y = agents.y - agents.y[nearest]
    norm = jnp.sqrt(away_x * away_x + away_y * away_y)
    scale = jnp.where(threatened & (norm > 0), 1.0 / jnp.maximum(norm, 1e-6), 0.0)
    margin = EVADE_WALL_MARGIN * min(config.limit_x, config.limit_y)

    def push(pos: jax.Array, limit: float) -> jax.Array:
        low = jnp.clip((margin - pos) / margin, 0.0, 1.0)
        high = jnp.clip((pos - (limit - margin)) / margin, 0.0, 1.0)
        return low - high

    # The wall term weighs 2: at the edge it overrides fleeing straight out of the map.
    want_x = away_x * scale + 2.0 * push(agents.x, config.limit_x)
    want_y = away_y * scale + 2.0 * push(agents.y, config.limit_y)
    steer = (want_x * want_x + want_y * want_y) > 1e-6
    turn = jnp.where(steer, _heading_control(config, agents.heading, want_x, want_y), 0.0)
    controls = jnp.stack([turn, jnp.zeros_like(turn), jnp.ones_like(turn)], axis=-1)
    return _emit(config, controls)


POLICIES: dict[str, Policy] = {
    "random": random,
    "circle": circle,
    "pursuit": pursuit,
    "evade": evade,
}
"""The built-in scripted policies by name."""


def get_policy(name: str | Policy) -> Policy:
    """The scripted policy called `name` (a callable is returned unchanged).

    Raises:
        ValueError: unknown name (the message lists the closest valid names).
    """
    if callable(name):
        return name
    if not isinstance(name, str):
        raise TypeError(
            f"an opponent is a policy name ({sorted(POLICIES)}) or a callable "
            f"policy(config, state, key) -> actions; got {type(name).__name__}"
        )
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown scripted policy {name!r}; closest: {closest(name, POLICIES)} "
            f"(all: {sorted(POLICIES)})"
        ) from None


# ------------------------------------------------------------------------------------------
# Cooperative mode: one team scripted inside the step
# ------------------------------------------------------------------------------------------


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


def team_outcome(
    config: EnvConfig, alive: jax.Array, episode_done: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(terminated, truncated) of a step from the alive mask after it and its episode_done.

    terminated = the episode ended by elimination (either team, or both when
    `episode_ends_one_team_dead` is False); truncated = it ended otherwise (time limit).
    """
    teams = np.asarray(config.teams)
    left = [jnp.any(alive[..., teams == t], axis=-1) for t in (0, 1)]
    if config.episode_ends_one_team_dead:
        eliminated = ~left[0] | ~left[1]
    else:
        eliminated = ~left[0] & ~left[1]
    return episode_done & eliminated, episode_done & ~eliminated
