"""The clipped PPO objective over masked [T, N] minibatches (a pure function)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PPOLoss", "ppo_loss"]


@dataclass
class PPOLoss:
    """The total loss and its parts (scalar tensors; only `loss` keeps a graph)."""

    loss: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_frac: torch.Tensor


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
    clip: float,
    vf_coef: float,
    ent_coef: float,
    clip_value: bool = False,
    norm_adv: bool = True,
    count=None,
    adv_moments=None,
    value_mask=None,
    value_count=None,
) -> PPOLoss:
    r"""Clipped-surrogate PPO loss, averaged over the entries where `mask` is set.

    .. math::

        L = \overline{\max(-A\rho, -A\,\mathrm{clip}(\rho, 1 \pm \epsilon))}
            + c_v\,\overline{\tfrac12 (V - R)^2} - c_e\,\overline{H},
        \qquad \rho = e^{\log\pi - \log\pi_{old}},

    where the bar is the mean over masked entries (the value term's over `value_mask`'s,
    by default the same). Masked-out entries (agents dead before
    the step) contribute exactly nothing, whatever they hold (NaN included): they are
    selected away with `torch.where`, not multiplied by zero. With `norm_adv` the advantages
    are standardised over the masked entries first; with `clip_value` the value loss is the
    larger of the plain and the clipped (``old + clip(V - old, ±ε)``) squared errors.

    Args:
        logp, old_logp, advantages, values, old_values, returns, entropy: float [T, N].
        mask: bool [T, N].
        count: the number of masked entries the means divide by (default: this batch's);
            a process holding part of a minibatch passes the whole minibatch's, so that
            the parts' losses and gradients sum to the minibatch's.
        adv_moments: (mean, std) of the minibatch's masked advantages for `norm_adv`
            (default: computed from this batch).
        value_mask: bool [T, N], the entries of the value loss (default: `mask`); the team
            signal trains the values of dead agents' rows too (`baselines.buffer`).
        value_count: the number of `value_mask` entries the value loss divides by (as
            `count`; default: this batch's).

    Returns:
        A `PPOLoss`; `approx_kl` is the mean of ``(ρ - 1) - log ρ`` (Schulman's estimator),
        `clip_frac` the fraction of entries with ``|ρ - 1| > ε``.
    """
    if count is None:
        count = mask.sum()
    count = torch.as_tensor(count, dtype=logp.dtype, device=logp.device).clamp(min=1)

    def mean(x):
        return torch.where(mask, x, 0.0).sum() / count

    adv = torch.where(mask, advantages, 0.0)
    if norm_adv:
        if adv_moments is None:
            centre = mean(adv)
            adv_moments = (centre, torch.sqrt(mean((adv - centre) ** 2)))
        centre, std = adv_moments
        adv = (adv - centre) / (std + 1e-8)
    log_ratio = torch.where(mask, logp - old_logp, 0.0)
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1 - clip, 1 + clip)
    policy = mean(torch.maximum(-adv * ratio, -adv * clipped))
    if value_mask is None:
        value_mask, value_count = mask, count
    elif value_count is None:
        value_count = value_mask.sum()
    value_count = torch.as_tensor(value_count, dtype=logp.dtype, device=logp.device).clamp(min=1)
    target = torch.where(value_mask, returns, 0.0)
    value_sq = 0.5 * (values - target) ** 2
    if clip_value:
        old = torch.where(value_mask, old_values, 0.0)
        capped = old + (values - old).clamp(-clip, clip)
        value_sq = torch.maximum(value_sq, 0.5 * (capped - target) ** 2)
    value = torch.where(value_mask, value_sq, 0.0).sum() / value_count
    ent = mean(entropy)
    loss = policy + vf_coef * value - ent_coef * ent
    with torch.no_grad():
        approx_kl = mean((ratio - 1) - log_ratio)
        clip_frac = mean(((ratio - 1).abs() > clip).float())
    return PPOLoss(loss, policy.detach(), value.detach(), ent.detach(), approx_kl, clip_frac)
