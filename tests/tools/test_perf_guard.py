"""The same-run performance guard (`tools/guard.py`) and the GPU script (`.ci/gpu`):
what they report and refuse, without timing anything."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import guard

ROOT = Path(__file__).resolve().parents[2]


def _row(value: float, floor: float) -> dict:
    return {
        "ratio": "jax_obs_vs_native",
        "value": value,
        "floor": floor,
        "ok": value >= floor,
        "measured_on_reference": "0.39-0.43",
        "guards": "the JAX path slowed",
    }


def test_a_ratio_below_its_floor_fails_with_its_name_value_and_floor():
    (msg,) = guard.check([_row(0.17, 0.28)])
    assert "jax_obs_vs_native" in msg and "0.170" in msg and "0.28" in msg


def test_a_ratio_at_its_floor_passes():
    assert guard.check([_row(0.28, 0.28), _row(0.5, 0.28)]) == []


def test_every_ratio_compares_two_known_programs():
    for r in guard.RATIOS:
        assert {r.numerator, r.denominator} <= set(guard.PROGRAMS), r.name
        assert r.numerator != r.denominator, r.name


def test_every_floor_sits_below_the_values_measured_for_it():
    for r in guard.RATIOS:
        low = float(re.match(r"([\d.]+)", r.measured).group(1))
        assert 0 < r.floor < low, r.name


def test_the_command_line_refuses_too_few_repeats(capsys):
    with pytest.raises(SystemExit):
        guard.main(["--repeats", "2"])
    assert "--repeats must be >= 3" in capsys.readouterr().err


def test_the_command_line_lists_the_ratios(capsys):
    assert guard.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(r.name in out for r in guard.RATIOS)


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(_cuda(), reason="a CUDA device is present: the script would run for real")
@pytest.mark.slow
def test_the_gpu_script_stops_at_once_without_cuda(tmp_path):
    out = tmp_path / "gpu"
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci" / "gpu"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 2
    assert "needs a CUDA GPU" in proc.stderr and "sees no CUDA device" in proc.stderr
    assert not out.exists()  # nothing installed, compiled or written


def test_the_gpu_script_refuses_an_unknown_option():
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci" / "gpu"), "--fast"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "unknown option --fast" in proc.stderr


def _fake_timings(monkeypatch, values):
    """measure() with programs that cost nothing and pairings that time as `values`, in order."""
    monkeypatch.setitem(guard.PROGRAMS, "a", lambda: (None, 1))
    monkeypatch.setitem(guard.PROGRAMS, "b", lambda: (None, 1))
    seen = iter(values)
    calls = []

    def time_pair(num, den, repeats):
        calls.append(repeats)
        v = next(seen)
        return {"value": v, "per_repeat": [v, v], "num_rate": v, "den_rate": 1.0}

    monkeypatch.setattr(guard, "_time_pair", time_pair)
    return calls


def _ratio(floor=0.5):
    return guard.Ratio("a_vs_b", "a", "b", floor, "0.6-0.7", "a slowed")


def test_a_ratio_at_its_floor_is_timed_once(monkeypatch):
    calls = _fake_timings(monkeypatch, [0.6, 0.1])
    (row,) = guard.measure((_ratio(),), repeats=3)
    assert calls == [3] and row["attempts"] == [0.6] and row["ok"]


def test_a_ratio_below_its_floor_is_timed_again_and_judged_by_its_best(monkeypatch):
    calls = _fake_timings(monkeypatch, [0.4, 0.55, 0.1])
    (row,) = guard.measure((_ratio(),), repeats=3)
    assert len(calls) == 2 and row["attempts"] == [0.4, 0.55]
    assert row["ok"] and row["value"] == 0.55
    row["build_and_compile_s"] = 0.0
    row.update(
        numerator="a",
        denominator="b",
        numerator_agent_steps_per_s=5.5e5,
        denominator_agent_steps_per_s=1e6,
    )
    assert "attempts 0.400, 0.550) ok" in guard._line(row)


def test_a_ratio_below_its_floor_on_every_attempt_fails(monkeypatch):
    calls = _fake_timings(monkeypatch, [0.3, 0.45, 0.35, 0.9])
    (row,) = guard.measure((_ratio(),), repeats=3, attempts=3)
    assert len(calls) == 3 and row["attempts"] == [0.3, 0.45, 0.35]
    assert not row["ok"] and row["value"] == 0.45
    (msg,) = guard.check([row])
    assert "a_vs_b = 0.450 (best of 3 attempts: 0.300, 0.450, 0.350) is below" in msg


def test_the_command_line_refuses_zero_attempts(capsys):
    with pytest.raises(SystemExit):
        guard.main(["--attempts", "0"])
    assert "--attempts must be >= 1" in capsys.readouterr().err


def _guard_row(value, floor=0.5, attempts=None):
    return {
        "ratio": "a_vs_b",
        "numerator": "a",
        "denominator": "b",
        "value": value,
        "floor": floor,
        "ok": value >= floor,
        "attempts": attempts or [value],
        "per_repeat_min": value,
        "per_repeat_max": value,
        "numerator_agent_steps_per_s": 1e6,
        "denominator_agent_steps_per_s": 1e6,
        "build_and_compile_s": 0.0,
        "measured_on_reference": "0.6-0.7",
        "guards": "a slowed",
    }


def test_a_ratio_at_its_floor_starts_no_fresh_process():
    calls = []
    rows = guard.retry_in_fresh_processes([_guard_row(0.6)], 2, calls.append)
    assert calls == [] and rows[0]["value"] == 0.6


def test_a_ratio_below_its_floor_is_timed_in_fresh_processes_until_it_passes():
    fresh = iter([_guard_row(0.45), _guard_row(0.55), _guard_row(0.9)])
    calls = []

    def run(name):
        calls.append(name)
        return next(fresh)

    (row,) = guard.retry_in_fresh_processes([_guard_row(0.3, attempts=[0.2, 0.3])], 3, run)
    assert calls == ["a_vs_b", "a_vs_b"]
    assert row["ok"] and row["value"] == 0.55 and row["attempts"] == [0.2, 0.3, 0.45, 0.55]


def test_a_ratio_below_its_floor_in_every_process_fails_with_its_best():
    fresh = iter([_guard_row(0.35), None, _guard_row(0.9)])
    (row,) = guard.retry_in_fresh_processes([_guard_row(0.4)], 2, lambda name: next(fresh))
    assert not row["ok"] and row["value"] == 0.4 and row["attempts"] == [0.4, 0.35]
    (msg,) = guard.check([row])
    assert "a_vs_b = 0.400 (best of 2 attempts: 0.400, 0.350)" in msg


def test_trace_reports_one_row_per_window_with_the_calls_made_in_it():
    calls = []

    def call(i):
        calls.append(i)
        time.sleep(0.004)  # 4 ms of wall time and almost no CPU time per call

    reported = []
    rows = guard.trace(call, work=100, seconds=0.3, window=0.1, report=reported.append)
    assert rows == reported and 2 <= len(rows) <= 4
    assert sum(r["calls"] for r in rows) == len(calls) and calls == list(range(len(calls)))
    for r in rows:
        assert 4.0 <= r["wall_ms"] < 20.0 and r["cpu_ms"] < r["wall_ms"]
        assert r["agent_steps_per_s"] == pytest.approx(100 / (r["wall_ms"] / 1e3))
        if sys.platform.startswith("linux"):  # sleeping is a voluntary switch per call
            assert r["switches"] >= 1


def test_trace_refuses_a_window_that_is_not_positive():
    with pytest.raises(ValueError, match="seconds and window must be > 0, got 1 and 0"):
        guard.trace(lambda i: None, work=1, seconds=1, window=0)


def test_the_command_line_refuses_a_trace_of_no_time(capsys):
    with pytest.raises(SystemExit):
        guard.main(["--trace", "jax_rgb", "--seconds", "0"])
    assert "--seconds must be > 0, got 0.0" in capsys.readouterr().err


def _pinning(monkeypatch, cpus):
    """A platform that can pin, on which this process may use `cpus` CPUs."""
    monkeypatch.setattr(guard.os, "sched_setaffinity", lambda pid, cpus: None, raising=False)
    monkeypatch.setattr(guard, "usable_cores", lambda: cpus)


def _one_cpu_ratio(name="c_vs_d"):
    return guard.Ratio(name, "c", "d", 0.5, "0.6-0.7", "c slowed", one_cpu=True)


def test_one_cpu_ratios_go_to_a_pinned_child_when_this_process_has_more_cpus(monkeypatch):
    _pinning(monkeypatch, 2)
    here, pinned = guard.split_by_cpus((_ratio(), _one_cpu_ratio()))
    assert [r.name for r in here] == ["a_vs_b"] and [r.name for r in pinned] == ["c_vs_d"]
    _pinning(monkeypatch, 1)  # already on one CPU (the child itself): timed where it is
    here, pinned = guard.split_by_cpus((_ratio(), _one_cpu_ratio()))
    assert [r.name for r in here] == ["a_vs_b", "c_vs_d"] and pinned == ()


def test_measure_all_keeps_the_ratios_order_and_asks_one_pinned_child(monkeypatch):
    _pinning(monkeypatch, 2)
    _fake_timings(monkeypatch, [0.6])
    asked = []

    def child(names, repeats, attempts, one_cpu):
        asked.append((names, repeats, attempts, one_cpu))
        return [_guard_row(0.7) | {"ratio": n} for n in names]

    ratios = (_one_cpu_ratio("c_vs_d"), _ratio(), _one_cpu_ratio("e_vs_f"))
    rows = guard.measure_all(ratios, repeats=3, attempts=2, child=child)
    assert [r["ratio"] for r in rows] == ["c_vs_d", "a_vs_b", "e_vs_f"]
    assert asked == [(["c_vs_d", "e_vs_f"], 3, 2, True)]
    assert [r["value"] for r in rows] == [0.7, 0.6, 0.7]


def test_a_pinned_child_that_fails_fails_its_ratios_by_name(monkeypatch):
    _pinning(monkeypatch, 2)
    rows = guard.measure_all((_one_cpu_ratio(),), repeats=3, attempts=1, child=lambda *args: None)
    assert not rows[0]["ok"]
    (msg,) = guard.check(rows)
    assert msg.startswith("performance guard: c_vs_d could not be measured: its process failed")


def test_the_command_line_refuses_a_cpu_it_may_not_use(capsys):
    can_pin = hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")
    cpu = max(os.sched_getaffinity(0)) + 1 if can_pin else 0
    with pytest.raises(SystemExit):
        guard.main(["--pin-cpu", str(cpu), "--list"])
    err = capsys.readouterr().err
    if can_pin:
        assert f"--pin-cpu {cpu} is not one of this process's CPUs" in err
    else:  # a platform that cannot pin says so
        assert "--pin-cpu needs os.sched_setaffinity (Linux)" in err


def test_a_ratio_whose_process_failed_is_replaced_by_a_measured_retry(monkeypatch):
    _pinning(monkeypatch, 2)
    (failed,) = guard.measure_all(
        (_one_cpu_ratio(),), repeats=3, attempts=1, child=lambda *args: None
    )
    measured = lambda name: _guard_row(0.7) | {"ratio": name}  # noqa: E731
    (row,) = guard.retry_in_fresh_processes([failed], 2, measured)
    assert row["ok"] and row["value"] == 0.7 and row["ratio"] == "c_vs_d"
    assert row["attempts"] == [0.7]
