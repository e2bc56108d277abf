"""The throughput benchmark's `--driver rollout` (the library's `gigastep.rollout`) and
`benchmarks/scaling.py`'s speed-up table. They check that the harness runs and counts
correctly; they say nothing about speed."""

from __future__ import annotations

import pytest

from benchmarks import scaling, throughput


def test_the_rollout_driver_times_gigastep_rollout_and_counts_its_steps():
    case = throughput.Case(
        "identical_1_vs_1",
        "pobs_vec",
        batch=2,
        steps=3,
        repeats=2,
        driver="rollout",
        step_fn="autoreset",
    )
    row = throughput.run_case(case)
    assert row["driver"] == "rollout" and row["steps"] == 3 and row["batch"] == 2
    median = row["timing"]["median_s"]
    assert row["agent_steps_per_s"] == pytest.approx(3 * 2 * 2 / median)
    assert row["compile_s"] >= 0 and row["xla_compile_s"] is None


def test_the_rollout_driver_refuses_a_network_policy():
    with pytest.raises(ValueError, match="--driver rollout plays uniform random actions"):
        throughput.cases_from_options(throughput.Options(driver=["rollout"], policy="mlp"))


def _row(native, batch, devices, rate):
    return {
        "native": native,
        "batch": batch,
        "devices": devices,
        "agent_steps_per_s": rate,
        "timing": {"cpu_median_s": 1.0},
        "obs_kernel": "jax",
    }


def test_speedups_divide_each_rate_by_the_one_device_rate_of_its_mode_and_batch():
    rows = [
        _row("off", 4096, 1, 2e6),
        _row("off", 4096, 2, 3.4e6),
        _row("on", 4096, 1, 7e6),
        _row("on", 4096, 2, 8.4e6),
        {"native": "on", "batch": 256, "error": "timed out"},
    ]
    table = {(t["native"], t["devices"]): t["speedup"] for t in scaling.speedups(rows)}
    assert table == {
        ("off", 1): 1.0,
        ("off", 2): pytest.approx(1.7),
        ("on", 1): 1.0,
        ("on", 2): pytest.approx(1.2),
    }
    lines = scaling._goal_lines(scaling.speedups(rows))
    assert lines == ["goal (pure JAX, 2 devices, 4096 games, >= 1.6x): 1.70x met"]


def test_scaling_refuses_batches_that_do_not_split_over_the_devices():
    with pytest.raises(ValueError, match=r"--devices 3: every batch must split evenly \(not "):
        scaling._cases(scaling.Options(batch=[1024, 4096], devices=[1, 3]))
