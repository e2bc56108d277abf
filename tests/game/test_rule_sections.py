"""Rules of docs/rules.md §3-§7 that had no test of their own, one test per rule, named for it.

The other rules of these sections are tested in test_dynamics.py (§3), test_rules.py (§4, §5.1),
test_vector_obs.py (§5.2), test_rgb.py (§5.3, §5.4), test_reset_rules.py (§6) and
tests/api/test_wrappers.py and test_transforms.py (§7); what every wrapper and adapter returns on
the last step of an episode is in tests/api/test_last_step.py. Here, besides the missing
rules, are the asymmetric cases: agents of different types and ranges (one sees and shoots the
other but not the other way round), a team of agents of different types, a world that is not
square (each axis scaled by its own limit) and an enemy within communication range.

States are built by hand and stepped once with `env.transition` and hand-built noise (the `gs`
fixture of tests/conftest.py). Expected values are worked out by hand from the rules in the
comments. Unless a test says otherwise an agent moves with a no-op action from v = 1 at
heading 0, i.e. by dt * v2 = 0.1 * (1 - 0.1 * 0.4 * 1^2) = 0.096 along +x, and ends at
speed max(0.96, 1.3) = 1.3.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep import EnvConfig, GigastepEnv, MapSpec
from gigastep.game.arena import prerender
from gigastep.game.observations.rgb import rgb_observations
from gigastep.game.rewards import TERMS, RewardInputs, reward_terms
from gigastep.types import EnvState

HALF_PI = math.pi / 2
ATOL = 1e-5
DIAG10 = math.sqrt(200.0)  # diagonal of the 10 x 10 world, 14.1421356


# ---------------------------------------------------------------------------------------------
# §3 Dynamics
# ---------------------------------------------------------------------------------------------


def test_rule_3_1_dynamics_constants_are_the_config_fields(gs):
    """rules §3.1: the constants of §3.3 are the `EnvConfig` fields, not fixed numbers.

    heading_rate 2, throttle_rate 3, drag 0.2, min_speed 1.0, dive_rate 2, gravity 10,
    dive_speed_exchange 1. Agent 0 from (5, 5, z 5), v 1, heading 0, action (1, -1, 1):
      h' = 0 + 0.1 * 1 * 2 = 0.2; v1 = 1 + 0.1 * 1 * 3 = 1.3; v2 = 1.3 - 0.1 * 0.2 * 1.69 = 1.2662
      x' = 5 + 0.1 * 1.2662 * cos 0.2 = 5.1240960; y' = 5 + 0.12662 * sin 0.2 = 5.0251555
      z' = 5 + 0.1 * 2 * (-1) = 4.8; v' = sqrt(1.2662^2 + 1 * 10 * (5 - 4.8)) = 1.8982261
    Agent 1 from (2, 2, z 5), no-op: v2 = 1 - 0.1 * 0.2 * 1 = 0.98, x' = 2.098, and
      v' = max(0.98, min_speed 1.0) = 1.0 (the default min_speed would give 1.3).
    """
    config = gs.config(
        heading_rate=2.0,
        throttle_rate=3.0,
        drag=0.2,
        min_speed=1.0,
        dive_rate=2.0,
        gravity=10.0,
        dive_speed_exchange=1.0,
    )
    state = gs.state(config, x=[5.0, 2.0], y=[5.0, 2.0], z=5.0)
    out = gs.step(config, state, np.array([[1, -1, 1], [0, 0, 0]], np.float32))
    got = np.stack([out.x, out.y, out.z, out.v, out.heading], axis=1)
    np.testing.assert_allclose(
        got, [[5.1240960, 5.0251555, 4.8, 1.8982261, 0.2], [2.098, 2.0, 5.0, 1.0, 0.0]], atol=ATOL
    )


def test_rule_3_3_altitude_is_clipped_at_the_ceiling_z_max(gs):
    """rules §3.3 steps 6-7 at the ceiling: z' = clip(z + dt vz, 0, z_max) and the speed
    exchange uses the clipped z'.

    Agent 0 at z 9.8, v 3, action (0, 1, 0) (climb): vz = 5, z + 0.5 = 10.3 -> z' = 10.
      v2 = 3 - 0.1 * 0.4 * 9 = 2.64; x' = 5 + 0.264 = 5.264;
      v' = sqrt(2.64^2 + 0.5 * 9.81 * (9.8 - 10)) = sqrt(6.9696 - 0.981) = 2.4471616
      (unclipped z' = 10.3 would give sqrt(6.9696 - 2.4525) = 2.1253470).
    """
    config = gs.config()
    state = gs.state(config, x=[5.0, 2.0], y=[5.0, 2.0], z=[9.8, 3.0], v=[3.0, 1.0])
    out = gs.step(config, state, np.array([[0, 1, 0], [0, 0, 0]], np.float32))
    assert out.z[0] == 10.0
    assert out.x[0] == pytest.approx(5.264, abs=ATOL)
    assert out.v[0] == pytest.approx(2.4471616, abs=ATOL)


# ---------------------------------------------------------------------------------------------
# A world that is not square: 20 x 10, map two_rooms1 (§8.2: boxes scaled by limit_x / 10 in x,
# limit_y / 10 in y: [0, 4.8, 6, 5.2] and [14, 4.8, 20, 5.2]), waypoints on, six agents.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wide(gs):
    return gs.config(
        teams=(0, 0, 0, 1, 1, 1),
        limit_x=20.0,
        limit_y=10.0,
        map_set="two_rooms1",
        enable_waypoints=True,
    )


def _wide_state(gs, wide, **fields):
    # Post-step (no-op): 0 (15.096, 3); 1 (20.046, 3) out in x; 2 (5.096, 5) inside the scaled
    # box [0, 4.8, 6, 5.2]; 3 (12, 7.096) heading pi/2; 4 (5, 10.046) out in y; 5 (8.096, 5),
    # outside both scaled boxes (inside the unscaled [7, 4.8, 10, 5.2]).
    return gs.state(
        wide,
        x=[15.0, 19.95, 5.0, 12.0, 5.0, 8.0],
        y=[3.0, 3.0, 5.0, 7.0, 9.95, 5.0],
        heading=[0.0, 0.0, 0.0, HALF_PI, HALF_PI, 0.0],
        **fields,
    )


def test_rule_4_3_out_of_bounds_uses_limit_x_and_limit_y_in_a_non_square_world(gs, wide):
    """rules §4.3 on a 20 x 10 world: x may exceed 10 (up to limit_x 20), y may not exceed
    limit_y 10. Agent 0 at x 15.096 and agent 3 at x 12 live; agent 1 (x 20.046 > 20) and
    agent 4 (y 10.046 > 10) die."""
    out = gs.step(wide, _wide_state(gs, wide))
    np.testing.assert_array_equal(out.alive[[0, 1, 3, 4]], [True, False, True, False])


def test_rule_4_5_boxes_are_scaled_with_a_non_square_world(gs, wide):
    """rules §4.5 with §8.2: box x coordinates scale by limit_x / 10 = 2, y by limit_y / 10 = 1.
    Agent 2 at (5.096, 5) is inside [0, 4.8, 6, 5.2] and dies; agent 5 at (8.096, 5) lies
    between the scaled boxes and lives."""
    out = gs.step(wide, _wide_state(gs, wide))
    np.testing.assert_array_equal(out.alive[[2, 5]], [False, True])


def test_rule_4_7_agents_killed_by_a_hazard_get_health_zero(gs, wide):
    """rules §4.7 step 5: health' is multiplied by alive after §4.5, so agents that left the map
    (1, 4) or entered a box (2) have health 0; the others heal 1 + 0.01 -> clipped to 1."""
    out = gs.step(wide, _wide_state(gs, wide))
    np.testing.assert_allclose(out.health, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0], atol=ATOL)


@pytest.mark.parametrize("u_appear, appears", [(0.0499, True), (0.05, False), (0.9, False)])
def test_rule_4_2_a_waypoint_appears_when_the_draw_is_below_the_spawn_probability(
    gs, wide, u_appear, appears
):
    """rules §4.2 steps 3-5 (strict u < 0.05) on the 20 x 10 world, none active: with the
    uniforms (appear, x, y, lifetime) = (u, 0.5, 0.25, 0.4) the corner is
    (0.5 * (20 - 0.6), 0.25 * (10 - 0.6)) = (9.7, 2.35), the square [9.7, 2.35, 10.3, 2.95]
    and the lifetime 5 + 0.4 * (10 - 5) = 7 s. Without appearance W stays 0 and E = 0."""
    noise = gs.noise(wide, waypoint=(u_appear, 0.5, 0.25, 0.4))
    out = gs.step(wide, _wide_state(gs, wide), noise=noise)
    ep = out.state.episode
    if appears:
        np.testing.assert_allclose(np.asarray(ep.waypoint), [9.7, 2.35, 10.3, 2.95], atol=ATOL)
        assert float(ep.waypoint_time) == pytest.approx(7.0, abs=ATOL)
    else:
        np.testing.assert_array_equal(np.asarray(ep.waypoint), np.zeros(4))
        assert float(ep.waypoint_time) == 0.0


def test_rule_4_2_no_new_waypoint_appears_while_one_is_active(gs, wide):
    """rules §4.2 step 3: appear needs E <= 0 after ageing. E = 3 -> 2.9 > 0, so even the draw
    0 < 0.05 keeps the square [4, 4, 4.6, 4.6] (which no agent reaches)."""
    state = _wide_state(gs, wide, waypoint=(4.0, 4.0, 4.6, 4.6), waypoint_time=3.0)
    out = gs.step(wide, state, noise=gs.noise(wide, waypoint=(0.0, 0.5, 0.25, 0.4)))
    np.testing.assert_allclose(np.asarray(out.state.episode.waypoint), [4.0, 4.0, 4.6, 4.6])
    assert float(out.state.episode.waypoint_time) == pytest.approx(2.9, abs=ATOL)


@pytest.mark.parametrize("u_appear, expected_time", [(0.99, 0.0), (0.0, 7.0)])
def test_rule_4_2_a_waypoint_expires_when_its_lifetime_runs_out(gs, wide, u_appear, expected_time):
    """rules §4.2 steps 2 and 5: E = 0.05 ages to -0.05; without appearance
    E' = max(-0.05, 0) + 0 = 0 (inactive); a new one may appear in that same step
    (E' = 0 + 7 with the lifetime draw 0.4)."""
    state = _wide_state(gs, wide, waypoint=(4.0, 4.0, 4.6, 4.6), waypoint_time=0.05)
    out = gs.step(wide, state, noise=gs.noise(wide, waypoint=(u_appear, 0.5, 0.25, 0.4)))
    assert float(out.state.episode.waypoint_time) == pytest.approx(expected_time, abs=ATOL)


def test_rule_5_2_extras_normalise_each_axis_by_its_own_limit_in_a_non_square_world(gs, wide):
    """rules §5.2 on the 20 x 10 world, ego 0 at (15.096, 3) after the step. M = 6 rows of 9,
    then the waypoint (5 values) and the boxes of two_rooms1 (B = 2, 8 values), L = 67.
    Ego row: x 15.096 / 20 = 0.7548, y 3 / 10 = 0.3.
    Waypoint [4, 2, 4.6, 2.6], 3 s left (active): ((4 - 15.096) / 20, (2 - 3) / 10,
    (4.6 - 15.096) / 20, (2.6 - 3) / 10, 1) = (-0.5548, -0.1, -0.5248, -0.04, 1).
    Boxes [0, 4.8, 6, 5.2], [14, 4.8, 20, 5.2] over (20, 10, 20, 10):
    [0, 0.48, 0.3, 0.52, 0.7, 0.48, 1, 0.52]."""
    state = _wide_state(gs, wide, waypoint=(4.0, 2.0, 4.6, 2.6), waypoint_time=3.0)
    obs = gs.step(wide, state).obs
    assert obs.shape == (6, 67)
    np.testing.assert_allclose(obs[0, 2:4], [0.7548, 0.3], atol=ATOL)
    np.testing.assert_allclose(obs[0, 54:59], [-0.5548, -0.1, -0.5248, -0.04, 1.0], atol=ATOL)
    np.testing.assert_allclose(obs[0, 59:], [0, 0.48, 0.3, 0.52, 0.7, 0.48, 1, 0.52], atol=ATOL)


def test_rule_5_3_pixel_positions_scale_each_axis_by_its_own_limit():
    """rules §0 and §5.3 step 5 on a 20 x 10 world drawn at 12 x 12: px = round(x * 12 / 20),
    py = round(y * 12 / 10). Ego 0 at (10, 5), z 0: pixel (6, 6) in (255 - 0, 255, 255 - 0),
    white. Enemy 1 at (15, 2.5), z 0, seen: pixel (9, 3) in (255, pz = 0, 0), red. (Scaling x
    by 12 / 10 would put the enemy at px 18, outside the image.)"""
    config = EnvConfig(
        teams=(0, 1), map_set="empty", limit_x=20.0, limit_y=10.0, resolution_x=12, resolution_y=12
    )
    state = EnvState.create(config, x=[10.0, 15.0], y=[5.0, 2.5])
    seen = jnp.asarray([[True, True], [False, True]])
    background = jnp.asarray(prerender(config))
    draw = jax.jit(lambda a, e, s, d: rgb_observations(config, background, a, e, s, d))
    images = draw(state.agents, state.episode, seen, jnp.zeros(2, bool))
    img = np.asarray(images[0])
    assert tuple(img[6, 6]) == (255, 255, 255)
    assert tuple(img[9, 3]) == (255, 0, 0)


# ---------------------------------------------------------------------------------------------
# §4.6 Detection and shooting
# ---------------------------------------------------------------------------------------------


def _lock_after_one_step(gs, config, dx, dy):
    """Shooter 0 at (5, 5), target 1 at (5 + dx, 5 + dy), both heading 0 (the relative position
    does not change), no lock before: tracked'[1, 0] is 1 iff S[1, 0] = HD and shoot."""
    state = gs.state(config, x=[5.0, 5.0 + dx], y=[5.0, 5.0 + dy])
    return int(gs.step(config, state).tracked[1, 0])


@pytest.mark.parametrize(
    "distance, angle, locks",
    [
        (2.0, 0.0, True),  # d^2 = 4 <= 2.05^2 = 4.2025, bearing 0
        (2.1, 0.0, False),  # d^2 = 4.41 > 4.2025 (yet detected: d < 3, in the cone)
        (1.5, 0.2 * math.pi, True),  # 36 degrees < pi/4
        (1.5, 0.3 * math.pi, False),  # 54 degrees > pi/4 (detected: < 0.75 pi)
        (1.5, -0.3 * math.pi, False),
    ],
)
def test_rule_4_6_shooting_needs_the_target_in_the_damage_cone_and_range(
    gs, distance, angle, locks
):
    """rules §4.6: shoot = [cds <= 1] and [|theta| < damage_cone_angle]; every target here is
    detected (deterministic: d <= 3 and |theta| < 0.75 pi), so the lock is the shot alone."""
    config = gs.config()
    dx, dy = distance * math.cos(angle), distance * math.sin(angle)
    assert _lock_after_one_step(gs, config, dx, dy) == int(locks)


def test_rule_4_6_a_damage_radius_of_zero_never_shoots_even_at_distance_zero(gs):
    """rules §4.6: damage_cone_depth 0 (the waypoint preset) never shoots. Enemies at the same
    x, y (altitudes 2 and 3.5, no collision), heading 0: bearing wrap(-0) = 0 and d = 0, which
    a positive radius would shoot (damage score 0); they still detect each other (very close,
    d < 1), so ego 0 sees agent 1."""
    config = gs.config(damage_cone_depth=0.0)
    out = gs.step(config, gs.state(config, x=5.0, y=5.0, z=[2.0, 3.5]))
    np.testing.assert_array_equal(out.tracked, np.zeros((2, 2)))
    assert out.obs[0, 9] == 1 and out.obs[1, 9] == 1


def test_rule_4_6_agents_of_different_ranges_one_sees_and_shoots_the_other_not_vice_versa(gs):
    """rules §4.6 with §15 row 24, asymmetric types: agent 0 has detection_range 2 (radius 6) and
    damage_range 2.5 (radius 5.125), agent 1 the defaults (3 and 2.05). They face each other:
    0 at (2, 5) heading 0, 1 at (6.5, 5) heading pi; after the step 0 is at 2.096 and 1 at
    6.404, d = 4.308, each at bearing 0 from the other.
    0 -> 1: 4.308 <= 6 in the cone: detected; 4.308 <= 5.125, bearing 0: locked (tracked 1).
    1 -> 0: 4.308 > 3 and > very close 1: not detected, no lock. Deterministic comm, so ego 0
    sees agent 1 (row 1 starts at index 9) and ego 1 sees only itself."""
    config = gs.config(detection_range=(2.0, 1.0), damage_range=(2.5, 1.0), sprites=(3, 1))
    state = gs.state(config, x=[2.0, 6.5], y=5.0, heading=[0.0, math.pi])
    out = gs.step(config, state)
    assert out.tracked[1, 0] == 1 and out.tracked[0, 1] == 0
    np.testing.assert_allclose(out.obs[0, 9:18], [1, 0, 0.4308, 0, 0, -math.pi, 0, 1, 1], atol=ATOL)
    np.testing.assert_array_equal(out.obs[1, 9:18], np.zeros(9))


# ---------------------------------------------------------------------------------------------
# A team of agents of different types: teams (0, 0, 1); agent 1 is "more_range" (sprite 3,
# max health 0.5, detection range 2), agents 0 and 2 are "default".
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(gs):
    return gs.config(
        teams=(0, 0, 1),
        sprites=(1, 3, 1),
        max_health=(1.0, 0.5, 1.0),
        detection_range=(1.0, 2.0, 1.0),
    )


def test_rule_4_6_teammates_are_never_detected_or_locked(gs, mixed):
    """rules §4.6: can = [tau_i != tau_j] and alive. Agent 0 faces its teammate 1 at d 1.5
    (bearing 0, inside both cones) with tracked[1, 0] = 5 before the step: the counter resets
    to 0 and agent 1 takes no damage (0.5 healed and clipped to 0.5; a lock of 6 steps would
    take 3 units: 0.5 - 0.3 + 0.01 = 0.21). Enemy 2 at (1, 9.5) is beyond every radius."""
    tracked = np.zeros((3, 3), np.int32)
    tracked[1, 0] = 5
    state = gs.state(mixed, x=[5.0, 6.5, 1.0], y=[5.0, 5.0, 9.5], tracked=tracked)
    out = gs.step(mixed, state)
    assert out.tracked[1, 0] == 0
    assert out.health[1] == pytest.approx(0.5, abs=ATOL)


def test_rule_5_1_a_long_range_teammate_shares_what_only_it_detects(gs, mixed):
    """rules §5.1 (deterministic) with §4.6 per-observer ranges, in a team of two types.
    After the step: 0 (2.096, 3), 1 (2.096, 7), enemy 2 (6.596, 7), all heading 0, v 1.3.
    Agent 1 (radius 6) detects 2 at d 4.5, bearing 0; agent 0 (radius 3) does not (d 6.02);
    agent 2 faces away and detects nobody. Ego 0 sees teammate 1 (d 4) and, through agent 1,
    enemy 2 (d 6.02); ego 1 sees teammate 0 (d 4) then enemy 2 (d 4.5); ego 2 sees only
    itself. Rows: (seen, same team, dx/10, dy/10, dz/10, dh, dv/diag, health, sprite)."""
    state = gs.state(mixed, x=[2.0, 2.0, 6.5], y=[3.0, 7.0, 7.0])
    obs = gs.step(mixed, state).obs
    v = 1.3 / DIAG10  # 0.0919239
    np.testing.assert_allclose(
        obs[0],
        [1, 1, 0.2096, 0.3, 0, 0, v, 1.0, 1]  # ego 0
        + [1, 1, 0.0, 0.4, 0, 0, 0, 0.5, 3]  # teammate 1, absolute health 0.5, sprite 3
        + [1, 0, 0.45, 0.4, 0, 0, 0, 1.0, 1],  # enemy 2, detected by agent 1 only
        atol=ATOL,
    )
    np.testing.assert_allclose(
        obs[1],
        [1, 1, 0.2096, 0.7, 0, 0, v, 0.5, 3]
        + [1, 1, 0.0, -0.4, 0, 0, 0, 1.0, 1]
        + [1, 0, 0.45, 0.0, 0, 0, 0, 1.0, 1],
        atol=ATOL,
    )
    np.testing.assert_array_equal(obs[2, 9:], np.zeros(18))


def test_rule_5_1_an_enemy_within_communication_range_shares_nothing_deterministic(gs):
    """rules §5.1 with §15 row 21, deterministic communication: agent 0 at (3, 5) detects
    agent 1 at (5, 5) (d 2, bearing 0), agent 1 faces away (agent 0 behind it at bearing pi,
    d 2 > 1) and detects nobody. Agent 0 is well within communication range (2 < 8) of agent 1,
    but it is an enemy: ego 1 sees nobody (its other row is zeros), ego 0 sees agent 1."""
    config = gs.config()
    out = gs.step(config, gs.state(config, x=[3.0, 5.0], y=5.0))
    np.testing.assert_allclose(out.obs[0, 9:18], [1, 0, 0.2, 0, 0, 0, 0, 1, 1], atol=ATOL)
    np.testing.assert_array_equal(out.obs[1, 9:18], np.zeros(9))


# ---------------------------------------------------------------------------------------------
# §4.7 Tracking, damage and health
# ---------------------------------------------------------------------------------------------


def test_rule_4_7_damage_from_several_shooters_adds_up(gs):
    """rules §4.7 step 3: takes_i = sum_j Dmg[i, j]. Teams (0, 0, 1), all heading 0: shooter 0
    at (5, 5) (target at d 1.5, bearing 0), shooter 1 at (5, 6) (d sqrt(1.5^2 + 1) = 1.803 <=
    2.05, bearing atan2(-1, 1.5) = -33.7 degrees, inside pi/4), target 2 at (6.5, 5) facing away
    (both shooters behind it: bearings pi and 0.81 pi, outside its cone, d > 1).
    Locks 3 -> 4 (1 unit) and 4 -> 5 (2 units): health 1 - 3 * 1 * 0.1 + 0.01 = 0.71."""
    config = gs.config(teams=(0, 0, 1))
    tracked = np.zeros((3, 3), np.int32)
    tracked[2, 0], tracked[2, 1] = 3, 4
    state = gs.state(config, x=[5.0, 5.0, 6.5], y=[5.0, 6.0, 5.0], tracked=tracked)
    out = gs.step(config, state)
    assert out.tracked[2, 0] == 4 and out.tracked[2, 1] == 5
    np.testing.assert_allclose(out.health, [1.0, 1.0, 0.71], atol=ATOL)


# ---------------------------------------------------------------------------------------------
# §4.8 Map state, §4.11 reward terms, §4.12 observation of the step
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paid(gs):
    # per-agent idle rewards (0.5, -0.25), reward_idle 10, reward_agent_disabled 5, maps "all"
    return gs.reward_config(
        map_set="all", idle_reward=(0.5, -0.25), reward_idle=10.0, reward_agent_disabled=5.0
    )


def test_rule_4_8_map_state_after_the_step(gs, paid):
    """rules §4.8: map_idx and aux_rewards_factor unchanged, step + 1, returns + rewards; with
    waypoints off W and E stay as they are (§4.2). Map 3 of "all" (two_rooms2_flipped), agents
    far apart and away from its boxes, aux 0.5, team size 1:
    r = 0.5 * (idle_reward + 10 * (-0.01 * 0.1)) = 0.5 * (0.5 - 0.01) = 0.245 and
    0.5 * (-0.25 - 0.01) = -0.13: returns (1, 2) -> (1.245, 1.87)."""
    state = gs.state(
        paid,
        x=[2.0, 8.0],
        y=[2.0, 8.0],
        map_idx=3,
        aux_rewards_factor=0.5,
        step=7,
        waypoint=(1.0, 1.0, 1.6, 1.6),
        waypoint_time=2.0,
    )
    state = state.replace(episode=state.episode.replace(returns=jnp.asarray([1.0, 2.0])))
    out = gs.step(paid, state)
    ep = out.state.episode
    np.testing.assert_allclose(out.rewards, [0.245, -0.13], atol=ATOL)
    assert int(ep.map_idx) == 3 and float(ep.aux_rewards_factor) == 0.5 and int(ep.step) == 8
    np.testing.assert_allclose(np.asarray(ep.returns), [1.245, 1.87], atol=ATOL)
    np.testing.assert_array_equal(np.asarray(ep.waypoint), np.float32([1.0, 1.0, 1.6, 1.6]))
    assert float(ep.waypoint_time) == 2.0


def test_rule_4_10_an_agent_dying_this_step_earns_its_idle_reward_and_death_penalty(gs, paid):
    """rules §4.10: an agent that dies during the step earns its full reward of that step (its
    disabled term and per-agent idle reward), while its terms multiplied by alive' (here the
    weighted idle term) are 0. Agent 1 leaves the map (x 9.95 -> 10.046), map 0 (empty), aux 1,
    team size 1:
      agent 0: 0.5 + 10 * (-0.01 * 0.1 * 1) = 0.49; agent 1: -0.25 + 5 * -(1 - 0) * 1 = -5.25."""
    out = gs.step(paid, gs.state(paid, x=[2.0, 9.95], y=[2.0, 8.0]))
    assert not out.alive[1]
    np.testing.assert_allclose(out.rewards, [0.49, -5.25], atol=ATOL)


def test_rule_4_11_reward_terms_are_every_unweighted_term_by_name():
    """rules §4.11 with the terms of §4.10. Teams (0, 0, 1, 1), all alive before; after: 0, 1
    alive, 2 collided, 3 left the map; agent 1 hit the waypoint. HD[2, 0], HD[3, 0] (agent 0
    detects 2 and 3) and HD[0, 3]; Dmg[2, 1] = 3 (1 shoots 2), Dmg[1, 3] = 1 (3 shoots 1).
    Counts: A0 2 -> 2 (delta 0), A1 2 -> 0 (delta -2).
      game won: team 1 eliminated now, times alive': (1, 1, 0, 0)
      defeat (survivors gain from enemy deaths, §13.2): (0 - (-2)) * 1 / (2 + 1) = 2/3 for 0, 1
      detection (0.5 det_other - 0.2 detby) dt alive': agent 0 (0.5 * 2 - 0.2 * 1) * 0.1 = 0.08
      damage (dealt - 0.5 takes) dt alive': agent 1 (3 - 0.5 * 1) * 0.1 = 0.25
      idle -0.01 dt alive' = -0.001 for 0, 1; disabled -(1 - alive') alive_pre: -1 for 2, 3;
      collision agent -col: -1 for 2; collision obstacle: -1 for 3; hit waypoint: 1 for 1."""
    config = EnvConfig(teams=(0, 0, 1, 1), obs_type="vector")
    detected = np.zeros((4, 4), bool)
    detected[2, 0] = detected[3, 0] = detected[0, 3] = True
    damage = np.zeros((4, 4), np.float32)
    damage[2, 1], damage[1, 3] = 3.0, 1.0
    inputs = RewardInputs(
        alive_pre=jnp.ones(4, bool),
        alive=jnp.asarray([True, True, False, False]),
        hit_waypoint=jnp.asarray([False, True, False, False]),
        collided=jnp.asarray([False, False, True, False]),
        hazard_death=jnp.asarray([False, False, False, True]),
        detected=jnp.asarray(detected),
        damage=jnp.asarray(damage),
    )
    terms = jax.jit(lambda r: reward_terms(config, r))(inputs)
    terms = {k: np.asarray(v) for k, v in terms.items()}
    expected = {
        "game_won": [1, 1, 0, 0],
        "defeat_one_opponent": [2 / 3, 2 / 3, 0, 0],
        "detection": [0.08, 0, 0, 0],
        "damage": [0, 0.25, 0, 0],
        "idle": [-0.001, -0.001, 0, 0],
        "agent_disabled": [0, 0, -1, -1],
        "collision_agent": [0, 0, -1, 0],
        "collision_obstacle": [0, 0, 0, -1],
        "hit_waypoint": [0, 1, 0, 0],
    }
    assert set(terms) == set(expected)
    # The names that WEIGHT_FIELDS (and so the `score` check) are built from
    assert sorted(terms) == sorted(TERMS)
    for name in expected:  # every term has its weight field reward_<name> (§4.10)
        assert hasattr(config, f"reward_{name}")
        np.testing.assert_allclose(terms[name], expected[name], atol=1e-6, err_msg=name)


def test_rule_4_12_the_observation_shows_the_damage_taken_in_this_step(gs):
    """rules §4.12 with §5.3 step 1: the step's took_damage draws the border. The §13.2 duel
    with the lock at 3 before the step: 3 -> 4 is 1 damage unit, so ego 1 (the target) has a
    red border (255, 0, 0) on the edges px = 0, px = 11, py = 0 (black map under it); ego 0
    took none and has a white border."""
    config = gs.config(obs_type="rgb", resolution_x=12, resolution_y=12)
    tracked = np.array([[0, 0], [3, 0]], np.int32)
    state = gs.state(config, x=[5.0, 6.5], y=5.0, z=3.0, v=1.3, tracked=tracked)
    out = gs.step(config, state)
    assert out.tracked[1, 0] == 4 and out.health[1] == pytest.approx(0.91, abs=ATOL)
    for pixel in [(0, 5), (11, 5), (5, 0)]:
        assert tuple(out.obs[1][pixel]) == (255, 0, 0), pixel
        assert tuple(out.obs[0][pixel]) == (255, 255, 255), pixel


# ---------------------------------------------------------------------------------------------
# §6 Reset: one custom map on which the teams start facing each other 1.5 apart
# ---------------------------------------------------------------------------------------------

FACING = MapSpec(
    name="facing",
    start_team0=(4.0, 5.0, 4.01, 5.01),
    start_team1=(5.5, 5.0, 5.51, 5.01),
    heading_team0=(0.0, 0.0),
    heading_team1=(math.pi, math.pi),
)


@pytest.fixture(scope="module")
def facing(gs):
    config = gs.config(maps=(FACING,))
    reset = GigastepEnv(config).reset  # compiled once; a batch would compile another program
    games = [reset(key) for key in jax.random.split(jax.random.key(0), 8)]
    obs = np.stack([np.asarray(o) for o, _ in games])
    return config, obs, [s for _, s in games]


def test_rule_6_1_a_set_with_one_map_always_gives_index_0(facing):
    """rules §6.1: the map index is uniform over the set; a set of one map gives 0."""
    _, _, states = facing
    np.testing.assert_array_equal([int(s.episode.map_idx) for s in states], np.zeros(8))


def test_rule_6_4_the_first_observation_has_no_detections(gs, facing):
    """rules §6.4 (and §5.1: at reset HD = 0): the agents start 1.49..1.51 apart, each straight
    ahead of the other (d < 3, bearing 0), which a step detects; yet the first observation of
    each ego shows only itself. One no-op step later (both move 0.096 toward each other,
    d ~ 1.3) each sees the other."""
    config, obs, states = facing
    np.testing.assert_array_equal(obs[:, :, 9:], np.zeros((8, 2, 9)))
    assert (obs[:, :, 0] == 1).all()  # both egos alive
    out = gs.step(config, states[0])
    assert out.obs[0, 9] == 1 and out.obs[1, 9] == 1


# ---------------------------------------------------------------------------------------------
# §7.1 set_aux_reward_factor
# ---------------------------------------------------------------------------------------------


def test_rule_7_1_set_aux_reward_factor_returns_a_new_state_and_keeps_its_input():
    """rules §7.1 with §15 row 26: a new state with the factor set, single or batched; the
    input state keeps its factor (2023 wrote into the caller's dict)."""
    config = EnvConfig(teams=(0, 1), obs_type="vector")
    state = EnvState.create(config, x=[2.0, 8.0], y=[2.0, 8.0])
    new = GigastepEnv.set_aux_reward_factor(state, 0.25)
    assert float(new.episode.aux_rewards_factor) == 0.25
    assert float(state.episode.aux_rewards_factor) == 1.0
    np.testing.assert_array_equal(np.asarray(new.agents.x), np.asarray(state.agents.x))
    batch = jax.tree_util.tree_map(lambda a: jnp.stack([a, a, a]), state)
    new = GigastepEnv.set_aux_reward_factor(batch, 0.5)
    np.testing.assert_array_equal(np.asarray(new.episode.aux_rewards_factor), [0.5] * 3)
    np.testing.assert_array_equal(np.asarray(batch.episode.aux_rewards_factor), [1.0] * 3)
