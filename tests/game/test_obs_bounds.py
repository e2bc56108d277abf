"""The vector observation space has finite bounds derived from the game, and observations stay
inside them (`gigastep.spaces.vector_bounds`).

Expected bounds come from rules §3 and §5.2 by hand (positions normalised by the world size,
headings wrapped into [-pi, pi), boxes as given in `envs/maps.toml`), and the speed bound from
an independent solution of its fixed-point equation (NumPy's polynomial roots). Random rollouts
with extreme actions (every control at -1 or +1, which reaches the highest speeds) over
scenarios with obstacle boxes, waypoints and heterogeneous agent types check containment.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gigastep
from gigastep.game.maps import builtin_maps
from gigastep.spaces import _speed_range, vector_bounds

ROLLOUT_SCENARIOS = [
    "special_5_vs_5_pobs_vec_maps_disc",  # boxes; faster (thrust 2), more_health (3), sprites
    "waypoint_5_vs_3_fobs_vec_maps_cont",  # waypoints and boxes, continuous actions
]
GAMES, STEPS = 8, 100


def _slot(config, low_high, slot: int, feature: int):
    low, high = vector_bounds(config)
    return (low, high)[low_high][9 * slot + feature]


def test_vector_bounds_are_finite_with_the_observation_length():
    for name in ROLLOUT_SCENARIOS:
        config = gigastep.make_config(name)
        low, high = vector_bounds(config)
        assert low.shape == high.shape == (config.vector_size,)
        assert low.dtype == high.dtype == np.float32
        assert np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low <= high)


def test_positions_are_bounded_by_the_world_and_headings_by_pi():
    config = gigastep.make_config("identical_5_vs_5_fobs_vec_void_cont")
    one_ulp = float(np.spacing(np.float32(1.0)))
    for feature in (2, 3, 4):  # x / limit_x, y / limit_y, z / z_max
        assert _slot(config, 0, 0, feature) == 0.0  # the ego's own position
        assert _slot(config, 1, 0, feature) == pytest.approx(1.0, abs=one_ulp)
        assert _slot(config, 0, 1, feature) == pytest.approx(-1.0, abs=one_ulp)  # relative
        assert _slot(config, 1, 1, feature) == pytest.approx(1.0, abs=one_ulp)
    for slot in (0, 1):
        assert _slot(config, 0, slot, 5) == pytest.approx(-math.pi)
        assert _slot(config, 1, slot, 5) == pytest.approx(math.pi)


def test_health_and_sprite_bounds_are_the_largest_of_the_agent_types():
    config = gigastep.make_config("special_5_vs_5_fobs_vec_void_cont")
    # special teams hold more_health / super (max health 3) and sprites up to 7
    assert _slot(config, 1, 0, 7) == 3.0 and _slot(config, 1, 3, 7) == 3.0
    assert _slot(config, 1, 0, 8) == 7.0 and _slot(config, 0, 3, 8) == 0.0


def test_box_bounds_are_the_range_of_each_box_coordinate_over_the_maps():
    config = gigastep.make_config("identical_5_vs_5_fobs_vec_maps_cont")
    low, high = vector_bounds(config)
    start = 9 * config.vec_agents
    boxes = np.zeros((len(config.maps), config.max_boxes, 4))
    for i, spec in enumerate(config.maps):
        for j, box in enumerate(builtin_maps()[spec.name].boxes):  # reference 10 x 10 world
            boxes[i, j] = np.asarray(box) / 10.0
    want_low = np.minimum(boxes.min(0), 0).ravel()
    want_high = np.maximum(boxes.max(0), 0).ravel()
    np.testing.assert_allclose(low[start:], want_low, atol=1e-6)
    np.testing.assert_allclose(high[start:], want_high, atol=1e-6)


def test_the_speed_bound_is_the_fixed_point_of_full_throttle_while_diving():
    # S^2 = (u - b u^2)^2 + c with u = S + a: a = dt throttle_rate thrust, b = dt drag,
    # c = dive_speed_exchange g dt dive_rate (rules §3, one step at full throttle and dive).
    for name, thrust in (("identical_5_vs_5", 1.0), ("special_5_vs_5", 2.0)):
        config = gigastep.make_config(name)
        a, b, c = 0.1 * 1.5 * thrust, 0.1 * 0.4, 0.5 * 9.81 * 0.1 * 5.0
        # (S + a - b (S + a)^2)^2 + c - S^2 = 0, a quartic in S
        p = np.poly1d([-b, 1.0 - 2 * a * b, a - b * a * a])  # u - b u^2 as a polynomial in S
        roots = (p * p + np.poly1d([-1.0, 0.0, c])).roots
        real = sorted(r.real for r in roots if abs(r.imag) < 1e-9 and r.real > 1.0)
        lo, hi = _speed_range(config)
        assert lo == 1.0
        assert hi == pytest.approx(real[0], rel=2e-4) and hi >= real[0]


def test_speed_without_drag_is_unbounded():
    config = gigastep.make_config("identical_2_vs_2_fobs_vec_void_cont", drag=0.0)
    assert _speed_range(config)[1] == math.inf
    low, high = vector_bounds(config)
    assert high[6] == np.inf and low[9 + 6] == -np.inf  # ego speed, relative speed


@functools.cache
def _extreme_rollout(name: str):
    """Observations (STEPS + 1, GAMES, n, L) of games from their reset on, where every control
    of every agent is -1 or +1 at random each step (discrete: a random one of the 27 corners;
    a plain step, which compiles faster than the auto-resetting one: STEPS is well under the
    time limit, and eliminated agents observe zeros)."""
    env = gigastep.make(name)

    def policy(key):
        if env.discrete_actions:
            return jax.random.randint(key, (GAMES, env.n_agents), 0, 27)
        return jnp.sign(jax.random.uniform(key, (GAMES, env.n_agents, 3), minval=-1, maxval=1))

    @jax.jit
    def rollout(key):
        k_reset, k_run = jax.random.split(key)
        obs, states = env.v_reset(jax.random.split(k_reset, GAMES))

        def body(states, key):
            k_act, k_step = jax.random.split(key)
            obs, states, *_ = gigastep.env.batched_step(
                env.config, states, policy(k_act), jax.random.split(k_step, GAMES)
            )
            return states, obs

        _, trajectory = jax.lax.scan(body, states, jax.random.split(k_run, STEPS))
        return obs, trajectory

    first, trajectory = rollout(jax.random.key(7))
    return env, np.concatenate([np.asarray(first)[None], np.asarray(trajectory)])


@pytest.mark.parametrize("name", ROLLOUT_SCENARIOS)
def test_observations_of_random_rollouts_stay_inside_the_bounds(name):
    env, obs = _extreme_rollout(name)
    low, high = vector_bounds(env.config)
    below, above = obs < low, obs > high
    assert not below.any() and not above.any(), (
        f"{below.sum()} values below and {above.sum()} above the bounds, at features "
        f"{sorted(set(np.nonzero(below | above)[-1].tolist()))}"
    )
    space = env.observation_space
    assert space.contains(obs[-1, 0, 0]) and space.contains(obs[0, 0, 0])


def test_gymnasium_checker_no_longer_warns_about_infinite_bounds():
    pytest.importorskip("gymnasium")  # an extra: absent in the dependency-floor check
    from gymnasium.utils.env_checker import check_env

    from gigastep.adapters.gymnasium import TeamEnv

    env = TeamEnv("identical_2_vs_2_fobs_vec_void_disc", opponent="random")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "infinit" in m.lower() or "inf" in m.split()], messages
