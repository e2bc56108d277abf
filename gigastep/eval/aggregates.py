"""Aggregates over tasks and runs, the rliable method (Agarwal et al. 2021, "Deep RL at the
edge of the statistical precipice"): the interquartile mean (IQM), stratified percentile
bootstrap intervals and the probability of improvement, on `scores[task]` = one score per run.

They use scipy (the `eval` extra: ``pip install "gigastep[eval]"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["interquartile_mean", "probability_of_improvement", "stratified_bootstrap_ci"]

Scores = Mapping[str, Sequence[float]] | Sequence[Sequence[float]]


def _tasks(scores: Any) -> list[Any]:
    """Score arrays per task from a dict task -> runs' scores, or a sequence of them."""
    import numpy as np

    groups = list(scores.values()) if isinstance(scores, dict) else list(scores)
    out = [np.asarray(g, dtype=np.float64).reshape(-1) for g in groups]
    if not out or any(g.size == 0 for g in out):
        raise ValueError(
            f"scores need at least one run in every task, got sizes {[g.size for g in out]}"
        )
    return out


def interquartile_mean(scores: Any) -> float:
    """The interquartile mean of every run's score of every task pooled: the mean of the
    middle 50% (scipy.stats.trim_mean with 25% cut from each end).

    Args:
        scores: dict task -> runs' scores, or a sequence of per-task score sequences (a
            single task: `[scores]`).
    """
    import numpy as np
    from scipy.stats import trim_mean

    return float(trim_mean(np.concatenate(_tasks(scores)), 0.25))


def _seeded(bootstrap: Callable[..., Any], seed: int) -> dict[str, int]:
    """The seed keyword of scipy.stats.bootstrap (`rng` from scipy 1.15, `random_state`
    before)."""
    import inspect

    name = "rng" if "rng" in inspect.signature(bootstrap).parameters else "random_state"
    return {name: seed}


def stratified_bootstrap_ci(
    scores: Any,
    statistic: Callable[[list[Any]], float] = interquartile_mean,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """A percentile bootstrap interval of `statistic`, resampling the runs of each task
    apart (stratified by task: every resample keeps each task's number of runs), with
    `scipy.stats.bootstrap` (each task one independent sample).

    Returns:
        (low, high).
    """
    from scipy.stats import bootstrap

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    groups = _tasks(scores)
    result = bootstrap(
        tuple(groups),
        lambda *g: statistic(list(g)),
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=False,
        paired=False,
        **_seeded(bootstrap, seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _improvement(x: Any, y: Any) -> float:
    """P(X > Y) of one task: the share of (run of x, run of y) pairs where x wins, ties 1/2."""
    import numpy as np

    x, y = np.asarray(x)[:, None], np.asarray(y)[None, :]
    return float(np.mean((x > y) + 0.5 * (x == y)))


def probability_of_improvement(
    x: Any, y: Any, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """The probability that a run of configuration x scores above a run of y on a random
    task (the mean over tasks of the Mann-Whitney statistic, ties counted 1/2), with its
    stratified percentile bootstrap interval (x's and y's runs resampled per task).

    Args:
        x, y: scores per task of the two configurations (the same tasks, in the same order).

    Returns:
        (probability, low, high).
    """
    from scipy.stats import bootstrap

    xs, ys = _tasks(x), _tasks(y)
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} tasks and y {len(ys)}; they must be the same")
    k = len(xs)

    def stat(*groups: Any) -> float:
        return sum(_improvement(a, b) for a, b in zip(groups[:k], groups[k:], strict=True)) / k

    point = stat(*xs, *ys)
    result = bootstrap(
        (*xs, *ys),
        stat,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=False,
        paired=False,
        **_seeded(bootstrap, seed),
    )
    ci = result.confidence_interval
    return point, float(ci.low), float(ci.high)
