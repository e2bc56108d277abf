"""`GigastepEnv`: the phases of the game composed into pure `reset` and `step` functions.

The phases live in `gigastep.game` (movement `dynamics`, `waypoints`, hazards and combat in
`interactions`, `rewards`, `observations`, the `reset` placement and the masked batch
computation of the auto-reset in `batching`); this module only composes them.

The module-level functions take the static `EnvConfig` as their first argument and are pure;
the class is a thin, stateless holder of a config that offers them as methods (unbatched,
batched with `vmap`, and auto-resetting), all compiled with the config as static argument.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

import chex
import jax
import jax.numpy as jnp
import numpy as np

from gigastep._util import checks as _checks
from gigastep._util.checks import check_actions
from gigastep._util.pytree import PytreeData, pytree_dataclass
from gigastep.game import dynamics, interactions, rewards, waypoints
from gigastep.game.arena import episode_boxes
from gigastep.game.batching import reset_where, select_games, where_masked
from gigastep.game.observations import first_observation, global_view, observe
from gigastep.game.observations.global_state import state_vector, state_vector_size
from gigastep.game.random import seed_words, split, stream_from_seed, uniforms_from_seed
from gigastep.game.reset import reset_state, reset_state_streamed
from gigastep.game.rewards import check_score
from gigastep.game.types import (
    EnvConfig,
    EnvState,
    Observation,
    StepInfo,
    StepNoise,
    check_fields,
)
from gigastep.game.xla import count_sum
from gigastep.spaces import Box, Discrete, Tuple, entity_bounds, vector_bounds

if TYPE_CHECKING:
    from jax.typing import ArrayLike

    from gigastep.scenarios import ScenarioSpec

StepResult: TypeAlias = "tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array]"
"""What `step` returns: (obs, state, rewards, dones, episode_done)."""

AutoresetResult: TypeAlias = (
    "tuple[Observation, EnvState, jax.Array, jax.Array, jax.Array, StepInfo]"
)
"""What `step_autoreset` returns: (obs, state, rewards, dones, episode_done, info)."""

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
    "transition",
    "where_masked",
]


# ------------------------------------------------------------------------------------------
# Input checks (trace time: shapes and dtypes only, no compute)
# ------------------------------------------------------------------------------------------


def _games(batch: tuple[int, ...]) -> str:
    count = int(np.prod(batch))
    shape = f", shape {batch}" if len(batch) > 1 else ""
    return f"{count} game{'s' if count != 1 else ''}{shape}"


def _state_batch(config: EnvConfig, state: object, what: str) -> tuple[int, ...]:
    """The batch shape of `state` (() for one game); a TypeError unless it is an `EnvState`,
    a ValueError unless its games have this config's agent count."""
    if not isinstance(state, EnvState):
        raise TypeError(
            f"{what} must be a gigastep EnvState (as returned by reset or v_reset), "
            f"got {type(state).__name__}"
        )
    shape = tuple(np.shape(state.agents.x))
    if not shape or shape[-1] != config.n_agents:
        raise ValueError(
            f"{what} holds {shape[-1] if shape else 0} agents per game but this game has "
            f"{config.n_agents} (a state of another scenario?)"
        )
    return shape[:-1]


def check_single_state(config: EnvConfig, state: object, batched_form: str = "v_step") -> None:
    """Raise a clear error unless `state` is one game of `config` (shapes only: trace time).

    `batched_form` names the batched function to suggest for a batch of games."""
    batch = _state_batch(config, state, "state")
    if batch:
        raise ValueError(
            f"this state is batched ({_games(batch)}); use {batched_form} for a batch of games, "
            "or index one game out of it"
        )


def check_batch(
    config: EnvConfig, states: object, actions: Any, keys: Any, single_form: str = "step"
) -> int:
    """The batch size B of `states` after checking that they are a batch of games of `config`
    (one leading axis) and that `actions` and `keys` hold B games too (shapes only)."""
    batch = _state_batch(config, states, "states")
    if not batch:
        raise ValueError(
            f"this state is a single game (no batch axis); use {single_form} for one game, "
            "or v_reset(jax.random.split(key, B)) to start a batch"
        )
    if len(batch) != 1:
        raise ValueError(f"states must have one batch axis, got batch shape {batch}")
    b = batch[0]
    for what, value in (("actions", actions), ("keys", keys)):
        shape = np.shape(value)
        if not shape or shape[0] != b:
            got = f"{shape[0]} games (shape {shape})" if shape else f"a scalar {value!r}"
            raise ValueError(f"states hold {b} games but {what} hold {got}")
    _checks.check_keys(keys)
    return b


def check_batched_state(config: EnvConfig, states: object, single_form: str) -> int:
    """The batch size B of `states` after checking that they are a batch of games of
    `config` with one leading axis (shapes only); `single_form` names the one-game form."""
    batch = _state_batch(config, states, "states")
    if len(batch) != 1:
        hint = f"; use {single_form} for one game" if not batch else ""
        raise ValueError(f"states must have one batch axis, got batch shape {batch}{hint}")
    return batch[0]


# ------------------------------------------------------------------------------------------
# Reset (the phase itself: `gigastep.game.reset`)
# ------------------------------------------------------------------------------------------


def reset(config: EnvConfig, key: jax.Array) -> tuple[Observation, EnvState]:
    """Start a game: returns (obs, state)."""
    _checks.check_key(key)
    state, comm, stream = reset_state_streamed(config, key)
    return first_observation(config, state, comm, stream), state


# ------------------------------------------------------------------------------------------
# Step
# ------------------------------------------------------------------------------------------


def sample_noise(config: EnvConfig, key: jax.Array) -> StepNoise:
    """Every random number of one step, from one key. Each draw has a fixed place in the
    stream whatever the flags, so switching a feature off leaves the others' draws unchanged."""
    return _noise_and_stream(config, key)[0]


def _noise_and_stream(config: EnvConfig, key: jax.Array) -> tuple[StepNoise, jax.Array | None]:
    """(`sample_noise(config, key)`, the counter stream of its comm noise or None), with the
    key's seed words drawn once."""
    n = config.n_agents
    skip = [
        i
        for i, on in enumerate(
            (config.stochastic_obs, config.stochastic_comm, config.enable_waypoints)
        )
        if not on
    ]
    seed = seed_words(key)
    detection, comm, waypoint = uniforms_from_seed(seed, _noise_shapes(n), skip=skip)
    noise = StepNoise(detection=detection, comm=comm, waypoint=waypoint)
    if not config.stochastic_comm:
        return noise, None
    return noise, stream_from_seed(seed, _noise_shapes(n), 1)


def _noise_shapes(n: int) -> list[tuple[int, ...]]:
    return [(n, n), (n, n), (4,)]  # detection, comm, waypoint


@pytree_dataclass
class Advanced(PytreeData):
    """A step's outcome before its observation (what `advance` returns): the next state, the
    geometry and combat it was computed with, rewards (n,), terminated () and truncated (),
    and what the rewards were computed from (`score_rewards` weighs it again)."""

    state: EnvState
    geo: interactions.Geometry
    combat: interactions.Combat
    rewards: chex.Array
    terminated: chex.Array
    truncated: chex.Array
    reward_inputs: rewards.RewardInputs


def advance(config: EnvConfig, state: EnvState, actions: ArrayLike, noise: StepNoise) -> Advanced:
    """Everything of a step but the observation: move, waypoints, hazards, combat, health,
    termination and rewards."""
    check_actions(actions, config.n_agents, config.discrete_actions)
    agents, episode = state.agents, state.episode
    alive_pre = agents.alive
    moved = dynamics.move(config, agents, dynamics.decode_actions(config, actions))
    hit, waypoint, waypoint_time = waypoints.update_waypoint(
        config, moved, episode, alive_pre, noise.waypoint
    )
    geo = interactions.geometry(moved)
    boxes, box_valid = episode_boxes(config, episode)
    hz = interactions.hazards(config, moved, geo, boxes, box_valid)
    fight = interactions.combat(config, moved, geo, hz.alive, noise.detection)
    max_health = jnp.asarray(config.max_health, jnp.float32)
    health = (
        moved.health
        - count_sum(fight.damage, axis=1) * np.float32(config.damage_per_second * config.dt)
        + np.float32(config.healing_per_second * config.dt)
        + max_health * hit
    )
    health = jnp.clip(jnp.where(hz.alive, health, 0.0), 0.0, max_health)
    alive = hz.alive & (health > 0)
    reward_inputs = rewards.RewardInputs(
        alive_pre=alive_pre,
        alive=alive,
        hit_waypoint=hit,
        collided=hz.collided,
        hazard_death=alive_pre & (hz.oob | hz.in_box),
        detected=fight.detected,
        damage=fight.damage,
        present=episode.present,
    )
    reward = rewards.total_reward(config, reward_inputs, episode.aux_rewards_factor)
    team1 = jnp.asarray(np.asarray(config.teams) == 1)
    a1 = jnp.sum(alive & team1)
    a0 = jnp.sum(alive) - a1
    if config.episode_ends_one_team_dead:
        terminated = (a0 == 0) | (a1 == 0)
    else:
        terminated = (a0 == 0) & (a1 == 0)
    length = episode.step + 1
    truncated = jnp.zeros((), bool)
    if config.max_episode_length is not None:
        truncated = (length >= config.max_episode_length) & ~terminated
    new = EnvState(
        agents=moved.replace(health=health, alive=alive, tracked=fight.tracked),
        episode=episode.replace(
            waypoint=waypoint,
            waypoint_time=waypoint_time,
            step=length,
            returns=episode.returns + reward,
        ),
    )
    return Advanced(
        state=new,
        geo=geo,
        combat=fight,
        rewards=reward,
        terminated=terminated,
        truncated=truncated,
        reward_inputs=reward_inputs,
    )


def score_rewards(score: EnvConfig, adv: Advanced) -> jax.Array:
    """(n,) float32: the reward of the step `adv` under `score`'s reward weights
    (`rewards.check_score`); with the game's own config, exactly `adv.rewards`."""
    return rewards.total_reward(score, adv.reward_inputs, adv.state.episode.aux_rewards_factor)


def transition(
    config: EnvConfig, state: EnvState, actions: ArrayLike, noise: StepNoise
) -> StepResult:
    """One step with its randomness given: (obs, state, rewards, dones, episode_done)."""
    check_single_state(config, state, "jax.vmap(transition)")
    return _transition_streamed(config, state, actions, noise)


def _transition_streamed(
    config: EnvConfig,
    state: EnvState,
    actions: ArrayLike,
    noise: StepNoise,
    comm_stream: jax.Array | None = None,
) -> StepResult:
    adv = advance(config, state, actions, noise)
    obs = observe(
        config,
        adv.state,
        adv.geo,
        adv.combat.detected,
        adv.combat.took_damage,
        noise.comm,
        comm_stream,
    )
    done = adv.terminated | adv.truncated
    return obs, adv.state, adv.rewards, ~adv.state.agents.alive, done


def episode_winner(config: EnvConfig, alive: ArrayLike, episode_done: ArrayLike) -> jax.Array:
    """The winning team of episodes that end: int32 of `episode_done`'s shape.

    At the end of an episode the winner is the only team that still has an agent alive
    (0 or 1); -1 means no winner: a draw (both teams, or neither, have survivors: the time
    limit, or both eliminated in one step) or an episode that goes on.

    Args:
        alive: bool (..., n), the agents alive after the step.
        episode_done: bool (...), the episode ended at this step.
    """
    team1 = jnp.asarray(np.asarray(config.teams) == 1)
    left1 = jnp.any(alive & team1, axis=-1)
    left0 = jnp.any(alive & ~team1, axis=-1)
    winner = jnp.where(left0 & ~left1, 0, jnp.where(left1 & ~left0, 1, -1))
    return jnp.where(episode_done, winner, -1).astype(jnp.int32)


def step(config: EnvConfig, state: EnvState, actions: ArrayLike, key: jax.Array) -> StepResult:
    """One step: (obs, state, rewards (n,), dones (n,), episode_done ()).

    `dones[i]` is True for every dead agent; the step never resets a finished game (see
    `step_autoreset` for that).
    """
    check_single_state(config, state, "v_step")
    _checks.check_key(key)
    return _transition_streamed(config, state, actions, *_noise_and_stream(config, key))


def step_autoreset(
    config: EnvConfig,
    state: EnvState,
    actions: ArrayLike,
    key: jax.Array,
    final_obs: bool = True,
    final_state: bool = False,
    score: EnvConfig | None = None,
) -> AutoresetResult:
    """A step that replaces a finished game by a fresh one inside the same call.

    Returns (obs, state, rewards, dones, episode_done, info): obs and state are the fresh
    game's where `episode_done`; rewards, dones and episode_done are the finished step's.
    `info.final_obs` holds the last observation of the finished game (computed only when
    `final_obs` is True, else it repeats `obs`); with `final_state`, `info.final_state` is
    the state the step ended in before any reset (else None). With `score`, a config that
    differs from `config` only in its reward weights (`rewards.WEIGHT_FIELDS`), `info.score`
    holds the step's rewards (n,) under `score`'s weights: e.g. the unshaped reward of a game
    trained with an extra shaping term (else None).

    This is the one-game form: it computes a fresh game on every call and keeps it only when
    the game ended. Under `jax.vmap` that is a full reset per game per step; for a batch use
    `GigastepEnv.v_step_autoreset`, which resets only the games that finished
    (`gigastep.game.batching`).
    """
    check_single_state(config, state, "v_step_autoreset")
    if score is not None:
        check_score(config, score)
    _checks.check_key(key)
    k_step, k_reset = split(key)
    noise, step_stream = _noise_and_stream(config, k_step)
    adv = advance(config, state, actions, noise)
    done = adv.terminated | adv.truncated
    fresh, fresh_comm, fresh_stream = reset_state_streamed(config, k_reset)
    return _finish_autoreset(
        config,
        adv,
        noise,
        fresh,
        fresh_comm,
        done,
        final_obs,
        (step_stream, fresh_stream),
        final_state,
        score,
    )


def _finish_autoreset(
    config: EnvConfig,
    adv: Advanced,
    noise: StepNoise,
    fresh: EnvState,
    fresh_comm: jax.Array,
    done: jax.Array,
    final_obs: bool,
    streams: tuple[jax.Array | None, jax.Array | None] = (None, None),
    final_state: bool = False,
    score: EnvConfig | None = None,
) -> AutoresetResult:
    """Take the fresh game where `done`, observe the result once (and the finished game's
    last observation when `final_obs`), and assemble the auto-reset step's outputs.
    `streams`: the counter streams of (noise.comm, fresh_comm), or Nones."""
    nxt = select_games(done, fresh, adv.state)
    geo = interactions.geometry(nxt.agents)
    step_stream, fresh_stream = streams
    stream: jax.Array | None = None
    if step_stream is not None:
        assert fresh_stream is not None  # both streams, or neither (without stochastic_comm)
        stream = jnp.where(done, fresh_stream, step_stream)
    obs = observe(
        config,
        nxt,
        geo,
        adv.combat.detected & ~done,
        adv.combat.took_damage & ~done,
        jnp.where(done, fresh_comm, noise.comm),
        stream,
    )
    last = _last_observation(config, adv, noise, step_stream) if final_obs else obs
    info = StepInfo(
        terminated=adv.terminated,
        truncated=adv.truncated,
        final_obs=last,
        episode_return=adv.state.episode.returns,
        episode_length=adv.state.episode.step,
        winner=episode_winner(config, adv.state.agents.alive, done),
        final_state=adv.state if final_state else None,
        score=None if score is None else score_rewards(score, adv),
    )
    return obs, nxt, adv.rewards, ~adv.state.agents.alive, done, info


# ------------------------------------------------------------------------------------------
# Compiled batched forms (config static; shared by every env with an equal config)
# ------------------------------------------------------------------------------------------


_reset = jax.jit(reset, static_argnums=0)
_step = jax.jit(step, static_argnums=0)
_transition = jax.jit(transition, static_argnums=0)
_step_autoreset = jax.jit(step_autoreset, static_argnums=(0, 4))
_global_view = jax.jit(global_view, static_argnums=0)


def batched_reset(config: EnvConfig, keys: jax.Array) -> tuple[Observation, EnvState]:
    """`reset` of every game of a batch: keys (B,) -> (obs, states) with leading axis B."""
    return jax.vmap(partial(reset, config))(keys)


def batched_step(
    config: EnvConfig, states: EnvState, actions: ArrayLike, keys: jax.Array
) -> StepResult:
    """`step` of every game of a batch (pure; `GigastepEnv.v_step` is its compiled form)."""
    check_batch(config, states, actions, keys, "step")
    return jax.vmap(partial(step, config))(states, actions, keys)


@partial(jax.jit, static_argnums=0)
def _v_reset(config: EnvConfig, keys: jax.Array) -> tuple[Observation, EnvState]:
    return batched_reset(config, keys)


@partial(jax.jit, static_argnums=0)
def _v_step(config: EnvConfig, states: EnvState, actions: ArrayLike, keys: jax.Array) -> StepResult:
    return batched_step(config, states, actions, keys)


def _reset_finished(
    config: EnvConfig, done: jax.Array, keys: jax.Array
) -> tuple[EnvState, jax.Array, jax.Array | None]:
    """(fresh states, their comm noise (B, n, n), its streams (B, 3) or None):
    `reset_state_streamed(config, keys[b])` for every game b where `done` (see
    `reset_where`)."""
    return reset_where(partial(reset_state_streamed, config), done, keys)


def batched_step_autoreset(
    config: EnvConfig,
    states: EnvState,
    actions: ArrayLike,
    keys: jax.Array,
    final_obs: bool = True,
    final_state: bool = False,
    score: EnvConfig | None = None,
) -> AutoresetResult:
    """`jax.vmap(partial(step_autoreset, config, final_obs=final_obs, final_state=final_state,
    score=score))(states, actions, keys)`, bit for bit, without resetting the games that go
    on.

    The batch is advanced as in `step_autoreset` (each game's key split into its step and reset
    keys), the finished games are reset by `_reset_finished`, and the observation is computed
    once on the resulting state (plus the finished games' last one when `final_obs`).
    Called on a batch (leading axis B on every argument); pure, so it traces inside a caller's
    jit or scan (under a further vmap its branches become selects, costing a full reset).
    """
    check_batch(config, states, actions, keys, "step_autoreset")
    if score is not None:
        check_score(config, score)

    def advance_one(
        state: EnvState, acts: ArrayLike, key: jax.Array
    ) -> tuple[Advanced, StepNoise, jax.Array, jax.Array | None]:
        _checks.check_key(key)
        k_step, k_reset = split(key)
        noise, stream = _noise_and_stream(config, k_step)
        return advance(config, state, acts, noise), noise, k_reset, stream

    adv, noise, k_reset, step_stream = jax.vmap(advance_one)(states, actions, keys)
    done = adv.terminated | adv.truncated
    fresh, fresh_comm, fresh_stream = _reset_finished(config, done, k_reset)

    # The finished games' last observations are computed for those games only (a step in
    # which few games end observes a few games twice, not the whole batch).
    finish = partial(
        _finish_autoreset, config, final_obs=False, final_state=final_state, score=score
    )
    obs, nxt, rewards, dones, done, info = jax.vmap(finish)(
        adv, noise, fresh, fresh_comm, done, streams=(step_stream, fresh_stream)
    )
    if final_obs:
        last = where_masked(partial(_last_observation, config), done, adv, noise, step_stream)
        info = info.replace(final_obs=select_games(done, last, obs))
    return obs, nxt, rewards, dones, done, info


def _last_observation(
    config: EnvConfig, adv: Advanced, noise: StepNoise, stream: jax.Array | None
) -> Observation:
    """The observation of the state a step ended in (before any reset)."""
    return observe(
        config, adv.state, adv.geo, adv.combat.detected, adv.combat.took_damage, noise.comm, stream
    )


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
