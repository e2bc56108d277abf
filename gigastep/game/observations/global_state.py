"""The global state vector of a game: everything a centralised critic (MAPPO) may read.

One float32 vector per game, seen from one team (`team`): that team's agents come first, in
agent order, then the other team's, so that one critic serves both sides of a symmetric game.
With n agents, their order p (the team's agents, then the others), B boxes per map and
W = 1 when waypoints are enabled (else 0), the layout is

    [ per agent, for a = p[0] .. p[n-1], 9 values each (9 n):
          alive (0/1), own team (1 for `team`'s agents), x / limit_x, y / limit_y, z / z_max,
          cos(heading), sin(heading), v / diagonal, health / max_health
      locks (n * n): tracked[p[i], p[j]] / max_tracking_steps, clipped to [0, 1], row-major,
          i.e. how long agent p[j] has held its lock on target p[i]
      step / max_episode_length (1; 0 without a time limit)
      waypoint (5 W): x1 / limit_x, y1 / limit_y, x2 / limit_x, y2 / limit_y (0 when
          inactive), active flag
      boxes (4 B): the current map's boxes, x / limit_x and y / limit_y as in the vector
          observation ]

Dead agents keep their last position and speed (alive = 0, health 0). The rows of absent
agents (a team draw left them out of the episode) and their locks are all zero. Unlike
observations the state vector is not limited by detection: it is the whole state, for
training only.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from gigastep._util.checks import check_team
from gigastep.game.arena import episode_boxes
from gigastep.game.types import EnvConfig, EnvState

__all__ = ["STATE_AGENT_FEATURES", "agent_order", "state_vector", "state_vector_size"]

STATE_AGENT_FEATURES = 9


def state_vector_size(config: EnvConfig) -> int:
    """Length S of the state vector: 9 n + n^2 + 1 + 5 [waypoints] + 4 B."""
    n = config.n_agents
    return (
        STATE_AGENT_FEATURES * n
        + n * n
        + 1
        + 5 * int(config.enable_waypoints)
        + 4 * config.max_boxes
    )


def agent_order(config: EnvConfig, team: int) -> np.ndarray:
    """(n,) int: the agents of `team` in agent order, then the other team's."""
    teams = np.asarray(config.teams)
    return np.concatenate([np.flatnonzero(teams == team), np.flatnonzero(teams != team)])


def state_vector(
    config: EnvConfig, state: EnvState, team: int = 0, boxes: jax.Array | None = None
) -> jax.Array:
    """(S,) float32: the state vector of one game seen from `team` (layout: module doc).

    Args:
        config: the game's config.
        state: one game's state (vmap for a batch).
        team: 0 or 1, the team whose agents come first and carry the own-team flag.
        boxes: (B, 4) float32 boxes of the current map in world units (looked up from the
            config's maps when None).
    """
    check_team(team)
    a, episode = state.agents, state.episode
    lx, ly = config.limit_x, config.limit_y
    order = agent_order(config, team)
    own = (np.asarray(config.teams)[order] == team).astype(np.float32)
    max_health = np.asarray(config.max_health, np.float32)[order]
    diag = math.sqrt(lx * lx + ly * ly)
    take = jnp.asarray(order)
    alive = a.alive[take].astype(jnp.float32)
    heading = a.heading[take]
    per_agent = jnp.stack(
        [
            alive,
            jnp.asarray(own),
            a.x[take] / lx,
            a.y[take] / ly,
            a.z[take] / config.z_max,
            jnp.cos(heading),
            jnp.sin(heading),
            a.v[take] / diag,
            a.health[take] / jnp.asarray(max_health),
        ],
        axis=-1,
    )
    locks = a.tracked[take][:, take].astype(jnp.float32)
    locks = jnp.clip(locks / max(config.max_tracking_steps, 1), 0.0, 1.0)
    if episode.present is not None:
        present = episode.present[take]
        per_agent = jnp.where(present[:, None], per_agent, 0.0)
        locks = jnp.where(present[:, None] & present[None, :], locks, 0.0)
    limit = config.max_episode_length
    step = episode.step.astype(jnp.float32) / limit if limit else jnp.zeros((), jnp.float32)
    parts = [per_agent.reshape(-1), locks.reshape(-1), step[None]]
    if config.enable_waypoints:
        active = (episode.waypoint_time > 0).astype(jnp.float32)
        w = episode.waypoint / jnp.asarray([lx, ly, lx, ly], jnp.float32)
        parts += [w * active, active[None]]
    if config.max_boxes:
        if boxes is None:
            boxes = episode_boxes(config, episode)[0]
        scale = jnp.asarray([lx, ly, lx, ly], jnp.float32)
        parts.append((boxes[: config.max_boxes] / scale).reshape(-1))
    return jnp.concatenate(parts).astype(jnp.float32)
