r"""GAE and the clipped PPO loss in JAX: pure functions, the twins of `baselines.buffer.
compute_gae` and `baselines.loss.ppo_loss` (same maths, same masking; see their docs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["compute_gae", "ppo_loss"]


def compute_gae(rewards, values, cont, boot, final_values, next_values, gamma, lam):
    r"""Advantages and returns of one rollout (a reverse `lax.scan`).

    .. math::

        \delta_t = r_t + \gamma\,(c_t V_{t+1} + b_t V^{final}_t) - V_t, \qquad
        A_t = \delta_t + \gamma \lambda\, c_t A_{t+1}, \qquad R_t = A_t + V_t.

    Args:
        rewards, values, final_values: float32 [T, N].
        cont, boot: bool [T, N] (see `baselines.buffer`).
        next_values: float32 [N], the values after the last step.
        gamma, lam: discount and GAE lambda (floats or traced scalars).

    Returns:
        (advantages, returns), float32 [T, N].
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must have shape [T, N], got {rewards.shape}")
    for name, x in (("values", values), ("cont", cont), ("boot", boot), ("final", final_values)):
        if x.shape != rewards.shape:
            raise ValueError(f"{name} must have shape {rewards.shape}, got {x.shape}")
    if next_values.shape != rewards.shape[1:]:
        raise ValueError(
            f"next_values must have shape {rewards.shape[1:]}, got {next_values.shape}"
        )
    c = cont.astype(values.dtype)
    following = jnp.concatenate([values[1:], next_values[None]])
    deltas = rewards + gamma * (c * following + jnp.where(boot, final_values, 0.0)) - values

    def back(running, xs):
        delta, c_t = xs
        running = delta + gamma * lam * c_t * running
        return running, running

    _, advantages = jax.lax.scan(back, jnp.zeros_like(next_values), (deltas, c), reverse=True)
    return advantages, advantages + values


def ppo_loss(
    logp,
    old_logp,
    advantages,
    values,
    old_values,
    returns,
    entropy,
    mask,
    *,
    clip,
    vf_coef,
    ent_coef,
    clip_value=False,
    norm_adv=True,
):
    """The clipped PPO objective averaged over the entries where `mask` is set.

    Args:
        logp, old_logp, advantages, values, old_values, returns, entropy: float32 [T, N].
        mask: bool [T, N]; masked-out entries contribute nothing (selected away, NaN too).

    Returns:
        (loss, parts): the scalar loss and a dict of policy, value, entropy, approx_kl and
        clip_frac (the last two without gradients).
    """
    count = jnp.maximum(mask.sum(), 1).astype(logp.dtype)

    def mean(x):
        return jnp.where(mask, x, 0.0).sum() / count

    adv = jnp.where(mask, advantages, 0.0)
    if norm_adv:
        centre = mean(adv)
        std = jnp.sqrt(mean((adv - centre) ** 2))
        adv = (adv - centre) / (std + 1e-8)
    log_ratio = jnp.where(mask, logp - old_logp, 0.0)
    ratio = jnp.exp(log_ratio)
    policy = mean(jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - clip, 1 + clip)))
    target = jnp.where(mask, returns, 0.0)
    value_sq = 0.5 * (values - target) ** 2
    if clip_value:
        old = jnp.where(mask, old_values, 0.0)
        capped = old + jnp.clip(values - old, -clip, clip)
        value_sq = jnp.maximum(value_sq, 0.5 * (capped - target) ** 2)
    value = mean(value_sq)
    ent = mean(entropy)
    loss = policy + vf_coef * value - ent_coef * ent
    ratio, log_ratio = jax.lax.stop_gradient(ratio), jax.lax.stop_gradient(log_ratio)
    parts = {
        "policy_loss": policy,
        "value_loss": value,
        "entropy": ent,
        "approx_kl": mean((ratio - 1) - log_ratio),
        "clip_frac": mean((jnp.abs(ratio - 1) > clip).astype(logp.dtype)),
    }
    return loss, parts
