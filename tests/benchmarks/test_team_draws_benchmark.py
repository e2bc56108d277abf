"""benchmarks/team_draws.py: the row it reports, and its refusal of a fixed scenario."""

from __future__ import annotations

import pytest

from benchmarks import team_draws


def test_a_fixed_scenario_is_refused_before_any_compute():
    with pytest.raises(ValueError, match="'identical_5_vs_5' is not a distribution"):
        team_draws.measure("identical_5_vs_5", batch=2, steps=2, repeats=1)


@pytest.mark.slow
def test_a_row_reports_medians_ranges_and_the_ratio():
    row = team_draws.measure("identical_1-5_vs_1-5_fobs_vec_void_cont", batch=2, steps=3, repeats=2)
    for label in ("fixed", "drawn"):
        lo, hi = row[f"{label}_range"]
        assert 0 < lo <= row[f"{label}_median"] <= hi
    assert row["ratio"] == pytest.approx(row["drawn_median"] / row["fixed_median"])
