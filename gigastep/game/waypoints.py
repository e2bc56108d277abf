"""Waypoints: a square that appears at random, heals and rewards the agent that reaches it
(rules §4.2 with §15 row 10: only alive agents collect it)."""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array

from gigastep.game.types import AgentState, EnvConfig, EpisodeState

__all__ = ["update_waypoint"]


def update_waypoint(
    config: EnvConfig, agents: AgentState, episode: EpisodeState, alive_pre: Array, noise: Array
) -> tuple[Array, Array, Array]:
    """Collect, age and spawn the waypoint.

    Args:
        agents: agents after moving. alive_pre: (n,) bool alive before the step.
        noise: (4,) float32 uniforms (appear, x, y, lifetime).

    Returns:
        (hit (n,) bool, waypoint (4,) float32, waypoint_time () float32).
    """
    if not config.enable_waypoints:
        return jnp.zeros(config.n_agents, bool), episode.waypoint, episode.waypoint_time
    w, remaining = episode.waypoint, episode.waypoint_time
    inside = (w[0] <= agents.x) & (agents.x <= w[2]) & (w[1] <= agents.y) & (agents.y <= w[3])
    hit = (remaining > 0) & inside & alive_pre
    remaining = jnp.where(jnp.any(hit), 0.0, remaining - config.dt)
    appear = (remaining <= 0) & (noise[0] < config.waypoint_spawn_prob)
    size = config.waypoint_size
    wx = noise[1] * (config.limit_x - size)
    wy = noise[2] * (config.limit_y - size)
    lo, hi = config.waypoint_lifetime
    lifetime = lo + noise[3] * (hi - lo)
    new = jnp.stack([wx, wy, wx + size, wy + size])
    w = jnp.where(appear, new, w)
    remaining = jnp.maximum(remaining, 0.0) + jnp.where(appear, lifetime, 0.0)
    return hit, w, remaining
