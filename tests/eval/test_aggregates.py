"""The rliable aggregates of gigastep.eval.aggregates, against hand-computed values."""

from __future__ import annotations

import pytest

from gigastep.eval.aggregates import (
    interquartile_mean,
    probability_of_improvement,
    stratified_bootstrap_ci,
)


def _pooled_mean(groups) -> float:
    return sum(sum(g) for g in groups) / sum(len(g) for g in groups)


def test_the_interquartile_mean_averages_the_middle_half_of_the_pooled_runs():
    # 8 runs: drop 1, 2 and 7, 8 -> mean(3, 4, 5, 6) = 4.5; an outlier does not move it
    assert interquartile_mean([[1, 2, 3, 4, 5, 6, 7, 8]]) == pytest.approx(4.5)
    assert interquartile_mean({"a": [1, 2, 3, 4], "b": [5, 6, 7, 800]}) == pytest.approx(4.5)


def test_the_bootstrap_resamples_within_each_task():
    # Task a scores 0 in every run, task b 1: every stratified resample keeps three runs of
    # each, so the pooled mean is 0.5 in all of them; resampling the six runs together would
    # give means from 0 to 1.
    low, high = stratified_bootstrap_ci({"a": [0, 0, 0], "b": [1, 1, 1]}, _pooled_mean)
    assert (low, high) == (pytest.approx(0.5), pytest.approx(0.5))


def test_the_bootstrap_interval_of_spread_runs_holds_the_estimate_and_narrows_with_runs():
    few = [0.1, 0.4, 0.5, 0.9]
    low, high = stratified_bootstrap_ci([few], resamples=500)
    assert low <= interquartile_mean([few]) <= high and high - low > 0
    low_m, high_m = stratified_bootstrap_ci([few * 8], resamples=500)
    assert high_m - low_m < high - low


def test_probability_of_improvement_counts_winning_pairs_and_half_the_ties():
    # x = (1, 2, 3) vs y = (2, 2, 0): pairs won by x: 1 (1 > 0), 2 ties and 1 win for x = 2,
    # 3 wins for x = 3 -> (1 + 2 + 3) / 9 = 2/3
    p, low, high = probability_of_improvement([[1, 2, 3]], [[2, 2, 0]], resamples=500)
    assert p == pytest.approx(2 / 3)
    assert 0 <= low <= p <= high <= 1
    # two tasks: x always wins the first (1), ties the second everywhere (1/2) -> 3/4
    p, _, _ = probability_of_improvement([[5, 6], [1, 1]], [[1, 2], [1, 1]], resamples=100)
    assert p == pytest.approx(0.75)


def test_aggregates_refuse_empty_tasks_and_mismatched_configurations():
    with pytest.raises(ValueError, match="at least one run"):
        interquartile_mean({"a": []})
    with pytest.raises(ValueError, match="tasks"):
        probability_of_improvement([[1], [2]], [[1]])
