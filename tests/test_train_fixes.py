"""The trainer's correctness fixes: TensorBoard history kept on resume, the learning-rate
schedule (resumable, over updates or the time budget), value normalisation and a separate
critic, pool opponents kept for their episode, and evaluation during training."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from baselines.config import PPOConfig
from baselines.metrics import MetricsLogger
from baselines.schedule import LRSchedule
from baselines.train import Trainer

LR = 3e-4
TINY = PPOConfig(
    scenario="identical_2_vs_2_fobs_vec_void_disc",
    num_envs=6,
    rollout_steps=8,
    hidden=16,
    s5_state_dim=8,
    epochs=1,
    minibatches=2,
    lr=LR,
    opponent="self:0.5,pursuit:0.5",
    progress=False,
    tensorboard=False,
    plots=False,
)


def _tiny(tmp_path, **changes) -> PPOConfig:
    return dataclasses.replace(TINY, out=str(tmp_path / "run"), **changes)


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


# ------------------------------------------------------------------------------------------
# The learning-rate schedule
# ------------------------------------------------------------------------------------------


def test_the_update_schedule_of_a_fresh_run_is_the_linear_decay_bit_for_bit():
    s = LRSchedule(3e-4, True, updates=7)
    assert [s.rate(k, 0.0) for k in range(7)] == [3e-4 * (1.0 - k / 7) for k in range(7)]
    assert LRSchedule(3e-4, False, updates=7).rate(5, 99.0) == 3e-4


def test_a_time_budget_anneals_by_the_share_of_the_budget_used():
    s = LRSchedule(1.0, True, updates=1_000_000, time_budget_s=100.0)
    assert s.rate(3, 25.0) == pytest.approx(0.75)  # 3 updates of a million: time dominates
    assert s.rate(3, 150.0) == 0.0  # past the budget: clamped at 0
    few = LRSchedule(1.0, True, updates=4, time_budget_s=100.0)
    assert few.rate(2, 10.0) == pytest.approx(0.5)  # the updates run out first


def test_a_new_horizon_continues_from_the_progress_reached():
    # 3 of 6 updates done (rate 0.5), resumed with --updates 9: 6 left to decay 0.5 -> 0
    s = LRSchedule(1.0, True, updates=6).resumed(9, 0.0, done=3, wall_s=0.0)
    assert [s.rate(k, 0.0) for k in (3, 6, 9)] == pytest.approx([0.5, 0.25, 0.0])
    # a budget of 100 s, half used (rate 0.5), resumed with 200 s: 150 s left for 0.5 -> 0
    t = LRSchedule(1.0, True, 10**6, 100.0).resumed(10**6, 200.0, done=9, wall_s=50.0)
    assert [t.rate(9, w) for w in (50.0, 125.0)] == pytest.approx([0.5, 0.25])
    # an ended schedule, extended: the new horizon's own rate (1 - 4 / 8), not 0
    ended = LRSchedule(1.0, True, updates=4).resumed(8, 0.0, done=4, wall_s=0.0)
    assert ended.rate(4, 0.0) == pytest.approx(0.5)
    assert LRSchedule.from_state_dict(s.state_dict()) == s


def test_resuming_with_more_updates_does_not_make_the_rate_jump(tmp_path):
    config = _tiny(tmp_path, updates=4)
    interrupted = Trainer(config)  # planned for 4 updates, stopped after 2
    interrupted.start()
    rates = [interrupted.step()["lr"] for _ in range(2)]
    Path(config.out).mkdir()
    interrupted.save(Path(config.out))
    run = Trainer(dataclasses.replace(config, updates=8, resume=True)).run()
    rates += [json.loads(x)["lr"] for x in (run / "metrics.jsonl").read_text().split("\n") if x]
    # 1, 0.75 of the 4-update schedule, then 0.5 decaying to 0 over the 6 updates left
    expected = [1.0, 0.75] + [0.5 - 0.5 * j / 6 for j in range(6)]
    assert rates == pytest.approx([LR * e for e in expected])
