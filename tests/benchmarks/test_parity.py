"""benchmarks.parity: the aggregates across seeds, the league's pooled score, and resuming a
sweep, on made-up runs (no training) with hand-computed expected values."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from benchmarks import parity


def _run(framework: str, seed: int, rates: dict[str, float], folder: str = "") -> dict:
    final = [
        {"opponent": k, "win_rate": v, "games": 8, "ci_low": 0.0, "ci_high": 1.0}
        for k, v in rates.items()
    ]
    return {
        "framework": framework,
        "seed": seed,
        "updates": 3,
        "trained_s": 1.0,
        "final": final,
        "run_dir": folder,
    }


RUNS = [
    _run("torch", 0, {"pursuit": 0.2}),
    _run("torch", 1, {"pursuit": 0.4}),
    _run("torch", 2, {"pursuit": 0.6}),
    _run("jax", 0, {"pursuit": 0.1}),
    _run("jax", 1, {"pursuit": 0.3}),
    _run("jax", 2, {"pursuit": 0.5}),
]


def test_each_framework_gets_the_iqm_of_its_seeds_and_an_interval_around_it():
    agg = parity.aggregate(RUNS, ("pursuit",))
    torch_row, jax_row = agg["frameworks"]["torch/pursuit"], agg["frameworks"]["jax/pursuit"]
    # 25% of 3 runs rounds down to 0 cut from each end: the IQM is the plain mean
    assert torch_row["iqm"] == pytest.approx(0.4)
    assert jax_row["iqm"] == pytest.approx(0.3)
    assert torch_row["win_rates"] == [0.2, 0.4, 0.6] and torch_row["seeds"] == 3
    assert 0.2 <= torch_row["ci_low"] <= 0.4 <= torch_row["ci_high"] <= 0.6


def test_the_probability_of_improvement_counts_the_pairs_pytorch_wins():
    # torch 0.2 beats jax 0.1; 0.4 beats 0.1 and 0.3; 0.6 beats all three: 6 of 9 pairs
    p = parity.aggregate(RUNS, ("pursuit",))["improvement"]["pursuit"]
    assert p["p"] == pytest.approx(6 / 9)
    assert p["ci_low"] <= p["p"] <= p["ci_high"]


def test_the_league_pools_every_pair_and_counts_a_draw_as_half(monkeypatch):
    outcomes = {  # (torch checkpoint, jax checkpoint) -> wins, draws, losses of torch's side
        ("t0", "j0"): (5, 2, 3),
        ("t0", "j1"): (4, 0, 6),
    }
    calls = []

    def evaluate(a, b, scenario, games, seed):
        calls.append(seed)
        w, d, lost = outcomes[(a.split("/")[-2], b.split("/")[-2])]
        return SimpleNamespace(wins=w, draws=d, losses=lost, games=w + d + lost)

    monkeypatch.setattr("gigastep.eval.matches.evaluate", evaluate)
    runs = [_run("torch", 0, {}, "r/t0"), _run("jax", 0, {}, "r/j0"), _run("jax", 1, {}, "r/j1")]
    out = parity.league(runs, "s", games=10)
    assert [p["score"] for p in out["pairs"]] == [pytest.approx(0.6), pytest.approx(0.4)]
    assert out["games"] == 20 and out["score"] == pytest.approx((5 + 1 + 4) / 20)
    assert out["decided_games"] == 18 and out["decided_win_rate"] == pytest.approx(9 / 18)
    assert out["decided_ci_low"] < 0.5 < out["decided_ci_high"]
    assert len(set(calls)) == 2  # each pair plays its own games


def test_a_finished_run_is_read_back_and_a_half_done_one_is_refused(tmp_path, monkeypatch):
    recipe = parity.PRESETS["quick"]
    done = tmp_path / "torch_seed0"
    done.mkdir()
    (done / "result.json").write_text(json.dumps(_run("torch", 0, {"random": 0.5})))
    monkeypatch.setattr(parity, "_train", lambda *a: pytest.fail("trained a finished run"))
    assert parity.train_and_evaluate("torch", 0, recipe, tmp_path, games=4)["seed"] == 0
    (tmp_path / "jax_seed0").mkdir()
    with pytest.raises(ValueError, match="jax_seed0 exists without result.json"):
        parity.train_and_evaluate("jax", 0, recipe, tmp_path, games=4)


def test_the_tables_name_each_run_the_aggregates_and_the_league():
    report = {
        "runs": RUNS,
        "aggregate": parity.aggregate(RUNS, ("pursuit",)),
        "league": {
            "games": 20,
            "score": 0.5,
            "decided_games": 18,
            "decided_win_rate": 0.5,
            "decided_ci_low": 0.29,
            "decided_ci_high": 0.71,
        },
    }
    text = parity.tables(report)
    assert text.count("| torch |") == 3 + 1 and text.count("| jax |") == 3 + 1
    assert "P(PyTorch run > JAX run) vs pursuit: 0.67" in text
    assert "League, PyTorch vs JAX: score 0.500 over 20 games" in text


def test_bad_arguments_fail_before_any_training(tmp_path, capsys):
    for flags, named in (
        (["--games", "0"], "--games must be positive, got 0"),
        (["--seeds", "1", "1"], "--seeds must be distinct"),
        (["--league-games", "-1"], "--league-games must be 0 or more"),
    ):
        with pytest.raises(SystemExit) as err:
            parity.main([*flags, "--out", str(tmp_path / "p")])
        assert err.value.code == 2
        assert named in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_the_team_preset_is_the_cpu_recipe_with_the_team_signal():
    cpu, team = parity.PRESETS["cpu"], parity.PRESETS["team"]
    assert cpu.flags[-2:] == ("--signal", "individual")
    assert team == dataclasses.replace(cpu, flags=(*cpu.flags[:-2], "--signal", "team"))
