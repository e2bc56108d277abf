"""Action and observation spaces on the JAX side, convertible to Gymnasium spaces."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Box", "Discrete", "Tuple"]


@dataclass(frozen=True, eq=False)
class Box:
    """Values of `shape` and `dtype` with element-wise bounds [low, high]."""

    low: np.ndarray
    high: np.ndarray
    shape: tuple[int, ...]
    dtype: np.dtype

    @staticmethod
    def create(low, high, shape, dtype) -> Box:
        dtype = np.dtype(dtype)
        low = np.broadcast_to(np.asarray(low, dtype), shape)
        high = np.broadcast_to(np.asarray(high, dtype), shape)
        return Box(low=low, high=high, shape=tuple(shape), dtype=dtype)

    def sample(self, key) -> jax.Array:
        """A uniform sample (bounded dims); unbounded dims draw from a standard normal."""
        if np.issubdtype(self.dtype, np.integer):
            return jax.random.randint(
                key, self.shape, self.low.astype(np.int64), self.high.astype(np.int64) + 1
            ).astype(self.dtype)
        low, high = self.low.astype(np.float32), self.high.astype(np.float32)
        bounded = np.isfinite(low) & np.isfinite(high)
        k1, k2 = jax.random.split(key)
        u = jax.random.uniform(k1, self.shape, jnp.float32)
        safe_low, safe_high = np.where(bounded, low, 0), np.where(bounded, high, 1)
        x = jnp.where(bounded, safe_low + u * (safe_high - safe_low),
                      jax.random.normal(k2, self.shape))  # fmt: skip
        return x.astype(self.dtype)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        if x.shape != self.shape:
            return False
        if np.issubdtype(self.dtype, np.integer) != np.issubdtype(x.dtype, np.integer):
            return False
        return bool(np.all(x >= self.low) & np.all(x <= self.high))

    def to_gymnasium(self):
        import gymnasium

        return gymnasium.spaces.Box(
            low=self.low, high=self.high, shape=self.shape, dtype=self.dtype
        )

    def __repr__(self) -> str:
        lo, hi = self.low.flat[0], self.high.flat[0]
        return f"Box({lo}, {hi}, {self.shape}, {self.dtype})"


@dataclass(frozen=True)
class Discrete:
    """Integers 0..n-1."""

    n: int
    shape: tuple[int, ...] = ()
    dtype: np.dtype = np.dtype(np.int32)

    def sample(self, key) -> jax.Array:
        return jax.random.randint(key, (), 0, self.n, jnp.int32)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        return bool(x.shape == () and np.issubdtype(x.dtype, np.integer) and 0 <= x < self.n)

    def to_gymnasium(self):
        import gymnasium

        return gymnasium.spaces.Discrete(self.n)


@dataclass(frozen=True)
class Tuple:
    """A tuple of spaces (the `rgb_vector` observation)."""

    spaces: tuple

    def sample(self, key):
        keys = jax.random.split(key, len(self.spaces))
        return tuple(s.sample(k) for s, k in zip(self.spaces, keys, strict=True))

    def contains(self, x) -> bool:
        return (isinstance(x, tuple) and len(x) == len(self.spaces)
                and all(s.contains(v) for s, v in zip(self.spaces, x, strict=True)))  # fmt: skip

    def to_gymnasium(self):
        import gymnasium

        return gymnasium.spaces.Tuple([s.to_gymnasium() for s in self.spaces])

    def __getitem__(self, i):
        return self.spaces[i]

    def __len__(self):
        return len(self.spaces)
