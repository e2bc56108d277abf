"""The reset phase: the map of a fresh game, the placement of its agents (redrawn while in
conflict) and the communication noise of its first observation (rules §6).

Every function is pure and takes the static `EnvConfig` first; `reset_state_streamed` is the
whole phase, the others are its steps (tests draw the same numbers through them).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.game import dynamics, interactions, rosters
from gigastep.game import random as grandom
from gigastep.game.arena import MapArrays, generated_boxes, map_arrays
from gigastep.game.types import AgentState, EnvConfig, EnvState, EpisodeState
from gigastep.game.xla import platform_form, varying_like

__all__ = [
    "map_index",
    "place_agents",
    "placement_conflicts",
    "placement_uniforms",
    "reset_keys",
    "reset_state",
    "reset_state_streamed",
]


def placement_conflicts(
    config: EnvConfig,
    agents: AgentState,
    boxes: jax.Array,
    box_valid: jax.Array,
    margin: float,
    present: jax.Array | None = None,
) -> jax.Array:
    """(n,) bool: an agent too close to a lower-index agent (radius and altitude enlarged by
    `margin`) or inside a box enlarged by `margin`. Only the later agent of a close pair is
    redrawn, so each round resolves more conflicts than redrawing both would. With `present`
    ((n,) bool), absent agents are never in conflict and never cause one."""
    n = config.n_agents
    conflict = jnp.zeros(n, bool)
    if config.collision_range > 0 and n > 1:
        geo = interactions.geometry(agents)
        dz = jnp.abs(agents.z[:, None] - agents.z[None, :])
        radius = np.float32((config.collision_range + margin) ** 2)
        close = (geo.d2 < radius) & (dz < config.collision_altitude + margin)
        earlier = jnp.asarray(np.tri(n, k=-1, dtype=bool))  # [i, j]: j < i
        if present is not None:
            earlier = earlier & present[None, :]
        conflict = jnp.any(close & earlier, axis=1)
    x, y = agents.x[:, None], agents.y[:, None]
    inside = (
        (x > boxes[None, :, 0] - margin)
        & (x < boxes[None, :, 2] + margin)
        & (y > boxes[None, :, 1] - margin)
        & (y < boxes[None, :, 3] + margin)
    )
    conflict = conflict | jnp.any(inside & box_valid[None, :], axis=1)
    return conflict if present is None else conflict & present


def reset_state(config: EnvConfig, key: jax.Array) -> tuple[EnvState, jax.Array]:
    """A fresh game and the communication noise of its first observation (see
    `reset_state_streamed`)."""
    return reset_state_streamed(config, key)[:2]


def reset_keys(key: jax.Array) -> jax.Array:
    """(k_map, k_place, k_comm): the three keys a reset splits its key into."""
    return jax.random.split(key, 3)


def map_index(config: EnvConfig, k_map: jax.Array) -> jax.Array:
    """() int32: the map of a fresh game, uniform over `config.maps` (rules §15 row 4)."""
    n_maps = len(config.maps)
    if n_maps == 1:
        return jnp.int32(0)
    return jax.random.randint(k_map, (), 0, n_maps)


def placement_uniforms(config: EnvConfig, k_place: jax.Array, round_: int | jax.Array) -> jax.Array:
    """(4, n) float32 uniforms in [0, 1) of placement round `round_` (0: the first draw,
    r >= 1: the r-th redraw): the fractions of x, y, z and heading across each agent's ranges."""
    return grandom.uniform(jax.random.fold_in(k_place, round_), (4, config.n_agents))


def place_agents(
    config: EnvConfig,
    maps: MapArrays,
    map_idx: jax.Array,
    k_place: jax.Array,
    present: jax.Array | None = None,
    drawn: tuple[jax.Array, jax.Array] | None = None,
) -> AgentState:
    """The agents of a fresh game on map `map_idx`: placed, redrawn while in conflict (see
    `reset_state_streamed`), at full health, alive, at speed 1, with no locks. With `present`
    ((n,) bool), absent agents start dead at health 0 and play no part in the conflicts.
    `drawn`: the (boxes, box_valid) of a generated map, which replace the map's boxes."""
    n = config.n_agents
    teams = np.asarray(config.teams)
    region = jnp.asarray(maps.start)[map_idx][teams]  # (n, 4)
    heights = jnp.asarray(maps.height)[map_idx]  # (2,)
    headings = jnp.asarray(maps.heading)[map_idx][teams]  # (n, 2)
    if drawn is None:
        boxes = jnp.asarray(maps.boxes)[map_idx]
        box_valid = jnp.asarray(maps.box_valid)[map_idx]
    else:
        boxes, box_valid = drawn

    def draw(round_: int | jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        u = placement_uniforms(config, k_place, round_)
        return (
            region[:, 0] + u[0] * (region[:, 2] - region[:, 0]),
            region[:, 1] + u[1] * (region[:, 3] - region[:, 1]),
            heights[0] + u[2] * (heights[1] - heights[0]),
            headings[:, 0] + u[3] * (headings[:, 1] - headings[:, 0]),
        )

    x, y, z, heading = draw(0)
    max_health = jnp.asarray(config.max_health, jnp.float32)
    alive = jnp.ones(n, bool)
    if present is not None:
        max_health, alive = jnp.where(present, max_health, 0.0), present
    agents = AgentState(
        x=x,
        y=y,
        z=z,
        v=jnp.ones(n, jnp.float32),
        heading=dynamics.wrap_angle(heading),
        health=max_health,
        alive=alive,
        tracked=jnp.zeros((n, n), jnp.int32),
    )

    def conflicts(a: AgentState) -> jax.Array:
        return placement_conflicts(config, a, boxes, box_valid, 0.1, present)

    def cond(carry: tuple[jax.Array, AgentState, jax.Array]) -> jax.Array:
        round_, a, need = carry
        return (round_ <= config.reset_max_rounds) & jnp.any(need)

    def body(
        carry: tuple[jax.Array, AgentState, jax.Array],
    ) -> tuple[jax.Array, AgentState, jax.Array]:
        round_, a, need = carry
        x, y, z, h = draw(round_)
        a = a.replace(
            x=jnp.where(need, x, a.x),
            y=jnp.where(need, y, a.y),
            z=jnp.where(need, z, a.z),
            heading=jnp.where(need, dynamics.wrap_angle(h), a.heading),
        )
        return round_ + 1, a, conflicts(a)

    def open_loop(
        carry: tuple[jax.Array, AgentState, jax.Array],
    ) -> tuple[jax.Array, AgentState, jax.Array]:
        # The CPU form: the loop stops at the first round without conflicts.
        return jax.lax.while_loop(cond, body, carry)

    def counted(
        carry: tuple[jax.Array, AgentState, jax.Array],
    ) -> tuple[jax.Array, AgentState, jax.Array]:
        # The GPU form: every one of the `reset_max_rounds` rounds runs, and a round after
        # the one the open loop would stop at leaves the carry as it is (a select): the same
        # rounds drawn from the same keys, the same placement.
        def round_(_: int, c: tuple[jax.Array, AgentState, jax.Array]) -> Any:
            return jax.tree.map(partial(jnp.where, cond(c)), body(c), c)

        return jax.lax.fori_loop(0, config.reset_max_rounds, round_, carry)

    # Inside shard_map the rounds' draws vary over the mesh axes of the key and the map: the
    # carry (with constants such as the health) is marked as varying like them, so that the
    # counted loop's carry keeps its type and both forms return the same types.
    start = varying_like((k_place, map_idx, boxes), (jnp.int32(1), agents, conflicts(agents)))
    return platform_form(start, cpu=open_loop, gpu=counted)[1]


def reset_state_streamed(
    config: EnvConfig, key: jax.Array
) -> tuple[EnvState, jax.Array, jax.Array | None]:
    """(state, comm, stream): a fresh game, the communication noise of its first observation
    and that noise's counter stream (None when communication is deterministic).

    The map is drawn uniformly from the config's map set, or, with a `map_generator`, its
    boxes are drawn by the generator from `fold_in(k_map, 1)` (`gigastep.game.procmaps`,
    stored in the episode state); each team's agents are placed
    uniformly in its start region with a heading drawn from its heading range (both from one
    round of `placement_uniforms`). An agent in conflict is redrawn (position, altitude and
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

    Team draws: with `config.team_draw`, the composition is drawn first
    (`rosters.draw_present`, from the key folded with `rosters.TEAM_DRAW_STREAM`, so the map
    and placement draws are those of the same config without a draw); absent agents start
    dead at health 0 where their round-0 draw put them, and are never redrawn nor make a
    present agent be redrawn.

    Platform forms (`gigastep.game.xla.platform_form`): on the CPU the rounds are a `while`
    loop that stops at the first round without conflicts; elsewhere (GPUs, where XLA reads a
    loop's predicate on the host every round) a counted loop of exactly `reset_max_rounds`
    rounds whose rounds after that one change nothing. Both draw round r from the same key
    and redraw the same agents, so the placement is the same in every case, exhausted rounds
    included; the GPU form's cost is that of `reset_max_rounds` rounds. (Drawing every round
    at once and keeping each agent's first conflict-free draw would not be the same: an agent
    is checked against the lower-index agents' positions of the same round, which move while
    they are redrawn.)
    """
    n = config.n_agents
    k_map, k_place, k_comm = reset_keys(key)
    maps = map_arrays(config)
    map_idx = map_index(config, k_map)
    present = None
    if config.team_draw is not None:
        k_team = jax.random.fold_in(key, rosters.TEAM_DRAW_STREAM)
        present = rosters.draw_present(config.team_draw, config.teams, config.type_names, k_team)
    drawn = None
    if config.map_generator is not None:
        drawn = generated_boxes(config, jax.random.fold_in(k_map, 1))
    agents = place_agents(config, maps, map_idx, k_place, present, drawn)
    episode = EpisodeState(
        map_idx=jnp.asarray(map_idx, jnp.int32),
        waypoint=jnp.zeros(4, jnp.float32),
        waypoint_time=jnp.zeros((), jnp.float32),
        aux_rewards_factor=jnp.ones((), jnp.float32),
        step=jnp.zeros((), jnp.int32),
        returns=jnp.zeros(n, jnp.float32),
        present=present,
        **({} if drawn is None else {"boxes": drawn[0], "box_valid": drawn[1]}),
    )
    if config.stochastic_comm:
        seed = grandom.seed_words(k_comm)
        comm = grandom.uniforms_from_seed(seed, [(n, n)])[0]
        stream = grandom.stream_from_seed(seed, [(n, n)], 0)
    else:
        comm, stream = jnp.zeros((n, n)), None
    return EnvState(agents=agents, episode=episode), comm, stream
