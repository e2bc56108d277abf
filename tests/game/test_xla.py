"""`gigastep.game.xla`: `stored` (the value itself, computed once) and `count_sum` (a float sum
of whole numbers, computed as an integer sum)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.game.xla import count_sum, stored


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


@pytest.mark.parametrize(("platform", "window"), [("cpu", True), ("cuda", False)])
def test_stored_is_a_reduce_window_on_the_cpu_and_a_reduction_elsewhere(platform, window):
    """The CPU form avoids XLA's YNNPACK reductions; other platforms keep the measured one."""
    text = jax.jit(stored).trace(jnp.zeros(5)).lower(lowering_platforms=(platform,)).as_text()
    assert ("reduce_window" in text) is window
    assert ("stablehlo.reduce(" in text) is not window


def test_stored_writes_its_value_once_on_the_cpu():
    """The compiled CPU form is one reduce-window whose output has x's size (not the pair)."""
    fn = jax.jit(lambda x: stored(jnp.sin(x)) * 2.0)
    text = fn.trace(jnp.zeros((5, 7))).lower(lowering_platforms=("cpu",)).compile().as_text()
    windows = [line for line in text.splitlines() if "reduce-window(" in line]
    assert len(windows) == 1 and "f32[1,5,7]" in windows[0], windows
    assert "f32[2,5,7]" not in text


def test_stored_has_the_identity_s_derivatives_under_jit():
    # The max window reduction has derivatives; JAX's generic window reduction (what a traced
    # init value gives) fails reverse mode inside jit.
    x = jnp.arange(6.0).reshape(2, 3)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(stored(x) ** 2)))(x)
    np.testing.assert_array_equal(np.asarray(grad), 2 * np.asarray(x))


@pytest.mark.parametrize("axis", [0, 1])
def test_count_sum_is_the_float_sum_of_whole_numbers(axis):
    rng = np.random.default_rng(0)
    units = rng.integers(0, 40, (64, 9)).astype(np.float32)  # damage units
    flags = rng.uniform(size=(64, 9)) < 0.5  # detections
    for x in (units, flags):
        out = np.asarray(jax.jit(count_sum, static_argnums=1)(jnp.asarray(x), axis))
        assert out.dtype == np.float32
        # By hand: whole numbers below 2^24 sum exactly, so the float64 sum is the value.
        np.testing.assert_array_equal(out, np.sum(x, axis=axis, dtype=np.float64))
        np.testing.assert_array_equal(out, np.asarray(jnp.sum(jnp.asarray(x, jnp.float32), axis)))
