"""`interactions.in_cone`: |theta_ij| < angle, decided without atan2 or a square root.

References are independent of the implementation: the bearing from float64 `atan2` (away from
the cone's edges, where float32 rounding may decide either way), and, for non-finite
geometry, the plain float32 formula `forward > cos(angle) * sqrt(d2)` evaluated in NumPy.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.game.interactions import Geometry, in_cone

ANGLES = [math.pi / 8, math.pi / 4, math.pi / 2, 3 * math.pi / 4, 0.99 * math.pi, math.pi]


def _geometry(dx: np.ndarray, dy: np.ndarray, cos_h: np.ndarray, sin_h: np.ndarray) -> Geometry:
    """Geometry of targets (rows) seen from observers (columns), as `geometry` lays it out."""
    dx, dy = np.float32(dx), np.float32(dy)
    d2 = dx * dx + dy * dy
    forward = dx * np.float32(cos_h) + dy * np.float32(sin_h)
    return Geometry(
        dx=jnp.asarray(dx),
        dy=jnp.asarray(dy),
        d2=jnp.asarray(d2),
        dist=jnp.sqrt(jnp.asarray(d2)),
        cos_bearing=jnp.asarray(forward),
    )


def _cone(angle: float, geo: Geometry, heading: np.ndarray) -> np.ndarray:
    return np.asarray(jax.jit(in_cone, static_argnums=0)(angle, geo, jnp.asarray(heading)))


@pytest.mark.parametrize("angle", ANGLES, ids=lambda a: f"{a / math.pi:.3g}pi")
def test_inside_iff_the_bearing_is_within_the_angle(angle):
    rng = np.random.default_rng(7)
    k = 4000
    heading = rng.uniform(-math.pi, math.pi, k)
    bearing = rng.uniform(-math.pi, math.pi, k)  # of the target, relative to the heading
    # keep clear of the edges, where float32 rounding decides
    bearing = bearing[np.abs(np.abs(bearing) - angle) > 1e-4][: k // 2]
    heading = heading[: bearing.size]
    r = rng.uniform(0.01, 10.0, bearing.size)
    dx, dy = r * np.cos(heading + bearing), r * np.sin(heading + bearing)
    # one observer per target: a diagonal geometry
    geo = _geometry(np.diag(dx), np.diag(dy), np.cos(heading)[None, :], np.sin(heading)[None, :])
    got = np.diag(_cone(angle, geo, np.float32(heading)))
    want = np.abs(bearing) < angle
    assert want.any() and (angle >= math.pi or not want.all())
    np.testing.assert_array_equal(got, want)


def test_a_cone_wider_than_pi_contains_every_direction():
    dx = np.array([[1.0, -1.0], [0.0, -3.0]])
    geo = _geometry(dx, np.zeros((2, 2)), np.ones((1, 2)), np.zeros((1, 2)))
    assert _cone(1.01 * math.pi, geo, np.zeros(2)).all()


@pytest.mark.parametrize(
    ("heading", "inside"), [(0.0, True), (0.5, True), (1.0, False), (-1.0, False), (math.pi, False)]
)
def test_a_target_at_the_observers_position_is_inside_iff_the_heading_is(heading, inside):
    # bearing atan2(0, 0) - h = -h (rules 4.6); cone half-angle pi/4 (0.785...)
    geo = _geometry(np.zeros((1, 1)), np.zeros((1, 1)), np.cos([[heading]]), np.sin([[heading]]))
    assert bool(_cone(math.pi / 4, geo, np.float32([heading]))[0, 0]) is inside


@pytest.mark.parametrize("angle", [math.pi / 4, 3 * math.pi / 4], ids=["narrow", "wide"])
def test_non_finite_geometry_decides_as_the_plain_formula(angle):
    values = np.float32([np.nan, np.inf, -np.inf, 3e38, -3e38, 1.0, -1.0, 0.6, 0.0])
    f, d2 = (a.ravel() for a in np.meshgrid(values, np.abs(values)))
    n = f.size
    geo = Geometry(
        dx=jnp.zeros((1, n)),
        dy=jnp.zeros((1, n)),
        d2=jnp.asarray(d2[None]),
        dist=jnp.sqrt(jnp.asarray(d2[None])),
        cos_bearing=jnp.asarray(f[None]),
    )
    got = _cone(angle, geo, np.zeros(n, np.float32))[0]
    with np.errstate(invalid="ignore", over="ignore"):
        plain = f > np.float32(math.cos(angle)) * np.sqrt(d2)
        want = np.where(d2 > 0, plain, True)  # coincident, heading 0: bearing 0 is inside
    # The one documented difference: a finite forward whose square overflows, against an
    # infinite d2 (agents ~1e19 apart, far outside any map: the hazards killed them).
    overflow = np.isfinite(f) & (np.abs(f) > 1.8e19) & np.isinf(d2)
    np.testing.assert_array_equal(got[~overflow], want[~overflow])
    assert np.isnan(f).any() and np.isinf(d2).any()
