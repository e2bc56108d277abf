"""The vector observation (SPEC §5.2 with §15 rows 3, 11, 13, 19).

For each ego, M = min(n, max_agents_in_vec_obs) rows of 9 features: the ego first, then the
agents it sees by increasing distance, then unseen agents (all-zero rows). Then 5 waypoint
values if waypoints are enabled, then 4 values per box of the current map.

Row features for another agent i (all times seen_i): seen, same team, (x_i - x_e) / limit_x,
(y_i - y_e) / limit_y, (z_i - z_e) / z_max, wrap(h_i - h_e), (v_i - v_e) / diag, health_i,
sprite_i. The ego row holds its own x / limit_x, y / limit_y, z / z_max, h, v / diag, health
and sprite. A dead ego's observation is all zeros.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.dynamics import wrap_angle
from gigastep.types import AgentState, EnvConfig, EpisodeState

__all__ = ["N_AGENT_FEATURES", "order_matrix", "vector_observations"]

N_AGENT_FEATURES = 9


def order_matrix(rank, m: int):
    """One-hot placement P[e, p, i] = [entry i of row e is the p-th smallest], p < m.

    A stable partial sort by counting (ties keep index order): the position of entry i is
    the number of entries before it. Applied as a matrix product, the permutation costs a
    fraction of `lax.top_k` + gathers on CPU for the small rows of a game.

    Args:
        rank: (n, n) float32 sort keys per row.
    Returns:
        (n, m, n) float32.
    """
    n = rank.shape[-1]
    i = jnp.arange(n)
    # before[e, j, i]: j comes before i in row e (reduced over the non-minor axis j).
    before = (rank[:, :, None] < rank[:, None, :]) | (
        (rank[:, :, None] == rank[:, None, :]) & (i[:, None] < i[None, :])
    )
    position = jnp.sum(before, axis=1, dtype=jnp.int32)  # (n, n), a permutation per row
    return (position[:, None, :] == jnp.arange(m)[None, :, None]).astype(jnp.float32)


def vector_observations(config: EnvConfig, agents: AgentState, episode: EpisodeState, dist, seen,
                        boxes):  # fmt: skip
    """(n, L) float32 vector observations of one game.

    Args:
        dist: (n, n) float32 planar distances. seen: (n, n) bool [e, i].
        boxes: (B, 4) float32 boxes of the current map in world coordinates.
    """
    n, m = config.n_agents, config.vec_agents
    lx, ly = config.limit_x, config.limit_y
    diag = math.sqrt(lx * lx + ly * ly)
    eye = jnp.eye(n, dtype=bool)
    # Ego first (-1), seen agents by distance, unseen last in index order.
    rank = jnp.where(eye, -1.0, jnp.where(seen, dist, jnp.inf))
    s = seen.astype(jnp.float32)
    other = 1.0 - eye.astype(jnp.float32)
    teams = np.asarray(config.teams)
    same_team = jnp.asarray((teams[:, None] == teams[None, :]).astype(np.float32))

    def rel(values, scale):  # [e, i]: value of i relative to e (absolute on the diagonal)
        return (values[None, :] - other * values[:, None]) * np.float32(1.0 / scale)

    heading = agents.heading
    rel_heading = jnp.where(eye, heading[None, :], wrap_angle(heading[None, :] - heading[:, None]))
    features = (
        jnp.stack(
            [
                jnp.ones_like(s),
                same_team,
                rel(agents.x, lx),
                rel(agents.y, ly),
                rel(agents.z, config.z_max),
                rel_heading,
                rel(agents.v, diag),
                jnp.broadcast_to(agents.health[None, :], (n, n)),
                jnp.broadcast_to(jnp.asarray(config.sprites, jnp.float32)[None, :], (n, n)),
            ],
            axis=-1,
        )
        * s[..., None]
    )  # (n, n, 9) [e, i, f]
    rows = jnp.einsum("epi,eif->epf", order_matrix(rank, m), features,
                      precision=jax.lax.Precision.HIGHEST)  # fmt: skip
    parts = [rows.reshape(n, m * N_AGENT_FEATURES)]
    if config.enable_waypoints:
        active = (episode.waypoint_time > 0).astype(jnp.float32)
        w = episode.waypoint
        corner = jnp.stack(
            [(w[0] - agents.x) / lx, (w[1] - agents.y) / ly,
             (w[2] - agents.x) / lx, (w[3] - agents.y) / ly], axis=-1)  # fmt: skip
        parts.append(jnp.concatenate([corner * active, jnp.broadcast_to(active, (n, 1))], -1))
    if config.max_boxes:
        scale = jnp.asarray([lx, ly, lx, ly], jnp.float32)
        flat = (boxes[: config.max_boxes] / scale).reshape(-1)
        parts.append(jnp.broadcast_to(flat, (n, flat.shape[0])))
    obs = jnp.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]
    return obs * agents.alive[:, None].astype(jnp.float32)
