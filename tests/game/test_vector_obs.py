"""The vector observation (rules §5.1, §5.2 with §15 rows 3, 11, 13, 19, 21), one rule per test.

Observations are those returned by a step, so they describe the post-step state. To observe a
hand-chosen state, each test starts from the pre-step state from which one no-op step lands
exactly there (`gs.before_noop`, an independent float64 reference of §3.3: same heading and
altitude, speed v' = max(v2, 1.3)) with health 0.01 below the wanted value (healing adds 0.01).

Layout: 9 features per row (seen, same team, dx/limit_x, dy/limit_y, dz/z_max, wrapped relative
heading, dv/diag, health, sprite; the ego row holds absolute x/limit_x, y/limit_y, z/z_max,
heading, v/diag), M = min(n, max_agents_in_vec_obs) rows, then 5 waypoint values and 4 B box
values. diag = sqrt(limit_x^2 + limit_y^2).
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

ATOL = 1e-5
DIAG10 = math.sqrt(200.0)  # 14.1421356


def _post_state(gs, config, x, y, z, v, heading, health, alive=True, **fields):
    """The pre-step state whose no-op step ends at (x, y, z, v, heading, health).

    Dead agents (alive False) get health 0 and stay frozen at their pre-step position.
    """
    px, py, pv = gs.before_noop(x, y, heading, v)
    alive = np.broadcast_to(np.asarray(alive, bool), np.shape(px))
    pre_health = np.where(alive, np.asarray(health, np.float32) - np.float32(0.01), 0.0)
    return gs.state(
        config,
        x=px.astype(np.float32),
        y=py.astype(np.float32),
        z=z,
        v=pv.astype(np.float32),
        heading=heading,
        health=pre_health.astype(np.float32),
        alive=alive,
        **fields,
    )


# ---------------------------------------------------------------------------------------------
# §13.3 example, recomputed for §15
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ex(gs):
    # n = 4, teams (0, 0, 1, 1), sprites (1, 3, 5, 7), max health (1, 2, 1, 3), M = 3,
    # map four_rooms, waypoints on, deterministic. Detection ranges (0.1, 1, 0.1, 1) make the
    # geometric HD equal to §13.3's single entry HD[2, 1] (agent 1 detects agent 2):
    #   agent 1 (4, 2) heading -2 -> agent 2 (3, 3): d = 1.414 <= 3, bearing atan2(1, -1) = 2.356,
    #   relative 2.356 + 2 = 4.356 -> -1.927, |.| < 0.75 pi: detected.
    #   agents 0 and 2 (radius 0.3) detect nothing; agent 3 (8, 8) is > 7 from every enemy;
    #   no enemy pair is within the very-close distance 1 (smallest d^2 = 2).
    return gs.config(
        teams=(0, 0, 1, 1),
        sprites=(1, 3, 5, 7),
        max_health=(1.0, 2.0, 1.0, 3.0),
        detection_range=(0.1, 1.0, 0.1, 1.0),
        max_agents_in_vec_obs=3,
        map_set="four_rooms",
        enable_waypoints=True,
    )


WAYPOINT = (1.0, 1.5, 1.6, 2.1)
# four_rooms boxes [x1, y1, x2, y2] on the 10 x 10 world, each coordinate / limit 10
BOXES_FOUR_ROOMS = (
    (np.array([[0, 4.8, 3, 5.2], [7, 4.8, 10, 5.2], [4.8, 0, 5.2, 3], [4.8, 7, 5.2, 10]]) / 10)
    .ravel()
    .tolist()
)


def _example(gs, ex, waypoint_time=3.5, alive=(True, True, True, True)):
    return _post_state(
        gs,
        ex,
        x=[2.0, 4.0, 3.0, 8.0],
        y=[2.0, 2.0, 3.0, 8.0],
        z=[1.0, 2.0, 4.0, 5.0],
        v=[1.3, 1.5, 2.0, 1.4],
        heading=[0.5, -2.0, 3.0, -3.0],
        health=[0.9, 1.5, 0.4, 2.0],
        alive=alive,
        waypoint=WAYPOINT,
        waypoint_time=waypoint_time,
    )


def test_section_13_3_example_for_ego_0(gs, ex):
    obs = gs.step(ex, _example(gs, ex)).obs
    assert obs.shape == (4, 48)  # 9*3 + 5 + 4*4
    expected = np.array(
        # ego 0: x 2/10, y 2/10, z 1/10, heading 0.5, v 1.3/14.142 = 0.0919239, health 0.9
        [1, 1, 0.2, 0.2, 0.1, 0.5, 0.0919239, 0.9, 1]
        # agent 2, seen via agent 1, d = sqrt(2): dx 1/10, dy 1/10, dz 3/10,
        # wrap(3.0 - 0.5) = 2.5, dv 0.7/14.142 = 0.0494975
        + [1, 0, 0.1, 0.1, 0.3, 2.5, 0.0494975, 0.4, 5]
        # agent 1, teammate at d = 2: wrap(-2.0 - 0.5) = -2.5, dv 0.2/14.142 = 0.0141421
        + [1, 1, 0.2, 0.0, 0.1, -2.5, 0.0141421, 1.5, 3]
        # waypoint, §15 row 11: ((1-2)/10, (1.5-2)/10, (1.6-2)/10, (2.1-2)/10), active flag 1
        # (3.5 - 0.1 = 3.4 s left; the original reported 3.5)
        + [-0.1, -0.05, -0.04, 0.01, 1.0]
        + BOXES_FOUR_ROOMS
    )
    np.testing.assert_allclose(obs[0], expected, atol=ATOL)


def test_section_13_3_example_for_ego_2(gs, ex):
    # Team 1 detects nothing, so ego 2 sees itself and teammate 3 (d = sqrt(50)).
    # Ego 2: (0.3, 0.3, 0.4, heading 3.0, v 2/14.142 = 0.1414214, health 0.4, sprite 5).
    # Agent 3: dx 5/10, dy 5/10, dz 1/10, §15 row 3: wrap(-3 - 3) = -6 + 2 pi = 0.2831853
    # (the original reported -6.0), dv -0.6/14.142 = -0.0424264, health 2.0, sprite 7.
    obs = gs.step(ex, _example(gs, ex)).obs
    expected = np.array(
        [1, 1, 0.3, 0.3, 0.4, 3.0, 0.1414214, 0.4, 5]
        + [1, 1, 0.5, 0.5, 0.1, -6.0 + 2 * math.pi, -0.0424264, 2.0, 7]
        + [0] * 9
        # waypoint relative to (3, 3): (-2, -1.5, -1.4, -0.9) / 10
        + [-0.2, -0.15, -0.14, -0.09, 1.0]
        + BOXES_FOUR_ROOMS
    )
    np.testing.assert_allclose(obs[2], expected, atol=ATOL)


def test_relative_heading_is_wrapped_into_minus_pi_pi(gs, ex):
    # Ego 1 (4, 2), heading -2.0, sees agent 2 (d sqrt 2) then agent 0 (d 2).
    # Agent 2: wrap(3.0 - (-2.0)) = wrap(5.0) = 5 - 2 pi = -1.2831853.
    # Agent 0: wrap(0.5 - (-2.0)) = 2.5.
    obs = gs.step(ex, _example(gs, ex)).obs
    rows = obs[1, :27].reshape(3, 9)
    np.testing.assert_allclose(rows[:, 8], [3, 5, 1])  # sprites: ego 1, agent 2, agent 0
    np.testing.assert_allclose(rows[:, 5], [-2.0, 5.0 - 2 * math.pi, 2.5], atol=ATOL)
    assert np.all((rows[1:, 5] >= -math.pi) & (rows[1:, 5] < math.pi))


# ---------------------------------------------------------------------------------------------
# Waypoint and box features
# ---------------------------------------------------------------------------------------------


def test_waypoint_features_are_ego_relative_with_a_0_1_flag(gs, ex):
    # 7.3 s left (7.2 after the step): the flag is 1, not the lifetime.
    # Ego 3 at (8, 8): ((1-8)/10, (1.5-8)/10, (1.6-8)/10, (2.1-8)/10) = (-.7, -.65, -.64, -.59).
    obs = gs.step(ex, _example(gs, ex, waypoint_time=7.3)).obs
    np.testing.assert_allclose(obs[0, 27:32], [-0.1, -0.05, -0.04, 0.01, 1.0], atol=ATOL)
    np.testing.assert_allclose(obs[3, 27:32], [-0.7, -0.65, -0.64, -0.59, 1.0], atol=ATOL)


def test_inactive_waypoint_features_are_zero(gs, ex):
    # Lifetime 0 and no new waypoint (appear draw 0.99): the stale location is not reported.
    obs = gs.step(ex, _example(gs, ex, waypoint_time=0.0)).obs
    np.testing.assert_array_equal(obs[:, 27:32], np.zeros((4, 5)))


@pytest.mark.parametrize(
    "map_idx, expected",
    [
        # two_rooms1: [0, 4.8, 3, 5.2], [7, 4.8, 10, 5.2] / 10, then two zero padding boxes
        (2, [0, 0.48, 0.3, 0.52, 0.7, 0.48, 1, 0.52] + [0] * 8),
        (4, BOXES_FOUR_ROOMS),
    ],
)
def test_box_features_are_absolute_coordinates_over_limits(gs, map_idx, expected):
    config = gs.config(teams=(0, 0, 1, 1), map_set="all")  # B = 4, M = 4: L = 36 + 16
    state = gs.state(config, x=[2.0, 8.0, 2.0, 8.0], y=[2.0, 2.0, 8.0, 8.0], map_idx=map_idx)
    obs = gs.step(config, state).obs
    assert obs.shape == (4, 52)
    np.testing.assert_allclose(obs[:, 36:], np.tile(expected, (4, 1)), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Per-feature normalisation (non-square world, z_max 20)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wide(gs):
    return gs.config(limit_x=10.0, limit_y=20.0, z_max=20.0, sprites=(3, 6), max_health=(2.0, 4.0))


def test_each_feature_is_normalised_by_its_own_scale(gs, wide):
    # diag = sqrt(10^2 + 20^2) = 22.3606798. Post-step: agent 0 (2, 4, z 6), heading 1.0,
    # v 1.5, health 1.2; agent 1 (3.5, 5, z 9), heading -2.5, v 2.0, health 3.0.
    # Each detects the other (d = 1.80; bearings relative to headings -0.412 and -0.054).
    # Ego 0: (2/10, 4/20, 6/20, 1.0, 1.5/22.36 = 0.0670820, 1.2, 3).
    # Agent 1 for ego 0: dx 1.5/10, dy 1/20, dz 3/20, wrap(-2.5 - 1.0) = -3.5 + 2 pi = 2.7831853,
    #   dv 0.5/22.36 = 0.0223607, health 3.0 (absolute, not / max 4), sprite 6.
    # Ego 1: (3.5/10, 5/20, 9/20, -2.5, 2/22.36 = 0.0894427, 3.0, 6);
    # agent 0 for ego 1: -0.15, -0.05, -0.15, wrap(3.5) = 3.5 - 2 pi = -2.7831853, -0.0223607.
    state = _post_state(
        gs,
        wide,
        x=[2.0, 3.5],
        y=[4.0, 5.0],
        z=[6.0, 9.0],
        v=[1.5, 2.0],
        heading=[1.0, -2.5],
        health=[1.2, 3.0],
    )
    obs = gs.step(wide, state).obs
    r = 3.5 - 2 * math.pi
    np.testing.assert_allclose(
        obs[0],
        [1, 1, 0.2, 0.2, 0.3, 1.0, 0.0670820, 1.2, 3]
        + [1, 0, 0.15, 0.05, 0.15, -r, 0.0223607, 3.0, 6],
        atol=ATOL,
    )
    np.testing.assert_allclose(
        obs[1],
        [1, 1, 0.35, 0.25, 0.45, -2.5, 0.0894427, 3.0, 6]
        + [1, 0, -0.15, -0.05, -0.15, r, -0.0223607, 1.2, 3],
        atol=ATOL,
    )


# ---------------------------------------------------------------------------------------------
# Ordering, truncation, unseen rows
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def five(gs):
    return gs.config(teams=(0, 0, 0, 1, 1), sprites=(1, 2, 3, 4, 5), max_agents_in_vec_obs=4)


def _five_state(gs, five):
    # Post-step, all heading 0, v 1.3: 0 (5, 5), 1 (3, 5), 2 (5, 9), 3 (1.5, 5), 4 (7.5, 5).
    # Team 0 detects only agent 4 (ahead of agent 0 at d 2.5); enemy 3 is 3.5 behind agent 0
    # and 1.5 behind agent 1 (outside both cones, beyond 1), 5.3 from agent 2: unseen by team 0.
    # Team 1: agent 3 detects agent 1 (1.5 ahead); nothing else (agent 4 faces +x, empty).
    return _post_state(
        gs,
        five,
        x=[5.0, 3.0, 5.0, 1.5, 7.5],
        y=[5.0, 5.0, 9.0, 5.0, 5.0],
        z=0.0,
        v=1.3,
        heading=0.0,
        health=1.0,
    )


def test_rows_are_ego_then_seen_by_distance(gs, five):
    # Ego 0: seen 1 (d 2), 4 (d 2.5), 2 (d 4); unseen 3 (d 3.5) comes after every seen agent
    # and is cut by M = 4. Sprites identify the rows: 1, 2, 5, 3.
    obs = gs.step(five, _five_state(gs, five)).obs
    rows = obs[0].reshape(4, 9)
    np.testing.assert_array_equal(rows[:, 8], [1, 2, 5, 3])
    np.testing.assert_array_equal(rows[:, 0], [1, 1, 1, 1])
    np.testing.assert_array_equal(rows[:, 1], [1, 1, 0, 1])
    np.testing.assert_allclose(rows[1:, 2], [-0.2, 0.25, 0.0], atol=ATOL)  # dx / 10
    np.testing.assert_allclose(rows[1:, 3], [0.0, 0.0, 0.4], atol=ATOL)  # dy / 10


def test_unseen_rows_are_zero(gs, five):
    # Ego 3 (1.5, 5) sees itself, agent 1 (d 1.5, detected by 3) and teammate 4 (d 6);
    # its fourth row (an unseen agent) is all zeros.
    obs = gs.step(five, _five_state(gs, five)).obs
    rows = obs[3].reshape(4, 9)
    np.testing.assert_array_equal(rows[:3, 8], [4, 2, 5])
    np.testing.assert_array_equal(rows[3], np.zeros(9))


def test_rows_are_min_of_n_and_max_agents_in_vec_obs(gs, five):
    assert gs.step(five, _five_state(gs, five)).obs.shape == (5, 9 * 4)  # min(5, 4) = 4
    duel = gs.config()  # n = 2, max_agents_in_vec_obs 15 -> 2 rows, no extras
    state = gs.state(duel, x=[2.0, 8.0], y=[2.0, 8.0])
    assert gs.step(duel, state).obs.shape == (2, 18)


# ---------------------------------------------------------------------------------------------
# Dead ego (§15 rows 19, 21)
# ---------------------------------------------------------------------------------------------


def test_dead_ego_observation_is_all_zeros_deterministic_comm(gs, ex):
    # Ego 0 dead before the step: all 48 values 0, although teammate 1 is alive and sees it.
    obs = gs.step(ex, _example(gs, ex, alive=(False, True, True, True))).obs
    np.testing.assert_array_equal(obs[0], np.zeros(48))
    assert obs[1, 0] == 1  # the alive teammate still observes


def test_dead_ego_observation_is_all_zeros_stochastic_comm(gs):
    config = gs.config(teams=(0, 0, 1), stochastic_obs=True, stochastic_comm=True)
    state = gs.state(
        config,
        x=[2.0, 2.5, 8.0],
        y=[2.0, 2.0, 8.0],
        alive=[False, True, True],
        health=[0.0, 1.0, 1.0],
    )
    out = gs.step(config, state, noise=gs.noise(config, comm=0.99, detection=0.99))
    np.testing.assert_array_equal(out.obs[0], np.zeros(27))


def test_agent_killed_this_step_observes_all_zeros(gs):
    # The §13.2 duel at step 8 (lock 7 -> 8, 5 units: 0.04 - 0.5 + 0.01 < 0): agent 1 dies and
    # its observation is zeros. Detection (§4.6) uses the alive flags before the damage deaths,
    # so agent 0 still sees agent 1 on this step (health 0, dx (6.62324 - 5.12324)/10 = 0.15);
    # one step later a dead agent is never detected and its row is zeros.
    duel = gs.config()
    tracked = np.array([[0, 0], [7, 0]], np.int32)
    state = gs.state(duel, x=[5.0, 6.5], y=5.0, z=3.0, v=1.3, health=[1.0, 0.04], tracked=tracked)
    out = gs.step(duel, state)
    assert not out.alive[1]
    np.testing.assert_array_equal(out.obs[1], np.zeros(18))
    # ego row: x (5 + 0.12324)/10, y 0.5, z 0.3, heading 0, v 1.3/14.142, health 1 (healed, max)
    np.testing.assert_allclose(
        out.obs[0],
        [1, 1, 0.512324, 0.5, 0.3, 0.0, 0.0919239, 1.0, 1] + [1, 0, 0.15, 0, 0, 0, 0, 0, 1],
        atol=ATOL,
    )
    out = gs.step(duel, out.state)
    np.testing.assert_array_equal(out.obs[1], np.zeros(18))
    np.testing.assert_array_equal(out.obs[0, 9:], np.zeros(9))


@pytest.mark.parametrize("n", [4, 17])  # the counting sort (n <= 16) and lax.top_k (n > 16)
def test_row_order_is_a_stable_partial_sort(n):
    # Ties (equal distances) and unseen agents (inf) keep index order; np.argsort(kind="stable")
    # is the independent reference.
    from gigastep.game.observations.vector import nearest_first

    rng = np.random.default_rng(n)
    rank = rng.integers(0, 3, size=(n, n)).astype(np.float32)  # many ties
    rank[rng.random((n, n)) < 0.3] = np.inf
    np.fill_diagonal(rank, -1.0)
    m = 3
    expected = np.argsort(rank, axis=1, kind="stable")[:, :m]
    np.testing.assert_array_equal(jax.jit(nearest_first, static_argnums=1)(rank, m), expected)
