"""The trainer's correctness fixes: TensorBoard history kept on resume, the learning-rate
schedule (resumable, over updates or the time budget), value normalisation and a separate
critic, pool opponents kept for their episode, and evaluation during training."""

from __future__ import annotations

import pytest

from baselines.metrics import MetricsLogger

COLUMNS = ["update", "agent_steps", "wall_s", "lr"]


def _scalars(run_dir, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]


def test_resuming_keeps_the_tensorboard_history_before_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    first = MetricsLogger(tmp_path, COLUMNS, plots=False)
    for u in (1, 2, 3):  # update 3 was logged, then the run died before its checkpoint
        first.log({"update": u, "agent_steps": 100 * u, "wall_s": 1.0 * u, "lr": 0.1 * u})
    first.close()
    resumed = MetricsLogger(tmp_path, COLUMNS, resume_update=2, resume_step=200, plots=False)
    resumed.log({"update": 3, "agent_steps": 300, "wall_s": 3.0, "lr": 0.7})
    resumed.close()
    assert _scalars(tmp_path, "lr") == [(100, 0.1), (200, 0.2), (300, 0.7)]
