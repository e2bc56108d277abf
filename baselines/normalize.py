"""Running observation normalisation and return-based reward scaling.

Both keep their statistics fixed during a rollout, so that every step of a rollout is seen
through the same normalisation (the update then replays exactly what the policy saw), and
merge what the rollout added at its end (`commit`). Sums are accumulated on the device in
float64, with no host synchronisation per step.
"""

from __future__ import annotations

import abc

import torch

__all__ = ["ObsNormalizer", "RewardScaler", "RunningMeanStd"]


class RunningMeanStd:
    """Mean and variance of a stream of vectors of length `size` (float64).

    `add(x, mask)` accumulates the rows of x [N, size] where mask [N] is set; `commit()`
    merges them into the running moments with the parallel update of Chan et al.
    (mean_ab = mean_a + d n_b / n, M2_ab = M2_a + M2_b + d^2 n_a n_b / n).
    """

    def __init__(self, size: int, device=None):
        kw = dict(dtype=torch.float64, device=device)
        self.count = torch.zeros((), **kw)
        self.mean = torch.zeros(size, **kw)
        self.m2 = torch.zeros(size, **kw)
        self._sum = torch.zeros(size, **kw)
        self._sumsq = torch.zeros(size, **kw)
        self._n = torch.zeros((), **kw)

    @property
    def var(self) -> torch.Tensor:
        """Population variance (1 before any data)."""
        return torch.where(self.count > 0, self.m2 / self.count.clamp(min=1), 1.0)

    def add(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        # One step's sums as matrix-vector products in x's precision (a million rows of 90
        # features: ~0.1 s instead of ~0.5 s for float64 elementwise sums), accumulated in
        # float64 across steps.
        m = (
            torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
            if mask is None
            else mask.to(x.dtype)
        )
        self._sum += (m @ x).to(torch.float64)
        self._sumsq += (m @ (x * x)).to(torch.float64)
        self._n += m.sum(dtype=torch.float64)

    def commit(self, reduce=None) -> None:
        """Merge what `add` accumulated; `reduce` (e.g. a sum over processes, in place) is
        applied to the accumulated sums first, so every process merges the same numbers."""
        if reduce is not None:
            for t in (self._sum, self._sumsq, self._n):
                reduce(t)
        n_b = self._n
        mean_b = self._sum / n_b.clamp(min=1)
        m2_b = (self._sumsq - n_b * mean_b * mean_b).clamp(min=0)
        n = self.count + n_b
        delta = mean_b - self.mean
        w = torch.where(n > 0, n_b / n.clamp(min=1), 0.0)
        self.mean = self.mean + delta * w
        self.m2 = self.m2 + m2_b + delta * delta * self.count * w
        self.count = n
        for t in (self._sum, self._sumsq, self._n):
            t.zero_()

    def state_dict(self) -> dict:
        return {"count": self.count.clone(), "mean": self.mean.clone(), "m2": self.m2.clone()}

    def load_state_dict(self, state: dict) -> None:
        device = self.mean.device
        self.count = state["count"].to(device, torch.float64).clone()
        self.mean = state["mean"].to(device, torch.float64).clone()
        self.m2 = state["m2"].to(device, torch.float64).clone()


class _RunningStatistic(abc.ABC):
    """A `RunningMeanStd` merged once per rollout (`commit`), with its derived constants
    refreshed then (`_refresh`), and a state dict of the statistics only."""

    enabled: bool
    stats: RunningMeanStd

    @abc.abstractmethod
    def _refresh(self) -> None:
        """Recompute the constants derived from the statistics."""

    def commit(self, reduce=None) -> None:
        """Merge what the rollout added (summed over processes by `reduce`)."""
        if self.enabled:
            self.stats.commit(reduce)
            self._refresh()

    def state_dict(self) -> dict:
        """The statistics (the same in every process)."""
        return self.stats.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.stats.load_state_dict(state)
        self._refresh()


class ObsNormalizer(_RunningStatistic):
    """(x - mean) / sqrt(var + 1e-8), clipped to [-clip, clip], float32. Disabled: identity."""

    def __init__(self, size: int, device=None, enabled: bool = True, clip: float = 10.0):
        self.enabled = enabled and size > 0
        self.stats = RunningMeanStd(max(size, 0), device)
        self.clip = clip
        self._refresh()

    def _refresh(self) -> None:
        scale = torch.rsqrt(self.stats.var + 1e-8)
        self._scale = scale.float()
        self._offset = (-self.stats.mean * scale).float()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        # x * scale - mean * scale in one pass
        return torch.addcmul(self._offset, x, self._scale).clamp_(-self.clip, self.clip)

    def add(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        if self.enabled:
            self.stats.add(x, mask)


class RewardScaler(_RunningStatistic):
    """Rewards divided by the running standard deviation of the discounted return.

    Per agent, G <- gamma G + r along its trajectory (G restarts where the trajectory ends:
    the agent died or its episode ended); the variance of G over alive agents is tracked,
    and r / sqrt(var(G) + 1e-8) is returned (no mean is subtracted: the sign of a reward
    stays); while every G seen so far is equal (no spread yet), the scale is 1. Disabled:
    identity.
    """

    def __init__(self, n: int, gamma: float, device=None, enabled: bool = True):
        self.enabled = enabled
        self.gamma = gamma
        self.stats = RunningMeanStd(1, device)
        self.returns = torch.zeros(n, dtype=torch.float64, device=device)
        self._refresh()

    def _refresh(self) -> None:
        # Returns that were all equal so far (typically: no reward yet) say nothing about
        # their scale; dividing by sqrt(0 + 1e-8) would multiply the first rewards by 1e4.
        # Until the returns have a spread, the scale stays 1.
        var = self.stats.var[0]
        var = torch.where(self.stats.m2[0] > 0, var, torch.ones_like(var))
        # a float32 scalar tensor, not a Python float: no host read when a rollout ends
        self._scale = torch.rsqrt(var + 1e-8).float()

    def __call__(self, rewards: torch.Tensor, alive: torch.Tensor, cont: torch.Tensor):
        """rewards [N] float32 of agents that acted (`alive`); `cont` [N]: the trajectory goes
        on after this step. Returns the scaled rewards."""
        if not self.enabled:
            return rewards
        self.returns.mul_(self.gamma).add_(rewards.to(torch.float64))
        self.stats.add(self.returns.unsqueeze(-1), alive)
        self.returns.mul_(cont.to(torch.float64))
        return rewards * self._scale
