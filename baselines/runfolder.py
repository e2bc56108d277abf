"""A run folder's guards: one run at a time (an OS lock), writable before any compute, no stale
temporary files, and the settings a resumed run may change.

The lock is `fcntl.flock` on `run.lock` in the run folder, taken without waiting: the kernel
drops it when the process ends, however it ends (`kill -9` included), so it is never stale.
The lock file keeps the holder's pid, host and start time for the message of a run that finds
the folder taken; the file itself stays (removing it would let two runs lock two files).
Under torchrun only rank 0 locks (every process writes the same folder; rank 0 writes it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gigastep._util import files as _files

__all__ = [
    "DISK_FULL",
    "LOCK_NAME",
    "RESUMABLE",
    "RunFolderBusy",
    "check_writable",
    "hold",
    "check_resumable",
    "is_disk_full",
    "remove_stale_temporaries",
    "resume_mismatches",
]

LOCK_NAME = "run.lock"
"""The lock file of a run folder."""

RESUMABLE = (
    "updates",
    "time_budget_s",
    "checkpoint_every",
    "keep_checkpoints",
    "eval_every",
    "eval_games",
    "progress",
    "tensorboard",
    "plots",
    "threads",
    "compile",
    "out",
    "resume",
)
"""The settings that may differ between a resumed run and its checkpoint (docs/training.md,
"Resuming"): the budget, the cadence of checkpoints, evaluations and logs, and how the run
uses its machine. Every other setting (and the scenario's hash and the architecture) must
match the checkpoint's."""

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
"""The errnos of a full disk or quota."""


def is_disk_full(err: BaseException) -> bool:
    """`err` (or an exception it was raised from) is a full disk or quota."""
    seen = 0
    while err is not None and seen < 8:
        if isinstance(err, OSError) and err.errno in DISK_FULL:
            return True
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
        seen += 1
    return False


class RunFolderBusy(ValueError):
    """Another live process holds the run folder's lock."""


_held: dict[str, tuple[int, int]] = {}  # real path -> (fd, how many holds in this process)


def _describe_holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    return text or "a process that has not yet written its pid"


@contextlib.contextmanager
def hold(folder: str | os.PathLike[str], enabled: bool = True) -> Iterator[None]:
    """Lock `folder` (created if missing) for this process while the block runs.

    Re-entrant within a process (a sweep's folder and its runs' folders, or a trainer inside
    `main`). `enabled=False` (torchrun's other ranks) does nothing.

    Raises:
        RunFolderBusy: another process holds it (the message names the holder).
    """
    if not enabled:
        yield
        return
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = os.path.realpath(folder)
    if key in _held:
        fd, count = _held[key]
        _held[key] = (fd, count + 1)
        try:
            yield
        finally:
            _release(key)
        return
    import fcntl

    path = folder / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunFolderBusy(
            f"{folder} is in use by another run ({_describe_holder(path)}; lock {path}); "
            "wait for it to end or choose another --out"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    holder = f"pid {os.getpid()} on host {socket.gethostname()}, started {started}\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder.encode(), 0)
    _held[key] = (fd, 1)
    try:
        yield
    finally:
        _release(key)


def _release(key: str) -> None:
    fd, count = _held[key]
    if count > 1:
        _held[key] = (fd, count - 1)
        return
    del _held[key]
    os.close(fd)  # closing the only descriptor drops the flock


def check_writable(folder: str | os.PathLike[str], flag: str = "--out") -> None:
    """Fail at once, naming `folder`, when it cannot hold a run: a file, or a folder (or
    parent) where no file can be created. Leaves nothing behind (folders it had to create
    to try are removed again).

    Raises:
        ValueError: one line naming the path and what is wrong.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {folder} is a file, not a folder")
    made = []
    try:
        missing = folder.absolute()
        while not missing.exists():
            made.append(missing)
            missing = missing.parent
        if not missing.is_dir():
            raise ValueError(f"{flag} {folder}: {missing} is a file, not a folder")
        for path in reversed(made):
            path.mkdir()
        fd, probe = tempfile.mkstemp(dir=folder, prefix=_files.TEMP_PREFIX)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        if err.errno in DISK_FULL:
            raise  # a full disk is reported as such (exit status 4)
        reason = err.strerror or str(err)
        raise ValueError(f"{flag} {folder} is not writable: {reason}") from None
    finally:
        for path in made:  # the deepest first
            with contextlib.suppress(OSError):
                path.rmdir()


def remove_stale_temporaries(folder: str | os.PathLike[str], quiet: bool = False) -> list[Path]:
    """Remove the temporary files an interrupted write left in `folder` (only call this while
    holding its lock: a live writer's temporary would be taken away). Returns them."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    stale = [p for p in folder.iterdir() if p.is_file() and _files.is_temporary(p.name)]
    for p in stale:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    if stale and not quiet:
        names = ", ".join(p.name for p in stale)
        print(
            f"ppo: removed {len(stale)} stale temporary file(s) in {folder}: {names}",
            file=sys.stderr,
        )
    return stale


def resume_mismatches(config: dict, scenario_hash: str, spec: dict, ckpt: dict) -> list[str]:
    """The differences that forbid continuing checkpoint `ckpt` with `config` (a resolved
    `PPOConfig` as a dict) on a game of `scenario_hash` with policy spec `spec`: every
    setting outside `RESUMABLE`, the scenario's hash and the architecture, each as
    "name: given X, checkpoint Y". Empty when the run may continue."""
    from .config import PPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(PPOConfig)}
    saved = _plain(ckpt.get("config", {}))
    given = _plain(config)
    out = []
    for name in sorted(set(given) | set(saved)):
        if name in RESUMABLE:
            continue
        mine = given.get(name, defaults.get(name))
        theirs = saved.get(name, defaults.get(name))  # older checkpoints: the default
        if mine != theirs:
            out.append(f"{name}: given {mine!r}, checkpoint {theirs!r}")
    theirs_hash = ckpt.get("game", {}).get("scenario_hash")
    if theirs_hash is not None and theirs_hash != scenario_hash:
        out.append(f"scenario_hash: given {scenario_hash!r}, checkpoint {theirs_hash!r}")
    from .policies import PolicySpec

    # a field added to the spec later is its default in older checkpoints
    fields = dataclasses.fields(PolicySpec)
    spec_defaults = _plain(
        {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    )
    saved_spec, given_spec = _plain(ckpt.get("policy_spec", {})), _plain(spec)
    for name in sorted(set(saved_spec) | set(given_spec)):
        theirs = saved_spec.get(name, spec_defaults.get(name))
        if theirs != given_spec.get(name):
            out.append(
                f"architecture {name}: given {given_spec.get(name)!r}, checkpoint {theirs!r}"
            )
    return out


def check_resumable(
    config: dict, scenario_hash: str, spec: dict, ckpt: dict, path: str | os.PathLike[str]
) -> None:
    """Raise `ValueError` naming every field (given vs checkpoint) of `resume_mismatches`.

    The message names `path` and how to continue with a change deliberately."""
    diffs = resume_mismatches(config, scenario_hash, spec, ckpt)
    if diffs:
        allowed = ", ".join("--" + k.replace("_", "-") for k in RESUMABLE if k != "resume")
        raise ValueError(
            f"--resume: the run's settings differ from its checkpoint {path} "
            f"({'; '.join(diffs)}): its config.json was edited or a flag differs. Only "
            f"{allowed} may change on resume (docs/training.md, 'Resuming'); to train with "
            "other settings start a new run in another --out"
        )


def _plain(value):
    """JSON's view of `value` (tuples as lists), for comparing a saved dict with a new one."""
    return json.loads(json.dumps(value, default=str))
