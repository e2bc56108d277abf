"""The game rules of one step (rules §4, §5.1 with §15), one rule per test.

States are built by hand; expected values are worked out by hand in the comments. Unless a
test says otherwise every agent moves with a no-op action from v = 1 at heading 0, i.e. by
dt * v2 = 0.1 * (1 - 0.1*0.4*1^2) = 0.096 along +x (v = 1.3: 0.1 * (1.3 - 0.04*1.69) = 0.12324),
so agents with the same heading and speed keep their relative positions. Headings of +-pi/2
move an agent along y; its x changes by 0.096 * cos(pi/2 in float32) ~ 4e-9, which rounds away.

Visibility is read from the vector observation (n = 2 or 3): row 1 starts at index 9, and its
first feature is "seen". With deterministic comm (§15 row 21) ego e sees exactly the enemies
its own team detects, so obs[0, 9] tells whether agent 0 detects agent 1 in a 1-vs-1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

HALF_PI = math.pi / 2
ATOL = 1e-5


def _far_apart(n):
    """Positions that interact with nothing: a row along y = 1.5 .. 8.5 at x = 2 and 8."""
    xs = [2.0, 8.0] * n
    ys = [1.5 + 2.0 * (k // 2) for k in range(2 * n)]
    return np.array(xs[:n], np.float32), np.array(ys[:n], np.float32)


# ---------------------------------------------------------------------------------------------
# Out of bounds (§4.3, strict)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def team4(gs):
    return gs.config(teams=(0, 0, 1, 1))


def test_leaving_the_map_through_any_side_kills(gs, team4):
    # 0: x 9.95 -> 10.046 > 10;  1: y 9.95 -> 10.046 > 10;
    # 2: x 0.05 -> -0.046 < 0;   3: y 0.05 -> -0.046 < 0.
    state = gs.state(
        team4,
        x=[9.95, 3.0, 0.05, 7.0],
        y=[3.0, 9.95, 7.0, 0.05],
        heading=[0.0, HALF_PI, math.pi, -HALF_PI],
    )
    out = gs.step(team4, state)
    np.testing.assert_array_equal(out.alive, [False, False, False, False])


def test_agent_exactly_on_the_boundary_lives(gs, team4):
    # Moving along the boundary keeps the boundary coordinate exact: x = 10 (heading +-pi/2),
    # y = 10 and y = 0 (heading 0). The test is strict (x > limit_x), so all live.
    state = gs.state(
        team4,
        x=[10.0, 3.0, 7.0, 10.0],
        y=[3.0, 10.0, 0.0, 7.0],
        heading=[HALF_PI, 0.0, 0.0, -HALF_PI],
    )
    out = gs.step(team4, state)
    assert out.x[0] == 10.0 and out.y[1] == 10.0 and out.y[2] == 0.0 and out.x[3] == 10.0
    np.testing.assert_array_equal(out.alive, [True, True, True, True])


# ---------------------------------------------------------------------------------------------
# Agent-agent collisions (§4.4)
# ---------------------------------------------------------------------------------------------


def _pair_state(gs, config, z1=5.3, alive1=True):
    # Agents 0 and 1 at (5, 5) and (5, 5.2): d = 0.2 < 0.4 after both move by +0.096 in x.
    # Agents 2 and 3 far away.
    return gs.state(
        config,
        x=[5.0, 5.0, 2.0, 8.0],
        y=[5.0, 5.2, 8.0, 8.0],
        z=[5.0, z1, 5.0, 5.0],
        alive=[True, alive1, True, True],
        health=[1.0, 1.0 if alive1 else 0.0, 1.0, 1.0],
    )


def test_collision_kills_both_agents(gs, team4):
    out = gs.step(team4, _pair_state(gs, team4, z1=5.3))  # |dz| = 0.3 < 0.5
    np.testing.assert_array_equal(out.alive, [False, False, True, True])


def test_collision_needs_altitude_difference_below_collision_altitude(gs, team4):
    out = gs.step(team4, _pair_state(gs, team4, z1=5.6))  # |dz| = 0.6 >= 0.5
    np.testing.assert_array_equal(out.alive, [True, True, True, True])


def test_dead_agents_are_not_obstacles(gs, team4):
    out = gs.step(team4, _pair_state(gs, team4, z1=5.0, alive1=False))
    np.testing.assert_array_equal(out.alive, [True, False, True, True])


def test_agent_leaving_the_map_this_step_is_not_an_obstacle(gs, team4):
    # Agent 1: x 9.95 -> 10.046, out (dies in §4.3, before collisions).
    # Agent 0: heading pi, x 9.85 -> 9.754. After moving: dx = 0.292, dy = 0.1,
    # d = sqrt(0.085264 + 0.01) = 0.309 < 0.4, same z, yet agent 0 lives.
    state = gs.state(
        team4, x=[9.85, 9.95, 2.0, 5.0], y=[5.0, 5.1, 8.0, 8.0], heading=[math.pi, 0, 0, 0]
    )
    out = gs.step(team4, state)
    np.testing.assert_array_equal(out.alive, [True, False, True, True])


def test_collision_range_zero_disables_collisions(gs):
    config = gs.config(teams=(0,) * 7 + (1,), thrust=(1.0,) * 6 + (2.0, 1.0), collision_range=0.0)
    out = gs.step(config, gs.state(config, x=5.0, y=5.0, z=5.0))  # 8 agents on one point
    assert out.alive.all()


# ---------------------------------------------------------------------------------------------
# Obstacle boxes (§4.5): map set "all", map 2 = two_rooms1 with boxes
# [0, 4.8, 3, 5.2] and [7, 4.8, 10, 5.2] plus two zero padding boxes (B = 4).
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def boxes(gs):
    return gs.config(teams=(0, 0, 1, 1), map_set="all")


def test_agent_strictly_inside_a_box_dies(gs, boxes):
    # 0: (1, 5) -> (1.096, 5) inside box 0; 1: (8, 5) -> (8.096, 5) inside box 1.
    state = gs.state(boxes, x=[1.0, 8.0, 5.0, 5.0], y=[5.0, 5.0, 2.0, 8.0], map_idx=2)
    out = gs.step(boxes, state)
    np.testing.assert_array_equal(out.alive, [False, False, True, True])


def test_agent_on_a_box_edge_lives(gs, boxes):
    # y = 4.8 and y = 5.2 stay exact at heading 0; x = 3 and x = 7 stay exact at +-pi/2.
    state = gs.state(
        boxes,
        x=[1.0, 8.0, 3.0, 7.0],
        y=[4.8, 5.2, 4.9, 5.1],
        heading=[0.0, 0.0, HALF_PI, -HALF_PI],
        map_idx=2,
    )
    out = gs.step(boxes, state)
    assert out.y[0] == np.float32(4.8) and out.x[2] == 3.0 and out.x[3] == 7.0
    np.testing.assert_array_equal(out.alive, [True, True, True, True])


@pytest.mark.parametrize("map_idx", [0, 2])  # empty map: 4 padding boxes; two_rooms1: 2
def test_padding_boxes_never_kill(gs, boxes, map_idx):
    # Padding boxes are [0, 0, 0, 0]; agents near the origin corner (0.8 apart) live.
    state = gs.state(boxes, x=[0.2, 1.0, 5.0, 5.0], y=[0.0, 0.05, 2.0, 8.0], map_idx=map_idx)
    out = gs.step(boxes, state)
    np.testing.assert_array_equal(out.alive, [True, True, True, True])


# ---------------------------------------------------------------------------------------------
# Detection, deterministic mode (§4.6 with §15 rows 1 and 24): HD = enemy & alive &
# (d^2 < 1 or (d^2 / (3^2 range^2) <= 1 and |bearing| < 0.75 pi)).
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def duel(gs):
    return gs.config()


def _agent0_sees_agent1(gs, config, dx, dy, observer=(5.0, 5.0)):
    """Observer 0 at `observer`, heading 0; target 1 at observer + (dx, dy), heading 0."""
    ox, oy = observer
    state = gs.state(config, x=[ox, ox + dx], y=[oy, oy + dy])
    return bool(gs.step(config, state).obs[0, 9])


def test_detection_inside_cone_and_range(gs, duel):
    assert _agent0_sees_agent1(gs, duel, 2.0, 0.0)  # d = 2 < 3, bearing 0
    assert _agent0_sees_agent1(gs, duel, 1.2, 1.6)  # d = 2, bearing 0.927


@pytest.mark.parametrize(
    "angle, seen",
    [(0.7 * math.pi, True), (-0.7 * math.pi, True), (0.8 * math.pi, False), (math.pi, False)],
)
def test_detection_needs_the_cone(gs, duel, angle, seen):
    # Half-angle 0.75 pi, target at d = 2 (> very-close 1, < depth 3) at bearing `angle`.
    dx, dy = 2.0 * math.cos(angle), 2.0 * math.sin(angle)
    assert _agent0_sees_agent1(gs, duel, dx, dy) is seen


@pytest.mark.parametrize("distance, seen", [(2.9, True), (3.1, False), (3.5, False), (5.0, False)])
def test_detection_needs_the_range(gs, duel, distance, seen):
    # Straight ahead; depth 3 * range 1 = 3.
    assert _agent0_sees_agent1(gs, duel, distance, 0.0, observer=(2.0, 5.0)) is seen


@pytest.mark.parametrize("dx, dy", [(-0.5, 0.0), (-0.9, 0.0), (-0.6, -0.3)])
def test_very_close_enemy_is_always_detected(gs, duel, dx, dy):
    # Behind or beside (outside the cone), d < very_close_depth 1 (and > collision 0.4).
    assert _agent0_sees_agent1(gs, duel, dx, dy)


@pytest.mark.parametrize("distance, seen", [(5.0, True), (5.9, True), (6.2, False)])
def test_detection_range_2_doubles_the_radius(gs, distance, seen):
    # §15 row 24: radius 3 * 2 = 6 (the original's sqrt(2) * 3 = 4.24 would miss d = 5).
    config = gs.config(detection_range=(2.0, 1.0), damage_range=(0.0, 1.0))
    assert _agent0_sees_agent1(gs, config, distance, 0.0, observer=(2.0, 5.0)) is seen


# ---------------------------------------------------------------------------------------------
# Stochastic detection and communication (§4.6, §5.1 with §15 rows 2, 21), hand-built noise.
# Teams (0, 0, 1). Deterministic defaults of gs.noise: detection 0 (q < 0 never holds),
# comm 0 (only the ego itself communicates).
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stoch(gs):
    return gs.config(teams=(0, 0, 1), stochastic_obs=True, stochastic_comm=True)


def _ego0_sees_enemy(gs, stoch, dx, dy, u):
    # Ego 0 at (5, 3); teammate 1 at (1, 9), d = sqrt(16 + 36) = 7.2, comm needs u >= 0.9 and
    # gets 0; enemy 2 at (5 + dx, 3 + dy); detection draw u for target 2 / observer 0.
    state = gs.state(stoch, x=[5.0, 1.0, 5.0 + dx], y=[3.0, 9.0, 3.0 + dy])
    out = gs.step(stoch, state, noise=gs.noise(stoch, det_2_0=u))
    assert not out.obs[0, 18]  # at most one other agent (the enemy) is seen
    return bool(out.obs[0, 9])


@pytest.mark.parametrize("u, seen", [(0.3, True), (0.2, False), (0.25, False), (0.99, True)])
def test_stochastic_detection_in_cone_iff_draw_exceeds_score(gs, stoch, u, seen):
    # Enemy at (0, 1.5): bearing pi/2 (in the cone, outside the damage cone), d = 1.5 > 1,
    # score cs = 1.5^2 / 3^2 = 0.25; detected iff cs < u (strict).
    assert _ego0_sees_enemy(gs, stoch, 0.0, 1.5, u) is seen


def test_stochastic_detection_needs_the_cone(gs, stoch):
    # Behind at d = 1.5: q = 0.25 + 1.1 > any u in [0, 1).
    assert not _ego0_sees_enemy(gs, stoch, -1.5, 0.0, 0.99)


@pytest.mark.parametrize(
    "distance, seen",
    [
        (2.0, True),  # damage score 4 / 2.05^2 = 0.952 <= 1, bearing 0: always detected
        (2.5, False),  # damage score 1.487 > 1 (detection score 0.694 no longer counts)
    ],
)
def test_stochastic_mode_always_detects_an_enemy_it_can_shoot(gs, stoch, distance, seen):
    # §15 row 2, with the detection draw u = 0 (never detects by chance).
    assert _ego0_sees_enemy(gs, stoch, distance, 0.0, 0.0) is seen


@pytest.mark.parametrize("u, shared", [(0.6, True), (0.5, True), (0.4, False), (0.0, False)])
def test_stochastic_comm_with_teammate_iff_draw_at_least_distance_over_range(gs, stoch, u, shared):
    # Ego 0 at (2, 2), teammate 1 at (2, 6): d = 4, d / R = 4 / 8 = 0.5; comm iff 0.5 <= u.
    # Enemy 2 at (4, 6): 2 ahead of agent 1 (damage score 0.952, always detected by 1);
    # from ego 0 d = sqrt(20) = 4.47 > 3 (score clipped to 1, never detected by 0).
    state = gs.state(stoch, x=[2.0, 2.0, 4.0], y=[2.0, 6.0, 6.0])
    out = gs.step(stoch, state, noise=gs.noise(stoch, comm_0_1=u))
    rows = out.obs[0, :27].reshape(3, 9)
    assert rows[0, 0] == 1  # the ego always communicates with itself
    if shared:  # ego, teammate (d = 4), enemy (d = 4.47): seen flags 1, team flags 1 / 0
        np.testing.assert_array_equal(rows[1:, :2], [[1, 1], [1, 0]])
    else:
        np.testing.assert_array_equal(rows[1:], np.zeros((2, 9)))


@pytest.mark.parametrize("teams, shared", [((0, 0, 1), False), ((0, 1, 0), True)])
def test_an_enemy_within_communication_range_never_communicates(gs, teams, shared):
    # Ego 0 at (2, 2) heading +x; agent 2 at (0.5, 2), 1.5 behind it: outside ego 0's cone
    # (never detected by it), d / R = 1.5 / 8 = 0.1875, comm draw 0.99. Agent 1 at (2, 6) has
    # comm draw 0 < 4 / 8 (never communicates) and detects nobody. As a teammate agent 2
    # communicates (0.1875 <= 0.99) and so is seen; as an enemy its score gains 1 for the
    # other team (1.1875 > 0.99) and the ego sees nothing but itself.
    config = gs.config(teams=teams, stochastic_obs=True, stochastic_comm=True)
    state = gs.state(config, x=[2.0, 2.0, 0.5], y=[2.0, 6.0, 2.0])
    out = gs.step(config, state, noise=gs.noise(config, comm_0_2=0.99))
    rows = out.obs[0, :27].reshape(3, 9)
    assert rows[0, 0] == 1  # the ego always communicates with itself
    assert bool(rows[1, 0]) is shared  # the nearest other agent, agent 2, when seen
    if not shared:
        np.testing.assert_array_equal(rows[1:], np.zeros((2, 9)))


# ---------------------------------------------------------------------------------------------
# Tracking, damage and health (§4.7)
# ---------------------------------------------------------------------------------------------


def test_damage_trace_of_section_13_2(gs, duel):
    # Agent 0 at (5, 5, 3) behind agent 1 at (6.5, 5, 3), both v = 1.3, heading 0, no-op.
    # Each step both move 0.1 * (1.3 - 0.04*1.69) = 0.12324 and keep d = 1.5 (score 0.25,
    # damage score 2.25 / 4.2025 = 0.535, bearing 0): lock every step; agent 1 sees agent 0
    # behind at d 1.5 (no lock). Damage units clip(t, 3, 10) - 3 = 0,0,0,1,2,3,4,5 for
    # t = 1..8, times dps * dt = 0.1; healing + 0.01, clipped to max 1:
    #   1.00, 1.00, 1.00, 1 - 0.1 + 0.01 = 0.91, 0.91 - 0.2 + 0.01 = 0.72,
    #   0.72 - 0.3 + 0.01 = 0.43, 0.43 - 0.4 + 0.01 = 0.04, 0.04 - 0.5 + 0.01 < 0 -> 0, dead.
    # Step-8 reward of agent 0 (§15 rows 8, 9): defeat 100 * (0 - (-1)) / (1 + 1) = 50,
    # game won 10, total 60, divided by its team size 1 -> 60. Step 9: nothing -> 0.
    state = gs.state(duel, x=[5.0, 6.5], y=5.0, z=3.0, v=1.3)
    health1 = [1.0, 1.0, 1.0, 0.91, 0.72, 0.43, 0.04, 0.0]
    for k in range(1, 9):
        out = gs.step(duel, state)
        state = out.state
        assert out.x[0] == pytest.approx(5.0 + 0.12324 * k, abs=1e-4)
        assert out.x[1] == pytest.approx(6.5 + 0.12324 * k, abs=1e-4)
        assert out.health[1] == pytest.approx(health1[k - 1], abs=ATOL), k
        assert out.tracked[1, 0] == k
        assert out.alive[1] == (k < 8)
        np.testing.assert_allclose(out.rewards, [60.0 if k == 8 else 0.0, 0.0], atol=ATOL)
        assert out.ep_done == (k == 8)
    out = gs.step(duel, state)  # step 9
    assert out.x[0] == pytest.approx(5.0 + 0.12324 * 9, abs=1e-4)
    assert out.x[1] == pytest.approx(6.5 + 0.12324 * 8, abs=1e-4)  # dead: frozen
    assert out.tracked[1, 0] == 0 and out.health[1] == 0.0 and not out.alive[1]
    np.testing.assert_allclose(out.rewards, [0.0, 0.0], atol=ATOL)


def _locked_state(gs, config, tracked10, target_dy=0.0, target_dx=1.5):
    tracked = np.zeros((2, 2), np.int32)
    tracked[1, 0] = tracked10
    return gs.state(
        config, x=[5.0, 5.0 + target_dx], y=[5.0, 5.0 + target_dy], z=3.0, tracked=tracked
    )


def test_damage_starts_only_after_min_tracking_steps(gs, duel):
    # tracked 2 -> 3: units clip(3, 3, 10) - 3 = 0, health 1 (1 + 0.01 clipped).
    out = gs.step(duel, _locked_state(gs, duel, 2))
    assert out.tracked[1, 0] == 3 and out.health[1] == pytest.approx(1.0, abs=ATOL)
    # tracked 3 -> 4: 1 unit: 1 - 0.1 + 0.01 = 0.91.
    out = gs.step(duel, _locked_state(gs, duel, 3))
    assert out.tracked[1, 0] == 4 and out.health[1] == pytest.approx(0.91, abs=ATOL)


@pytest.mark.parametrize("tracked10", [9, 20])
def test_damage_grows_to_the_maximum_and_stays(gs, duel, tracked10):
    # tracked 9 -> 10: clip(10, 3, 10) - 3 = 7 units; tracked 20 -> 21: still 7.
    # 1 - 7 * 0.1 + 0.01 = 0.31.
    out = gs.step(duel, _locked_state(gs, duel, tracked10))
    assert out.health[1] == pytest.approx(0.31, abs=ATOL)


def test_tracking_resets_when_the_lock_breaks(gs, duel):
    # Target beside the shooter (bearing pi/2, outside the damage half-angle pi/4): no lock,
    # tracked 5 -> 0 and no damage (health 1 + 0.01 clipped to 1).
    out = gs.step(duel, _locked_state(gs, duel, 5, target_dy=1.5, target_dx=0.0))
    assert out.tracked[1, 0] == 0
    assert out.health[1] == pytest.approx(1.0, abs=ATOL)


def test_a_lock_needs_detection(gs):
    # Deterministic detection, agent 0's detection radius 3 * 0.4 = 1.2: the section 13.2
    # target at d = 1.5 (not very close, < 1) is inside the damage cone (2.05, bearing 0) but
    # not detected, so there is no lock: tracked 9 -> 0, no damage (health 1 + 0.01 -> 1).
    config = gs.config(detection_range=(0.4, 1.0))
    out = gs.step(config, _locked_state(gs, config, 9))
    assert out.tracked[1, 0] == 0
    assert out.health[1] == pytest.approx(1.0, abs=ATOL)


def test_damage_range_zero_never_shoots(gs):
    # Agent 0 has damage_range 0; the §13.2 geometry with a 9-step lock does nothing.
    config = gs.config(detection_range=(2.0, 1.0), damage_range=(0.0, 1.0))
    out = gs.step(config, _locked_state(gs, config, 9))
    assert out.tracked[1, 0] == 0
    assert out.health[1] == pytest.approx(1.0, abs=ATOL)


@pytest.fixture(scope="module")
def wp(gs):
    # Waypoints on; agent 0 max health 2, agent 1 max health 1; R_wp = 4, other weights 0.
    return gs.reward_config(enable_waypoints=True, max_health=(2.0, 1.0), reward_hit_waypoint=4.0)


SQUARE = (4.9, 4.7, 5.5, 5.3)  # contains (5.096, 5), where agent 0 is after the step


def test_healing_adds_per_step_and_clips_at_max_health(gs, wp):
    # healing 0.1/s * 0.1 s = 0.01: agent 0 1.0 -> 1.01 (max 2); agent 1 0.995 -> 1.0 (max 1).
    state = gs.state(wp, x=[2.0, 8.0], y=[2.0, 8.0], health=[1.0, 0.995])
    out = gs.step(wp, state)
    np.testing.assert_allclose(out.health, [1.01, 1.0], atol=ATOL)


def test_waypoint_hit_adds_max_health_but_clips(gs, wp):
    # Agent 0 ends in the active square: 0.5 + 0.01 + 2 = 2.51 -> clipped to 2; the
    # waypoint is collected (time 0; the appear draw 0.99 >= 0.05 spawns none).
    # Agent 1 elsewhere only heals: 0.5 -> 0.51.
    state = gs.state(
        wp, x=[5.0, 2.0], y=[5.0, 8.0], health=[0.5, 0.5], waypoint=SQUARE, waypoint_time=3.0
    )
    out = gs.step(wp, state)
    np.testing.assert_allclose(out.health, [2.0, 0.51], atol=ATOL)
    assert float(out.state.episode.waypoint_time) == 0.0


def test_dead_agent_does_not_collect_the_waypoint(gs, wp):
    # §15 row 10: a dead agent in the square leaves the waypoint active (3.0 - 0.1 = 2.9).
    state = gs.state(
        wp,
        x=[5.0, 2.0],
        y=[5.0, 8.0],
        alive=[False, True],
        health=[0.0, 1.0],
        waypoint=SQUARE,
        waypoint_time=3.0,
    )
    out = gs.step(wp, state)
    assert float(out.state.episode.waypoint_time) == pytest.approx(2.9, abs=ATOL)
    np.testing.assert_allclose(out.rewards, [0.0, 0.0], atol=ATOL)
    assert not out.alive[0]


# ---------------------------------------------------------------------------------------------
# Dead agents, dones
# ---------------------------------------------------------------------------------------------


def test_dead_agent_gets_zero_reward(gs):
    # Per-agent idle rewards 0.5 / -0.25 are paid to agents alive at the start of the step.
    config = gs.reward_config(idle_reward=(0.5, -0.25))
    x, y = _far_apart(2)
    state = gs.state(config, x=x, y=y, alive=[True, False], health=[1.0, 0.0])
    out = gs.step(config, state)
    np.testing.assert_allclose(out.rewards, [0.5, 0.0], atol=ATOL)


def test_dead_agent_stays_dead(gs, duel):
    # alive never returns, even with health left in the state; its health becomes 0.
    x, y = _far_apart(2)
    state = gs.state(duel, x=x, y=y, alive=[True, False], health=[1.0, 1.0])
    out = gs.step(duel, state)
    np.testing.assert_array_equal(out.alive, [True, False])
    assert out.health[1] == 0.0


def test_dones_are_not_alive(gs, team4):
    # 0 died earlier, 1 leaves the map now (x 9.95 -> 10.046), 2 and 3 live.
    state = gs.state(
        team4,
        x=[2.0, 9.95, 2.0, 5.0],
        y=[2.0, 5.0, 8.0, 8.0],
        alive=[False, True, True, True],
        health=[0.0, 1.0, 1.0, 1.0],
    )
    out = gs.step(team4, state)
    np.testing.assert_array_equal(out.dones, [True, True, False, False])
    np.testing.assert_array_equal(out.dones, ~out.alive)


# ---------------------------------------------------------------------------------------------
# Episode end (§4.9 and §15: terminated vs truncated in the auto-reset info)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def timed(gs):
    return gs.config(max_episode_length=5)


def _exit_state(gs, config, step=0, both=False):
    # Agent 1 (team 1) leaves the map: x 9.95 -> 10.046. With both=True agent 0 does too.
    return gs.state(config, x=[9.95 if both else 2.0, 9.95], y=[2.0, 8.0], step=step)


def test_team_elimination_terminates_the_episode(gs, timed):
    out, info = gs.autoreset(timed, _exit_state(gs, timed))
    assert out.ep_done
    assert bool(info.terminated) and not bool(info.truncated)


def test_time_limit_truncates_the_episode(gs, timed):
    x, y = _far_apart(2)
    out, info = gs.autoreset(timed, gs.state(timed, x=x, y=y, step=3))  # step 4 of 5
    assert not out.ep_done and not bool(info.terminated) and not bool(info.truncated)
    out, info = gs.autoreset(timed, gs.state(timed, x=x, y=y, step=4))  # step 5 of 5
    assert out.ep_done
    assert bool(info.truncated) and not bool(info.terminated)


def test_elimination_on_the_last_step_is_terminated_not_truncated(gs, timed):
    out, info = gs.autoreset(timed, _exit_state(gs, timed, step=4))
    assert out.ep_done
    assert bool(info.terminated) and not bool(info.truncated)


def test_the_winner_is_the_team_left_alone_when_the_other_is_eliminated(gs, timed):
    out, info = gs.autoreset(timed, _exit_state(gs, timed))  # agent 1 (team 1) leaves
    assert out.ep_done and int(info.winner) == 0


def test_a_time_limit_with_both_teams_alive_has_no_winner(gs, timed):
    x, y = _far_apart(2)
    out, info = gs.autoreset(timed, gs.state(timed, x=x, y=y, step=4))  # step 5 of 5
    assert out.ep_done and int(info.winner) == -1


def test_both_teams_eliminated_in_one_step_has_no_winner(gs, timed):
    out, info = gs.autoreset(timed, _exit_state(gs, timed, both=True))
    assert out.ep_done and out.dones.all() and int(info.winner) == -1


def test_an_episode_that_goes_on_has_no_winner(gs, timed):
    x, y = _far_apart(2)
    out, info = gs.autoreset(timed, gs.state(timed, x=x, y=y, step=1))
    assert not out.ep_done and int(info.winner) == -1


def test_episode_continues_until_both_teams_are_dead_when_not_ending_on_one_team(gs):
    config = gs.config(episode_ends_one_team_dead=False)
    out = gs.step(config, _exit_state(gs, config))
    assert not out.alive[1] and not out.ep_done
    out = gs.step(config, _exit_state(gs, config, both=True))
    assert not out.alive.any() and out.ep_done


# ---------------------------------------------------------------------------------------------
# Reward terms (§4.10 with §15 rows 6-9), one per test; weights not named are 0.
# r_i = (aux * base_i + R_won * gw_i) / team_size(i) * alive_pre_i; 1-vs-1 unless stated.
# ---------------------------------------------------------------------------------------------


def test_reward_game_won_is_paid_once(gs):
    # Agent 1 leaves the map: agent 0 gets 10 / 1 on that step, nothing on the next.
    config = gs.reward_config(reward_game_won=10.0)
    out = gs.step(config, _exit_state(gs, config))
    np.testing.assert_allclose(out.rewards, [10.0, 0.0], atol=ATOL)
    out = gs.step(config, out.state)
    np.testing.assert_allclose(out.rewards, [0.0, 0.0], atol=ATOL)


def test_reward_defeat_rewards_survivors_and_penalises_the_losing_team(gs):
    # Teams (0, 0, 1, 1); agent 2 leaves the map. A0 = 2, A1 = 1, d0 = 0, d1 = -1.
    # Team 0: 100 * (0 - (-1)) / (2 + 1) = 33.33, / team size 2 = 16.667.
    # Agent 3: 100 * (-1 - 0) / (1 + 1) = -50, / 2 = -25. Agent 2 (died): 0.
    config = gs.reward_config(teams=(0, 0, 1, 1), reward_defeat_one_opponent=100.0)
    state = gs.state(config, x=[2.0, 2.0, 9.95, 7.0], y=[2.0, 8.0, 5.0, 8.0])
    out = gs.step(config, state)
    np.testing.assert_allclose(out.rewards, [100 / 6, 100 / 6, 0.0, -25.0], atol=1e-4)


def test_reward_detection_pays_the_detector_and_charges_the_detected(gs):
    # Agent 0 at (3, 5) detects agent 1 at (5, 5) ahead; agent 1 has agent 0 behind it at d 2.
    # R_det = 10: agent 0: 10 * 0.5 * 1 * 0.1 = 0.5; agent 1: -10 * 0.2 * 1 * 0.1 = -0.2.
    config = gs.reward_config(reward_detection=10.0)
    out = gs.step(config, gs.state(config, x=[3.0, 5.0], y=5.0))
    np.testing.assert_allclose(out.rewards, [0.5, -0.2], atol=ATOL)


def test_reward_damage_pays_the_shooter_and_charges_the_target(gs):
    # Lock of 4 -> 5 steps: 2 units. R_dmg = 10: shooter 10 * 2 * 0.1 = 2;
    # target -10 * 0.5 * 2 * 0.1 = -1 (it survives: 1 - 0.2 + 0.01 = 0.81).
    config = gs.reward_config(reward_damage=10.0)
    out = gs.step(config, _locked_state(gs, config, 4))
    np.testing.assert_allclose(out.rewards, [2.0, -1.0], atol=ATOL)
    assert out.health[1] == pytest.approx(0.81, abs=ATOL)


def test_reward_idle_is_a_small_penalty_per_alive_step(gs):
    # R_idle = 10: -10 * 0.01 * 0.1 = -0.01 each.
    config = gs.reward_config(reward_idle=10.0)
    x, y = _far_apart(2)
    out = gs.step(config, gs.state(config, x=x, y=y))
    np.testing.assert_allclose(out.rewards, [-0.01, -0.01], atol=1e-6)


def test_reward_agent_disabled_penalises_the_death_step(gs):
    config = gs.reward_config(reward_agent_disabled=5.0)
    out = gs.step(config, _exit_state(gs, config))
    np.testing.assert_allclose(out.rewards, [0.0, -5.0], atol=ATOL)
    out = gs.step(config, out.state)  # dead before the step: no more penalty
    np.testing.assert_allclose(out.rewards, [0.0, 0.0], atol=ATOL)


def test_reward_collision_agent_penalises_both_colliders(gs):
    # (5, 5) and (5, 5.2), same altitude: both die, each -3 / 1.
    config = gs.reward_config(reward_collision_agent=3.0)
    out = gs.step(config, gs.state(config, x=5.0, y=[5.0, 5.2]))
    assert not out.alive.any()
    np.testing.assert_allclose(out.rewards, [-3.0, -3.0], atol=ATOL)


def test_reward_collision_obstacle_penalises_dying_by_map_edge_or_box(gs):
    # §15 row 6. Map two_rooms1, teams (0, 0, 1, 1), no division. Agent 0 leaves the map
    # (9.95 -> 10.046), agent 2 enters box [0, 4.8, 3, 5.2] at (1.096, 5); 1 and 3 are safe.
    config = gs.reward_config(
        teams=(0, 0, 1, 1),
        map_set="two_rooms1",
        reward_collision_obstacle=2.0,
        divide_reward_by_team_size=False,
    )
    state = gs.state(config, x=[9.95, 2.0, 1.0, 8.0], y=[2.0, 2.0, 5.0, 8.0])
    out = gs.step(config, state)
    np.testing.assert_array_equal(out.alive, [False, True, False, True])
    np.testing.assert_allclose(out.rewards, [-2.0, 0.0, -2.0, 0.0], atol=ATOL)


def test_reward_hit_waypoint(gs, wp):
    # R_wp = 4 for the agent in the active square, / team size 1.
    state = gs.state(wp, x=[5.0, 2.0], y=[5.0, 8.0], waypoint=SQUARE, waypoint_time=3.0)
    out = gs.step(wp, state)
    np.testing.assert_allclose(out.rewards, [4.0, 0.0], atol=ATOL)


def test_per_agent_idle_reward_is_added_every_step(gs):
    config = gs.reward_config(idle_reward=(0.5, -0.25))
    x, y = _far_apart(2)
    out = gs.step(config, gs.state(config, x=x, y=y))
    np.testing.assert_allclose(out.rewards, [0.5, -0.25], atol=ATOL)


def test_negative_weight_flips_the_sign_of_a_term(gs):
    # §15 row 7: penalties are subtracted, so R_idle = -10 pays +10 * 0.01 * 0.1 = +0.01.
    config = gs.reward_config(reward_idle=-10.0)
    x, y = _far_apart(2)
    out = gs.step(config, gs.state(config, x=x, y=y))
    np.testing.assert_allclose(out.rewards, [0.01, 0.01], atol=1e-6)


@pytest.mark.parametrize("aux, expected0", [(1.0, 59.99), (0.5, 34.995)])
def test_aux_rewards_factor_scales_all_terms_but_game_won(gs, aux, expected0):
    # Agent 1 leaves the map. Agent 0: defeat 100 * 1 / 2 = 50, idle -10 * 0.001 = -0.01,
    # game won 10: aux * (50 - 0.01) + 10 -> 59.99 (aux 1), 0.5 * 49.99 + 10 = 34.995 (aux 0.5).
    # Agent 1 died: its defeat, idle and game-won terms are masked by alive' -> 0.
    config = gs.reward_config(
        reward_game_won=10.0, reward_defeat_one_opponent=100.0, reward_idle=10.0
    )
    state = gs.state(config, x=[2.0, 9.95], y=[2.0, 8.0], aux_rewards_factor=aux)
    out = gs.step(config, state)
    np.testing.assert_allclose(out.rewards, [expected0, 0.0], atol=1e-4)


@pytest.mark.parametrize(
    "divide, expected", [(True, [-0.01 / 3] * 3 + [-0.01]), (False, [-0.01] * 4)]
)
def test_divide_reward_by_team_size_uses_own_team_size(gs, divide, expected):
    # §15 row 8. Teams (0, 0, 0, 1), R_idle = 10 (-0.01 each before division): team 0 divides
    # by 3, team 1 by 1 (the original divided all by n = 4).
    config = gs.reward_config(
        teams=(0, 0, 0, 1), reward_idle=10.0, divide_reward_by_team_size=divide
    )
    x, y = _far_apart(4)
    out = gs.step(config, gs.state(config, x=x, y=y))
    np.testing.assert_allclose(out.rewards, expected, atol=1e-6)
