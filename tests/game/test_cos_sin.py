"""`dynamics.cos_sin`, the step's float32 cosine and sine, against float64 NumPy.

The step takes the cosine and sine of every heading from this polynomial instead of
`jnp.cos`/`jnp.sin` (see its docstring). Its promises: at most 1.5 ulp on [-pi, pi], where
the game's wrapped headings live; an absolute error of at most 8e-8 up to |x| = 8192; finite
values in [-1, 1] for every finite x; NaN for a non-finite x; cos even and sin odd bit for bit.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from gigastep.game.dynamics import cos_sin

_cos_sin = jax.jit(cos_sin)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the float32 spacing at want (want in float64)."""
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def grid(lo: float, hi: float, count: int) -> np.ndarray:
    """count float32 values from lo to hi, with the quarter turns and their neighbours."""
    x = np.linspace(lo, hi, count, dtype=np.float32)
    k = np.arange(np.ceil(lo / (np.pi / 2)), np.floor(hi / (np.pi / 2)) + 1)
    turns = (k * (np.pi / 2)).astype(np.float32)
    around = np.concatenate(
        [turns, np.nextafter(turns, np.float32(np.inf)), np.nextafter(turns, np.float32(-np.inf))]
    )
    # and the octant edges, where the reduction switches quarter
    edges = ((k[:-1] + 0.5) * (np.pi / 2)).astype(np.float32)
    return np.concatenate([x, around, edges, np.nextafter(edges, np.float32(np.inf))])


def test_within_one_and_a_half_ulp_on_the_wrapped_headings():
    x = grid(-np.pi, np.pi, 400_001)
    cos, sin = np.asarray(_cos_sin(x))
    x64 = x.astype(np.float64)
    assert ulps(cos, np.cos(x64)).max() <= 1.5
    assert ulps(sin, np.sin(x64)).max() <= 1.5


@pytest.mark.parametrize("bound", [20.0, 1000.0, 8192.0])
def test_absolute_error_up_to_8192(bound):
    x = grid(-bound, bound, 200_001)
    cos, sin = np.asarray(_cos_sin(x)).astype(np.float64)
    x64 = x.astype(np.float64)
    assert np.abs(cos - np.cos(x64)).max() <= 8e-8
    assert np.abs(sin - np.sin(x64)).max() <= 8e-8


def test_exact_at_zero_and_symmetric_bit_for_bit():
    cos, sin = np.asarray(_cos_sin(np.float32([0.0])))
    assert (cos[0], sin[0]) == (1.0, 0.0)
    x = grid(-50.0, 50.0, 100_001)
    x = x[x != 0]
    pos, neg = np.asarray(_cos_sin(x)), np.asarray(_cos_sin(-x))
    np.testing.assert_array_equal(neg[0], pos[0])
    np.testing.assert_array_equal(neg[1], -pos[1])


def test_huge_finite_inputs_give_finite_values_in_range():
    big = np.float32(
        [8193.0, -1e5, 1e12, -3e30, np.finfo(np.float32).max, -np.finfo(np.float32).max]
    )
    out = np.asarray(_cos_sin(big))
    assert np.isfinite(out).all()
    assert (np.abs(out) <= 1.0).all()


def test_non_finite_inputs_give_nan():
    out = np.asarray(_cos_sin(np.float32([np.inf, -np.inf, np.nan])))
    assert np.isnan(out).all()


def test_shape_is_two_by_the_input():
    assert _cos_sin(np.zeros((3, 4), np.float32)).shape == (2, 3, 4)
