"""What an evaluation during training must write, for both trainers (PyTorch and JAX): one row
per evaluation with its Wilson interval, the best evaluation in the checkpoint and best.pt,
and training rows untouched by the evaluations. A helper module, not a test module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from baselines.checkpoint import load_checkpoint, load_policy


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_evaluations(run: Path, plain: Path, updates: list[int], games: int, per_update: int):
    """`run` evaluated `games` games against random at `updates`; `plain` is the same run
    without evaluations; every update plays `per_update` agent-steps."""
    evals = rows(run / "eval.jsonl")
    assert [r["update"] for r in evals] == updates
    for r in evals:
        n, p = r["games/random"], r["win_rate/random"]
        assert n == games
        z = 1.959964  # Wilson score interval, 95%, by hand
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
        assert r["win_rate_lo/random"] == pytest.approx(centre - half, abs=1e-5)
        assert r["win_rate_hi/random"] == pytest.approx(centre + half, abs=1e-5)
        assert r["score"] == p and r["agent_steps"] == r["update"] * per_update
    best = max(evals, key=lambda r: (r["score"], -r["update"]))
    ckpt = load_checkpoint(run / "checkpoint.pt")
    assert ckpt["evaluation"]["update"] == best["update"]
    assert ckpt["evaluation"]["score"] == pytest.approx(best["score"], rel=1e-6)
    assert load_policy(run / "best.pt").update == best["update"]
    # evaluating draws no training randomness: the same training rows as without it
    train = [r["policy_loss"] for r in rows(run / "metrics.jsonl")]
    assert train == [r["policy_loss"] for r in rows(plain / "metrics.jsonl")]
