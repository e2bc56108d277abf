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

__all__ = ["vector_observations", "N_AGENT_FEATURES"]

N_AGENT_FEATURES = 9


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
    # Ego first (-1), seen agents by distance, unseen last in index order (top_k is stable).
    rank = jnp.where(eye, -1.0, jnp.where(seen, dist, jnp.inf))
    _, idx = jax.lax.top_k(-rank, m)  # (n, m)
    s = jnp.take_along_axis(seen, idx, axis=1).astype(jnp.float32)
    is_ego = (idx == jnp.arange(n)[:, None]).astype(jnp.float32)
    other = 1.0 - is_ego
    teams = jnp.asarray(config.teams)
    sprites = jnp.asarray(config.sprites, jnp.float32)

    def rel(values, scale):
        return (values[idx] - other * values[:, None]) / np.float32(scale)

    heading = agents.heading[idx]
    rel_heading = jnp.where(is_ego > 0, heading, wrap_angle(heading - agents.heading[:, None]))
    features = jnp.stack(
        [
            jnp.ones_like(s),
            (teams[idx] == teams[:, None]).astype(jnp.float32),
            rel(agents.x, lx),
            rel(agents.y, ly),
            rel(agents.z, config.z_max),
            rel_heading,
            rel(agents.v, diag),
            agents.health[idx],
            sprites[idx],
        ],
        axis=-1,
    ) * s[..., None]
    parts = [features.reshape(n, m * N_AGENT_FEATURES)]
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
