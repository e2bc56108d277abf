"""Agent motion (rules §3; §13.1 vectors; §15 row 3 heading wrap; §15 "also part": NaN/clip).

Every agent starts at x = y = z = 5, v = 1, heading 0, alive, thrust 1 unless stated. Collisions
are off (collision_range 0) so that all agents can share the start point of §13.1; one agent of
team 1 keeps both teams non-empty. Constants: dt 0.1, c_heading 4, c_dive 5, c_throttle 1.5,
drag 0.4, v_min 1.3, g 9.81, c_dive_throttle 0.5.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

N = 8
TEAMS = (0,) * 7 + (1,)
THRUST = (1.0,) * 6 + (2.0, 1.0)  # agent 6 has thrust 2
ATOL = 1e-5


@pytest.fixture(scope="module")
def cont(gs):
    return gs.config(teams=TEAMS, thrust=THRUST, collision_range=0.0)


@pytest.fixture(scope="module")
def disc(gs):
    return gs.config(teams=TEAMS, thrust=THRUST, collision_range=0.0, discrete_actions=True)


def _start(gs, config, **fields):
    kw = dict(x=5.0, y=5.0, z=5.0, v=1.0, heading=0.0)
    kw.update(fields)
    return gs.state(config, **kw)


def test_section_13_1_single_agent_dynamics_vectors(gs, cont):
    # rules §13.1, valid unchanged under §15. Worked example, row (1, -1, 1):
    #   h' = 0 + 0.1*1*4 = 0.4; v1 = 1 + 0.1*1*1.5 = 1.15; v2 = 1.15 - 0.04*1.15^2 = 1.0971
    #   x' = 5 + 0.1*1.0971*cos 0.4 = 5.1010494; y' = 5 + 0.1*1.0971*sin 0.4 = 5.0427232
    #   z' = 5 - 0.1*5 = 4.5; v' = sqrt(1.0971^2 + 0.5*9.81*0.5) = sqrt(3.65613) = 1.9121006
    # Thrust 2: v1 = 1.3, v2 = 1.3 - 0.04*1.69 = 1.2324, v' = sqrt(1.51881 + 2.4525) = 1.9928145.
    # z = 0.2, v = 2, dive -1: v2 = 2 - 0.16 = 1.84, x' = 5.184, z' = clip(-0.3) = 0,
    #   v' = sqrt(1.84^2 + 0.5*9.81*0.2) = sqrt(4.3666) = 2.0896411.
    actions = np.array(
        [
            (0, 0, 0),
            (1, -1, 1),
            (-1, 1, -1),
            (0.5, 0.2, -0.3),
            (2, -3, 5),  # saturates to (1, -1, 1)
            (1, -1, 1),  # dead agent
            (1, -1, 1),  # thrust 2
            (0, -1, 0),  # z = 0.2, v = 2
        ],
        np.float32,
    )
    alive = np.ones(N, bool)
    alive[5] = False
    health = np.ones(N, np.float32)
    health[5] = 0.0
    z = np.full(N, 5.0, np.float32)
    z[7] = 0.2
    v = np.ones(N, np.float32)
    v[7] = 2.0
    state = _start(gs, cont, z=z, v=v, alive=alive, health=health)
    out = gs.step(cont, state, actions)
    expected = np.array(
        [  # x', y', z', v', h'
            (5.0960002, 5.0, 5.0, 1.3, 0.0),
            (5.1010494, 5.0427232, 4.5, 1.9121006, 0.4),
            (5.0756283, 4.9680247, 5.5, 1.3, -0.4),
            (5.0900211, 5.0182481, 5.1, 1.3, 0.2),
            (5.1010494, 5.0427232, 4.5, 1.9121006, 0.4),
            (5.0, 5.0, 5.0, 1.3, 0.0),  # dead: frozen, v' = max(v, 1.3)
            (5.1135116, 5.0479918, 4.5, 1.9928145, 0.4),
            (5.184, 5.0, 0.0, 2.0896411, 0.0),
        ]
    )
    got = np.stack([out.x, out.y, out.z, out.v, out.heading], axis=1)
    np.testing.assert_allclose(got, expected, atol=ATOL)


def test_heading_wraps_into_minus_pi_pi_when_turning_past_minus_pi(gs, cont):
    # §15 row 3: floor-mod wrap. h = -pi + 0.05, u_h = -1: -pi + 0.05 - 0.4 = -pi - 0.35,
    # wrapped: (-0.35 mod 2 pi) - pi = pi - 0.35 = 2.7915927 (the original kept -3.4916).
    heading = np.zeros(N, np.float32)
    heading[0] = -math.pi + 0.05
    actions = np.zeros((N, 3), np.float32)
    actions[0, 0] = -1.0
    out = gs.step(cont, _start(gs, cont, heading=heading), actions)
    assert out.heading[0] == pytest.approx(math.pi - 0.35, abs=ATOL)
    assert -math.pi <= out.heading[0] < math.pi


def test_heading_wraps_into_minus_pi_pi_when_turning_past_plus_pi(gs, cont):
    # h = pi - 0.05, u_h = +1: pi + 0.35 -> wrapped -pi + 0.35 = -2.7915927.
    heading = np.zeros(N, np.float32)
    heading[0] = math.pi - 0.05
    actions = np.zeros((N, 3), np.float32)
    actions[0, 0] = 1.0
    out = gs.step(cont, _start(gs, cont, heading=heading), actions)
    assert out.heading[0] == pytest.approx(-math.pi + 0.35, abs=ATOL)
    assert np.all((out.heading >= -math.pi) & (out.heading < math.pi))


def test_discrete_action_table_entries_produce_their_motion(gs, disc):
    # §3.2: r -> (a[(r//3)%3], a[r%3], a[r//9]) with a = (-1, 0, 1) for (heading, dive, throttle).
    #  0 -> (-1,-1,-1): h' = -0.4; v1 = 0.85; v2 = 0.85 - 0.04*0.7225 = 0.8211;
    #       x' = 5 + 0.08211 cos 0.4 = 5.0756283; y' = 5 - 0.08211 sin 0.4 = 4.9680249;
    #       z' = 4.5; v' = sqrt(0.8211^2 + 2.4525) = 1.7682492
    # 13 -> no-op: v2 = 1 - 0.04 = 0.96, x' = 5.096, v' = 1.3
    # 10 -> (-1, 0, 0) circle left:  h' = -0.4, x' = 5 + 0.096 cos 0.4 = 5.0884219, y' = 4.9626158
    # 16 -> ( 1, 0, 0) circle right: h' = +0.4, y' = 5.0373842
    # 26 -> (1, 1, 1): like §13.1's (1, -1, 1) in the plane, z' = 5.5, v' = floor 1.3
    actions = np.array([0, 13, 10, 16, 26, 13, 13, 13], np.int32)
    out = gs.step(disc, _start(gs, disc), actions)
    expected = np.array(
        [
            (5.0756283, 4.9680249, 4.5, 1.7682492, -0.4),
            (5.096, 5.0, 5.0, 1.3, 0.0),
            (5.0884219, 4.9626158, 5.0, 1.3, -0.4),
            (5.0884219, 5.0373842, 5.0, 1.3, 0.4),
            (5.1010496, 5.0427231, 5.5, 1.3, 0.4),
        ]
    )
    got = np.stack([out.x, out.y, out.z, out.v, out.heading], axis=1)[:5]
    np.testing.assert_allclose(got, expected, atol=ATOL)


def test_discrete_actions_outside_0_26_are_clipped(gs, disc):
    # §15 "also part": -5 acts as 0 and 99 acts as 26 (compared within the same step).
    actions = np.array([0, -5, 26, 99, 13, 13, 13, 13], np.int32)
    out = gs.step(disc, _start(gs, disc), actions)
    got = np.stack([out.x, out.y, out.z, out.v, out.heading], axis=1)
    np.testing.assert_array_equal(got[1], got[0])
    np.testing.assert_array_equal(got[3], got[2])
    assert got[0, 2] == pytest.approx(4.5) and got[2, 2] == pytest.approx(5.5)


def test_nan_continuous_actions_act_as_zero(gs, cont):
    # §15 "also part". (nan, nan, nan) = no-op: x' = 5.096, v' = 1.3.
    # (nan, 1, nan) = (0, 1, 0): same plane motion, z' = 5 + 0.1*5 = 5.5, v' = floor 1.3.
    actions = np.zeros((N, 3), np.float32)
    actions[0] = np.nan
    actions[1] = (np.nan, 1.0, np.nan)
    out = gs.step(cont, _start(gs, cont), actions)
    for field in (out.x, out.y, out.z, out.v, out.heading, out.health, out.obs):
        assert np.all(np.isfinite(field))
    np.testing.assert_allclose(
        [out.x[0], out.y[0], out.z[0], out.v[0], out.heading[0]], [5.096, 5, 5, 1.3, 0], atol=ATOL
    )
    np.testing.assert_allclose(
        [out.x[1], out.y[1], out.z[1], out.v[1], out.heading[1]], [5.096, 5, 5.5, 1.3, 0], atol=ATOL
    )


def test_dead_agents_are_frozen_in_x_y_z(gs, cont):
    alive = np.array([False, False, False] + [True] * 5)
    health = np.where(alive, 1.0, 0.0).astype(np.float32)
    x = np.array([2.0, 7.5, 1.25, 5, 5, 5, 5, 5], np.float32)
    y = np.array([3.0, 8.5, 9.75, 5, 5, 5, 5, 5], np.float32)
    z = np.array([4.0, 0.0, 10.0, 5, 5, 5, 5, 5], np.float32)
    v = np.array([3.0, 1.0, 1.5, 1, 1, 1, 1, 1], np.float32)
    actions = np.zeros((N, 3), np.float32)
    actions[0] = (1, 1, 1)
    actions[1] = (-1, -1, -1)
    actions[2] = (0.3, 1, -1)
    state = _start(gs, cont, x=x, y=y, z=z, v=v, alive=alive, health=health)
    out = gs.step(cont, state, actions)
    np.testing.assert_array_equal(out.x[:3], x[:3])
    np.testing.assert_array_equal(out.y[:3], y[:3])
    np.testing.assert_array_equal(out.z[:3], z[:3])
    assert not out.alive[:3].any()


def test_the_trigonometry_of_the_moved_headings_is_their_cosine_and_sine(gs, cont):
    """`heading_trig` of the moved headings is their cosine and sine (`cos_sin`, within 1.5
    float32 ulp of float64 NumPy), and the geometry built on it projects each pair on the
    observer's heading with exactly those values."""
    import jax
    import jax.numpy as jnp

    from gigastep.game import dynamics, interactions

    rng = np.random.default_rng(0)
    state = _start(
        gs,
        cont,
        x=rng.uniform(1, 9, N).astype(np.float32),
        y=rng.uniform(1, 9, N).astype(np.float32),
        heading=rng.uniform(-3.1, 3.1, N).astype(np.float32),
    )
    controls = jnp.asarray(rng.uniform(-1, 1, (N, 3)).astype(np.float32))

    @jax.jit
    def both(agents, controls):
        moved = dynamics.move(cont, agents, controls)
        own = dynamics.cos_sin(moved.heading)
        geo = interactions.geometry(moved)
        forward = geo.dx * own[0][None, :] + geo.dy * own[1][None, :]
        return dynamics.heading_trig(moved.heading), own, geo.cos_bearing, forward, moved.heading

    trig, own, cos_bearing, forward, heading = both(state.agents, controls)
    np.testing.assert_array_equal(trig, own)
    np.testing.assert_array_equal(cos_bearing, forward)
    h = np.asarray(heading, np.float64)
    np.testing.assert_allclose(
        np.asarray(trig),
        np.stack([np.cos(h), np.sin(h)]),
        rtol=0,
        atol=1.5 * np.spacing(np.float32(1.0)),
    )
