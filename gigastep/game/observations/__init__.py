"""The observation phase: what every agent sees of one game (rules §5).

`observe` dispatches to the native CPU kernels (`gigastep.game._native`) where they support the
config (the vector observation, the RGB drawing) and to the JAX renderers otherwise: the
vector observation (`vector`, with `visibility`), the entity observation (`entity`), the RGB
images and the global view (`rgb`), and the centralised state vector (`global_state`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from gigastep.game import interactions
from gigastep.game.arena import episode_background, episode_boxes
from gigastep.game.interactions import Geometry
from gigastep.game.observations import rgb
from gigastep.game.observations.entity import entity_observations
from gigastep.game.observations.vector import (
    native_supported,
    native_vector_observations,
    vector_observations,
)
from gigastep.game.observations.visibility import finite_agents, visibility
from gigastep.game.types import AgentState, EnvConfig, EnvState, EpisodeState, Observation

__all__ = ["first_observation", "global_view", "observe"]


def observe(
    config: EnvConfig,
    state: EnvState,
    geo: Geometry,
    detected: jax.Array,
    took_damage: jax.Array,
    comm_noise: jax.Array,
    comm_stream: jax.Array | None = None,
) -> Observation:
    """Observations of every agent of one game (rules §5).

    `comm_stream` (optional, (3,) uint32) is the counter stream `comm_noise` was drawn from;
    the native kernel then draws the noise itself (same numbers) instead of reading it.

    Returns: "vector" (n, L) float32, "rgb" (n, res_x, res_y, 3) uint8, the tuple
    (rgb, vector) for "rgb_vector", or "entity" (n, entity_size) float32.
    """
    agents, episode = state.agents, state.episode
    if config.obs_type not in ("vector", "rgb_vector") or not native_supported(config):
        return _observe_jax(config, state, geo, detected, took_damage, comm_noise)
    # One CPU kernel for visibility + vector observation (the same values; XLA on the CPU
    # recomputes the bit sets and the sort per element of the gathered rows, the kernel once);
    # the JAX code everywhere else.
    boxes = episode_boxes(config, episode)[0]
    args = (agents, episode, geo.dist, detected, comm_noise, boxes, comm_stream)

    def cpu(*a: Any) -> Observation:
        vector = native_vector_observations(config, *a)
        if config.obs_type == "vector":
            return vector
        # rgb_vector: the images need the seen mask, which the vector kernel keeps to itself
        seen = _seen(config, agents, geo, detected, comm_noise)
        return _rgb_images(config, agents, episode, seen, took_damage), vector

    return jax.lax.platform_dependent(
        *args,
        cpu=cpu,
        default=lambda *a: _observe_jax(config, state, geo, detected, took_damage, comm_noise),
    )


def _observe_jax(
    config: EnvConfig,
    state: EnvState,
    geo: Geometry,
    detected: jax.Array,
    took_damage: jax.Array,
    comm_noise: jax.Array,
) -> Observation:
    agents, episode = state.agents, state.episode
    seen = _seen(config, agents, geo, detected, comm_noise)
    out: list[jax.Array] = []
    if config.obs_type in ("rgb", "rgb_vector"):
        out.append(_rgb_images(config, agents, episode, seen, took_damage))
    if config.obs_type in ("vector", "rgb_vector"):
        boxes = episode_boxes(config, episode)[0]
        out.append(vector_observations(config, agents, episode, geo.dist, seen, boxes))
    if config.obs_type == "entity":
        # the boxes of the current map, read here only (padding rows have box_valid False)
        boxes, box_valid = episode_boxes(config, episode)
        out.append(entity_observations(config, agents, episode, seen, boxes, box_valid))
    return out[0] if len(out) == 1 else (out[0], out[1])  # (rgb, vector)


def _seen(
    config: EnvConfig, agents: AgentState, geo: Geometry, detected: jax.Array, comm_noise: jax.Array
) -> jax.Array:
    """(n, n) bool seen[e, i]: ego e sees agent i (`visibility`)."""
    return visibility(config, agents.alive, geo.dist, detected, comm_noise, finite_agents(agents))


def _rgb_images(
    config: EnvConfig,
    agents: AgentState,
    episode: EpisodeState,
    seen: jax.Array,
    took_damage: jax.Array,
) -> jax.Array:
    """The ego images: drawn by the native kernel on the CPU (the same bytes, one image at a
    time while it is in the cache), by the JAX code everywhere else."""
    images = episode_background(config, episode)
    args = (agents, episode, seen, took_damage)
    if rgb.native_rgb_supported(config):
        return jax.lax.platform_dependent(
            *args,
            cpu=lambda *a: rgb.native_rgb_observations(config, images, *a),
            default=lambda *a: rgb.rgb_observations(config, images, *a),
        )
    return rgb.rgb_observations(config, images, *args)


def global_view(config: EnvConfig, state: EnvState) -> jax.Array:
    """The team-coloured top view of one game, (res_x, res_y, 3) uint8 (rules §5.4)."""
    images = episode_background(config, state.episode)
    return rgb.global_view(config, images, state.agents, state.episode)


def first_observation(
    config: EnvConfig, state: EnvState, comm: jax.Array, comm_stream: jax.Array | None = None
) -> Observation:
    """The observations of a fresh game: nobody detected, nobody damaged, `comm` (n, n) the
    communication noise of this observation (`comm_stream` its counter stream, or None)."""
    n = config.n_agents
    geo = interactions.geometry(state.agents)
    return observe(
        config, state, geo, jnp.zeros((n, n), bool), jnp.zeros(n, bool), comm, comm_stream
    )
