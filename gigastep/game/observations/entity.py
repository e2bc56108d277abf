"""The entity observation: fixed slot groups in the ego's own frame (rules §5.5).

One flat float32 vector per agent of `config.entity_size` = G * F values: G rows of
F = `ENTITY_FEATURES` features, in groups whose sizes do not depend on the team sizes:

    self (1 row) | allies (entity_max_allies) | enemies (entity_max_enemies)
    | boxes (max_boxes) | waypoint (1 row, only with waypoints)

Each row starts with a presence flag (1 = a real entity in this slot, 0 = an empty slot, all
zeros), so a policy can pool or attend over the slots of any scenario with a mask.
`entity_groups` splits a batch of observations into these groups. Agents fill their group's
slots nearest first (planar distance, ties by agent index); those beyond the slots are left
out, so the nearest are kept. Boxes likewise, by the distance to their nearest point.

Column (feature) order of every row, `COLUMNS`:
     0 present        1 is_self   2 is_ally   3 is_enemy   4 is_box   5 is_waypoint
     6 forward / S    7 left / S  8 up / z_max             9 distance / S
    10 cos bearing   11 sin bearing   12 cos rel. heading  13 sin rel. heading
    14 speed / diag  15 health / max_health
    16-18 sprite bits (1 dot, 2 plus arms, 4 diagonals)
    19 detection_range  20 damage_range  21 thrust  22 max_health (the agent's type table)
    23 half width / S   24 half depth / S (boxes, waypoint)
with S = max(limit_x, limit_y) and diag = sqrt(limit_x^2 + limit_y^2). A row's meaning per
group is tabled in docs/rules.md §5.5; every angle enters as a cosine and a sine.

Visibility is the vector observation's (`visibility`): an agent the ego does not see, a dead
agent, or one that is not finite leaves its slot empty; a dead (or non-finite) ego observes
all zeros. Pure JAX without data-dependent control flow: it lowers for any platform.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.game.dynamics import cos_sin
from gigastep.game.observations.vector import nearest_first
from gigastep.game.observations.visibility import finite_agents
from gigastep.game.types import ENTITY_FEATURES, AgentState, EnvConfig, EpisodeState

__all__ = [
    "COLUMNS",
    "ENTITY_FEATURES",
    "GROUPS",
    "entity_groups",
    "entity_observations",
    "group_slices",
]

COLUMNS = (
    "present",
    "is_self",
    "is_ally",
    "is_enemy",
    "is_box",
    "is_waypoint",
    "forward",
    "left",
    "up",
    "distance",
    "cos_bearing",
    "sin_bearing",
    "cos_heading",
    "sin_heading",
    "speed",
    "health",
    "sprite_dot",
    "sprite_plus",
    "sprite_diagonal",
    "detection_range",
    "damage_range",
    "thrust",
    "max_health",
    "half_width",
    "half_depth",
)
"""The F = 25 feature names of a row, in column order."""
assert len(COLUMNS) == ENTITY_FEATURES

GROUPS = ("self", "allies", "enemies", "boxes", "waypoint")
"""The slot groups, in row order."""

_C = {name: i for i, name in enumerate(COLUMNS)}


def group_slices(config: EnvConfig) -> dict[str, slice]:
    """{group: slice of its rows} for `config`, in `GROUPS` order (an absent group: empty)."""
    sizes = (
        1,
        config.entity_max_allies,
        config.entity_max_enemies,
        config.max_boxes,
        int(config.enable_waypoints),
    )
    out, start = {}, 0
    for name, size in zip(GROUPS, sizes, strict=True):
        out[name] = slice(start, start + size)
        start += size
    return out


def entity_groups(config: EnvConfig, obs: jax.Array | np.ndarray) -> dict[str, jax.Array]:
    """Split entity observations (..., entity_size) into {group: (..., slots, F)}.

    Every group of `GROUPS` is a key (with 0 slots where the config has none); the presence
    mask of a group is `groups[name][..., 0] > 0`.

    Raises:
        ValueError: the last axis of `obs` is not `config.entity_size`.
    """
    shape = np.shape(obs)
    if not shape or shape[-1] != config.entity_size:
        raise ValueError(
            f"entity_groups: observations of shape {shape}; expected a last axis of "
            f"entity_size = {config.entity_size} ({config.entity_rows} rows of "
            f"{ENTITY_FEATURES} features) for this config"
        )
    rows = jnp.reshape(jnp.asarray(obs), (*shape[:-1], config.entity_rows, ENTITY_FEATURES))
    return {name: rows[..., s, :] for name, s in group_slices(config).items()}


def entity_observations(
    config: EnvConfig,
    agents: AgentState,
    episode: EpisodeState,
    seen: jax.Array,
    boxes: jax.Array,
    box_valid: jax.Array,
) -> jax.Array:
    """(n, entity_size) float32 entity observations of one game.

    Args:
        seen: (n, n) bool [e, i], ego e sees agent i (`visibility`).
        boxes: (>= max_boxes, 4) float32 boxes [x1, y1, x2, y2] of the current map in world
            units; box_valid: (>= max_boxes,) bool, False for padding.
    """
    n = config.n_agents
    alive = agents.alive & finite_agents(agents)
    cos_e, sin_e = cos_sin(agents.heading)
    # [e, i]: agent i relative to ego e, in world and in ego coordinates
    dx = agents.x[None, :] - agents.x[:, None]
    dy = agents.y[None, :] - agents.y[:, None]
    dist = jnp.sqrt(dx * dx + dy * dy)
    teams = np.asarray(config.teams)
    same = teams[:, None] == teams[None, :]
    # Seen agents sort by distance, ties by index; NaN or inf distances after finite ones.
    key = jnp.where(dist < np.inf, dist, np.finfo(np.float32).max)
    others = ~np.eye(n, dtype=bool)
    parts = [_self_row(config, agents, cos_e, sin_e)]
    for group, wanted, slots in (
        ("is_ally", same & others, config.entity_max_allies),
        ("is_enemy", ~same, config.entity_max_enemies),
    ):
        if slots:
            rank = jnp.where(seen & jnp.asarray(wanted), key, jnp.inf)
            parts.append(
                _agent_rows(config, agents, group, rank, slots, dx, dy, dist, cos_e, sin_e)
            )
    if config.max_boxes:
        b = config.max_boxes
        parts.append(_box_rows(config, agents, "is_box", boxes[:b], box_valid[:b], cos_e, sin_e))
    if config.enable_waypoints:
        active = (episode.waypoint_time > 0)[None]
        wp = episode.waypoint[None, :]
        parts.append(_box_rows(config, agents, "is_waypoint", wp, active, cos_e, sin_e))
    obs = jnp.concatenate(parts, axis=1).reshape(n, config.entity_size)
    return jnp.where(alive[:, None], obs, 0.0)


def _scales(config: EnvConfig) -> tuple[float, float]:
    """(S, diag): the arena scale max(limit_x, limit_y) and its diagonal."""
    lx, ly = config.limit_x, config.limit_y
    return max(lx, ly), math.sqrt(lx * lx + ly * ly)


def _type_columns(config: EnvConfig, idx: jax.Array | slice = slice(None)) -> dict[str, jax.Array]:
    """The type columns of the agents `idx`: sprite bits 1, 2, 4 (0/1), detection_range,
    damage_range, thrust and max_health, each float32 of the shape of `idx`."""
    sprites = np.asarray(config.sprites)
    table = {
        "sprite_dot": (sprites & 1) > 0,
        "sprite_plus": (sprites & 2) > 0,
        "sprite_diagonal": (sprites & 4) > 0,
        "detection_range": config.detection_range,
        "damage_range": config.damage_range,
        "thrust": config.thrust,
        "max_health": config.max_health,
    }
    return {name: jnp.asarray(np.asarray(v, np.float32))[idx] for name, v in table.items()}


def _rows(columns: dict[str, jax.Array | float], shape: tuple[int, ...]) -> jax.Array:
    """(*shape, F) float32 with the named columns filled (broadcast), zeros elsewhere."""
    zero = jnp.zeros(shape, jnp.float32)
    return jnp.stack(
        [jnp.broadcast_to(columns.get(name, zero), shape).astype(jnp.float32) for name in COLUMNS],
        axis=-1,
    )


def _self_row(
    config: EnvConfig, agents: AgentState, cos_e: jax.Array, sin_e: jax.Array
) -> jax.Array:
    """(n, 1, F): the ego's own row, world-frame position and heading (walls are fixed in the
    world)."""
    s, diag = _scales(config)
    n = config.n_agents
    row = _rows(
        {
            "present": 1.0,
            "is_self": 1.0,
            "forward": agents.x / config.limit_x,
            "left": agents.y / config.limit_y,
            "up": agents.z / config.z_max,
            "cos_heading": cos_e,
            "sin_heading": sin_e,
            "speed": agents.v / diag,
            "health": agents.health / jnp.asarray(config.max_health, jnp.float32),
            **_type_columns(config),
        },
        (n,),
    )
    return row[:, None, :]


def _agent_rows(
    config: EnvConfig,
    agents: AgentState,
    group: str,
    rank: jax.Array,
    slots: int,
    dx: jax.Array,
    dy: jax.Array,
    dist: jax.Array,
    cos_e: jax.Array,
    sin_e: jax.Array,
) -> jax.Array:
    """(n, slots, F): the nearest `slots` agents with a finite `rank` [e, i], nearest first."""
    n = config.n_agents
    s, diag = _scales(config)
    k = min(slots, n)
    idx = nearest_first(rank, k)  # (n, k)
    present = jnp.take_along_axis(rank, idx, axis=1) < jnp.inf

    def pick(a: jax.Array) -> jax.Array:
        return jnp.take_along_axis(a, idx, axis=1)

    gx, gy, d = pick(dx), pick(dy), pick(dist)
    ce, se = cos_e[:, None], sin_e[:, None]
    forward = gx * ce + gy * se
    left = gy * ce - gx * se
    # bearing of the agent seen from the ego's heading; straight ahead at zero distance
    safe = jnp.where(d > 0, d, 1.0)
    cos_b = jnp.where(d > 0, jnp.clip(forward / safe, -1.0, 1.0), 1.0)
    sin_b = jnp.where(d > 0, jnp.clip(left / safe, -1.0, 1.0), 0.0)
    cos_h, sin_h = cos_sin(agents.heading[idx] - agents.heading[:, None])
    max_health = jnp.asarray(config.max_health, jnp.float32)
    rows = _rows(
        {
            "present": 1.0,
            group: 1.0,
            "forward": forward / s,
            "left": left / s,
            "up": (agents.z[idx] - agents.z[:, None]) / config.z_max,
            "distance": d / s,
            "cos_bearing": cos_b,
            "sin_bearing": sin_b,
            "cos_heading": cos_h,
            "sin_heading": sin_h,
            "speed": agents.v[idx] / diag,
            "health": agents.health[idx] / max_health[idx],
            **_type_columns(config, idx),
        },
        (n, k),
    )
    # Selects, not products: an empty slot is exactly zero even next to NaN or inf values.
    rows = jnp.where(present[..., None], rows, 0.0)
    if k < slots:
        rows = jnp.concatenate([rows, jnp.zeros((n, slots - k, ENTITY_FEATURES))], axis=1)
    return rows


def _box_rows(
    config: EnvConfig,
    agents: AgentState,
    group: str,
    boxes: jax.Array,
    valid: jax.Array,
    cos_e: jax.Array,
    sin_e: jax.Array,
) -> jax.Array:
    """(n, B, F): axis-aligned boxes [x1, y1, x2, y2] (B, 4) as centre, distance to the nearest
    point, the direction of the box's x side and half extents, nearest first."""
    n, b = config.n_agents, boxes.shape[0]
    s, _ = _scales(config)
    x, y = agents.x[:, None], agents.y[:, None]
    x1, y1, x2, y2 = (boxes[None, :, c] for c in range(4))
    # distance from the ego to the box's nearest point (0 inside)
    qx = jnp.maximum(jnp.maximum(x1 - x, x - x2), 0.0)
    qy = jnp.maximum(jnp.maximum(y1 - y, y - y2), 0.0)
    near = jnp.sqrt(qx * qx + qy * qy)  # (n, B)
    rank = jnp.where(
        valid[None, :], jnp.where(near < np.inf, near, np.finfo(np.float32).max), jnp.inf
    )
    idx = nearest_first(rank, b)
    present = jnp.take_along_axis(rank, idx, axis=1) < jnp.inf

    def pick(a: jax.Array) -> jax.Array:
        return jnp.take_along_axis(jnp.broadcast_to(a, (n, b)), idx, axis=1)

    gx = pick(0.5 * (x1 + x2) - x)
    gy = pick(0.5 * (y1 + y2) - y)
    ce, se = cos_e[:, None], sin_e[:, None]
    forward = gx * ce + gy * se
    left = gy * ce - gx * se
    d = jnp.sqrt(forward * forward + left * left)
    safe = jnp.where(d > 0, d, 1.0)
    rows = _rows(
        {
            "present": 1.0,
            group: 1.0,
            "forward": forward / s,
            "left": left / s,
            "distance": pick(near) / s,
            "cos_bearing": jnp.where(d > 0, jnp.clip(forward / safe, -1.0, 1.0), 1.0),
            "sin_bearing": jnp.where(d > 0, jnp.clip(left / safe, -1.0, 1.0), 0.0),
            # the world x axis (the box's width side) seen from the ego: angle -heading
            "cos_heading": ce,
            "sin_heading": -se,
            "half_width": pick(0.5 * (x2 - x1)) / s,
            "half_depth": pick(0.5 * (y2 - y1)) / s,
        },
        (n, b),
    )
    return jnp.where(present[..., None], rows, 0.0)
