"""The JAX observation path, the one every GPU runs, against the NumPy reference.

On the CPU the native kernel computes every vector observation of a step, so the rule and
reference tests hold the JAX code (`gigastep.game.observations.visibility` + `.vector`) only
through the kernel's bit-for-bit equality with it. These tests call the JAX path explicitly
(`jax_vector_observations`, never the CPU dispatch) on random states and compare it with
tests/reference.py (§5.1, §5.2), so that a change to the JAX code alone (say, dropping the
wrap of the relative heading) fails here, kernel or not.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.game.interactions import geometry
from gigastep.game.observations.vector import jax_vector_observations
from gigastep.types import EnvConfig, EnvState
from tests import reference as ref

F32 = np.float32

CONFIGS = {
    "5v5, waypoints, boxes": EnvConfig(
        teams=(0, 1) * 5, obs_type="vector", enable_waypoints=True, map_set="all"
    ),
    "4v4 deterministic comm": EnvConfig(
        teams=(0, 0, 1, 1) * 2, obs_type="vector", stochastic_comm=False
    ),
    "7 agents, 3 rows": EnvConfig(
        teams=(0, 1, 1, 0, 1, 0, 0), obs_type="vector", max_agents_in_vec_obs=3
    ),
    "18 agents, 6 rows (top_k)": EnvConfig(
        teams=(0, 1) * 9, obs_type="vector", max_agents_in_vec_obs=6, map_set="all"
    ),
}


def _random_game(config: EnvConfig, rng):
    """One random game: positions on a grid (distance ties), headings in [-pi, pi) as the game
    keeps them, some agents dead; random detections and communication noise."""
    n = config.n_agents
    state = EnvState.create(
        config,
        x=rng.integers(0, 6, n).astype(F32) * F32(1.5),
        y=rng.integers(0, 6, n).astype(F32) * F32(1.5),
        z=rng.uniform(0, config.z_max, n).astype(F32),
        v=rng.uniform(0, 3, n).astype(F32),
        heading=rng.uniform(-np.pi, np.pi, n).astype(F32),
        health=rng.uniform(0, 1, n).astype(F32),
        alive=rng.random(n) < 0.8,
        map_idx=int(rng.integers(0, len(config.maps))),
        waypoint=rng.uniform(0, 10, 4).astype(F32),
        waypoint_time=F32(rng.choice([0.0, 2.0])),
    )
    detected = rng.random((n, n)) < 0.3
    comm = rng.random((n, n)).astype(F32)
    return state, detected, comm


@functools.cache
def _jax_path(config: EnvConfig):
    def fn(agents, episode, detected, comm, boxes):
        dist = geometry(agents).dist
        return jax_vector_observations(config, agents, episode, dist, detected, comm, boxes)

    return jax.jit(jax.vmap(fn))


def _reference(config: EnvConfig, state: EnvState, detected, comm) -> np.ndarray:
    s = ref.state_to_numpy(state)
    seen = ref.visibility(config, s, detected, comm)
    return np.stack([ref.vector_observation(config, s, seen, e) for e in range(config.n_agents)])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_jax_path_matches_the_reference_on_random_games(name):
    config = CONFIGS[name]
    rng = np.random.default_rng(len(name))
    games = [_random_game(config, rng) for _ in range(12)]
    states = jax.tree.map(lambda *a: jnp.stack(a), *[g[0] for g in games])
    detected = jnp.asarray(np.stack([g[1] for g in games]))
    comm = jnp.asarray(np.stack([g[2] for g in games]))
    n_boxes = max(len(m.boxes) for m in config.maps)
    boxes = np.zeros((len(games), max(n_boxes, 1), 4), F32)
    for b, (state, _, _) in enumerate(games):
        scaled = ref.scaled_boxes(config, int(state.episode.map_idx))
        boxes[b, : len(scaled)] = np.asarray(scaled, F32).reshape(-1, 4)
    got = np.asarray(_jax_path(config)(states.agents, states.episode, detected, comm, boxes))
    want = np.stack([_reference(config, *g) for g in games])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # The games exercise what they should: seen agents beyond the ego, relative headings that
    # needed the wrap (|h_i - h_e| > pi before it), dead egos.
    assert (want[:, :, 9::9][..., : config.vec_agents - 1] == 1).any()
    assert (want == 0).all(axis=-1).any()
    h = np.stack([np.asarray(g[0].agents.heading) for g in games])
    assert (np.abs(h[:, :, None] - h[:, None, :]) > np.pi).any()
