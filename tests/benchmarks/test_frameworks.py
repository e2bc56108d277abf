"""`benchmarks.frameworks`: the rows it measures and the table it renders."""

from __future__ import annotations

import pytest

from benchmarks import frameworks


def _row(kind: str, end_to_end: float, **extra) -> dict:
    return {
        "kind": kind,
        "seeds": extra.pop("seeds", 1),
        "num_envs": 512,
        "end_to_end_samples_per_s": end_to_end,
        "end_to_end_min": end_to_end * 0.9,
        "end_to_end_max": end_to_end * 1.1,
        "peak_rss_mb": 1000.0,
        "warmup_s": 2.0,
        **extra,
    }


def test_the_table_gives_each_row_its_ratio_to_pytorch_eager_and_skips_failed_rows():
    rows = [
        _row("torch", 80_000.0),
        _row("jax", 100_000.0),
        _row("jax-seeds", 120_000.0, seeds=8),
        {"kind": "torch-compiled", "error": "timed out"},
    ]
    table = frameworks.render(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + 3  # header, rule, the three measured rows
    assert "| PyTorch eager |" in lines[2] and "| 1.00 |" in lines[2]
    assert "| JAX, one program |" in lines[3] and "| 1.25 |" in lines[3]  # 100 k / 80 k
    assert "| JAX, 8 runs vmapped |" in lines[4] and "| 1.50 |" in lines[4]
    assert "compiled" not in table


def test_without_a_pytorch_row_the_ratio_is_left_empty():
    table = frameworks.render([_row("jax", 100_000.0)])
    assert "| – |" in table


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jax", "jax-phases"])
def test_the_jax_rows_measure_the_smoke_recipe_with_its_pool_opponents(kind):
    # the smoke preset's scenario is symmetric, so its `auto` mix includes the pool
    case = frameworks.Case(kind, "smoke", batch=8, repeats=1)
    row = frameworks.run_case(case)
    assert row["kind"] == kind and row["num_envs"] == 8
    assert row["end_to_end_samples_per_s"] > 0 and row["warmup_s"] > 0
    if kind == "jax-phases":
        assert row["rollout_agent_steps_per_s"] > 0 and row["update_samples_per_s"] > 0
