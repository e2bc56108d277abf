r"""GAE, the training signal and the clipped PPO loss in JAX: pure functions, the twins of
`baselines.buffer.compute_gae`, `baselines.buffer.signal_rewards` and
`baselines.loss.ppo_loss` (same maths, same masking; see their docs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["compute_gae", "ppo_loss", "signal_rewards", "trajectory_flags"]


def signal_rewards(signal: str, rewards, score, teams):
    """Every agent's training reward of one step (`baselines.buffer.signal_rewards`): the
    game's rewards (individual), or its team's sum of the game's own rewards plus its own
    shaping (team).

    Args:
        rewards: float32 [B, n]. score: float32 [B, n] or None. teams: int [n] (numpy or jax).

    Returns:
        float32 [B, n].
    """
    if signal == "individual":
        return rewards
    if signal != "team":
        raise ValueError(f"signal must be individual or team, got {signal!r}")
    game = rewards if score is None else score
    teams = jnp.asarray(teams)
    team_sum = game @ jax.nn.one_hot(teams, 2, dtype=game.dtype)  # [B, 2]
    shared = jnp.take(team_sum, teams, axis=1)  # [B, n]
    return shared if score is None else shared + (rewards - score)


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


def trajectory_flags(signal: str, alive_after, ended, truncated):
    """(cont, boot) of one step's rows (`baselines.buffer.trajectory_flags`), bool [N]."""
    if signal == "team":
        return ~ended, truncated
    return alive_after & ~ended, alive_after & truncated


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
    value_mask=None,
):
    """The clipped PPO objective averaged over the entries where `mask` is set.

    Args:
        logp, old_logp, advantages, values, old_values, returns, entropy: float32 [T, N].
        mask: bool [T, N]; masked-out entries contribute nothing (selected away, NaN too).
        value_mask: bool [T, N], the entries of the value loss (default: `mask`).

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
    vmask = mask if value_mask is None else value_mask
    target = jnp.where(vmask, returns, 0.0)
    value_sq = 0.5 * (values - target) ** 2
    if clip_value:
        old = jnp.where(vmask, old_values, 0.0)
        capped = old + jnp.clip(values - old, -clip, clip)
        value_sq = jnp.maximum(value_sq, 0.5 * (capped - target) ** 2)
    if value_mask is None:
        value = mean(value_sq)
    else:
        value_count = jnp.maximum(value_mask.sum(), 1).astype(logp.dtype)
        value = jnp.where(value_mask, value_sq, 0.0).sum() / value_count
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
