"""The vector observation (rules §5.2 with §15 rows 3, 11, 13, 19).

For each ego, M = min(n, max_agents_in_vec_obs) rows of 9 features: the ego first, then the
agents it sees by increasing distance, then unseen agents (all-zero rows). Then 5 waypoint
values if waypoints are enabled, then 4 values per box of the current map.

Row features for another agent i (all times seen_i): seen, same team, (x_i - x_e) / limit_x,
(y_i - y_e) / limit_y, (z_i - z_e) / z_max, wrap(h_i - h_e), (v_i - v_e) / diag, health_i,
sprite_i. The ego row holds its own x / limit_x, y / limit_y, z / z_max, h, v / diag, health
and sprite. A dead ego's observation is all zeros.

An agent whose x, y, z, heading or speed is not finite (`visibility.finite_agents`) is seen
by nobody, observes all zeros and shares nothing (not even its detections); a seen agent at a
distance that is not below +inf (an overflow of far-apart finite positions) sorts after every
smaller distance, so the rows after the ego always hold the seen agents.
`jax_vector_observations` and the native kernel give the same float32 values bit for bit on
every state, except that where both give NaN (say a feature that overflows to inf - inf) the
NaN's sign and payload bits may differ.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.game.dynamics import wrap_angle
from gigastep.game.observations.visibility import finite_agents, visibility
from gigastep.game.types import AgentState, EnvConfig, EpisodeState
from gigastep.game.xla import varying_like

__all__ = [
    "N_AGENT_FEATURES",
    "jax_vector_observations",
    "native_supported",
    "native_vector_observations",
    "nearest_first",
    "vector_observations",
]

N_AGENT_FEATURES = 9


# Up to this many agents a counting sort (O(n^3) compares, fully vectorised) beats
# lax.top_k on CPU; beyond it the cubic work outgrows top_k's sort, and top_k wins
# (`python -m tools.profile_step` times both).
_COUNTING_SORT_MAX_AGENTS = 16


def nearest_first(rank: jax.Array, m: int) -> jax.Array:
    """(n, m) int32: per row of `rank` (n, n), the indices of its m smallest entries in
    increasing order, ties by index (a stable partial sort)."""
    n = rank.shape[-1]
    if n > _COUNTING_SORT_MAX_AGENTS:
        return jax.lax.top_k(-rank, m)[1]
    i = np.arange(n)
    # before[e, j, i]: j comes before i in row e (reduced over the non-minor axis j). With the
    # tie-break by index folded into a constant mask (j < i: <=, else <): one compare and one
    # select per triple instead of four ops.
    rj, ri = rank[:, :, None], rank[:, None, :]
    before = jnp.where(jnp.asarray(i[:, None] < i[None, :]), rj <= ri, rj < ri)
    position = jnp.sum(before, axis=1, dtype=jnp.int32)  # (n, n), a permutation per row
    slot = position[:, None, :] == jnp.arange(m)[None, :, None]  # [e, p, i]
    return jnp.sum(jnp.where(slot, jnp.arange(n), 0), axis=-1, dtype=jnp.int32)


def vector_observations(
    config: EnvConfig,
    agents: AgentState,
    episode: EpisodeState,
    dist: jax.Array,
    seen: jax.Array,
    boxes: jax.Array,
) -> jax.Array:
    """(n, L) float32 vector observations of one game.

    Args:
        dist: (n, n) float32 planar distances. seen: (n, n) bool [e, i].
        boxes: (B, 4) float32 boxes of the current map in world coordinates.
    """
    n, m = config.n_agents, config.vec_agents
    lx, ly = config.limit_x, config.limit_y
    diag = math.sqrt(lx * lx + ly * ly)
    # Ego first (-1), seen agents by distance, unseen last in index order. A seen agent's key
    # stays below the unseen agents' +inf even at a NaN or +inf distance.
    key = jnp.where(dist < np.inf, dist, np.finfo(np.float32).max)
    rank = jnp.where(jnp.eye(n, dtype=bool), -1.0, jnp.where(seen, key, jnp.inf))
    idx = nearest_first(rank, m)  # (n, m)
    # Seen agents come right after the ego (which an alive ego always sees), unseen ones last:
    # slot p holds a seen agent iff p < the number of agents e sees (no gather needed; a dead
    # ego sees nothing, so all its slots are unseen).
    count = jnp.sum(seen, axis=1, dtype=jnp.int32)
    # The m rows of 9 features are computed flat, as the (n, m * 9) block they occupy in the
    # observation: column c is feature f = c % 9 of slot p = c // 9. Per-column constants and
    # a constant gather of each slot's values (c -> p) take the place of a (n, m, 9) block
    # and its reshape, whose index arithmetic XLA on the CPU repeated for every element of
    # the fusion that writes the observation.
    f = np.tile(np.arange(N_AGENT_FEATURES), m)
    p = np.repeat(np.arange(m), N_AGENT_FEATURES)
    slot = idx[:, p]  # (n, m * 9): the agent in column c's slot
    s = jnp.asarray(p)[None, :] < count[:, None]
    teams = jnp.asarray(config.teams, jnp.float32)
    sprites = jnp.asarray(config.sprites, jnp.float32)
    # Per-agent rows in feature order, with a constant 1 for the seen flag, gathered element by
    # element from the flat table. Unsigned indices: NumPy-style wrapping of negative signed
    # indices would add a select to every element of the fused gather.
    table = jnp.stack(
        [
            jnp.ones(n, jnp.float32),
            teams,
            agents.x,
            agents.y,
            agents.z,
            agents.heading,
            agents.v,
            agents.health,
            sprites,
        ],
        axis=-1,
    )
    g = table.reshape(-1)[(slot * N_AGENT_FEATURES + jnp.asarray(f)).astype(jnp.uint32)]
    own = table[:, f]  # (n, m * 9): the ego's own value of each column's feature
    is_ego = slot == jnp.arange(n)[:, None]
    # All features as one elementwise expression with per-column constants: d = g - k * own,
    # where k = 1 for the team column (so the ego's own entry is 0, i.e. "same team") and for
    # the relative features (x, y, z, heading, speed) of other agents, else 0 (the ego's
    # absolute values, health, sprite, seen flag). XLA fuses the gathers, the features and the
    # final concatenation into one pass that writes the observation once (per-feature planes
    # and a stack would keep every plane as a temporary, several times the memory).
    team_col = jnp.asarray(f == 1)
    relative = jnp.asarray((f >= 2) & (f <= 6))
    k = jnp.where(team_col | (relative & ~is_ego), 1.0, 0.0)
    d = g - k * own
    d = jnp.where(team_col, 1.0 - jnp.abs(d), d)  # [team_i == team_e], 0/1 ids
    d = jnp.where(jnp.asarray(f == 5) & ~is_ego, wrap_angle(d), d)
    scale = np.ones(N_AGENT_FEATURES, np.float32)
    scale[2:5] = [1.0 / lx, 1.0 / ly, 1.0 / config.z_max]
    scale[6] = 1.0 / diag
    # Selects, not products with 0/1: an unseen agent's NaN or inf stays out of the zeros.
    rows = jnp.where(s, d * jnp.asarray(scale[f]), 0.0)  # (n, m * 9)
    parts = [rows]
    if config.enable_waypoints:
        active = (episode.waypoint_time > 0).astype(jnp.float32)
        w = episode.waypoint
        corner = jnp.stack(
            [
                (w[0] - agents.x) / lx,
                (w[1] - agents.y) / ly,
                (w[2] - agents.x) / lx,
                (w[3] - agents.y) / ly,
            ],
            axis=-1,
        )
        parts.append(jnp.concatenate([corner * active, jnp.broadcast_to(active, (n, 1))], -1))
    if config.max_boxes:
        box_scale = jnp.asarray([lx, ly, lx, ly], jnp.float32)
        flat = (boxes[: config.max_boxes] / box_scale).reshape(-1)
        parts.append(jnp.broadcast_to(flat, (n, flat.shape[0])))
    obs = jnp.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]
    return jnp.where((agents.alive & finite_agents(agents))[:, None], obs, 0.0)


def jax_vector_observations(
    config: EnvConfig,
    agents: AgentState,
    episode: EpisodeState,
    dist: jax.Array,
    detected: jax.Array,
    comm_noise: jax.Array,
    boxes: jax.Array,
) -> jax.Array:
    """`visibility` followed by `vector_observations`: the JAX path, which every GPU runs, of
    what `native_vector_observations` computes on the CPU (same arguments but the stream).
    (n, L) float32."""
    finite = finite_agents(agents)
    seen = visibility(config, agents.alive, dist, detected, comm_noise, finite)
    return vector_observations(config, agents, episode, dist, seen, boxes)


# The native kernel keeps bit sets in one 64-bit word per agent and boxes on its stack.
_NATIVE_MAX_AGENTS = 64
_NATIVE_MAX_BOXES = 64


def native_supported(config: EnvConfig) -> bool:
    """Whether `native_vector_observations` serves this config: JAX's default backend is the
    CPU, the kernel is built and loaded, at most 64 agents and 64 boxes. (On a GPU machine
    nothing is compiled or loaded.)"""
    from gigastep.game import _native

    return (
        config.n_agents <= _NATIVE_MAX_AGENTS
        and config.max_boxes <= _NATIVE_MAX_BOXES
        and jax.default_backend() == "cpu"
        and _native.load()
    )


def native_vector_observations(
    config: EnvConfig,
    agents: AgentState,
    episode: EpisodeState,
    dist: jax.Array,
    detected: jax.Array,
    comm_noise: jax.Array,
    boxes: jax.Array,
    comm_stream: jax.Array | None = None,
) -> jax.Array:
    """`visibility` followed by `vector_observations`, as one CPU kernel call (FFI target
    ``gigastep_vector_obs``, gigastep/game/_native/vector_obs.cc): the values of
    `jax_vector_observations` bit for bit (NaNs aside, module docstring). CPU only (callers
    pick it with `jax.lax.platform_dependent`).

    Args:
        dist: (n, n) float32 planar distances of these agents, `geometry(agents).dist`. The
            kernel computes them itself from x and y, with the same float32 operations, so in
            a compiled step XLA need not write them out; the JAX path and derivatives read
            them.
        detected: (n, n) bool HD[i, j]. comm_noise: (n, n) float32 uniforms [e, j].
        comm_stream: optional (3,) uint32 counter stream those uniforms come from
            (`gigastep.game.random.stream`); the kernel then hashes them itself and `comm_noise`
            is not read (nor, in a compiled step, computed).
        Others as in `vector_observations`.

    Raises:
        ValueError: an operand's shape or dtype does not fit the config (before any call).
    """
    _check_operands(config, agents, episode, dist, detected, comm_noise, boxes, comm_stream)
    return _native_call(config, agents, episode, dist, detected, comm_noise, boxes, comm_stream)


def _check_operands(
    config: EnvConfig,
    agents: AgentState,
    episode: EpisodeState,
    dist: jax.Array,
    detected: jax.Array,
    comm_noise: jax.Array,
    boxes: jax.Array,
    comm_stream: jax.Array | None,
) -> None:
    """ValueError naming the first operand whose (per-game) shape or dtype is wrong."""
    n, floating = config.n_agents, jnp.floating
    checks: list[tuple[str, Any, tuple[int, ...], Any]]
    checks = [
        (f"agents.{name}", getattr(agents, name), (n,), floating)
        for name in ("x", "y", "z", "heading", "v", "health")
    ]
    checks += [
        ("agents.alive", agents.alive, (n,), jnp.bool_),
        ("dist", dist, (n, n), floating),
        ("detected", detected, (n, n), jnp.bool_),
        ("comm_noise", comm_noise, (n, n), floating),
        ("episode.waypoint", episode.waypoint, (4,), floating),
        ("episode.waypoint_time", episode.waypoint_time, (), floating),
    ]
    if comm_stream is not None:
        checks.append(("comm_stream", comm_stream, (3,), jnp.unsignedinteger))
    nb = np.shape(boxes)[0] if np.ndim(boxes) == 2 else -1
    checks.append(("boxes", boxes, (max(nb, config.max_boxes), 4), floating))
    for name, value, shape, kind in checks:
        dtype = jnp.result_type(value)
        if np.shape(value) != shape or not jnp.issubdtype(dtype, kind):
            want = {jnp.bool_: "bool", jnp.unsignedinteger: "uint32"}.get(kind, "float32")
            raise ValueError(
                f"native_vector_observations: {name} has shape {np.shape(value)} and dtype "
                f"{dtype}; expected shape {shape} ({want}) for {n} agents"
                + (f" and {config.max_boxes} boxes" if name == "boxes" else "")
            )


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _native_call(
    config: EnvConfig,
    agents: AgentState,
    episode: EpisodeState,
    dist: jax.Array,
    detected: jax.Array,
    comm_noise: jax.Array,
    boxes: jax.Array,
    comm_stream: jax.Array | None,
) -> jax.Array:
    n = config.n_agents
    call = jax.ffi.ffi_call(
        "gigastep_vector_obs",
        jax.ShapeDtypeStruct((n, config.vector_size), jnp.float32),
        vmap_method="broadcast_all",
    )
    f32 = jnp.float32
    if comm_stream is not None and config.stochastic_comm:
        comm = jnp.asarray(comm_stream, jnp.uint32)
    else:
        comm = comm_noise.astype(f32)
    inputs = (agents, episode, dist, detected, comm, boxes)
    return varying_like(
        inputs,
        call(
            agents.x.astype(f32),
            agents.y.astype(f32),
            agents.z.astype(f32),
            agents.heading.astype(f32),
            agents.v.astype(f32),
            agents.health.astype(f32),
            agents.alive.astype(bool),
            detected.astype(bool),
            comm,
            boxes.astype(f32),
            episode.waypoint.astype(f32),
            episode.waypoint_time.astype(f32),
            **native_attributes(config),
        ),
    )


def native_attributes(config: EnvConfig) -> dict[str, Any]:
    """The FFI attributes of a ``gigastep_vector_obs`` call for `config` (its constants)."""
    lx, ly = config.limit_x, config.limit_y
    return dict(
        m=np.int64(config.vec_agents),
        n_boxes=np.int64(config.max_boxes),
        stochastic_comm=bool(config.stochastic_comm),
        waypoints=bool(config.enable_waypoints),
        comm_range=np.float32(config.communication_range),
        inv_lx=np.float32(1.0 / lx),
        inv_ly=np.float32(1.0 / ly),
        inv_z=np.float32(1.0 / config.z_max),
        inv_diag=np.float32(1.0 / math.sqrt(lx * lx + ly * ly)),
        lx=np.float32(lx),
        ly=np.float32(ly),
        teams=np.asarray(config.teams, np.int64),
        sprites=np.asarray(config.sprites, np.float32),
    )


@_native_call.defjvp
def _native_call_jvp(
    config: EnvConfig, primals: tuple[Any, ...], tangents: tuple[Any, ...]
) -> tuple[jax.Array, jax.Array]:
    """Derivatives come from the JAX path (same function, so the same derivatives): the
    kernel's value, the JAX code's tangent. Without differentiation this rule is never
    traced."""

    def jax_path(*args: Any) -> jax.Array:
        return jax_vector_observations(config, *args)

    _, tangent = jax.jvp(jax_path, primals[:6], tangents[:6])
    return _native_call(config, *primals), tangent
