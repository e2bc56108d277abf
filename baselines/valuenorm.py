"""Value normalisation (`--value-norm`): the critic learns returns standardised by running
statistics, and its outputs are mapped back to the return scale for GAE.

A `ValueNorm` keeps a debiased exponential moving average (factor `BETA` per update) of the
mean and mean square of the returns of the learner's alive agents, as float64 buffers of the
policy (so they travel with its `state_dict`: checkpoints, pool snapshots and exported
policies). The value head's output v' is read as a standardised value; the policy returns
``V = mean + std * v'`` wherever a value is used (acting, bootstrap targets, replay), and the
update's value loss compares ``(V - mean) / std`` with ``(R - mean) / std`` (MAPPO's
ValueNorm; Yu et al. 2022 found it matters for multi-agent PPO).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BETA", "ValueNorm", "normalized_value_terms", "update_value_norm"]

BETA = 0.99
"""Weight of the old statistics at each update (a horizon of about 100 updates)."""
_EPS = 1e-5


class ValueNorm(nn.Module):
    """Running mean/std of returns (see the module doc); identity before its first update."""

    mean: torch.Tensor
    mean_sq: torch.Tensor
    weight: torch.Tensor
    """float64 scalars: the weighted sums of the moments and of the weights (debiasing)."""

    def __init__(self):
        super().__init__()
        f64 = torch.float64
        self.register_buffer("mean", torch.zeros((), dtype=f64))
        self.register_buffer("mean_sq", torch.zeros((), dtype=f64))
        self.register_buffer("weight", torch.zeros((), dtype=f64))

    def moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) float32 scalars: the debiased statistics, (0, 1) before any update."""
        w = self.weight.clamp(min=_EPS)
        mean = torch.where(self.weight > 0, self.mean / w, 0.0)
        var = torch.where(self.weight > 0, self.mean_sq / w - mean * mean, 1.0)
        return mean.float(), var.clamp(min=_EPS).sqrt().float()

    def denormalize(self, v: torch.Tensor) -> torch.Tensor:
        """Standardised values -> the return scale."""
        mean, std = self.moments()
        return v * std + mean

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Return-scale values -> standardised."""
        mean, std = self.moments()
        return (x - mean) / std

    @torch.no_grad()
    def update(self, returns: torch.Tensor, mask: torch.Tensor, reduce) -> None:
        """Fold in the returns [T, N] where `mask` (summed over processes by `reduce`)."""
        r = torch.where(mask, returns, 0.0).to(torch.float64)
        sums = reduce(torch.stack([mask.sum().to(torch.float64), r.sum(), (r * r).sum()]))
        if float(sums[0]) < 1:
            return
        self.mean.mul_(BETA).add_((1 - BETA) * sums[1] / sums[0])
        self.mean_sq.mul_(BETA).add_((1 - BETA) * sums[2] / sums[0])
        self.weight.mul_(BETA).add_(1 - BETA)


def update_value_norm(net: nn.Module, returns, mask, reduce) -> None:
    """The update's hook: fold a rollout's returns into `net`'s `ValueNorm` (if it has one)."""
    norm = getattr(net, "value_norm", None)
    if norm is not None:
        norm.update(returns, mask, reduce)


def normalized_value_terms(net: nn.Module, values, old_values, returns):
    """The loss's hook: (values, old values, returns) on the scale the value loss compares,
    standardised by `net`'s `ValueNorm`, unchanged without one."""
    norm = getattr(net, "value_norm", None)
    if norm is None:
        return values, old_values, returns
    return norm.normalize(values), norm.normalize(old_values), norm.normalize(returns)
