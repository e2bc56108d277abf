"""How the game's arrays are laid out for XLA: values that must be computed once, and the
manual mesh axes (inside `shard_map`) that a value built apart from its inputs varies over."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["count_sum", "stored", "varying_like"]


def stored(x: jax.Array) -> jax.Array:
    """`x` itself (bit for bit; NaN stays NaN), computed so that XLA stores it once.

    XLA on the CPU copies an elementwise producer into every fusion that consumes it and
    recomputes it per element of that fusion (it also removes `optimization_barrier`), so
    per-agent values read by per-pair (n, n) or per-pixel fusions (the moved agents, the
    trigonometry of their headings, the tail points of the RGB images) would be recomputed
    for every element that reads them. Measured on the pure JAX step, 5v5 pobs, 1,024 games:
    1.25x (docs/benchmarks.md).

    On the CPU the boundary is a cumulative max over (lowest, x), i.e. a reduce-window, whose
    output XLA writes out: its second lane is max(lowest, x) = x. (A plain reduction
    max(x, lowest) is a boundary too, but XLA's CPU backend hands float reductions to YNNPACK,
    which first writes a padded copy of the input; the reduce-window measured 1.03-1.11x over
    it in the step.) Elsewhere (GPUs, where the reduce-window was not measured) the reduction.
    """
    if jnp.issubdtype(x.dtype, jnp.floating):
        lowest = -jnp.inf
    elif jnp.issubdtype(x.dtype, jnp.integer):
        lowest = jnp.iinfo(x.dtype).min
    else:
        raise TypeError(f"stored: expected a float or integer array, got dtype {x.dtype}")
    pair = jnp.stack([jnp.full_like(x, lowest), x])
    return jax.lax.platform_dependent(
        pair,
        cpu=lambda p: jax.lax.cummax(p, axis=0)[1],
        default=lambda p: jnp.max(p, axis=0),
    )


def count_sum(x: jax.Array, axis: int) -> jax.Array:
    """The float32 sum over `axis` of `x`, whose entries are whole numbers (bools, damage
    units), summed as int32: the same value bit for bit as a float32 sum (whole numbers below
    2^24 add exactly in any order), but XLA's CPU backend keeps an integer reduction inside
    the fusion that computes its input, where a float one is handed to YNNPACK after the
    input is written out (and padded). Measured on the step, 5v5 pobs with the native kernel:
    1.08-1.14x at 100,000 games, 1.03x at 1,024 (docs/benchmarks.md)."""
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
