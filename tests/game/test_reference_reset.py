"""The library's reset must equal the NumPy reference reset (tests/reference.py, rules §6 with
§15 rows 4, 22, 23) given the same random draws.

The draws come from the library's own draw functions (`_reset_keys`, `_map_index`,
`_placement_uniforms`, and the communication uniforms of the key's third part); everything else
— start regions and their scaling, heights, headings and their wrap, the conflict test, the
redraw rounds, the initial values and the first observation — is computed by the reference.
One jitted vmap per configuration over many keys; each test also asserts that redraws happened,
so that it cannot pass on first draws alone.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep import env as genv
from gigastep.game import random as grandom
from gigastep.game import reset as game_reset
from gigastep.types import EnvConfig, MapSpec
from tests import reference as ref

N_KEYS = 96

# A user map whose start regions are small for their teams and overlap a box, with a height
# range and wide, wrapping heading ranges.
CROWDED = MapSpec(
    name="crowded",
    boxes=((2.0, 2.0, 3.0, 4.0), (6.0, 0.0, 7.0, 10.0)),
    start_team0=(1.0, 1.0, 3.5, 4.0),
    start_team1=(5.0, 6.0, 8.0, 8.0),
    height=(0.0, 1.5),
    heading_team0=(-3.0, 3.0),
    heading_team1=(2.5, 4.0),  # past pi: wraps into [-pi, pi)
)
TINY = MapSpec(name="tiny", start_team0=(5.0, 5.0, 5.05, 5.05), start_team1=(1.0, 1.0, 9.0, 9.0))

SPECIAL = dict(  # rules §9.1 types more_health, more_range, faster, super, default per team
    sprites=(7, 3, 5, 6, 1) * 2,
    max_health=(3.0, 0.5, 1.0, 3.0, 1.0) * 2,
    detection_range=(1.0, 2.0, 1.0, 1.0, 1.0) * 2,
    thrust=(1.0, 1.0, 2.0, 0.8, 1.0) * 2,
)

CONFIGS = {
    # every built-in map on a non-square world, heterogeneous types, waypoints, stochastic comm
    "all_special_20x15": EnvConfig(
        map_set="all",
        limit_x=20.0,
        limit_y=15.0,
        obs_type="vector",
        enable_waypoints=True,
        **SPECIAL,
    ),
    # the two empty maps, deterministic communication, 20 agents (many redraws)
    "empty_20": EnvConfig(
        teams=(0,) * 10 + (1,) * 10,
        map_set="empty",
        obs_type="vector",
        stochastic_obs=False,
        stochastic_comm=False,
    ),
    # a user map set: crowded regions overlapping boxes, heights, wrapping headings
    "user_crowded": EnvConfig(
        teams=(0,) * 6 + (1,) * 4,
        maps=(CROWDED, MapSpec(name="open")),
        obs_type="vector",
        collision_altitude=0.3,
    ),
    # rounds run out: three team-0 agents in a 0.05 x 0.05 region never separate
    "exhausted": EnvConfig(teams=(0, 0, 0, 1), maps=(TINY,), obs_type="vector", reset_max_rounds=3),
    # no redraws at all: the first draw is kept
    "no_rounds": EnvConfig(
        teams=(0,) * 6 + (1,) * 4, maps=(CROWDED,), obs_type="vector", reset_max_rounds=0
    ),
    # no collisions (hide and seek): only boxes force redraws
    "no_collisions": EnvConfig(
        teams=(0,) * 6 + (1,) * 4, maps=(CROWDED,), obs_type="vector", collision_range=0.0
    ),
    # RGB first observation (small images)
    "rgb_four_rooms": EnvConfig(
        teams=(0, 0, 0, 1, 1, 1),
        map_set="four_rooms",
        obs_type="rgb",
        resolution_x=16,
        resolution_y=12,
        max_health=(2.0,) * 6,
    ),
}


def library_draws(config: EnvConfig, key):
    """The draws of one reset, from the library's draw functions: (map_idx, uniforms
    (R + 1, 4, n), comm (n, n))."""
    k_map, k_place, k_comm = game_reset.reset_keys(key)
    rounds = jnp.stack(
        [
            game_reset.placement_uniforms(config, k_place, r)
            for r in range(config.reset_max_rounds + 1)
        ]
    )
    n = config.n_agents
    if config.stochastic_comm:
        comm = grandom.uniform(k_comm, (n, n))
    else:
        comm = jnp.zeros((n, n), jnp.float32)
    return game_reset.map_index(config, k_map), rounds, comm


@functools.cache
def batch(name: str):
    """(library obs, library states, draws) over N_KEYS keys: `batched_reset` (the body of
    `v_reset`) and the draws in one compiled call."""
    config = CONFIGS[name]
    keys = jax.random.split(jax.random.key(sum(map(ord, name))), N_KEYS)

    @jax.jit
    def run(keys):
        obs, states = genv.batched_reset(config, keys)
        return obs, states, jax.vmap(functools.partial(library_draws, config))(keys)

    return config, jax.tree_util.tree_map(np.asarray, run(keys))


def unbatch(tree, b):
    return jax.tree_util.tree_map(lambda x: x[b], tree)


def compare(name: str):
    config, (obs, states, (map_idx, uniforms, comm)) = batch(name)
    redraw_rounds = []
    for b in range(N_KEYS):
        want_obs, want, rounds = ref.reference_reset(config, int(map_idx[b]), uniforms[b], comm[b])
        got = ref.state_to_numpy(unbatch(states, b))
        for key in ref.STATE_KEYS:
            if key in ("x", "y", "z", "heading", "health"):
                np.testing.assert_allclose(
                    got[key], want[key], rtol=1e-6, atol=1e-6, err_msg=f"{name} game {b}: {key}"
                )
            else:
                np.testing.assert_array_equal(got[key], want[key], f"{name} game {b}: {key}")
        if config.obs_type == "rgb":
            np.testing.assert_array_equal(unbatch(obs, b), want_obs, f"{name} game {b}: obs")
        else:
            np.testing.assert_allclose(
                unbatch(obs, b), want_obs, rtol=1e-5, atol=1e-5, err_msg=f"{name} game {b}: obs"
            )
        redraw_rounds.append(rounds)
    return config, np.asarray(redraw_rounds), map_idx


# the fast tier compares one layout (every special rule, a non-square world); CI all five
_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "name",
    [
        "all_special_20x15",
        pytest.param("empty_20", marks=_SLOW),
        pytest.param("user_crowded", marks=_SLOW),
        pytest.param("no_collisions", marks=_SLOW),
        pytest.param("rgb_four_rooms", marks=_SLOW),
    ],
)
def test_reset_equals_reference(name):
    config, rounds, map_idx = compare(name)
    assert rounds.max() >= 2, "no game needed a second redraw: the redraws were not exercised"
    assert len(set(map_idx.tolist())) == len(config.maps), "some map was never drawn"


def test_reset_with_rounds_exhausted_equals_reference():
    """Conflicts that cannot be resolved: exactly reset_max_rounds redraws are made, and the
    last round's positions are kept."""
    config, rounds, _ = compare("exhausted")
    assert (rounds == config.reset_max_rounds).all()


def test_reset_without_rounds_keeps_the_first_draw_as_the_reference_does():
    config, rounds, _ = compare("no_rounds")
    assert (rounds == 0).all()
    _, (_, states, (map_idx, uniforms, _)) = batch("no_rounds")
    conflicts = [
        any(
            ref.placement_conflict(config, 0, ref.state_to_numpy(unbatch(states, b)), i)
            for i in range(config.n_agents)
        )
        for b in range(N_KEYS)
    ]
    assert any(conflicts), "the first draws had no conflict: the case is vacuous"


def test_reference_reset_places_a_lone_agent_by_hand():
    """The reference against a hand calculation: one team-1 agent on empty_flipped (team 1
    starts in [1, 4] x [1, 9] facing east, §8.1 / §15 row 23) on a 20 x 10 world, so in
    [2, 8] x [1, 9]: x = 2 + 0.5 * 6 = 5, y = 1 + 0.25 * 8 = 3, z = 0, heading 0, health its
    max_health."""
    config = EnvConfig(teams=(1,), map_set="empty", limit_x=20.0, max_health=(2.5,))
    u = np.array([[[0.5], [0.25], [0.9], [0.3]]], np.float32)
    state, rounds = ref.reference_reset_state(config, 1, np.repeat(u, 11, axis=0))
    assert rounds == 0
    assert (state["x"][0], state["y"][0], state["z"][0]) == (5.0, 3.0, 0.0)
    assert state["heading"][0] == 0.0 and state["health"][0] == 2.5
    flipped = ref.reference_reset_state(config.replace(teams=(0,), max_health=()), 1, u)[0]
    assert flipped["x"][0] == pytest.approx(2 * (6 + 0.5 * 3))  # team 0: [6, 9] x [1, 9]
    assert flipped["heading"][0] == pytest.approx(-math.pi)  # pi wraps to -pi
