"""PPO under torchrun: two gloo processes reproduce one process with the same total batch.

Both runs play the same games (each process holds a contiguous slice of the batch drawing the
random numbers of those games) and draw the same actions (counter-based noise, and the
acting forward pass gives each row the same bits whatever the batch it is part of), so the
first update's rollout is identical. The update's gradient is the same sum taken in another
order (two partial sums added by the all-reduce instead of one pass), which changes the last
bits; Adam divides by the gradient's running RMS, so in coordinates whose gradient is near
zero such a difference can move a parameter by up to one learning rate (3e-4) per step. After
the first update (4 optimiser steps) the parameters must agree within 1e-4.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
ARGS = [
    "--preset",
    "smoke",
    "--updates",
    "2",
    "--checkpoint-every",
    "1",
    "--keep-checkpoints",
    "0",
    "--no-progress",
    "--no-tensorboard",
    "--no-plots",
]


def _run(out: Path, *extra: str, processes: int = 1, resume: bool = False) -> None:
    args = ["--resume", "--no-progress"] if resume else ARGS
    launcher = ["-m", "baselines.ppo"]
    if processes > 1:
        launcher = [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(processes),
            *launcher,
        ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, *launcher, *args, "--out", str(out), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _model(path: Path) -> dict:
    return torch.load(path, weights_only=True)["learners"][0]["model"]


def _rows(out: Path) -> list[str]:
    return (out / "metrics.csv").read_text().splitlines()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    _run(root / "one")
    _run(root / "two", processes=2)
    return root


@pytest.mark.subprocess
def test_two_processes_match_one_with_the_same_total_batch(runs):
    one, two = _model(runs / "one/checkpoint_000001.pt"), _model(runs / "two/checkpoint_000001.pt")
    worst = max(float((one[k] - two[k]).abs().max()) for k in one)
    assert worst <= 1e-4, worst
    # the same episodes were played: identical episode statistics in update 1
    header = _rows(runs / "one")[0].split(",")
    keep = [i for i, c in enumerate(header) if c.startswith(("episode", "return_", "games/"))]
    a, b = (_rows(runs / d)[1].split(",") for d in ("one", "two"))
    assert [a[i] for i in keep] == [b[i] for i in keep]


@pytest.mark.subprocess
def test_only_the_main_process_writes_one_checkpoint_with_every_process_games(runs):
    ckpt = torch.load(runs / "two/checkpoint.pt", weights_only=True)
    assert ckpt["world_size"] == 2 and [r["games"] for r in ckpt["ranks"]] == [[0, 16], [16, 32]]
    assert len(_rows(runs / "two")) == 3  # header + 2 updates, written once


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_two_process_run_resumes_exactly(runs, tmp_path):
    _run(tmp_path / "r", "--updates", "1", processes=2)
    _run(tmp_path / "r", "--updates", "2", processes=2, resume=True)
    a, b = _model(runs / "two/checkpoint.pt"), _model(tmp_path / "r/checkpoint.pt")
    for key, value in a.items():
        assert torch.equal(value, b[key]), key


@pytest.mark.subprocess
def test_the_run_folder_is_locked_once_for_every_process(runs):
    text = (runs / "two" / "run.lock").read_text()
    assert text.startswith("pid ") and text.count("pid ") == 1  # rank 0 locked it, once


@pytest.mark.subprocess
def test_every_process_stops_at_once_when_another_run_holds_the_folder(tmp_path):
    folder = tmp_path / "busy"
    code = (
        "import sys, time\nfrom baselines import runfolder\n"
        "with runfolder.hold(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)], cwd=ROOT, env=env, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        proc = subprocess.run(
            [sys.executable, *launcher, "-m", "baselines.ppo", *ARGS, "--out", str(folder)],
            cwd=ROOT,
            env={**env, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            timeout=300,  # a rank waiting for the other would hang here
        )
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode != 0
    assert f"pid {holder.pid} on host" in proc.stderr
    assert "could not lock" in proc.stderr  # the other rank stopped too, saying why
    assert not (folder / "metrics.csv").exists()
