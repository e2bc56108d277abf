"""Gymnasium adapters: one team of a Gigastep game as a (vector) Gymnasium environment.

The learner controls every agent of team `team`; the other team is played by a scripted
opponent (`gigastep.opponents`) inside the same compiled step.

- Action: the joint action of the team, `MultiDiscrete([27] * m)` (discrete scenarios) or
  `Box(-1, 1, (m, 3), float32)` (continuous; heading, dive, throttle per agent).
- Observation: the team's per-agent observations stacked, `Box(low, high, (m, L), float32)`
  (vector; `Box(low, high, (m, entity_size), float32)` for entity), `Box(0, 255, (m, res_x,
  res_y, 3), uint8)` (rgb) or a `Tuple` of both (rgb_vector). A dead agent's rows are zeros.
- Reward: the sum of the team's agents' rewards. `terminated`: the game ended by elimination;
  `truncated`: it reached its time limit.

`TeamEnv` is one game (a `gymnasium.Env`); `TeamVectorEnv` runs `num_envs` games in one
compiled call per step (a `gymnasium.vector.VectorEnv`) with any of Gymnasium's three
autoreset modes. Both take and return NumPy arrays (writable copies).

Both are registered as `gigastep/Team-v0` (importing this module registers them):
`gymnasium.make("gigastep/Team-v0", name_or_env=..., opponent=...)` builds a `TeamEnv`, and
`gymnasium.make_vec("gigastep/Team-v0", num_envs=..., vectorization_mode="vector_entry_point",
name_or_env=...)` a `TeamVectorEnv`.

Example:
    >>> envs = TeamVectorEnv("identical_5_vs_5_fobs_vec_void_disc", num_envs=64,
    ...                      opponent="pursuit")
    >>> obs, info = envs.reset(seed=0)                      # (64, 5, L) float32
    >>> obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, TypeAlias

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from gigastep import env as _env
from gigastep._util.checks import check_positive_int, check_seed, check_team
from gigastep.env import team_outcome
from gigastep.game.batching import select_games
from gigastep.game.dynamics import N_DISCRETE_ACTIONS
from gigastep.game.types import EnvState, Observation
from gigastep.opponents import Policy
from gigastep.spaces import entity_bounds, vector_bounds
from gigastep.versus import EnvLike, VersusEnv, resolve_env

__all__ = ["ENV_ID", "TeamEnv", "TeamVectorEnv", "team_spaces"]

_RENDER_MODES = ["rgb_array"]

NumpyObservation: TypeAlias = "np.ndarray | tuple[np.ndarray, np.ndarray]"
"""Observations on the host: an array, or the pair (rgb, vector) for "rgb_vector"."""


def team_spaces(versus: VersusEnv) -> tuple[gymnasium.Space[Any], gymnasium.Space[Any]]:
    """(observation_space, action_space) of one game for the learner team (Gymnasium)."""
    m, config = versus.n_agents, versus.config
    action: gymnasium.spaces.Space[Any]
    if config.discrete_actions:
        action = gymnasium.spaces.MultiDiscrete(np.full(m, N_DISCRETE_ACTIONS, np.int64))
    else:
        action = gymnasium.spaces.Box(-1.0, 1.0, (m, 3), np.float32)
    if config.obs_type == "entity":
        low, high = (np.broadcast_to(b, (m, config.entity_size)) for b in entity_bounds(config))
        return gymnasium.spaces.Box(low, high, (m, config.entity_size), np.float32), action
    rgb = gymnasium.spaces.Box(0, 255, (m, config.resolution_x, config.resolution_y, 3), np.uint8)
    low, high = (np.broadcast_to(b, (m, config.vector_size)) for b in vector_bounds(config))
    vec = gymnasium.spaces.Box(low, high, (m, config.vector_size), np.float32)
    obs: dict[str, gymnasium.spaces.Space[Any]] = {
        "rgb": rgb,
        "vector": vec,
        "rgb_vector": gymnasium.spaces.Tuple((rgb, vec)),
    }
    return obs[config.obs_type], action


def _numpy(tree: Any) -> Any:
    """Device arrays -> writable NumPy copies (one transfer for the whole pytree)."""
    return jax.tree_util.tree_map(np.array, jax.device_get(tree))


def _seed_key(seed: int | None, rng: np.random.Generator | None = None) -> jax.Array:
    if seed is None:
        seed = int((rng or np.random.default_rng()).integers(0, 2**31 - 1))
    return jax.random.PRNGKey(check_seed(seed))


def _frame(view: npt.ArrayLike) -> np.ndarray:
    """A global view (res_x, res_y, 3) as an image (rows = world y, columns = world x)."""
    return np.ascontiguousarray(np.swapaxes(np.asarray(view), 0, 1))


def _check_actions(versus: VersusEnv, actions: npt.ArrayLike, batch: tuple[int, ...]) -> np.ndarray:
    """NumPy team actions of shape batch + (m,) / batch + (m, 3) in the env's dtype."""
    m = versus.n_agents
    actions = np.asarray(actions)
    discrete = versus.discrete_actions
    shape = batch + ((m,) if discrete else (m, 3))
    kind_ok = (
        np.issubdtype(actions.dtype, np.integer)
        if discrete
        else np.issubdtype(actions.dtype, np.floating)
    )
    if actions.shape != shape or not kind_ok:
        what = "integers in 0..26" if discrete else "floats (heading, dive, throttle) in [-1, 1]"
        raise ValueError(
            f"team {versus.team} actions must be {what} of shape {shape}; got {actions.dtype} "
            f"of shape {actions.shape}"
        )
    return actions.astype(np.int32 if discrete else np.float32, copy=False)


# ------------------------------------------------------------------------------------------
# Compiled functions (static: the VersusEnv, hashable by value)
# ------------------------------------------------------------------------------------------


def _stats(versus: VersusEnv, state: EnvState) -> tuple[jax.Array, jax.Array]:
    """Team episode return and length of (single) state."""
    return jnp.sum(versus.team_view(state.episode.returns)), state.episode.step


_single_view = jax.jit(_env.global_view, static_argnums=0)


@partial(jax.jit, static_argnums=0)
def _single_reset(versus: VersusEnv, key: jax.Array) -> tuple[Observation, EnvState]:
    return versus.reset(key)


@partial(jax.jit, static_argnums=0, donate_argnums=1)
def _single_step(
    versus: VersusEnv, state: EnvState, key: jax.Array, actions: jax.Array
) -> tuple[jax.Array, Observation, EnvState, jax.Array, jax.Array, jax.Array, jax.Array]:
    key, sub = jax.random.split(key)
    obs, state, rewards, dones, done = versus.step(state, actions, sub)
    terminated, truncated = team_outcome(versus.config, state.agents.alive, done)
    return key, obs, state, rewards, dones, terminated, truncated


@partial(jax.jit, static_argnums=0)
def _masked_reset(
    versus: VersusEnv, obs: Observation, states: EnvState, mask: jax.Array, keys: jax.Array
) -> tuple[Observation, EnvState]:
    new_obs, new_states = jax.vmap(versus.reset)(keys)
    return select_games(mask, new_obs, obs), select_games(mask, new_states, states)


@partial(jax.jit, static_argnums=(0, 1), donate_argnums=2)
def _vector_step(
    versus: VersusEnv,
    mode: str,
    states: EnvState,
    key: jax.Array,
    actions: jax.Array,
    pending: jax.Array,
) -> tuple[
    jax.Array,
    Observation,
    EnvState,
    jax.Array,
    jax.Array,
    jax.Array,
    jax.Array,
    jax.Array,
    Observation | None,
]:
    """One batched step in autoreset `mode` ("NextStep", "SameStep", "Disabled").

    `pending` (B,) bool: games that ended at the previous step (NextStep resets them now
    instead of stepping them). Returns key, obs, states, reward (B,), terminated (B,),
    truncated (B,), episode_return (B,), episode_length (B,), final_obs.
    """
    b = actions.shape[0]
    key, k_step, k_reset = jax.random.split(key, 3)
    step_keys = jax.random.split(k_step, b)
    if mode == AutoresetMode.SAME_STEP.value:
        # Only the finished games are reset. (Where XLA runs conditionals from the host, this
        # reads a count there; the NumPy interface copies every step's outputs to the host
        # anyway.)
        obs, new, rewards, _, done, info = versus.batched_step_autoreset(states, actions, step_keys)
        ep_return = jnp.sum(info.episode_return, axis=-1)
        return (
            key,
            obs,
            new,
            jnp.sum(rewards, axis=-1),
            info.terminated,
            info.truncated,
            ep_return,
            info.episode_length,
            info.final_obs,
        )
    obs, new, rewards, _, done = jax.vmap(versus.step)(states, actions, step_keys)
    terminated, truncated = team_outcome(versus.config, new.agents.alive, done)
    ep_return, ep_length = jax.vmap(partial(_stats, versus))(new)
    reward = jnp.sum(rewards, axis=-1)
    if mode == AutoresetMode.NEXT_STEP.value:
        fresh_obs, fresh = _env.reset_where(versus.reset, pending, jax.random.split(k_reset, b))
        obs = select_games(pending, fresh_obs, obs)
        new = select_games(pending, fresh, new)
        reward = jnp.where(pending, 0.0, reward)
        terminated = terminated & ~pending
        truncated = truncated & ~pending
    return key, obs, new, reward, terminated, truncated, ep_return, ep_length, None


# ------------------------------------------------------------------------------------------
# Single game
# ------------------------------------------------------------------------------------------


class TeamEnv(gymnasium.Env):
    """One Gigastep game as a Gymnasium environment in which the agent is a whole team.

    Args:
        name_or_env: a scenario name, `GigastepEnv` or `EnvConfig`.
        team: the learner's team (0 or 1); the other team is scripted.
        opponent: scripted policy name (`"random"`, `"circle"`, `"pursuit"`, `"evade"`) or a
            callable `policy(config, state, key) -> actions`.
        render_mode: None or "rgb_array" (the global view, rows = world y).
        **overrides: EnvConfig fields changed (e.g. `resolution_x=16, resolution_y=16`).

    `info` holds `agent_rewards` (m,) float32 and `agent_dones` (m,) bool of the team; with a
    team draw (`EnvConfig.team_draw`) `reset` and `step` also give `agent_present` (m,) bool,
    the team's agents present in the episode (an absent agent's rows are zeros: mask it out).
    Seeding: `reset(seed=s)` seeds `np_random`, from which the game's JAX key is drawn, so
    `reset(seed=s)` followed by the same actions replays the same game.
    """

    metadata = {"render_modes": _RENDER_MODES, "render_fps": 10}

    def __init__(
        self,
        name_or_env: EnvLike,
        team: int = 0,
        opponent: str | Policy = "random",
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        if render_mode is not None and render_mode not in _RENDER_MODES:
            raise ValueError(
                f"render_mode must be None or one of {_RENDER_MODES}, got {render_mode!r}"
            )
        check_team(team)
        self.versus = VersusEnv(resolve_env(name_or_env, **overrides), opponent, 1 - team)
        self.observation_space, self.action_space = team_spaces(self.versus)
        self.render_mode = render_mode
        self._state: EnvState | None = None
        self._key: jax.Array | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NumpyObservation, dict[str, Any]]:
        super().reset(seed=seed)
        key = _seed_key(None, self.np_random)
        self._key, sub = jax.random.split(key)
        obs, self._state = _single_reset(self.versus, sub)
        return _numpy(obs), _present_info(self.versus, self._state)

    def step(
        self, action: npt.ArrayLike
    ) -> tuple[NumpyObservation, float, bool, bool, dict[str, Any]]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        actions = _check_actions(self.versus, action, ())
        self._key, obs, self._state, rewards, dones, term, trunc = _single_step(
            self.versus, self._state, self._key, jnp.asarray(actions)
        )
        obs, rewards, dones, term, trunc = _numpy((obs, rewards, dones, term, trunc))
        info = {"agent_rewards": rewards, "agent_dones": dones}
        info.update(_present_info(self.versus, self._state))
        return obs, float(rewards.sum()), bool(term), bool(trunc), info

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gymnasium.logger.warn(
                "render() called without a render_mode; create the env with render_mode='rgb_array'"
            )
            return None
        if self._state is None:
            raise RuntimeError("call reset() before render()")
        return _frame(_single_view(self.versus.config, self._state))


def _present_info(versus: VersusEnv, state: EnvState, batched: bool = False) -> dict[str, Any]:
    """{"agent_present": the team's present agents, (m,) or (B, m) bool} with a team draw,
    else {} (every agent is present)."""
    present = state.episode.present
    if present is None:
        return {}
    view = jax.vmap(versus.team_view) if batched else versus.team_view
    return {"agent_present": np.array(view(present))}


# ------------------------------------------------------------------------------------------
# Vector of games
# ------------------------------------------------------------------------------------------


def _autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    for m in AutoresetMode:
        if isinstance(mode, str) and mode.lower().replace("_", "") in (
            m.value.lower(),
            m.name.lower().replace("_", ""),
        ):
            return m
    raise ValueError(
        f"autoreset_mode must be a gymnasium.vector.AutoresetMode "
        f"({', '.join(m.name for m in AutoresetMode)}), got {mode!r}"
    )


class TeamVectorEnv(gymnasium.vector.VectorEnv):
    """`num_envs` Gigastep games, one team each controlled by the learner (see module doc).

    Autoreset modes (`metadata["autoreset_mode"]`):
        NEXT_STEP (default): a game that ends at step t is reset by the call at t + 1, which
            ignores its action and returns the reset observation, reward 0 and no end flags.
        SAME_STEP: a game that ends is reset within the same call; its last observation is in
            `info["final_obs"]` (same structure as the observations, valid where
            `info["_final_obs"]`), and `info["final_info"]` holds its `episode_return` and
            `episode_length`.
        DISABLED: nothing is reset automatically; call `reset(options={"reset_mask": mask})`
            (mask (num_envs,) bool) before stepping a finished game again.

    With a team draw (`EnvConfig.team_draw`), `reset` and `step` give `info["agent_present"]`
    (num_envs, m) bool: the team's agents present in each game's current episode.
    In every mode, on a step where some game ended, `info["episode_return"]` (team sum,
    float32) and `info["episode_length"]` (int32) hold the finished episodes' values, valid
    where `info["_episode_return"]` / `info["_episode_length"]` (zero elsewhere).
    All games run in one compiled call per step; the game states stay on the device.
    """

    def __init__(
        self,
        name_or_env: EnvLike,
        num_envs: int,
        team: int = 0,
        opponent: str | Policy = "random",
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        check_positive_int(num_envs, "num_envs")
        check_team(team)
        if render_mode is not None and render_mode not in _RENDER_MODES:
            raise ValueError(
                f"render_mode must be None or one of {_RENDER_MODES}, got {render_mode!r}"
            )
        self.versus = VersusEnv(resolve_env(name_or_env, **overrides), opponent, 1 - team)
        self.num_envs = num_envs
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self.metadata = {
            "render_modes": _RENDER_MODES,
            "render_fps": 10,
            "autoreset_mode": self.autoreset_mode,
        }
        self.render_mode = render_mode
        self.single_observation_space, self.single_action_space = team_spaces(self.versus)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._states: EnvState | None = None
        # device observations (the masked reset keeps the others')
        self._obs: Observation | None = None
        self._key: jax.Array | None = None
        # device (B,) bool: ended at the last step (NEXT_STEP)
        self._pending: jax.Array | None = None
        self._ended = np.zeros(num_envs, bool)  # host copy, for DISABLED misuse checks

    # --- reset --------------------------------------------------------------------------
    def _reset_keys(self, seed: int | Sequence[int] | None) -> jax.Array:
        b = self.num_envs
        if seed is None or isinstance(seed, (int, np.integer)):
            if seed is not None or self._key is None:
                self._np_random, self._np_random_seed = gymnasium.utils.seeding.np_random(seed)
                self._key = _seed_key(None, self._np_random)
            self._key, sub = jax.random.split(self._key)
            return jax.random.split(sub, b)
        seeds = list(seed)
        if len(seeds) != b:
            raise ValueError(f"seed must be an int, None or {b} ints; got {len(seeds)} seeds")
        self._np_random, self._np_random_seed = gymnasium.utils.seeding.np_random(seeds[0])
        self._key = _seed_key(None, self._np_random)
        return jnp.stack([_seed_key(s) for s in seeds])

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NumpyObservation, dict[str, Any]]:
        """Reset every game, or only those of `options["reset_mask"]` ((num_envs,) bool)."""
        mask = None if options is None else options.get("reset_mask")
        keys = self._reset_keys(seed)
        if mask is None:
            self._obs, self._states = self.versus.v_reset(keys)
            reset = np.ones(self.num_envs, bool)
        else:
            if self._states is None:
                raise RuntimeError("reset() without reset_mask must come first")
            mask = np.asarray(mask)
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise ValueError(
                    f"options['reset_mask'] must be a bool array of shape "
                    f"({self.num_envs},), got {mask.dtype} {mask.shape}"
                )
            self._obs, self._states = _masked_reset(
                self.versus, self._obs, self._states, jnp.asarray(mask), keys
            )
            reset = mask
        self._ended = self._ended & ~reset
        self._pending = jnp.asarray(self._ended)
        return _numpy(self._obs), _present_info(self.versus, self._states, batched=True)

    # --- step ---------------------------------------------------------------------------
    def step(
        self, actions: npt.ArrayLike
    ) -> tuple[NumpyObservation, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._states is None:
            raise RuntimeError("call reset() before step()")
        if self.autoreset_mode == AutoresetMode.DISABLED and self._ended.any():
            raise RuntimeError(
                f"games {np.flatnonzero(self._ended).tolist()} have ended; with autoreset "
                f"DISABLED call reset(options={{'reset_mask': mask}}) before stepping them"
            )
        actions = jnp.asarray(_check_actions(self.versus, actions, (self.num_envs,)))
        out = _vector_step(
            self.versus, self.autoreset_mode.value, self._states, self._key, actions, self._pending
        )
        self._key, obs, self._states, reward, term, trunc, ep_ret, ep_len, final = out
        self._obs = obs
        obs, reward, term, trunc, ep_ret, ep_len, final = _numpy(
            (obs, reward, term, trunc, ep_ret, ep_len, final)
        )
        ended = term | trunc
        self._ended = ended
        self._pending = jnp.asarray(ended)
        info: dict[str, Any] = _present_info(self.versus, self._states, batched=True)
        if ended.any():
            # Zero where no episode ended (the masks say which entries are valid).
            stats = {
                "episode_return": np.where(ended, ep_ret, 0).astype(np.float32),
                "_episode_return": ended.copy(),
                "episode_length": np.where(ended, ep_len, 0).astype(np.int32),
                "_episode_length": ended.copy(),
            }
            info.update(stats)
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                info["final_obs"], info["_final_obs"] = final, ended.copy()
                info["final_info"] = {k: v.copy() for k, v in stats.items()}
                info["_final_info"] = ended.copy()
        return obs, reward.astype(np.float64), term, trunc, info

    def render(self) -> tuple[np.ndarray, ...] | None:
        """The global views of all games (a tuple of (res_y, res_x, 3) uint8 frames)."""
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without render_mode='rgb_array'")
            return None
        if self._states is None:
            raise RuntimeError("call reset() before render()")
        views = np.asarray(self.versus.env.v_global_view(self._states))
        return tuple(_frame(v) for v in views)

    def close_extras(self, **kwargs: Any) -> None:
        self._states = self._obs = None


ENV_ID = "gigastep/Team-v0"
"""Gymnasium id of `TeamEnv` (entry point) and `TeamVectorEnv` (vector entry point)."""

if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        ENV_ID,
        entry_point="gigastep.adapters.gymnasium:TeamEnv",
        vector_entry_point="gigastep.adapters.gymnasium:TeamVectorEnv",
    )
