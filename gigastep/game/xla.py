"""How the game's arrays are laid out for XLA: values that must be computed once, and the
manual mesh axes (inside `shard_map`) that a value built apart from its inputs varies over."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["count_sum", "platform_form", "stored", "varying_like"]


def stored(x: jax.Array) -> jax.Array:
    """`x` itself (bit for bit; NaN stays NaN), computed so that XLA stores it once.

    XLA on the CPU copies an elementwise producer into every fusion that consumes it and
    recomputes it per element of that fusion (it also removes `optimization_barrier`), so
    per-agent values read by per-pair (n, n) or per-pixel fusions (the moved agents, the
    trigonometry of their headings, the tail points of the RGB images) would be recomputed
    for every element that reads them.

    On the CPU the boundary is a reduce-window whose output XLA writes out: the max over a
    window of 2 along a new leading axis of size 1, padded before with the lowest value, i.e.
    max(lowest, x) = x, written once, x's size. (A plain reduction max(x, lowest) is a boundary
    too, but XLA's CPU backend hands float reductions to YNNPACK, which first writes a padded
    copy of the input. A cumulative max over the pair (lowest, x) would write both lanes; this
    window writes one.) Elsewhere (GPUs, where the reduce-window has not been timed) the
    reduction.
    """
    if jnp.issubdtype(x.dtype, jnp.floating):
        lowest = -jnp.inf
    elif jnp.issubdtype(x.dtype, jnp.integer):
        lowest = jnp.iinfo(x.dtype).min
    else:
        raise TypeError(f"stored: expected a float or integer array, got dtype {x.dtype}")

    def window(x: jax.Array) -> jax.Array:
        ones = (1,) * x.ndim
        # A NumPy scalar init: JAX then emits its max window reduction, which has
        # derivatives (a traced init gives the generic one, which reverse mode cannot use).
        init = np.asarray(lowest, x.dtype)[()]
        return jax.lax.reduce_window(
            x[None], init, jax.lax.max, (2, *ones), (1, *ones), ((1, 0), *((0, 0),) * x.ndim)
        )[0]

    return jax.lax.platform_dependent(
        x,
        cpu=window,
        default=lambda x: jnp.max(jnp.stack([jnp.full_like(x, lowest), x]), axis=0),
    )


def count_sum(x: jax.Array, axis: int) -> jax.Array:
    """The float32 sum over `axis` of `x`, whose entries are whole numbers (bools, damage
    units), summed as int32: the same value bit for bit as a float32 sum (whole numbers below
    2^24 add exactly in any order), but XLA's CPU backend keeps an integer reduction inside
    the fusion that computes its input, where a float one is handed to YNNPACK after the
    input is written out (and padded)."""
    return jnp.sum(x.astype(jnp.int32), axis=axis).astype(jnp.float32)


def varying_like(inputs: Any, out: Any) -> Any:
    """Every leaf of `out` marked as varying over the manual mesh axes that the leaves of
    `inputs` vary over (inside `shard_map`), as JAX's own ops on those inputs would be.

    A value built without reading the inputs (zeros of a known shape, an FFI call's result)
    carries no such type, and a conditional whose branches disagree on it fails to trace.
    Outside `shard_map`, or with a jax that has no varying-axis types, `out` is returned as is.
    """
    typeof, pcast = getattr(jax, "typeof", None), getattr(jax.lax, "pcast", None)
    if typeof is None or pcast is None:  # jax without varying-axis types
        return out

    def varying(x: Any) -> set[Any]:
        aval = typeof(x)
        manual = getattr(aval, "manual_axis_type", None)  # jax >= 0.9; before: aval.vma
        return set(manual.varying) if manual is not None else set(getattr(aval, "vma", ()))

    axes = set().union(*(varying(leaf) for leaf in jax.tree.leaves(inputs)))

    def mark(leaf: Any) -> Any:
        missing = tuple(sorted(axes - varying(leaf)))
        return pcast(leaf, missing, to="varying") if missing else leaf

    return jax.tree.map(mark, out)


_FORM: str | None = None
"""None: `platform_form` chooses by the platform lowered for; "cpu" or "gpu": that form
everywhere (tests, through `_force_form`, run the GPU forms on the CPU)."""


def platform_form(*args: Any, cpu: Callable[..., Any], gpu: Callable[..., Any]) -> Any:
    """`cpu(*args)` on the CPU, `gpu(*args)` on every other platform: two forms of the same
    values, chosen when the program is lowered (a constant conditional that XLA folds).

    The GPU forms have no data-dependent control flow: XLA:GPU reads the index of a
    conditional and the predicate of a `while` loop whose trip count it does not know on the
    host, stalling the device at every one. The CPU forms keep the conditionals and loops
    that skip work there (tests/game/test_gpu_lowering.py checks the lowered GPU programs;
    tests/game/test_gpu_forms.py runs the GPU forms on the CPU against the CPU forms).
    """
    if _FORM == "cpu":
        return cpu(*args)
    if _FORM == "gpu":
        return gpu(*args)
    return jax.lax.platform_dependent(*args, cpu=cpu, default=gpu)


@contextmanager
def _force_form(form: str) -> Iterator[None]:
    """Within the block, every `platform_form` takes the `form` ("cpu" or "gpu") form on
    every platform. JAX's caches are cleared on entry and exit (a jitted function traced
    under another form would be reused otherwise). For tests."""
    global _FORM
    if form not in ("cpu", "gpu"):
        raise ValueError(f"_force_form: form must be 'cpu' or 'gpu', got {form!r}")
    before = _FORM
    _FORM = form
    jax.clear_caches()
    try:
        yield
    finally:
        _FORM = before
        jax.clear_caches()
