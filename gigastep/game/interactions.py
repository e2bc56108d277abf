"""Pairwise interactions, computed from one shared geometry per step (rules §4.3–§4.7).

Pairwise matrices follow one convention: row i is the target (observed) agent, column j the
observer (shooter). `M[i, j]` is "j does something to i".
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np

from gigastep._util.pytree import PytreeData, pytree_dataclass
from gigastep.game.dynamics import heading_trig, wrap_angle
from gigastep.game.types import AgentState, EnvConfig
from gigastep.game.xla import stored, varying_like

__all__ = [
    "Geometry",
    "Hazards",
    "Combat",
    "geometry",
    "hazards",
    "jax_hazards",
    "combat",
    "native_supported",
    "native_hazards",
]


@pytree_dataclass
class Geometry(PytreeData):
    """Pairwise planar geometry of one game, computed once per step."""

    dx: chex.Array  # (n, n) float32, x_i - x_j
    dy: chex.Array  # (n, n) float32, y_i - y_j
    d2: chex.Array  # (n, n) float32, squared planar distance
    dist: chex.Array  # (n, n) float32, planar distance
    cos_bearing: chex.Array  # (n, n) float32, d * cos(bearing of i seen from j vs j's heading)


def geometry(agents: AgentState) -> Geometry:
    dx = agents.x[:, None] - agents.x[None, :]
    dy = agents.y[:, None] - agents.y[None, :]
    d2 = dx * dx + dy * dy
    # Projection of (i - j) on j's heading: |i - j| cos(theta_ij); avoids atan2 and fmod.
    # cos and sin of each heading stored once, not recomputed per pair (see `heading_trig`)
    cos_h, sin_h = heading_trig(agents.heading)
    forward = dx * cos_h[None, :] + dy * sin_h[None, :]
    return Geometry(dx=dx, dy=dy, d2=d2, dist=jnp.sqrt(d2), cos_bearing=forward)


def in_cone(angle: float, geo: Geometry, heading: jax.Array) -> jax.Array:
    """[|theta_ij| < angle] for every pair, without atan2.

    For angle <= pi, |theta| < angle <=> cos(theta) > cos(angle) <=> forward > c d with
    c = cos(angle), compared without the square root d = sqrt(d2): for c >= 0, forward > 0 and
    forward^2 > c^2 d2; for c < 0, forward >= 0 or forward^2 < c^2 d2. The two forms differ
    by rounding at the cone's edge only, and NaN or infinite geometry decides as
    `forward > c d` would, except where a finite forward's square overflows against an
    infinite d2 (agents ~1e19 apart, far outside any map). Without the square root, nothing
    of the step needs the (n, n) distances on the native path (its kernel computes its own):
    XLA neither computes nor writes them. A cone wider than pi contains
    every direction. For a target at exactly the observer's (x, y) the bearing is
    atan2(0, 0) - h_j = -h_j (wrapped), as in rules §4.6.
    """
    if angle > math.pi:
        return jnp.ones_like(geo.d2, dtype=bool)
    c = math.cos(angle)
    f, c2 = geo.cos_bearing, np.float32(c * c)
    if c >= 0:
        ahead = (f > 0) & (f * f > c2 * geo.d2)
    else:
        ahead = (f >= 0) | (f * f < c2 * geo.d2)
    # |wrap(-h_j)| per observer, stored: read by every pair, else recomputed for each of them
    coincident = stored(jnp.abs(wrap_angle(-heading)))[None, :] < np.float32(angle)
    return jnp.where(geo.d2 > 0, ahead, coincident)


@pytree_dataclass
class Hazards(PytreeData):
    """Deaths by leaving the map, agent-agent collisions and boxes."""

    oob: chex.Array  # (n,) bool, outside [0, limit_x] x [0, limit_y]
    collided: chex.Array  # (n,) bool, in a collision with another alive agent
    in_box: chex.Array  # (n,) bool, strictly inside an obstacle box
    alive: chex.Array  # (n,) bool, alive after these hazards


def hazards(
    config: EnvConfig, agents: AgentState, geo: Geometry, boxes: jax.Array, box_valid: jax.Array
) -> Hazards:
    """Out of bounds, then collisions among the agents still alive, then boxes.

    On the CPU the native kernel computes them where it serves the config (`native_hazards`:
    the same values; XLA's CPU code for the collision test, a reduction over the other agents,
    runs one agent at a time), elsewhere the JAX code (`jax_hazards`).

    Args:
        boxes: (B, 4) float32 boxes of the current map; box_valid: (B,) bool.
    """
    if not native_supported(config, boxes.shape[0]):
        return jax_hazards(config, agents, geo, boxes, box_valid)
    return jax.lax.platform_dependent(
        cpu=lambda: native_hazards(config, agents, boxes, box_valid),
        default=lambda: jax_hazards(config, agents, geo, boxes, box_valid),
    )


def jax_hazards(
    config: EnvConfig, agents: AgentState, geo: Geometry, boxes: jax.Array, box_valid: jax.Array
) -> Hazards:
    """`hazards` in JAX (what runs on GPUs): the rules as written."""
    x, y = agents.x, agents.y
    oob = (x < 0) | (x > config.limit_x) | (y < 0) | (y > config.limit_y)
    alive = agents.alive & ~oob
    n = config.n_agents
    if config.collision_range > 0 and n > 1:
        dz = jnp.abs(agents.z[:, None] - agents.z[None, :])
        close = (geo.d2 < np.float32(config.collision_range**2)) & (dz < config.collision_altitude)
        pair = close & alive[:, None] & alive[None, :] & ~jnp.eye(n, dtype=bool)
        collided = jnp.any(pair, axis=1)
    else:
        collided = jnp.zeros(n, bool)
    alive = alive & ~collided
    inside = (
        (x[:, None] > boxes[None, :, 0])
        & (x[:, None] < boxes[None, :, 2])
        & (y[:, None] > boxes[None, :, 1])
        & (y[:, None] < boxes[None, :, 3])
    )
    in_box = jnp.any(inside & box_valid[None, :], axis=1)
    return Hazards(oob=oob, collided=collided, in_box=in_box, alive=alive & ~in_box)


@pytree_dataclass
class Combat(PytreeData):
    """Detection, tracking and damage of one step."""

    detected: chex.Array  # (n, n) bool, HD[i, j]: enemy j has detected i
    tracked: chex.Array  # (n, n) int32, consecutive steps of j's damage lock on i
    damage: chex.Array  # (n, n) float32, damage units j deals to i this step
    took_damage: chex.Array  # (n,) bool, positive damage taken this step


def combat(
    config: EnvConfig,
    agents: AgentState,
    geo: Geometry,
    alive: jax.Array,
    detection_noise: jax.Array,
) -> Combat:
    """Who detects whom, who locks on whom, and the damage units of each lock.

    Detection score cs = d^2 / (cone_depth^2 range_j^2) and damage score
    cds = d^2 / (damage_cone_depth^2 damage_range_j^2) (ranges scale the radius).
    Stochastic detection: an enemy inside the cone is detected with probability 1 - min(cs, 1);
    one that j could shoot is always detected. Deterministic: (cs <= 1) and in cone.
    An enemy closer than `very_close_depth` is always detected. A lock needs detection and
    (cds <= 1) inside the damage cone; damage units = clip(tracked, min, max) - min.
    """
    teams = np.asarray(config.teams)
    det_r2 = (config.cone_depth * np.asarray(config.detection_range, np.float64)) ** 2
    dmg_r2 = (config.damage_cone_depth * np.asarray(config.damage_range, np.float64)) ** 2
    d2 = geo.d2
    within_det = d2 <= jnp.asarray(det_r2, jnp.float32)[None, :]
    # A radius of 0 (damage_range 0) never shoots, even at distance 0.
    within_dmg = (d2 <= jnp.asarray(dmg_r2, jnp.float32)[None, :]) & jnp.asarray(dmg_r2 > 0)[
        None, :
    ]
    dcone = in_cone(config.damage_cone_angle, geo, agents.heading)
    shoot = within_dmg & dcone
    cone = in_cone(config.cone_angle, geo, agents.heading)
    if config.stochastic_obs:
        with np.errstate(divide="ignore"):
            inv = np.where(det_r2 > 0, 1.0 / np.where(det_r2 > 0, det_r2, 1.0), np.inf)
        cs = jnp.where(d2 > 0, d2 * jnp.asarray(inv, jnp.float32)[None, :], 0.0)
        q = jnp.clip(cs, 0.0, 1.0) + jnp.where(cone, 0.0, 1.1)
        sensed = (q < detection_noise) | shoot
    else:
        sensed = within_det & cone
    enemies = jnp.asarray(teams[:, None] != teams[None, :])
    can = enemies & alive[:, None] & alive[None, :]
    very_close = d2 < np.float32(config.very_close_depth**2)
    detected = can & (very_close | sensed)
    # With stochastic detection a target j could shoot is always detected (sensed includes
    # shoot), so the lock is can & shoot: the same booleans, without the detection noise.
    lock = (can & shoot) if config.stochastic_obs else (detected & shoot)
    tracked = jnp.where(lock, agents.tracked + 1, 0)
    lo, hi = config.min_tracking_steps, config.max_tracking_steps
    damage = (jnp.clip(tracked, lo, hi) - lo).astype(jnp.float32)
    took = jnp.any(damage > 0, axis=1)  # damage units are >= 0
    return Combat(detected=detected, tracked=tracked, damage=damage, took_damage=took)


# ------------------------------------------------------------------------------------------
# The native CPU kernel of the hazards (gigastep/game/_native/hazards.cc)
# ------------------------------------------------------------------------------------------

_NATIVE_MAX_AGENTS = 64
_NATIVE_MAX_BOXES = 64


def native_supported(config: EnvConfig, n_boxes: int) -> bool:
    """Whether `native_hazards` serves this config: JAX's default backend is the CPU, the
    kernels are built and loaded, at most 64 agents and 64 boxes per map."""
    from gigastep.game import _native

    return (
        config.n_agents <= _NATIVE_MAX_AGENTS
        and n_boxes <= _NATIVE_MAX_BOXES
        and jax.default_backend() == "cpu"
        and _native.load()
    )


def native_hazards(
    config: EnvConfig, agents: AgentState, boxes: jax.Array, box_valid: jax.Array
) -> Hazards:
    """`hazards` of one game as one CPU kernel call (FFI target ``gigastep_hazards``): the
    same values bit for bit, finite or not. CPU only (callers pick it with
    `jax.lax.platform_dependent`). Its outputs are booleans, so it has no derivatives (its
    float inputs are read through `stop_gradient`)."""
    n = config.n_agents
    f32 = jnp.float32
    call = jax.ffi.ffi_call(
        "gigastep_hazards", jax.ShapeDtypeStruct((n, 3), jnp.bool_), vmap_method="broadcast_all"
    )
    inputs = (
        *(jax.lax.stop_gradient(v.astype(f32)) for v in (agents.x, agents.y, agents.z)),
        agents.alive.astype(bool),
        jax.lax.stop_gradient(boxes.astype(f32)),
        box_valid.astype(bool),
    )
    flags = varying_like(
        inputs,
        call(
            *inputs,
            collisions=bool(config.collision_range > 0),
            limit_x=np.float32(config.limit_x),
            limit_y=np.float32(config.limit_y),
            coll_r2=np.float32(config.collision_range**2),
            coll_alt=np.float32(config.collision_altitude),
        ),
    )
    oob, collided, in_box = flags[..., 0], flags[..., 1], flags[..., 2]
    return Hazards(
        oob=oob, collided=collided, in_box=in_box, alive=agents.alive & ~oob & ~collided & ~in_box
    )
