"""Running statistics of the JAX trainer: float32 moments (count, mean, m2) merged once per
rollout from masked sums (Chan et al.'s parallel update), as `baselines.normalize` keeps
them in float64; observation normalisation and the reward scale read them."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["add_sums", "merge", "moments", "normalize", "reward_scale", "sums", "variance"]


def moments(size: int) -> dict:
    """Moments of `size` features before any data."""
    return {"count": jnp.zeros(()), "mean": jnp.zeros(size), "m2": jnp.zeros(size)}


def variance(m: dict) -> jax.Array:
    """Population variance (1 before any data)."""
    return jnp.where(m["count"] > 0, m["m2"] / jnp.maximum(m["count"], 1.0), 1.0)


def normalize(m: dict, x: jax.Array, enabled: bool) -> jax.Array:
    """(x - mean) / sqrt(var + 1e-8) clipped to [-10, 10] (x when not `enabled`)."""
    if not enabled or x.shape[-1] == 0:
        return x
    return jnp.clip((x - m["mean"]) * jax.lax.rsqrt(variance(m) + 1e-8), -10.0, 10.0)


def reward_scale(m: dict) -> jax.Array:
    """1 / sqrt(var + 1e-8) of the discounted returns' moments `m`; 1 while they have no
    spread (as `baselines.normalize.RewardScaler`)."""
    var = jnp.where(m["m2"][0] > 0, variance(m)[0], 1.0)
    return jax.lax.rsqrt(var + 1e-8)


def sums(x: jax.Array, mask: jax.Array) -> tuple:
    """(sum, sum of squares, count) of the rows of x [N, F] where mask [N]."""
    w = mask.astype(x.dtype)
    return (w @ x, w @ (x * x), w.sum())


def merge(m: dict, sums: tuple) -> dict:
    """Chan et al.'s parallel update of `m` with the (sum, sum of squares, count) `sums`."""
    s, ss, n_b = sums
    mean_b = s / jnp.maximum(n_b, 1.0)
    m2_b = jnp.maximum(ss - n_b * mean_b * mean_b, 0.0)
    n = m["count"] + n_b
    delta = mean_b - m["mean"]
    w = jnp.where(n > 0, n_b / jnp.maximum(n, 1.0), 0.0)
    return {
        "count": n,
        "mean": m["mean"] + delta * w,
        "m2": m["m2"] + m2_b + delta * delta * m["count"] * w,
    }


def add_sums(a: tuple, b: tuple) -> tuple:
    """Two `sums` added."""
    return tuple(x + y for x, y in zip(a, b, strict=True))
