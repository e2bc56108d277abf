"""Cheap per-step uniforms: one threefry draw per call, expanded by a counter-based hash.

A step needs about 2 n^2 uniforms (detection and communication draws for every pair). Drawing
each with threefry costs more than the rest of the step, so `uniform` draws two uint32 words
from the key with threefry and expands them with Wellons' `lowbias32` integer hash applied to
a counter (a counter-based generator in the style of Random123/Squares). The result is a pure
function of the key: same key, same numbers, under jit, vmap or not. Uniforms have 24 random
bits (float32 resolution), in [0, 1).

Threefry, unrolled. `seed_words` and `split` return exactly what `jax.random.bits` and
`jax.random.split` return for a threefry key (raw uint32 data or a typed key, either
`jax_threefry_partitionable` mode), but evaluate the Threefry-2x32 hash as straight-line code.
On the CPU JAX lowers that hash as a rolled loop of five iterations, a dozen small kernels and
copies per draw (it compiles faster); the step draws this way on every call, so it is written
out there. The reset, which runs for finished games only, keeps `jax.random`. Keys of another
PRNG implementation, or of another shape, go to `jax.random`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from gigastep.game.xla import stored

__all__ = [
    "lowbias32",
    "seed_words",
    "split",
    "stream",
    "stream_from_seed",
    "threefry2x32",
    "uniform",
    "uniforms",
    "uniforms_from_seed",
]

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


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def threefry2x32(
    key1: jax.Array, key2: jax.Array, x1: jax.Array, x2: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 with 20 rounds (Salmon et al., SC 2011) of the counters (x1, x2) under the
    key (key1, key2), all uint32 (broadcast together): the hash of JAX's threefry2x32
    generator, bit for bit, as straight-line code."""
    ks = (key1, key2, key1 ^ key2 ^ _PARITY)
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ ((x2 << np.uint32(r)) | (x2 >> np.uint32(32 - r)))
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    # Stored, not recomputed: XLA would otherwise copy the ~100 operations of the hash into
    # every fusion that reads its words (e.g. once per agent pair of the step's noise).
    return stored(x1), stored(x2)


def _threefry_data(key: jax.Array) -> tuple[jax.Array, Callable[[jax.Array], jax.Array]] | None:
    """(the (2,) uint32 data of one threefry key, a function that makes keys of the same kind
    from (..., 2) data), or None for a key that is not one threefry key."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = jax.random.key_impl(key)
        if key.shape != () or str(impl) != "threefry2x32":
            return None
        return jax.random.key_data(key), lambda data: jax.random.wrap_key_data(data, impl=impl)
    if (
        key.shape == (2,)
        and key.dtype == jnp.uint32
        and jax.config.jax_default_prng_impl == "threefry2x32"  # type: ignore[attr-defined]
    ):
        return key, lambda data: data
    return None


def _partitionable() -> bool:
    return bool(jax.config.jax_threefry_partitionable)  # type: ignore[attr-defined]


def seed_words(key: jax.Array) -> jax.Array:
    """(2,) uint32: the two words drawn from `key` that seed its counter streams,
    `jax.random.bits(key, (2,), jnp.uint32)`."""
    got = _threefry_data(key)
    if got is None:
        return jax.random.bits(key, (2,), jnp.uint32)
    data = got[0]
    if _partitionable():  # the blocks of counters (0, 0) and (0, 1), each one's words xor-ed
        blocks = _split(data, 2)
        return blocks[:, 0] ^ blocks[:, 1]
    y1, y2 = threefry2x32(data[0], data[1], jnp.zeros(1, jnp.uint32), jnp.ones(1, jnp.uint32))
    return jnp.concatenate([y1, y2])  # one block of counters (0, 1)


def _split(data: jax.Array, num: int) -> jax.Array:
    """(num, 2) uint32: the data of `jax.random.split(key, num)` of threefry key data."""
    if _partitionable():  # counters (0, i): one block per key
        zeros, count = jnp.zeros(num, jnp.uint32), jnp.arange(num, dtype=jnp.uint32)
        y1, y2 = threefry2x32(data[0], data[1], zeros, count)
        return jnp.stack([y1, y2], axis=1)
    counts = jnp.arange(2 * num, dtype=jnp.uint32)
    y1, y2 = threefry2x32(data[0], data[1], counts[:num], counts[num:])
    return jnp.concatenate([y1, y2]).reshape(num, 2)


def split(key: jax.Array, num: int = 2) -> jax.Array:
    """`jax.random.split(key, num)`, the same keys."""
    got = _threefry_data(key)
    if got is None:
        return jax.random.split(key, num)
    data, wrap = got
    return wrap(_split(data, num))


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
