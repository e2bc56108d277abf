"""`GigastepEnv`: the phases of the game composed into pure `reset` and `step` functions.

The module-level functions take the static `EnvConfig` as their first argument and are pure;
the class is a thin, stateless holder of a config that offers them as methods (unbatched,
batched with `vmap`, and auto-resetting), all compiled with the config as static argument.
"""

from __future__ import annotations

from functools import lru_cache, partial

import chex
import jax
import jax.numpy as jnp
import numpy as np

from gigastep import dynamics, interactions, rewards, waypoints
from gigastep import random as grandom
from gigastep.maps import MapArrays, prerender
from gigastep.observations.global_state import state_vector, state_vector_size
from gigastep.observations.vector import (
    native_supported,
    native_vector_observations,
    vector_observations,
)
from gigastep.observations.visibility import finite_agents, visibility
from gigastep.spaces import Box, Discrete, Tuple, vector_bounds
from gigastep.types import (
    AgentState,
    EnvConfig,
    EnvState,
    EpisodeState,
    StepInfo,
    StepNoise,
    check_fields,
)

__all__ = [
    "GigastepEnv",
    "batched_reset",
    "batched_step",
    "batched_step_autoreset",
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
# Static per-config data (numpy, cached; embedded as constants when traced)
# ------------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _maps(config: EnvConfig) -> MapArrays:
    return MapArrays(config)


@lru_cache(maxsize=16)
def _background(config: EnvConfig) -> np.ndarray:
    return prerender(config)


# ------------------------------------------------------------------------------------------
# Input checks (trace time: shapes and dtypes only, no compute)
# ------------------------------------------------------------------------------------------


def _check_key(key, what: str = "key") -> None:
    key = jnp.asarray(key) if not hasattr(key, "dtype") else key
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(
                f"{what} must be a single PRNG key, got a key array of shape {key.shape}"
            )
        return
    if key.shape != (2,) or key.dtype != jnp.uint32:
        raise ValueError(
            f"{what} must be a PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed), "
            f"uint32 of shape (2,)); got {key.dtype} of shape {key.shape}"
        )


def check_actions(actions, n: int, discrete: bool, who: str = "") -> None:
    """Raise a clear ValueError unless `actions` fit `n` agents: int (n,) indices 0..26 when
    `discrete`, else float (n, 3) (heading, dive, throttle). Shapes and dtypes only, so it
    runs at trace time, before any compute. `who` prefixes the message (e.g. "team 0 ")."""
    shape, dtype = np.shape(actions), jnp.result_type(actions)
    if discrete:
        if shape != (n,) or not jnp.issubdtype(dtype, jnp.integer):
            raise ValueError(
                f"{who}discrete actions must be integers of shape ({n},) (one index 0..26 per "
                f"agent); got {dtype} of shape {shape}"
            )
    elif shape != (n, 3) or not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f"{who}continuous actions must be floats of shape ({n}, 3) (heading, dive, "
            f"throttle in [-1, 1] per agent); got {dtype} of shape {shape}"
        )


def _games(batch: tuple[int, ...]) -> str:
    count = int(np.prod(batch))
    shape = f", shape {batch}" if len(batch) > 1 else ""
    return f"{count} game{'s' if count != 1 else ''}{shape}"


def _state_batch(config: EnvConfig, state, what: str) -> tuple[int, ...]:
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


def check_single_state(config: EnvConfig, state, batched_form: str = "v_step") -> None:
    """Raise a clear error unless `state` is one game of `config` (shapes only: trace time).

    `batched_form` names the batched function to suggest for a batch of games."""
    batch = _state_batch(config, state, "state")
    if batch:
        raise ValueError(
            f"this state is batched ({_games(batch)}); use {batched_form} for a batch of games, "
            "or index one game out of it"
        )


def check_batch(config: EnvConfig, states, actions, keys, single_form: str = "step") -> int:
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
    _check_batch(keys)
    return b


# ------------------------------------------------------------------------------------------
# Observation
# ------------------------------------------------------------------------------------------


def observe(config: EnvConfig, state: EnvState, geo, detected, took_damage, comm_noise,
            comm_stream=None):  # fmt: skip
    """Observations of every agent of one game (rules §5).

    `comm_stream` (optional, (3,) uint32) is the counter stream `comm_noise` was drawn from;
    the native kernel then draws the noise itself (same numbers) instead of reading it.

    Returns: "vector" (n, L) float32, "rgb" (n, res_x, res_y, 3) uint8, or the tuple
    (rgb, vector) for "rgb_vector".
    """
    agents, episode = state.agents, state.episode
    if config.obs_type == "vector" and native_supported(config):
        # One CPU kernel for visibility + vector observation (the same values, ~2x faster on
        # the CPU); the JAX code everywhere else.
        boxes = jnp.asarray(_maps(config).boxes)[episode.map_idx]
        args = (agents, episode, geo.dist, detected, comm_noise, boxes, comm_stream)
        return jax.lax.platform_dependent(
            *args,
            cpu=lambda *a: native_vector_observations(config, *a),
            default=lambda *a: _observe_jax(config, state, geo, detected, took_damage, comm_noise),
        )
    return _observe_jax(config, state, geo, detected, took_damage, comm_noise)


def _observe_jax(config: EnvConfig, state: EnvState, geo, detected, took_damage, comm_noise):
    agents, episode = state.agents, state.episode
    finite = finite_agents(agents)
    seen = visibility(config, agents.alive, geo.dist, detected, comm_noise, finite)
    out = []
    if config.obs_type in ("rgb", "rgb_vector"):
        from gigastep.observations.rgb import rgb_observations

        background = jnp.asarray(_background(config))
        out.append(rgb_observations(config, background, agents, episode, seen, took_damage))
    if config.obs_type in ("vector", "rgb_vector"):
        boxes = jnp.asarray(_maps(config).boxes)[episode.map_idx]
        out.append(vector_observations(config, agents, episode, geo.dist, seen, boxes))
    return out[0] if len(out) == 1 else tuple(out)


def global_view(config: EnvConfig, state: EnvState):
    """The team-coloured top view of one game, (res_x, res_y, 3) uint8 (rules §5.4)."""
    from gigastep.observations.rgb import global_view as draw

    return draw(config, jnp.asarray(_background(config)), state.agents, state.episode)


# ------------------------------------------------------------------------------------------
# Reset
# ------------------------------------------------------------------------------------------


def _placement_conflicts(config: EnvConfig, agents: AgentState, boxes, box_valid, margin):
    """(n,) bool: an agent too close to a lower-index agent (radius and altitude enlarged by
    `margin`) or inside a box enlarged by `margin`. Only the later agent of a close pair is
    redrawn, so each round resolves more conflicts than redrawing both would."""
    n = config.n_agents
    conflict = jnp.zeros(n, bool)
    if config.collision_range > 0 and n > 1:
        geo = interactions.geometry(agents)
        dz = jnp.abs(agents.z[:, None] - agents.z[None, :])
        radius = np.float32((config.collision_range + margin) ** 2)
        close = (geo.d2 < radius) & (dz < config.collision_altitude + margin)
        earlier = jnp.asarray(np.tri(n, k=-1, dtype=bool))  # [i, j]: j < i
        conflict = jnp.any(close & earlier, axis=1)
    x, y = agents.x[:, None], agents.y[:, None]
    inside = (
        (x > boxes[None, :, 0] - margin) & (x < boxes[None, :, 2] + margin)
        & (y > boxes[None, :, 1] - margin) & (y < boxes[None, :, 3] + margin)
    )  # fmt: skip
    return conflict | jnp.any(inside & box_valid[None, :], axis=1)


def reset_state(config: EnvConfig, key) -> tuple[EnvState, jax.Array]:
    """A fresh game and the communication noise of its first observation (see
    `_reset_state_streamed`)."""
    return _reset_state_streamed(config, key)[:2]


def _reset_keys(key):
    """(k_map, k_place, k_comm): the three keys a reset splits its key into."""
    return jax.random.split(key, 3)


def _map_index(config: EnvConfig, k_map) -> jax.Array:
    """() int32: the map of a fresh game, uniform over `config.maps` (rules §15 row 4)."""
    n_maps = len(config.maps)
    if n_maps == 1:
        return jnp.int32(0)
    return jax.random.randint(k_map, (), 0, n_maps)


def _placement_uniforms(config: EnvConfig, k_place, round_) -> jax.Array:
    """(4, n) float32 uniforms in [0, 1) of placement round `round_` (0: the first draw,
    r >= 1: the r-th redraw): the fractions of x, y, z and heading across each agent's ranges."""
    return grandom.uniform(jax.random.fold_in(k_place, round_), (4, config.n_agents))


def _place_agents(config: EnvConfig, maps: MapArrays, map_idx, k_place) -> AgentState:
    """The agents of a fresh game on map `map_idx`: placed, redrawn while in conflict (see
    `_reset_state_streamed`), at full health, alive, at speed 1, with no locks."""
    n = config.n_agents
    teams = np.asarray(config.teams)
    region = jnp.asarray(maps.start)[map_idx][teams]  # (n, 4)
    heights = jnp.asarray(maps.height)[map_idx]  # (2,)
    headings = jnp.asarray(maps.heading)[map_idx][teams]  # (n, 2)
    boxes = jnp.asarray(maps.boxes)[map_idx]
    box_valid = jnp.asarray(maps.box_valid)[map_idx]

    def draw(round_):
        u = _placement_uniforms(config, k_place, round_)
        return (
            region[:, 0] + u[0] * (region[:, 2] - region[:, 0]),
            region[:, 1] + u[1] * (region[:, 3] - region[:, 1]),
            heights[0] + u[2] * (heights[1] - heights[0]),
            headings[:, 0] + u[3] * (headings[:, 1] - headings[:, 0]),
        )

    x, y, z, heading = draw(0)
    max_health = jnp.asarray(config.max_health, jnp.float32)
    agents = AgentState(
        x=x, y=y, z=z, v=jnp.ones(n, jnp.float32), heading=dynamics.wrap_angle(heading),
        health=max_health, alive=jnp.ones(n, bool), tracked=jnp.zeros((n, n), jnp.int32),
    )  # fmt: skip

    def conflicts(a):
        return _placement_conflicts(config, a, boxes, box_valid, 0.1)

    def cond(carry):
        round_, a, need = carry
        return (round_ <= config.reset_max_rounds) & jnp.any(need)

    def body(carry):
        round_, a, need = carry
        x, y, z, h = draw(round_)
        a = a.replace(x=jnp.where(need, x, a.x), y=jnp.where(need, y, a.y),
                      z=jnp.where(need, z, a.z),
                      heading=jnp.where(need, dynamics.wrap_angle(h), a.heading))  # fmt: skip
        return round_ + 1, a, conflicts(a)

    return jax.lax.while_loop(cond, body, (jnp.int32(1), agents, conflicts(agents)))[1]


def _reset_state_streamed(config: EnvConfig, key):
    """(state, comm, stream): a fresh game, the communication noise of its first observation
    and that noise's counter stream (None when communication is deterministic).

    The map is drawn uniformly from the config's map set; each team's agents are placed
    uniformly in its start region with a heading drawn from its heading range (both from one
    round of `_placement_uniforms`). An agent in conflict is redrawn (position, altitude and
    heading together): one closer than `collision_range + 0.1` in the plane and
    `collision_altitude + 0.1` in altitude to a lower-index agent (when collisions are on), or
    strictly inside a box enlarged by 0.1 (padding boxes ignored). Redrawing stops once no
    agent is in conflict.

    Exhausted rounds: at most `reset_max_rounds` redraws are made (0: the first draw is kept
    whatever it is). If conflicts remain after the last one, the game starts with the positions
    of the last round as they are: the reset never fails and never loops further; a pair left
    too close collides on the first step if it is within the collision cylinder, and an agent
    left in a box dies on it. Crowded start regions need many rounds: with 10 rounds about 9%
    of identical_20_vs_5's games (20 agents in a 8 x 2 band) started with a conflict, 0.4%
    with 20 rounds, none in 4096 with 30; hence the default of 100.
    """
    n = config.n_agents
    k_map, k_place, k_comm = _reset_keys(key)
    maps = _maps(config)
    map_idx = _map_index(config, k_map)
    agents = _place_agents(config, maps, map_idx, k_place)
    episode = EpisodeState(
        map_idx=jnp.asarray(map_idx, jnp.int32),
        waypoint=jnp.zeros(4, jnp.float32),
        waypoint_time=jnp.zeros((), jnp.float32),
        aux_rewards_factor=jnp.ones((), jnp.float32),
        step=jnp.zeros((), jnp.int32),
        returns=jnp.zeros(n, jnp.float32),
    )
    if config.stochastic_comm:
        seed = grandom.seed_words(k_comm)
        comm = grandom.uniforms_from_seed(seed, [(n, n)])[0]
        stream = grandom.stream_from_seed(seed, [(n, n)], 0)
    else:
        comm, stream = jnp.zeros((n, n)), None
    return EnvState(agents=agents, episode=episode), comm, stream


def _first_observation(config: EnvConfig, state: EnvState, comm, comm_stream=None):
    n = config.n_agents
    geo = interactions.geometry(state.agents)
    return observe(config, state, geo, jnp.zeros((n, n), bool), jnp.zeros(n, bool), comm,
                   comm_stream)  # fmt: skip


def reset(config: EnvConfig, key):
    """Start a game: returns (obs, state)."""
    _check_key(key)
    state, comm, stream = _reset_state_streamed(config, key)
    return _first_observation(config, state, comm, stream), state


# ------------------------------------------------------------------------------------------
# Step
# ------------------------------------------------------------------------------------------


def sample_noise(config: EnvConfig, key) -> StepNoise:
    """Every random number of one step, from one key. Each draw has a fixed place in the
    stream whatever the flags, so switching a feature off leaves the others' draws unchanged."""
    return _noise_and_stream(config, key)[0]


def _noise_and_stream(config: EnvConfig, key):
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
    seed = grandom.seed_words(key)
    detection, comm, waypoint = grandom.uniforms_from_seed(seed, _noise_shapes(n), skip=skip)
    noise = StepNoise(detection=detection, comm=comm, waypoint=waypoint)
    if not config.stochastic_comm:
        return noise, None
    return noise, grandom.stream_from_seed(seed, _noise_shapes(n), 1)


def _noise_shapes(n: int):
    return [(n, n), (n, n), (4,)]  # detection, comm, waypoint


@chex.dataclass(frozen=True)
class _Advanced:
    state: EnvState
    geo: interactions.Geometry
    combat: interactions.Combat
    rewards: chex.Array
    terminated: chex.Array
    truncated: chex.Array


def _advance(config: EnvConfig, state: EnvState, actions, noise: StepNoise) -> _Advanced:
    """Everything of a step but the observation: move, waypoints, hazards, combat, health,
    termination and rewards."""
    check_actions(actions, config.n_agents, config.discrete_actions)
    agents, episode = state.agents, state.episode
    alive_pre = agents.alive
    moved = dynamics.move(config, agents, dynamics.decode_actions(config, actions))
    hit, waypoint, waypoint_time = waypoints.update_waypoint(
        config, moved, episode, alive_pre, noise.waypoint
    )
    maps = _maps(config)
    geo = interactions.geometry(moved)
    boxes = jnp.asarray(maps.boxes)[episode.map_idx]
    box_valid = jnp.asarray(maps.box_valid)[episode.map_idx]
    hz = interactions.hazards(config, moved, geo, boxes, box_valid)
    fight = interactions.combat(config, moved, geo, hz.alive, noise.detection)
    max_health = jnp.asarray(config.max_health, jnp.float32)
    health = (
        moved.health
        - jnp.sum(fight.damage, axis=1) * np.float32(config.damage_per_second * config.dt)
        + np.float32(config.healing_per_second * config.dt)
        + max_health * hit
    )
    health = jnp.clip(jnp.where(hz.alive, health, 0.0), 0.0, max_health)
    alive = hz.alive & (health > 0)
    reward = rewards.total_reward(
        config,
        rewards.RewardInputs(
            alive_pre=alive_pre, alive=alive, hit_waypoint=hit, collided=hz.collided,
            hazard_death=alive_pre & (hz.oob | hz.in_box), detected=fight.detected,
            damage=fight.damage,
        ),
        episode.aux_rewards_factor,
    )  # fmt: skip
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
            waypoint=waypoint, waypoint_time=waypoint_time, step=length,
            returns=episode.returns + reward,
        ),
    )  # fmt: skip
    return _Advanced(state=new, geo=geo, combat=fight, rewards=reward,
                     terminated=terminated, truncated=truncated)  # fmt: skip


def transition(config: EnvConfig, state: EnvState, actions, noise: StepNoise):
    """One step with its randomness given: (obs, state, rewards, dones, episode_done)."""
    check_single_state(config, state, "jax.vmap(transition)")
    return _transition_streamed(config, state, actions, noise)


def _transition_streamed(config: EnvConfig, state: EnvState, actions, noise: StepNoise,
                         comm_stream=None):  # fmt: skip
    adv = _advance(config, state, actions, noise)
    obs = observe(config, adv.state, adv.geo, adv.combat.detected, adv.combat.took_damage,
                  noise.comm, comm_stream)  # fmt: skip
    done = adv.terminated | adv.truncated
    return obs, adv.state, adv.rewards, ~adv.state.agents.alive, done


def episode_winner(config: EnvConfig, alive, episode_done):
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


def step(config: EnvConfig, state: EnvState, actions, key):
    """One step: (obs, state, rewards (n,), dones (n,), episode_done ()).

    `dones[i]` is True for every dead agent; the step never resets a finished game (see
    `step_autoreset` for that).
    """
    check_single_state(config, state, "v_step")
    _check_key(key)
    return _transition_streamed(config, state, actions, *_noise_and_stream(config, key))


def _select(done, a, b):
    return jax.tree_util.tree_map(
        lambda x, y: jnp.where(jnp.reshape(done, (-1,) + (1,) * (x.ndim - done.ndim)), x, y)
        if done.ndim else jnp.where(done, x, y), a, b)  # fmt: skip


def step_autoreset(config: EnvConfig, state: EnvState, actions, key, final_obs: bool = True,
                   final_state: bool = False):  # fmt: skip
    """A step that replaces a finished game by a fresh one inside the same call.

    Returns (obs, state, rewards, dones, episode_done, info): obs and state are the fresh
    game's where `episode_done`; rewards, dones and episode_done are the finished step's.
    `info.final_obs` holds the last observation of the finished game (computed only when
    `final_obs` is True, else it repeats `obs`); with `final_state`, `info.final_state` is
    the state the step ended in before any reset (else None).
    """
    check_single_state(config, state, "v_step_autoreset")
    _check_key(key)
    k_step, k_reset = jax.random.split(key)
    noise, step_stream = _noise_and_stream(config, k_step)
    adv = _advance(config, state, actions, noise)
    done = adv.terminated | adv.truncated
    fresh, fresh_comm, fresh_stream = _reset_state_streamed(config, k_reset)
    return _finish_autoreset(config, adv, noise, fresh, fresh_comm, done, final_obs,
                             (step_stream, fresh_stream), final_state)  # fmt: skip


def _finish_autoreset(config: EnvConfig, adv: _Advanced, noise: StepNoise, fresh: EnvState,
                      fresh_comm, done, final_obs: bool, streams=(None, None),
                      final_state: bool = False):  # fmt: skip
    """Take the fresh game where `done`, observe the result once (and the finished game's
    last observation when `final_obs`), and assemble the auto-reset step's outputs.
    `streams`: the counter streams of (noise.comm, fresh_comm), or Nones."""
    nxt = _select(done, fresh, adv.state)
    geo = interactions.geometry(nxt.agents)
    step_stream, fresh_stream = streams
    stream = None if step_stream is None else jnp.where(done, fresh_stream, step_stream)
    obs = observe(
        config, nxt, geo, adv.combat.detected & ~done, adv.combat.took_damage & ~done,
        jnp.where(done, fresh_comm, noise.comm), stream,
    )  # fmt: skip
    last = _last_observation(config, adv, noise, step_stream) if final_obs else obs
    info = StepInfo(
        terminated=adv.terminated,
        truncated=adv.truncated,
        final_obs=last,
        episode_return=adv.state.episode.returns,
        episode_length=adv.state.episode.step,
        winner=episode_winner(config, adv.state.agents.alive, done),
        final_state=adv.state if final_state else None,
    )
    return obs, nxt, adv.rewards, ~adv.state.agents.alive, done, info


# ------------------------------------------------------------------------------------------
# Compiled batched forms (config static; shared by every env with an equal config)
# ------------------------------------------------------------------------------------------


def _check_team(team) -> None:
    if isinstance(team, bool) or team not in (0, 1):
        raise ValueError(f"team must be 0 or 1, got {team!r}")


def _check_batch(keys, what="keys"):
    keys = keys if hasattr(keys, "dtype") else jnp.asarray(keys)
    typed = jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)
    if (typed and keys.ndim != 1) or (not typed and (keys.ndim != 2 or keys.shape[-1] != 2)):
        raise ValueError(
            f"{what} must be a batch of PRNG keys, shape (B, 2) uint32 or (B,) typed keys "
            f"(e.g. jax.random.split(key, B)); got {keys.dtype} of shape {keys.shape}"
        )


_reset = jax.jit(reset, static_argnums=0)
_step = jax.jit(step, static_argnums=0)
_transition = jax.jit(transition, static_argnums=0)
_step_autoreset = jax.jit(step_autoreset, static_argnums=(0, 4))
_global_view = jax.jit(global_view, static_argnums=0)


def batched_reset(config: EnvConfig, keys):
    """`reset` of every game of a batch: keys (B,) -> (obs, states) with leading axis B."""
    return jax.vmap(partial(reset, config))(keys)


def batched_step(config: EnvConfig, states, actions, keys):
    """`step` of every game of a batch (pure; `GigastepEnv.v_step` is its compiled form)."""
    check_batch(config, states, actions, keys, "step")
    return jax.vmap(partial(step, config))(states, actions, keys)


@partial(jax.jit, static_argnums=0)
def _v_reset(config, keys):
    return batched_reset(config, keys)


@partial(jax.jit, static_argnums=0)
def _v_step(config, states, actions, keys):
    return batched_step(config, states, actions, keys)


def _autoreset_capacity(batch: int) -> int:
    """How many finished games the cheap path of `batched_step_autoreset` resets (static):
    one per 32 games. A step in which more games finish resets the whole batch instead."""
    return max(1, -(-batch // 32))


def where_masked(fn, mask, *args):
    """`jax.vmap(fn)(*args)` at the games where `mask` (B,) is set; the other games' entries
    are unspecified (zeros, or fn's value there).

    Only the masked games are computed: none when no game is masked, the first
    `_autoreset_capacity(B)` of them (gathered, computed, scattered into zeros) when few are,
    the whole batch otherwise. The choice is a conditional on the count of masked games: on
    backends that run conditionals from the host (GPU) its index is read there.
    """
    b = mask.shape[0]
    cap = _autoreset_capacity(b)
    v_fn = jax.vmap(fn)
    shapes = jax.eval_shape(v_fn, *args)

    def zeros(_):
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def few(_):
        (idx,) = jnp.nonzero(mask, size=cap, fill_value=b)
        # the unused slots compute a copy of the first masked game and are dropped
        take = jnp.where(idx < b, idx, idx[0])
        out = v_fn(*jax.tree_util.tree_map(lambda x: x[take], args))
        return jax.tree_util.tree_map(
            lambda full, new: full.at[idx].set(new, mode="drop"), zeros(None), out
        )

    def every(_):
        return v_fn(*args)

    count = jnp.sum(mask, dtype=jnp.int32)
    if cap >= b:
        return jax.lax.cond(count > 0, every, zeros, None)
    branch = (count > 0).astype(jnp.int32) + (count > cap).astype(jnp.int32)
    return jax.lax.switch(branch, (zeros, few, every), None)


def reset_where(reset_one, mask, keys):
    """`jax.vmap(reset_one)(keys)` at the games where `mask` (B,) is set; the other games'
    entries are unspecified (zeros or a fresh game). See `where_masked`: resetting a few games
    costs a fraction of resetting the batch, since the placement loop of a batched reset runs
    until its worst game is placed."""
    return where_masked(reset_one, mask, keys)


def _reset_finished(config: EnvConfig, done, keys):
    """(fresh states, their comm noise (B, n, n), its streams (B, 3) or None):
    `_reset_state_streamed(config, keys[b])` for every game b where `done` (see
    `reset_where`)."""
    return reset_where(partial(_reset_state_streamed, config), done, keys)


def batched_step_autoreset(config: EnvConfig, states: EnvState, actions, keys,
                           final_obs: bool = True, final_state: bool = False):  # fmt: skip
    """`jax.vmap(partial(step_autoreset, config, final_obs=final_obs))(states, actions, keys)`,
    bit for bit, without resetting the games that go on.

    The batch is advanced as in `step_autoreset` (each game's key split into its step and reset
    keys), the finished games are reset by `_reset_finished`, and the observation is computed
    once on the resulting state (plus the finished games' last one when `final_obs`).
    Called on a batch (leading axis B on every argument); pure, so it traces inside a caller's
    jit or scan (under a further vmap its branches become selects, costing a full reset).
    """
    check_batch(config, states, actions, keys, "step_autoreset")

    def advance(state, acts, key):
        _check_key(key)
        k_step, k_reset = jax.random.split(key)
        noise, stream = _noise_and_stream(config, k_step)
        return _advance(config, state, acts, noise), noise, k_reset, stream

    adv, noise, k_reset, step_stream = jax.vmap(advance)(states, actions, keys)
    done = adv.terminated | adv.truncated
    fresh, fresh_comm, fresh_stream = _reset_finished(config, done, k_reset)

    # The finished games' last observations are computed for those games only (a step in
    # which few games end observes a few games twice, not the whole batch).
    finish = partial(_finish_autoreset, config, final_obs=False, final_state=final_state)
    obs, nxt, rewards, dones, done, info = jax.vmap(finish)(
        adv, noise, fresh, fresh_comm, done, streams=(step_stream, fresh_stream)
    )
    if final_obs:
        last = where_masked(partial(_last_observation, config), done, adv, noise, step_stream)
        info = info.replace(final_obs=_select(done, last, obs))
    return obs, nxt, rewards, dones, done, info


def _last_observation(config: EnvConfig, adv: _Advanced, noise: StepNoise, stream):
    """The observation of the state a step ended in (before any reset)."""
    return observe(config, adv.state, adv.geo, adv.combat.detected, adv.combat.took_damage,
                   noise.comm, stream)  # fmt: skip


@partial(jax.jit, static_argnums=(0, 4))
def _v_step_autoreset(config, states, actions, keys, final_obs):
    return batched_step_autoreset(config, states, actions, keys, final_obs)


@partial(jax.jit, static_argnums=0)
def _reset_done_episodes(config, obs, states, ep_dones, key):
    keys = jax.random.split(key, ep_dones.shape[0])
    new_obs, new_states = jax.vmap(partial(reset, config))(keys)
    return _select(ep_dones, new_obs, obs), _select(ep_dones, new_states, states)


@partial(jax.jit, static_argnums=0)
def _v_global_view(config, states):
    return jax.vmap(partial(global_view, config))(states)


@partial(jax.jit, static_argnums=(0, 2))
def _state_vector(config, state, team):
    return state_vector(config, state, team)


@partial(jax.jit, static_argnums=(0, 2))
def _v_state_vector(config, states, team):
    return jax.vmap(partial(state_vector, config, team=team))(states)


class GigastepEnv:
    """A Gigastep game: two teams of 3D aircraft-like agents that detect and shoot each other.

    Observation (per agent, leading axis n = `n_agents`):
        "vector": float32 (n, L) — ego row, nearest seen agents, waypoint and box features.
        "rgb": uint8 (n, res_x, res_y, 3) — ego-centred top view (first image axis = world x).
        "rgb_vector": the tuple (rgb, vector).
        A dead agent's observation is all zeros.
    Action (per agent): continuous float32 (n, 3) (heading, dive, throttle) in [-1, 1], NaN
        acting as 0; or discrete int (n,) in 0..26 (clipped), see `gigastep.dynamics.ACTION_TABLE`.
    Reward: float32 (n,), see `gigastep.rewards`. Dones: bool (n,), True for dead agents.
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

    def __init__(self, config: EnvConfig | None = None, **fields):
        if config is None:
            check_fields(fields, "GigastepEnv")
            config = EnvConfig(**fields)
        elif not isinstance(config, EnvConfig):
            raise TypeError(f"config must be an EnvConfig, got {type(config).__name__}")
        elif fields:
            config = config.replace(**fields)
        self.config = config
        self.spec = None

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
    def action_space(self):
        """Per-agent action space."""
        if self.config.discrete_actions:
            return Discrete(dynamics.N_DISCRETE_ACTIONS)
        return Box.create(-1.0, 1.0, (3,), np.float32)

    @property
    def observation_space(self):
        """Per-agent observation space."""
        c = self.config
        rgb = Box.create(0, 255, (c.resolution_x, c.resolution_y, 3), np.uint8)
        vec = Box.create(*vector_bounds(c), (c.vector_size,), np.float32)  # finite, derived
        return {"rgb": rgb, "vector": vec, "rgb_vector": Tuple((rgb, vec))}[c.obs_type]

    @property
    def n_actions(self) -> int:
        if not self.config.discrete_actions:
            raise ValueError("n_actions is only defined for discrete actions")
        return dynamics.N_DISCRETE_ACTIONS

    def __eq__(self, other) -> bool:
        return isinstance(other, GigastepEnv) and other.config == self.config

    def __hash__(self) -> int:
        return hash(self.config)

    def __repr__(self) -> str:
        name = self.spec.name if self.spec is not None else "custom"
        return (f"GigastepEnv({name}: {self.team_sizes[0]} vs {self.team_sizes[1]}, "
                f"obs={self.obs_type}, discrete={self.discrete_actions})")  # fmt: skip

    # --- pure functions (compiled once per config; they also trace inside a caller's jit,
    # vmap or scan, and run eagerly under jax.disable_jit) --------------------------------
    def reset(self, key):
        return _reset(self.config, key)

    def step(self, state, actions, key):
        return _step(self.config, state, actions, key)

    def sample_noise(self, key) -> StepNoise:
        return sample_noise(self.config, key)

    def transition(self, state, actions, noise):
        return _transition(self.config, state, actions, noise)

    def step_autoreset(self, state, actions, key, final_obs: bool = True):
        return _step_autoreset(self.config, state, actions, key, final_obs)

    def global_view(self, state):
        return _global_view(self.config, state)

    # --- compiled batched forms ---------------------------------------------------------
    def v_reset(self, keys):
        _check_batch(keys)
        return _v_reset(self.config, keys)

    def v_step(self, states, actions, keys):
        check_batch(self.config, states, actions, keys, "step")
        return _v_step(self.config, states, actions, keys)

    def v_step_autoreset(self, states, actions, keys, final_obs: bool = True):
        check_batch(self.config, states, actions, keys, "step_autoreset")
        return _v_step_autoreset(self.config, states, actions, keys, final_obs)

    def reset_done_episodes(self, obs, states, ep_dones, key):
        """Reset only the finished games of a batch, inside one compiled call."""
        _check_key(key)
        return _reset_done_episodes(self.config, obs, states, jnp.asarray(ep_dones), key)

    def v_global_view(self, states):
        return _v_global_view(self.config, states)

    @property
    def state_vector_size(self) -> int:
        """Length S of `state_vector` (layout: `gigastep.observations.global_state`)."""
        return state_vector_size(self.config)

    def state_vector(self, state, team: int = 0):
        """The global state of one game as a float32 (S,) vector seen from `team` (its
        agents first), for centralised critics; layout in
        `gigastep.observations.global_state`."""
        _check_team(team)
        return _state_vector(self.config, state, team)

    def v_state_vector(self, states, team: int = 0):
        """`state_vector` of every game of a batch: (B, S) float32."""
        _check_team(team)
        return _v_state_vector(self.config, states, team)

    @staticmethod
    def set_aux_reward_factor(state: EnvState, factor) -> EnvState:
        """A copy of `state` (single or batched) with the curriculum factor set to `factor`."""
        f = jnp.broadcast_to(jnp.asarray(factor, jnp.float32),
                             state.episode.aux_rewards_factor.shape)  # fmt: skip
        return state.replace(episode=state.episode.replace(aux_rewards_factor=f))
