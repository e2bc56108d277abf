"""Cheap per-step uniforms: one threefry draw per call, expanded by a counter-based hash.

A step needs about 2 n^2 uniforms (detection and communication draws for every pair). Drawing
each with threefry costs more than the rest of the step, so `uniform` draws two uint32 words
from the key with threefry and expands them with Wellons' `lowbias32` integer hash applied to
a counter (a counter-based generator in the style of Random123/Squares). The result is a pure
function of the key: same key, same numbers, under jit, vmap or not. Uniforms have 24 random
bits (float32 resolution), in [0, 1).
"""

from __future__ import annotations

from collections.abc import Container, Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["lowbias32", "seed_words", "stream", "stream_from_seed", "uniform", "uniforms",
           "uniforms_from_seed"]  # fmt: skip

_GOLDEN = np.uint32(0x9E3779B9)


def lowbias32(x: jax.Array) -> jax.Array:
    """Wellons' lowbias32 integer hash (uint32 -> uint32), a bijection with strong avalanche."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _expand(seed: jax.Array, start: int, shape: tuple[int, ...]) -> jax.Array:
    count = int(np.prod(shape, dtype=np.int64))
    counter = jnp.arange(start, start + count, dtype=jnp.uint32).reshape(shape)
    bits = lowbias32(lowbias32(counter * _GOLDEN ^ seed[0]) + seed[1])
    return (bits >> 8).astype(jnp.float32) * np.float32(2.0**-24)


def uniform(key: jax.Array, shape: Sequence[int]) -> jax.Array:
    """float32 uniforms in [0, 1) of `shape`, a deterministic function of `key`."""
    return uniforms(key, [shape])[0]


def seed_words(key: jax.Array) -> jax.Array:
    """(2,) uint32: the two words drawn from `key` (threefry) that seed its counter streams."""
    return jax.random.bits(key, (2,), jnp.uint32)


def stream(key: jax.Array, shapes: Sequence[Sequence[int]], index: int) -> jax.Array:
    """`stream_from_seed(seed_words(key), shapes, index)`."""
    return stream_from_seed(seed_words(key), shapes, index)


def stream_from_seed(seed: jax.Array, shapes: Sequence[Sequence[int]], index: int) -> jax.Array:
    """(3,) uint32 (seed0, seed1, start): the counter stream of array `index` of
    `uniforms_from_seed(seed, shapes)`, for code that draws those uniforms itself (the native
    observation kernel hashes the communication noise where it uses it instead of reading a
    materialised array). Element k of that array (row-major) hashes counter start + k."""
    start = sum(int(np.prod(tuple(s), dtype=np.int64)) for s in shapes[:index])
    return jnp.concatenate([jnp.asarray(seed, jnp.uint32), jnp.asarray([start], jnp.uint32)])


def uniforms(
    key: jax.Array, shapes: Sequence[Sequence[int]], skip: Container[int] = ()
) -> list[jax.Array]:
    """Independent uniform arrays of the given shapes from one key.

    Each array takes its own range of counters, fixed by the shapes alone, so skipping an
    array (its index in `skip`: returned as zeros, not computed) leaves the others unchanged.
    """
    return uniforms_from_seed(seed_words(key), shapes, skip)


def uniforms_from_seed(
    seed: jax.Array, shapes: Sequence[Sequence[int]], skip: Container[int] = ()
) -> list[jax.Array]:
    """`uniforms` given the key's `seed_words` (so that a caller who also needs a `stream`
    of the same key draws the seed once)."""
    out: list[jax.Array] = []
    start = 0
    for i, shape in enumerate(shapes):
        shape = tuple(shape)
        if i in skip:
            out.append(jnp.zeros(shape, jnp.float32))
        else:
            out.append(_expand(seed, start, shape))
        start += int(np.prod(shape, dtype=np.int64))
    return out
