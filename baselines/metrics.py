"""Metrics of a run: one row per update in metrics.csv and metrics.jsonl (the same columns,
fixed when the run starts), TensorBoard events when the package is installed, and
learning-curve PNGs.

Columns (a metric of a learner other than the first carries a `_team1` suffix):
    update, agent_steps, env_steps, wall_s            progress (wall_s excludes start-up)
    rollout_s, update_s                               seconds of this update's two phases
    rollout_agent_steps_per_s, update_agent_steps_per_s
                                                      agent-steps of the rollout (all agents
                                                      of all games) per second of each phase
    episodes, episode_length                          episodes finished in this rollout
    return_team0, return_team1                        mean episode return of a team's agents
    win_rate/<kind>, draw_rate/<kind>, loss_rate/<kind>, games/<kind>
                                                      outcomes of the learner's team per
                                                      opponent kind (games finished in this
                                                      rollout; empty when none finished)
    episode_length/<kind>, return/<kind>              their mean length and the learner
                                                      team's mean return (shaping included)
    return_unshaped/<kind>                            the same return under the scenario's
                                                      own reward weights (no --env shaping)
    lr, policy_loss, value_loss, entropy, approx_kl, clip_frac, explained_variance,
    grad_norm, epochs                                 the update (means over minibatches)
    rss_mb, peak_rss_mb                               resident memory of the process, MiB

A resumed run first cuts both files back to the rows of the checkpoint it resumes from (from
metrics.jsonl; a torn last line, a write cut short, is dropped and said on stderr), so a
run killed between checkpoints and resumed has each update exactly once; its TensorBoard
events (logged against agent-steps) are purged after the checkpoint's agent-steps only.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import resource
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gigastep._util import files as _files

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from .config import PPOConfig

__all__ = [
    "MainProcessLog",
    "MetricsLogger",
    "current_rss_mb",
    "peak_rss_mb",
    "progress_bar",
    "progress_postfix",
]


def peak_rss_mb() -> float:
    """Peak resident set size of this process, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    """Resident set size of this process now, MiB (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return 0.0


def _atomic_write_text(path: Path, text: str) -> None:
    _files.write_text(path, text)


def _clean(value):
    """JSON/CSV-safe value: floats rounded to 7 significant digits, NaN as None."""
    if isinstance(value, float):
        return None if not math.isfinite(value) else float(f"{value:.7g}")
    return value


class MetricsLogger:
    """Appends one row per update to metrics.csv / metrics.jsonl (see the module doc)."""

    def __init__(
        self,
        run_dir,
        columns: list[str],
        resume_update: int | None = None,
        tensorboard: bool = True,
        plots: bool = True,
        resume_step: int | None = None,
        name: str = "metrics",
        tb_prefix: str = "",
    ):
        """`resume_update` and `resume_step` (the checkpoint's update and agent-steps) are
        given together when resuming: rows after the update are cut, and TensorBoard events
        from agent-step `resume_step + 1` on (its x axis) are purged. `name` names the files
        (name.csv, name.jsonl); `tb_prefix` starts every TensorBoard tag."""
        self.dir = Path(run_dir)
        self.columns = list(columns)
        self.csv_path = self.dir / f"{name}.csv"
        self.jsonl_path = self.dir / f"{name}.jsonl"
        self.tb_prefix = tb_prefix
        self.rows: list[dict] = []
        self.plots = plots
        if resume_update is None:
            _atomic_write_text(self.csv_path, ",".join(self.columns) + "\n")
            _atomic_write_text(self.jsonl_path, "")
        else:
            self._cut_back(resume_update)
        self.writer: SummaryWriter | None = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is optional
                pass
            else:
                purge = None
                if resume_update is not None:
                    if resume_step is None:
                        raise ValueError("resuming the metrics needs resume_step (agent-steps)")
                    purge = resume_step + 1
                suffix = "" if name == "metrics" else f".{name}"
                self.writer = SummaryWriter(
                    str(self.dir / "tensorboard"), purge_step=purge, filename_suffix=suffix
                )

    def _cut_back(self, update: int) -> None:
        """Keep the rows of updates <= `update` (both files rewritten atomically)."""
        kept = []
        if self.jsonl_path.exists():
            lines = self.jsonl_path.read_text(encoding="utf-8", errors="replace").split("\n")
            for i, line in enumerate(lines):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    if any(rest.strip() for rest in lines[i + 1 :]):
                        raise ValueError(
                            f"{self.jsonl_path} line {i + 1} is not a JSON row ({err}); only "
                            "a torn last line is dropped on resume"
                        ) from None
                    print(
                        f"ppo: {self.jsonl_path}: dropped its torn last line {i + 1} (a write "
                        f"cut short: {line[:60]!r})",
                        file=sys.stderr,
                    )
                    break
                if not isinstance(row, dict):
                    raise ValueError(
                        f"{self.jsonl_path} line {i + 1} is not a metrics row: {line[:60]!r}"
                    )
                if row.get("update", math.inf) <= update:
                    kept.append(row)
        header = None
        if self.csv_path.exists():
            first = self.csv_path.read_text().split("\n", 1)[0]
            header = first.split(",") if first else None
        if header is not None and header != self.columns:
            raise ValueError(
                f"{self.csv_path} has other columns than this run writes: the "
                "run's config or the code changed since it started"
            )
        self.rows = kept
        buf = io.StringIO()
        w = csv.DictWriter(buf, self.columns, lineterminator="\n")
        w.writeheader()
        for row in kept:
            w.writerow({k: "" if row.get(k) is None else row.get(k) for k in self.columns})
        _atomic_write_text(self.csv_path, buf.getvalue())
        _atomic_write_text(self.jsonl_path, "".join(json.dumps(r) + "\n" for r in kept))

    def log(self, row: dict) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(f"metrics row has columns not declared at start: {sorted(unknown)}")
        row = {k: _clean(row.get(k)) for k in self.columns}
        self.rows.append(row)
        with open(self.csv_path, "a", newline="") as f:
            csv.DictWriter(f, self.columns, lineterminator="\n").writerow(
                {k: "" if v is None else v for k, v in row.items()}
            )
        with open(self.jsonl_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self.writer is not None:
            step = int(row["agent_steps"])
            for k, v in row.items():
                if isinstance(v, (int, float)) and k not in ("update", "agent_steps"):
                    self.writer.add_scalar(self.tb_prefix + k, v, step)
            self.writer.flush()

    def plot(self) -> None:
        """learning_curves.png: win rates, returns and losses against agent-steps."""
        if not self.plots or not self.rows:
            return
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        steps = [r["agent_steps"] for r in self.rows]
        panels = [
            ("win rate", [c for c in self.columns if c.startswith("win_rate/")]),
            ("episode return", ["return_team0", "return_team1"]),
            ("loss", ["policy_loss", "value_loss", "entropy"]),
        ]
        fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
        for ax, (title, names) in zip(axes, panels, strict=True):
            for name in names:
                ys = [r.get(name) for r in self.rows]
                pts = [(x, y) for x, y in zip(steps, ys, strict=True) if y is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=True), label=name.split("/")[-1])
            ax.set_title(title)
            ax.set_xlabel("agent-steps")
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=8)
        fig.tight_layout()
        try:
            with _files.atomic_path(self.dir / "learning_curves.png") as tmp:
                fig.savefig(tmp, dpi=90)
        finally:
            plt.close(fig)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class MainProcessLog:
    """The metrics logger on the main process; nothing elsewhere (every call is a no-op).

    `resumed` is (update, agent_steps) of the checkpoint a run resumes from, else
    (None, None)."""

    def __init__(self, out, columns, resumed, cfg: PPOConfig, main: bool):
        update, step = resumed
        self.logger = None
        if main:
            self.logger = MetricsLogger(
                out, columns, update, cfg.tensorboard, cfg.plots, resume_step=step
            )

    def __getattr__(self, name):
        if self.logger is None:
            return lambda *a, **k: None
        return getattr(self.logger, name)


def progress_bar(cfg: PPOConfig, start: int, main: bool = True):
    """The run's tqdm bar over `cfg.updates` updates from `start` (shown with --progress, on
    the main process)."""
    from tqdm import tqdm

    return tqdm(
        total=cfg.updates,
        initial=start,
        disable=not (cfg.progress and main),
        unit="update",
        dynamic_ncols=True,
        desc="ppo",
    )


def progress_postfix(row: dict, labels) -> str:
    """The progress bar's text of a metrics row: the agent-steps per second so far and the
    win rate against each opponent kind of `labels` but self-play."""
    rate = row["agent_steps"] / max(row["wall_s"], 1e-9)
    parts = [f"{rate / 1e3:.0f}k agent-steps/s"]
    for label in labels:
        w = row.get(f"win_rate/{label}")
        if w is not None and label != "self":
            parts.append(f"win {label} {w:.2f}")
    return ", ".join(parts)
