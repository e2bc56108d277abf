"""`python -m baselines.ppo`: train PPO with S5 (or GRU, MLP) policies on a Gigastep scenario.

    python -m baselines.ppo --preset smoke --out runs/smoke            # ~1 min on 2 cores
    python -m baselines.ppo --preset cpu --opponent random --out runs/a
    python -m baselines.ppo --resume --out runs/a                     # continue the run
    python -m baselines.ppo --resume --out runs/a --updates 400       # ... and extend it
    python -m baselines.ppo --framework jax --preset cpu --out runs/j  # the JAX twin
    python -m baselines.ppo --framework jax --seeds 8 --out runs/j8    # 8 runs in one program
    python -m baselines.ppo --help                                    # every flag

`--preset NAME` (smoke, cpu, million, gpu) picks the defaults of `baselines.config.PRESETS`;
flags after it override them. With `--resume` the run's saved config is used; only
the settings of `baselines.runfolder.RESUMABLE` may change (the budget, the cadence of
checkpoints, evaluations and logs, threads, --compile, and `--out` for a moved run folder);
the checkpoint is checked against the config (docs/training.md, "Resuming").
Exit status: 0 done; 2 bad arguments, an unusable --out, a run folder in use by another run,
a resume whose settings differ from its checkpoint, or an unreadable, corrupt or incomplete
checkpoint; 3 the training diverged (non-finite values); 4 the disk (or quota) is full; 130
interrupted. After 3, 4 and 130 the last checkpoint written is intact and `--resume`
continues from it (a run stopped before its first checkpoint starts again from update 0).
"""

from __future__ import annotations

import os

# PyTorch's OpenMP threads otherwise busy-wait after every op and take the cores from XLA's
# threads (see docs/benchmarks.md, "Running JAX and PyTorch on the same CPU cores"); set
# before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Protocol  # noqa: E402

from . import runfolder  # noqa: E402
from .config import (  # noqa: E402
    PRESETS,
    PPOConfig,
    dumps,
    from_dict,
    preset,
    validate,
)

__all__ = ["DISK_FULL", "main", "parse_args"]

DISK_FULL = 4
"""The exit status of a run stopped by a full disk (or quota); its last checkpoint is intact."""

RESUMABLE = set(runfolder.RESUMABLE)
"""Flags that may differ from the saved config (and the checkpoint's) when resuming."""


def _pre_parse(argv: list[str]):
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default=None)
    pre.add_argument("--resume", action="store_true")
    pre.add_argument("--out", default=None)
    known, _ = pre.parse_known_args(argv)
    rest, skip = [], False
    for i, arg in enumerate(argv):  # --preset is ours, not a PPOConfig field
        if skip:
            skip = False
        elif arg == "--preset":
            skip = i + 1 < len(argv)
        elif not arg.startswith("--preset="):
            rest.append(arg)
    return known, rest


def parse_args(argv: list[str] | None = None) -> PPOConfig:
    """The run's config from the command line (see the module doc).

    Raises:
        ValueError: an unknown preset, --preset with --resume, a resumed run whose folder
            holds no config, or a flag that cannot change on resume.
    """
    import tyro

    argv = list(sys.argv[1:] if argv is None else argv)
    known, rest = _pre_parse(argv)
    if known.resume:
        if known.preset is not None:
            raise ValueError(
                "--resume continues the run in --out with its saved config; "
                "drop --preset (give only the flags to change)"
            )
        out = Path(known.out or PPOConfig.out)
        saved_path = out / "config.json"
        if not saved_path.exists() and not (out / "checkpoint.pt").exists():
            raise ValueError(f"--resume: {saved_path} does not exist (no run to continue in {out})")
        saved = _read_config(saved_path)
        fields = {f.name for f in dataclasses.fields(PPOConfig)}
        default = from_dict({k: v for k, v in saved.items() if k in fields})
        default = dataclasses.replace(default, resume=True)
    else:
        default = preset(known.preset)
    presets = "; ".join(
        f"{name}: " + ", ".join(f"{k}={v}" for k, v in values.items())
        for name, values in PRESETS.items()
    )
    description = (
        f"{inspect.getdoc(PPOConfig)}\n\nPresets (--preset NAME, before the other "
        f"flags, which override them): {presets}"
    )
    config = tyro.cli(
        PPOConfig,
        default=default,
        args=rest,
        prog=f"python -m {__package__}.ppo",  # gigastep_baselines.ppo where installed
        description=description,
    )
    if known.resume:
        changed = [
            f.name
            for f in dataclasses.fields(PPOConfig)
            if f.name not in RESUMABLE and getattr(config, f.name) != getattr(default, f.name)
        ]
        if changed:
            diffs = ", ".join(
                f"--{k.replace('_', '-')} {getattr(default, k)!r} -> {getattr(config, k)!r}"
                for k in changed
            )
            raise ValueError(
                f"cannot change {diffs} when resuming (only "
                f"{sorted(RESUMABLE - {'resume'})} may change)"
            )
    return config


def _read_config(path: Path) -> dict:
    """A run folder's config.json; when it is missing, torn or unreadable, the config saved
    in the folder's checkpoint (said on stderr).

    Raises:
        ValueError: naming the file when it is unreadable or torn and no checkpoint holds the
            config, or when it is not a config object.
    """
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        ckpt_path = path.parent / "checkpoint.pt"
        if not ckpt_path.exists():
            raise ValueError(
                f"--resume: {path} is missing, unreadable or torn ({err}) and {ckpt_path} "
                "does not exist to take the config from; start a new run"
            ) from None
        from .checkpoint import load_checkpoint

        saved = load_checkpoint(ckpt_path)["config"]
        print(
            f"ppo: {path} is missing, unreadable or torn ({err}); resuming with the config "
            f"saved in {ckpt_path}",
            file=sys.stderr,
        )
    if not isinstance(saved, dict):
        raise ValueError(f"--resume: {path} holds {type(saved).__name__}, not a config object")
    return saved


def _torch_runs(config: PPOConfig) -> list[PPOConfig]:
    """The PyTorch runs of a config: itself, or one per seed in out/seed_<s>, run one after
    the other (a resumed sweep continues the runs that have a checkpoint and starts the
    others)."""
    if config.seeds == 1:
        return [config]
    runs = []
    for s in range(config.seed, config.seed + config.seeds):
        out = Path(config.out) / f"seed_{s}"
        resume = config.resume and (out / "checkpoint.pt").exists()
        runs.append(dataclasses.replace(config, seed=s, seeds=1, out=str(out), resume=resume))
    return runs


class _Finished(Protocol):
    """What `main` reports of a finished trainer (`Trainer` and `JaxTrainer` alike)."""

    @property
    def update(self) -> int: ...
    @property
    def agent_steps(self) -> int: ...
    @property
    def wall_s(self) -> float: ...


def _train(config: PPOConfig, dist, device) -> tuple[_Finished, Path]:
    """Train `config` with its framework; returns (trainer, run folder), with several seeds
    the last seed's trainer."""
    validate(config)  # before any folder is made (with --seeds 0 no trainer would check it)
    if dist.is_main:
        runfolder.check_writable(config.out)  # before any compute
    if config.framework == "jax":
        from .jax_ppo.trainer import JaxTrainer

        jax_trainer = JaxTrainer(config)  # its set-up: checks, no compilation yet
        return jax_trainer, jax_trainer.run()  # locks the folders before compiling
    from gigastep._util import files as _files

    from .train import Trainer, hold_run_folder

    runs = _torch_runs(config)
    # the lock is taken before any compute; the sweep's folder holds it for all its seeds
    with hold_run_folder(Path(config.out), dist, device):
        if config.seeds > 1 and dist.is_main:
            _files.write_text(Path(config.out) / "config.json", dumps(config))
        for run in runs[:-1]:
            Trainer(run, dist=dist, device=device).run()
        trainer = Trainer(runs[-1], dist=dist, device=device)
        trainer.run()
    return trainer, Path(config.out)


def _last_checkpoints(config: PPOConfig) -> str:
    """What a stopped run leaves to resume from, for its message."""
    out = Path(config.out)
    found = sorted(out.glob("checkpoint.pt")) + sorted(out.glob("seed_*/checkpoint.pt"))
    if not found:
        return (
            f"no checkpoint was written yet in {out}; --resume starts the run again from "
            "update 0 with its config"
        )
    names = ", ".join(str(p) for p in found)
    return f"the last checkpoint ({names}) is kept; --resume continues from it"


def main(argv: list[str] | None = None) -> int:
    from .distributed import Dist, init_from_env
    from .train import TrainingDiverged, keep_freed_memory

    try:
        config = parse_args(argv)
        keep_freed_memory()  # reads GIGASTEP_MALLOC_TUNING: a bad value is one line too
    except SystemExit as exit_:  # tyro/argparse: --help or a usage error
        return int(exit_.code or 0)
    except ValueError as err:
        print(f"ppo: error: {err}", file=sys.stderr)
        return 2
    try:
        if config.framework == "jax":
            dist, device = Dist(), None
        else:
            dist, device = init_from_env(config.device)
        trainer, out = _train(config, dist, device)
    except TrainingDiverged as err:
        print(
            f"ppo: training stopped: {err}. The last good checkpoint is "
            f"{Path(config.out) / 'checkpoint.pt'}.",
            file=sys.stderr,
        )
        return 3
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"ppo: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nppo: interrupted; {_last_checkpoints(config)}", file=sys.stderr)
        return 130
    except Exception as err:  # a full disk, however the writer reports it
        if not runfolder.is_disk_full(err):
            raise
        what = " ".join(str(err).split())[:200]
        print(
            f"ppo: stopped: no space left on device for {config.out} ({what}); "
            f"{_last_checkpoints(config)} once space is freed",
            file=sys.stderr,
        )
        return DISK_FULL
    if dist.is_main:
        print(
            f"ppo: {trainer.update} updates, {trainer.agent_steps:,} agent-steps in "
            f"{trainer.wall_s:.0f} s ({config.framework}, {config.seeds} seed(s), "
            f"{dist.world} process(es)); run folder {out}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
