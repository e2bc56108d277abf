"""Run folders and checkpoints that survive anything (issue 52): a resume checked against its
checkpoint, one run per folder (an OS lock), a run stopped before its first checkpoint,
torn and temporary files, a full disk, and checkpoints checked on every load."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from baselines import runfolder
from baselines.checkpoint import (
    DIGEST,
    UnverifiedCheckpointWarning,
    atomic_save,
    load_checkpoint,
    load_policy,
    policy_from_checkpoint,
)
from baselines.config import PPOConfig
from baselines.metrics import MetricsLogger
from baselines.ppo import DISK_FULL, main
from baselines.train import Trainer, hold_run_folder
from gigastep._util import files as _files

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "identical_2_vs_2_fobs_vec_void_disc"
TINY = [
    *("--scenario", SCENARIO, "--num-envs", "6", "--rollout-steps", "8", "--hidden", "16"),
    *("--s5-state-dim", "8", "--epochs", "1", "--minibatches", "2"),
    *("--opponent", "self:0.5,pursuit:0.5", "--no-progress", "--no-tensorboard", "--no-plots"),
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished run of one update (its checkpoint at update 1)."""
    out = tmp_path_factory.mktemp("trained") / "run"
    assert main([*TINY, "--updates", "1", "--out", str(out)]) == 0
    return out


def _copy(trained: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run


def _edit_config(run: Path, **changes) -> None:
    config = json.loads((run / "config.json").read_text())
    config.update(changes)
    (run / "config.json").write_text(json.dumps(config))


# ------------------------------------------------------------------------------------------
# 1. --resume checks the checkpoint against the config
# ------------------------------------------------------------------------------------------


def test_resume_refuses_an_edited_config_json_naming_each_field_given_and_saved(
    trained, tmp_path, capsys
):
    run = _copy(trained, tmp_path)
    _edit_config(run, scenario="identical_2_vs_2_fobs_vec_void_cont", gamma=0.9)
    assert main(["--resume", "--out", str(run), "--updates", "2"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert str(run / "checkpoint.pt") in err
    assert "gamma: given 0.9, checkpoint 0.99" in err
    assert f"scenario: given 'identical_2_vs_2_fobs_vec_void_cont', checkpoint '{SCENARIO}'" in err
    assert "scenario_hash: given" in err and "architecture discrete" in err
    assert "--updates" in err and "--eval-every" in err  # how to change what may change
    assert load_checkpoint(run / "checkpoint.pt")["update"] == 1  # nothing was trained


def test_resume_refuses_a_changed_architecture_given_by_the_api(trained, tmp_path):
    run = _copy(trained, tmp_path)
    saved = json.loads((run / "config.json").read_text())
    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    config = PPOConfig(**{k: v for k, v in saved.items() if k in fields})
    changed = dataclasses.replace(config, out=str(run), resume=True, hidden=32)
    with pytest.raises(ValueError, match=r"hidden: given 32, checkpoint 16"):
        Trainer(changed).run()


def test_the_settings_that_may_change_on_resume_are_listed_in_the_docs():
    docs = (ROOT / "docs" / "training.md").read_text()
    section = docs.split("## Resuming", 1)[1].split("\n## ", 1)[0]
    for name in runfolder.RESUMABLE:
        if name != "resume":
            assert f"`--{name.replace('_', '-')}`" in section, name


def test_a_resume_with_an_allowed_change_only_continues(trained, tmp_path, capsys):
    run = _copy(trained, tmp_path)
    _edit_config(run, eval_games=32, keep_checkpoints=5)  # allowed in config.json too
    assert main(["--resume", "--out", str(run), "--updates", "2", "--checkpoint-every", "5"]) == 0
    assert load_checkpoint(run / "checkpoint.pt")["update"] == 2


def test_mismatches_skip_fields_an_older_checkpoint_lacks_when_they_have_their_default():
    config = dataclasses.asdict(PPOConfig())
    old = {k: v for k, v in config.items() if k != "value_norm"}
    ckpt = {"config": old, "game": {"scenario_hash": "h"}, "policy_spec": {"hidden": 64}}
    assert runfolder.resume_mismatches(config, "h", {"hidden": 64}, ckpt) == []
    config["value_norm"] = True
    assert runfolder.resume_mismatches(config, "h", {"hidden": 64}, ckpt) == [
        "value_norm: given True, checkpoint False"
    ]


# ------------------------------------------------------------------------------------------
# 3. One run per folder: an OS lock that dies with its process
# ------------------------------------------------------------------------------------------


def _holder(folder: Path) -> subprocess.Popen:
    """Another process holding `folder`'s lock until it is killed."""
    code = (
        "import sys, time\n"
        "from baselines import runfolder\n"
        "with runfolder.hold(sys.argv[1]):\n"
        "    print('locked', flush=True)\n"
        "    time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)], cwd=ROOT, env=env, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"locked"
    return proc


@pytest.mark.subprocess
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_second_run_fails_at_once_naming_the_holder_and_a_killed_holder_frees_it(
    framework, tmp_path, capsys
):
    folder = tmp_path / "run"
    proc = _holder(folder)
    try:
        argv = [*TINY, "--framework", framework, "--updates", "1", "--out", str(folder)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"pid {proc.pid} on host" in err and "in use by another run" in err
        assert not (folder / "config.json").exists() and not (folder / "metrics.csv").exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with runfolder.hold(folder):  # kill -9 left no stale lock
        assert f"pid {os.getpid()} " in (folder / runfolder.LOCK_NAME).read_text()


@pytest.mark.subprocess
def test_the_lock_is_reentrant_in_its_process_and_released_after(tmp_path):
    folder = tmp_path / "run"
    with runfolder.hold(folder), runfolder.hold(folder):
        pass
    proc = _holder(folder)  # the lock was released: another process takes it
    proc.send_signal(signal.SIGKILL)
    proc.wait()


class _OtherRank:
    """A torchrun process other than rank 0 whose rank 0 failed to lock (sum of flags 1)."""

    is_main, enabled = False, True

    def sum_(self, t):
        return t.fill_(1.0)


def test_every_process_fails_when_the_main_process_cannot_lock(tmp_path):
    with pytest.raises(runfolder.RunFolderBusy, match="could not lock"):
        with hold_run_folder(tmp_path, _OtherRank()):  # type: ignore[arg-type]
            pass
    assert not (tmp_path / runfolder.LOCK_NAME).exists()  # only rank 0 locks


# ------------------------------------------------------------------------------------------
# 4. A run stopped before its first checkpoint
# ------------------------------------------------------------------------------------------


def test_a_run_stopped_before_its_first_checkpoint_restarts_and_resumes(
    tmp_path, capsys, monkeypatch
):
    real_step = Trainer.step

    def interrupted(self):
        if self.update == 1:
            raise KeyboardInterrupt
        return real_step(self)

    run = tmp_path / "run"
    argv = [*TINY, "--updates", "2", "--checkpoint-every", "5", "--out", str(run)]
    with monkeypatch.context() as m:
        m.setattr(Trainer, "step", interrupted)
        assert main(argv) == 130
    err = capsys.readouterr().err
    assert "no checkpoint was written yet" in err and "is kept" not in err
    assert (run / "config.json").exists() and not (run / "checkpoint.pt").exists()
    shutil.copytree(run, tmp_path / "again")
    assert main(["--resume", "--out", str(run)]) == 0
    assert "holds no checkpoint" in capsys.readouterr().err
    assert load_checkpoint(run / "checkpoint.pt")["update"] == 2
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["update"] for r in rows] == [1, 2]
    # restarting the stopped run without --resume is allowed too (nothing to lose)
    assert main([*argv[:-1], str(tmp_path / "again")]) == 0


def test_the_interrupt_message_names_the_checkpoint_kept(trained, tmp_path, capsys, monkeypatch):
    run = _copy(trained, tmp_path)

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "step", interrupted)
    assert main(["--resume", "--out", str(run), "--updates", "3"]) == 130
    err = capsys.readouterr().err
    assert f"the last checkpoint ({run / 'checkpoint.pt'}) is kept" in err


# ------------------------------------------------------------------------------------------
# 6. Torn and partial files
# ------------------------------------------------------------------------------------------

COLUMNS = ["update", "agent_steps", "wall_s", "lr"]


def test_a_torn_last_metrics_line_is_dropped_and_said(tmp_path, capsys):
    log = MetricsLogger(tmp_path, COLUMNS, tensorboard=False, plots=False)
    for u in (1, 2):
        log.log({"update": u, "agent_steps": 10 * u, "wall_s": 1.0, "lr": 0.1})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"update": 3, "agent_st')  # killed mid-write
    MetricsLogger(tmp_path, COLUMNS, 3, tensorboard=False, plots=False, resume_step=30)
    assert "dropped its torn last line 3" in capsys.readouterr().err
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["update"] for x in lines] == [1, 2]
    assert len((tmp_path / "metrics.csv").read_text().splitlines()) == 3


def test_a_torn_metrics_line_before_the_last_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"update": 1}\n{"upd\n{"update": 2}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 2 is not a JSON row"):
        MetricsLogger(tmp_path, COLUMNS, 2, tensorboard=False, plots=False, resume_step=2)


def test_a_resume_recovers_from_torn_files_and_removes_stale_temporaries(
    trained, tmp_path, capsys, monkeypatch
):
    run = _copy(trained, tmp_path)
    text = (run / "config.json").read_text()
    (run / "config.json").write_text(text[: len(text) // 2])  # torn
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"update": 2, "ag')
    size = (run / "checkpoint.pt").stat().st_size
    stale = [run / f"{_files.TEMP_PREFIX}k2j4.pt", run / ".tmp-x81b.pt"]
    for p in stale:  # what kill -9 during a checkpoint's write leaves
        p.write_bytes(b"\0" * size)
    real = Path.write_text

    def no_plain_write(self, *a, **k):  # config.json is written atomically, not in place
        if self.name == "config.json":
            raise AssertionError(f"{self} written in place")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", no_plain_write)
    assert main(["--resume", "--out", str(run), "--updates", "2"]) == 0
    err = capsys.readouterr().err
    assert f"{run / 'config.json'} is missing, unreadable or torn" in err
    assert "resuming with the config saved in" in err
    assert "dropped its torn last line" in err and "stale temporary" in err
    assert not any(p.exists() for p in stale)
    assert not [p for p in run.iterdir() if _files.is_temporary(p.name)]
    assert json.loads((run / "config.json").read_text())["scenario"] == SCENARIO
    assert load_checkpoint(run / "checkpoint.pt")["update"] == 2


def test_a_missing_config_json_is_taken_from_the_checkpoint(trained, tmp_path, capsys):
    run = _copy(trained, tmp_path)
    (run / "config.json").unlink()
    assert main(["--resume", "--out", str(run)]) == 0  # at the checkpoint's update: no training
    assert "resuming with the config saved in" in capsys.readouterr().err
    assert json.loads((run / "config.json").read_text())["scenario"] == SCENARIO


def test_a_torn_config_json_without_a_checkpoint_is_an_error_naming_it(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"scenario": "ident')
    assert main(["--resume", "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'config.json'} is missing, unreadable or torn" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------------
# 7. A full disk
# ------------------------------------------------------------------------------------------


def _check_stopped_by_a_full_disk(run: Path, err: str) -> None:
    assert "no space left on device" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert f"the last checkpoint ({run / 'checkpoint.pt'}) is kept" in err
    assert load_checkpoint(run / "checkpoint.pt")["update"] == 1  # intact, digest checked
    assert not [p for p in run.iterdir() if _files.is_temporary(p.name)]


def test_a_full_disk_stops_with_its_exit_status_keeping_the_last_checkpoint(
    tmp_path, capsys, monkeypatch
):
    import baselines.checkpoint as checkpoint

    real = torch.save

    def save(obj, f, *a, **k):  # the second checkpoint hits a full disk
        if obj["update"] == 2:
            f.write(b"x" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, f, *a, **k)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    run = tmp_path / "run"
    argv = [*TINY, "--updates", "3", "--checkpoint-every", "1", "--out", str(run)]
    assert main(argv) == DISK_FULL == 4
    _check_stopped_by_a_full_disk(run, capsys.readouterr().err)


@pytest.fixture
def small_disk(tmp_path):
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a 2 MiB tmpfs needs root (and mount)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)])
    if done.returncode:
        pytest.skip("mount -t tmpfs was refused here (no CAP_SYS_ADMIN)")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_a_real_full_disk_stops_with_its_exit_status_keeping_the_last_checkpoint(
    small_disk, capsys
):
    run = small_disk / "run"
    argv = [*TINY, "--updates", "1", "--checkpoint-every", "1", "--out", str(run)]
    assert main(argv) == 0  # one checkpoint, then the disk fills up
    capsys.readouterr()
    size = (run / "checkpoint.pt").stat().st_size
    free = shutil.disk_usage(small_disk).free
    (small_disk / "filler").write_bytes(b"\0" * max(free - size // 2, 0))
    assert main(["--resume", "--out", str(run), "--updates", "3"]) == DISK_FULL
    _check_stopped_by_a_full_disk(run, capsys.readouterr().err)


# ------------------------------------------------------------------------------------------
# Output paths, checked before any compute
# ------------------------------------------------------------------------------------------


def test_an_out_that_is_a_file_fails_at_once(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main([*TINY, "--out", str(tmp_path / "file")]) == 2
    assert f"--out {tmp_path / 'file'} is a file, not a folder" in capsys.readouterr().err
    assert main([*TINY, "--out", str(tmp_path / "file" / "run")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_an_unwritable_out_fails_at_once_leaving_nothing(tmp_path, capsys, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(runfolder.tempfile, "mkstemp", refuse)
    out = tmp_path / "a" / "b"
    assert main([*TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out} is not writable: Read-only file system" in err
    assert not (tmp_path / "a").exists()


# ------------------------------------------------------------------------------------------
# 8. Checkpoint integrity, on every loader
# ------------------------------------------------------------------------------------------


def _tamper(trained: Path, tmp_path: Path, change, keep_digest: bool = True) -> Path:
    ckpt = torch.load(trained / "checkpoint.pt", weights_only=True)
    change(ckpt)
    if not keep_digest:
        ckpt.pop(DIGEST)
    path = tmp_path / "bad.pt"
    atomic_save(ckpt, path)
    return path


def _nan(ckpt):
    model = ckpt["learners"][0]["model"]
    key = next(k for k, v in model.items() if v.is_floating_point())
    model[key] = model[key].clone().fill_(float("nan"))


def _eval(path: Path, capsys) -> str:
    from gigastep.cli import main as gigastep

    assert gigastep(["eval", str(path), "random", "--games", "2", "--scenario", SCENARIO]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert str(path) in err
    return err


def test_checkpoints_carry_a_digest_and_a_changed_byte_is_refused(trained, tmp_path, capsys):
    ckpt = torch.load(trained / "checkpoint.pt", weights_only=True)
    assert str(ckpt[DIGEST]).startswith("sha256:")

    def flip(c):
        c["learners"][0]["model"]["encoder.vector.0.weight"] = (
            c["learners"][0]["model"]["encoder.vector.0.weight"] + 1e-3
        )

    path = _tamper(trained, tmp_path, flip)
    with pytest.raises(ValueError, match=r"bad\.pt is corrupt: its content does not match"):
        load_checkpoint(path)
    assert "is corrupt" in _eval(path, capsys)


def test_non_finite_weights_are_refused_by_every_loader(trained, tmp_path, capsys):
    from baselines.jax_ppo.convert import load_jax_policy

    path = _tamper(trained, tmp_path, _nan, keep_digest=False)  # a digest would catch it first
    for load in (load_checkpoint, load_policy, load_jax_policy):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnverifiedCheckpointWarning)
            with pytest.raises(ValueError, match=r"bad\.pt: learner 'learner0' has non-finite"):
                load(path)
    ckpt = torch.load(path, weights_only=True)
    with pytest.warns(UnverifiedCheckpointWarning), pytest.raises(ValueError, match="non-finite"):
        policy_from_checkpoint(ckpt, path=str(path))
    assert "non-finite weights" in _eval(path, capsys)


def test_the_trainer_refuses_to_resume_non_finite_weights(trained, tmp_path, capsys):
    run = _copy(trained, tmp_path)
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    _nan(ckpt)
    ckpt.pop(DIGEST)
    atomic_save(ckpt, run / "checkpoint.pt")
    assert main(["--resume", "--out", str(run), "--updates", "2"]) == 2
    assert "has non-finite weights" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.pop("learners"), r"is not a complete checkpoint: it lacks \['learners'\]"),
        (lambda c: c.update(learners=[]), "holds no learners"),
        (
            lambda c: c["learners"][0]["model"].pop("encoder.vector.0.weight"),
            "weights do not fit its architecture",
        ),
        (
            lambda c: c["policy_spec"].update(hidden=32),
            "weights do not fit its architecture",
        ),
    ],
)
def test_broken_checkpoints_fail_with_one_line_naming_the_file(
    change, message, trained, tmp_path, capsys
):
    path = _tamper(trained, tmp_path, change)
    ckpt = torch.load(path, weights_only=True)
    ckpt[DIGEST] = _digest(ckpt)
    atomic_save(ckpt, path)
    with pytest.raises(ValueError, match=message):
        load_policy(path)
    assert message.replace("\\", "") in _eval(path, capsys)


def _digest(ckpt):
    from baselines.checkpoint import content_digest

    return content_digest(ckpt)


def test_a_checkpoint_without_a_digest_loads_with_a_warning(trained, tmp_path):
    path = _tamper(trained, tmp_path, lambda c: None, keep_digest=False)
    with pytest.warns(UnverifiedCheckpointWarning, match=r"bad\.pt has no content digest"):
        policy = load_policy(path)
    assert policy.update == 1
