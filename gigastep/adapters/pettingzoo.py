"""PettingZoo adapter: a Gigastep game as a `pettingzoo.ParallelEnv`.

Agents are named `team{t}_agent{k}`, k counting within the team (`team0_agent0`,
`team0_agent1`, ..., `team1_agent0`, ...), in the order of the environment's agent axis.
`possible_agents` never changes; an agent that dies is reported `terminated` on that step and
removed from `agents` (it never comes back). When the game ends every remaining agent is
`terminated` (a team was eliminated) or `truncated` (time limit) and `agents` empties.

Per-agent spaces are Gymnasium spaces, built once and returned as the same objects every call:
observation `Box(low, high, (L,), float32)` (vector, finite bounds from
`gigastep.spaces.vector_bounds`; entity: `(entity_size,)`, `entity_bounds`),
`Box(0, 255, (res_x, res_y, 3), uint8)` (rgb) or a `Tuple` of both; action `Discrete(27)`
or `Box(-1, 1, (3,), float32)`.
`state()` is the global view (res_x, res_y, 3) uint8 (first axis = world x, like the
observations); `render()` returns the same picture as an image (rows = world y).

Each step is one compiled call, shared by every env with an equal config. Missing actions of
live agents are an error; actions of dead agents are ignored.

Example:
    >>> env = parallel_env("identical_5_vs_5_fobs_vec_void_disc")
    >>> obs, infos = env.reset(seed=0)
    >>> actions = {a: env.action_space(a).sample() for a in env.agents}
    >>> obs, rewards, terminations, truncations, infos = env.step(actions)
"""

from __future__ import annotations

from functools import partial
from typing import Any, TypeAlias

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from pettingzoo import ParallelEnv

from gigastep import env as _env
from gigastep._util.checks import check_seed
from gigastep.adapters._names import agent_names
from gigastep.env import team_outcome
from gigastep.game.dynamics import N_DISCRETE_ACTIONS
from gigastep.game.types import EnvConfig, EnvState, Observation, check_finite_state, closest
from gigastep.versus import EnvLike, observe_state, resolve_env

__all__ = ["GigastepParallelEnv", "agent_names", "parallel_env"]

_RENDER_MODES = ["rgb_array"]
_NOOP_DISCRETE = 13  # ACTION_TABLE row (0, 0, 0)

AgentObservation: TypeAlias = "np.ndarray | tuple[np.ndarray, ...]"
"""One agent's observation on the host: an array, or (rgb, vector) for "rgb_vector"."""


@partial(jax.jit, static_argnums=0)
def _reset(config: EnvConfig, key: jax.Array) -> tuple[jax.Array, Observation, EnvState]:
    key, sub = jax.random.split(key)
    obs, state = _env.reset(config, sub)
    return key, obs, state


@partial(jax.jit, static_argnums=0)
def _observe(config: EnvConfig, state: EnvState, key: jax.Array) -> tuple[jax.Array, Observation]:
    key, sub = jax.random.split(key)
    return key, observe_state(config, state, sub)


@partial(jax.jit, static_argnums=0, donate_argnums=1)
def _step(
    config: EnvConfig, state: EnvState, key: jax.Array, actions: np.ndarray
) -> tuple[jax.Array, Observation, EnvState, jax.Array, jax.Array, jax.Array, jax.Array]:
    key, sub = jax.random.split(key)
    obs, state, rewards, dones, done = _env.step(config, state, actions, sub)
    terminated, truncated = team_outcome(config, state.agents.alive, done)
    return key, obs, state, rewards, dones, terminated, truncated


_global_view = jax.jit(_env.global_view, static_argnums=0)


def parallel_env(
    name_or_env: EnvLike, render_mode: str | None = None, **overrides: Any
) -> GigastepParallelEnv:
    """A PettingZoo ParallelEnv of a scenario name, `GigastepEnv` or `EnvConfig`.

    Args:
        render_mode: None or "rgb_array".
        **overrides: EnvConfig fields to change (e.g. `resolution_x=16, resolution_y=16`).
    """
    return GigastepParallelEnv(resolve_env(name_or_env, **overrides), render_mode=render_mode)


class GigastepParallelEnv(ParallelEnv):
    """A Gigastep game with one PettingZoo agent per Gigastep agent (see module doc)."""

    metadata = {
        "render_modes": _RENDER_MODES,
        "name": "gigastep_v0",
        "is_parallelizable": True,
        "render_fps": 10,
    }

    def __init__(self, env: _env.GigastepEnv, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in _RENDER_MODES:
            raise ValueError(
                f"render_mode must be None or one of {_RENDER_MODES}, got {render_mode!r}"
            )
        self.env = env
        self.config = env.config
        self.render_mode = render_mode
        self.possible_agents = agent_names(self.config)
        self.agents: list[str] = []
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        obs_space = env.observation_space.to_gymnasium()
        self._observation_spaces = {a: obs_space for a in self.possible_agents}
        self._action_spaces: dict[str, gymnasium.spaces.Space[Any]]
        if self.config.discrete_actions:
            self._action_spaces = {
                a: gymnasium.spaces.Discrete(N_DISCRETE_ACTIONS) for a in self.possible_agents
            }
        else:
            self._action_spaces = {
                a: gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32) for a in self.possible_agents
            }
        self.state_space = gymnasium.spaces.Box(
            0, 255, (self.config.resolution_x, self.config.resolution_y, 3), np.uint8
        )
        self._key: jax.Array | None = None
        self._state: EnvState | None = None

    def __str__(self) -> str:
        spec = getattr(self.env, "spec", None)
        name = spec.name if spec is not None else "custom"
        return f"gigastep_v0({name})"

    # --- spaces -------------------------------------------------------------------------
    def _agent(self, agent: str) -> int:
        try:
            return self._index[agent]
        except KeyError:
            raise KeyError(
                f"unknown agent {agent!r}; closest: {closest(str(agent), self.possible_agents)}"
            ) from None

    def observation_space(self, agent: str) -> gymnasium.Space[Any]:
        self._agent(agent)
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.Space[Any]:
        self._agent(agent)
        return self._action_spaces[agent]

    # --- API ----------------------------------------------------------------------------
    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, AgentObservation], dict[str, dict[str, Any]]]:
        """Start a game. `options={"state": EnvState}` starts from that (unbatched) state
        instead, e.g. one built with `EnvState.create`; its dead agents are left out."""
        if seed is not None or self._key is None:
            if seed is None:
                seed = int(np.random.default_rng().integers(0, 2**31 - 1))
            self._key = jax.random.PRNGKey(check_seed(seed))
        start = (options or {}).get("state")
        if start is None:
            self._key, obs, self._state = _reset(self.config, self._key)
            alive = np.ones(self.config.n_agents, bool)
            if self.config.team_draw is not None:  # absent agents are not in `agents`
                alive = np.asarray(self._state.agents.alive)
        else:
            start = jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), start)
            self._check_state(start)
            self._key, obs = _observe(self.config, start, self._key)
            self._state = start
            alive = np.asarray(start.agents.alive)
        obs = _host(obs)
        self.agents = [a for a, live in zip(self.possible_agents, alive, strict=True) if live]
        return self._per_agent(obs, self.agents), {a: {} for a in self.agents}

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[
        dict[str, AgentObservation],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict[str, Any]],
    ]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        live = list(self.agents)
        joint = self._joint_actions(actions, live)
        out = _step(self.config, self._state, self._key, joint)
        self._key, obs, self._state, rewards, dones, term, trunc = out
        obs, rewards, dones, term, trunc = _host((obs, rewards, dones, term, trunc))
        term, trunc = bool(term), bool(trunc)
        ended = term or trunc
        terminations, truncations = {}, {}
        for a in live:
            died = bool(dones[self._index[a]])
            terminations[a] = died or term
            truncations[a] = trunc and not died
        self.agents = [] if ended else [a for a in live if not terminations[a]]
        rewards = {a: float(rewards[self._index[a]]) for a in live}
        return (
            self._per_agent(obs, live),
            rewards,
            terminations,
            truncations,
            {a: {} for a in live},
        )

    def state(self) -> np.ndarray:
        """The global view of the current game, (res_x, res_y, 3) uint8."""
        if self._state is None:
            raise RuntimeError("call reset() before state()")
        return np.array(_global_view(self.config, self._state))

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without render_mode='rgb_array'")
            return None
        return np.ascontiguousarray(np.swapaxes(self.state(), 0, 1))

    def close(self) -> None:
        pass

    # --- helpers ------------------------------------------------------------------------
    def _check_state(self, state: object) -> None:
        if not isinstance(state, EnvState):
            raise TypeError(f"options['state'] must be an EnvState, got {type(state).__name__}")
        n = self.config.n_agents
        if state.agents.x.shape != (n,):
            raise ValueError(
                f"options['state'] must be one game of {n} agents (x of shape "
                f"({n},)), got x of shape {state.agents.x.shape}"
            )
        check_finite_state(state, "options['state']")

    def _per_agent(
        self, obs: np.ndarray | tuple[np.ndarray, ...], agents: list[str]
    ) -> dict[str, AgentObservation]:
        if isinstance(obs, tuple):
            return {a: tuple(o[self._index[a]] for o in obs) for a in agents}
        return {a: obs[self._index[a]] for a in agents}

    def _joint_actions(self, actions: dict[str, Any], live: list[str]) -> np.ndarray:
        if not isinstance(actions, dict):
            raise TypeError(f"actions must be a dict agent -> action, got {type(actions)}")
        for a in actions:
            self._agent(a)
        missing = [a for a in live if actions.get(a) is None]
        if missing:
            raise ValueError(f"no action for live agent(s) {missing}")
        n = self.config.n_agents
        discrete = self.config.discrete_actions
        joint = np.full(n, _NOOP_DISCRETE, np.int32) if discrete else np.zeros((n, 3), np.float32)
        for a in live:
            value = np.asarray(actions[a])
            if discrete:
                if value.shape != () or not np.issubdtype(value.dtype, np.integer):
                    raise ValueError(f"action of {a} must be an integer in 0..26, got {value!r}")
            elif value.shape != (3,) or not np.issubdtype(value.dtype, np.number):
                raise ValueError(
                    f"action of {a} must be 3 floats (heading, dive, throttle), got {value!r}"
                )
            joint[self._index[a]] = value
        return joint


def _host(tree: Any) -> Any:
    """Device arrays -> writable NumPy copies, one transfer for the whole pytree."""
    return jax.tree_util.tree_map(np.array, jax.device_get(tree))
