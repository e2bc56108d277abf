"""`gigastep.game.xla.stored`: the value itself, computed once."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.game.xla import stored


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_stored_returns_floats_bit_for_bit_with_nan_infinities_and_signed_zero(dtype):
    x = np.array(
        [np.nan, np.inf, -np.inf, -0.0, 0.0, np.finfo(dtype).max, -1.5, np.finfo(dtype).tiny], dtype
    )
    out = np.asarray(jax.jit(stored)(jnp.asarray(x)))
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int8])
def test_stored_returns_integers_unchanged_including_the_lowest_value(dtype):
    info = np.iinfo(dtype)
    x = np.array([[info.min, info.max], [0, 1]], dtype)
    out = np.asarray(jax.jit(stored)(jnp.asarray(x)))
    assert out.dtype == dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, x)


def test_stored_names_the_dtype_it_cannot_store():
    with pytest.raises(TypeError, match="expected a float or integer array, got dtype bool"):
        stored(jnp.zeros(3, bool))


def _pair_fusions(hlo: str, shape: str) -> list[str]:
    """The bodies of the fused computations whose result has `shape`."""
    bodies = re.findall(r"%fused_computation[^\n]*\{\n(.*?)\n\}", hlo, re.S)
    return [b for b in bodies if re.search(rf"ROOT[^\n]*= \w+\[{shape}\]", b)]


@pytest.mark.parametrize("through_stored", [False, True])
def test_a_stored_value_is_not_recomputed_inside_the_pair_fusion(through_stored):
    """Without `stored`, XLA on the CPU copies the cosine into the (n, n) fusion (so the guard
    can fail); with it, the (n, n) fusion only reads the stored values."""

    def pairs(a):
        c = jnp.cos(a) * 3.0
        c = stored(c) if through_stored else c
        return c[:, None] - c[None, :]

    hlo = jax.jit(pairs).lower(jnp.ones(16, jnp.float32)).compile().as_text()
    fusions = _pair_fusions(hlo, "16,16")
    assert fusions, "no (16, 16) fusion in the compiled function"
    recomputed = any("cosine(" in body for body in fusions)
    assert recomputed is (not through_stored)
