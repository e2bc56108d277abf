"""Figures of benchmark results for a paper: throughput against batch size, time to 10^9
agent-steps, learning curves and a win-rate heat map.

    python -m benchmarks.plot results/throughput.json --out results/throughput.png
    python -m benchmarks.plot results/report/report.json --out results/throughput_vector.png \\
        --obs vector

The input is the JSON list written by `python -m benchmarks.throughput --json`, or the
`report.json` written by `python -m benchmarks.report`. Throughput figures draw one line per
configuration (scenario, observation, policy, driver, devices) on log-log axes: agent-steps/s
(median over repeats, the min-max range as a band) against the number of parallel games.
Every PNG carries the run's description (device, versions, XLA flags, scenario hashes) in its
metadata ("Description", JSON) and a one-line footer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = [
    "plot_heatmap",
    "plot_learning_curves",
    "plot_throughput",
    "plot_time_to",
    "save_figure",
    "throughput_rows",
]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(
    fig,
    out: str | os.PathLike,
    title: str = "",
    footer: str = "",
    description: dict[str, Any] | None = None,
) -> Path:
    """Write `fig` as a PNG atomically (temporary file, then rename) with `footer` printed
    under it and `description` stored as JSON in the PNG's "Description" text chunk."""
    plt = _pyplot()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if footer:
        text = "\n".join(textwrap.wrap(footer, width=int(fig.get_figwidth() * 22)))
        fig.text(0.01, 0.0, text, fontsize=6, color="0.35", ha="left", va="top")
    meta = {"Title": title, "Software": "gigastep benchmarks"}
    if description is not None:
        meta["Description"] = json.dumps(description, default=str)
    from gigastep._util import files as _files  # here: plotting a JSON file needs no JAX

    try:
        with _files.atomic_path(out, suffix=".png") as tmp:
            # A tight box keeps long tick labels, the legend and the footer inside the image.
            fig.savefig(tmp, dpi=150, format="png", metadata=meta, bbox_inches="tight")
    finally:
        plt.close(fig)
    return out


def throughput_rows(data: Any) -> list[dict[str, Any]]:
    """The measured environment rows of a throughput JSON list or of a report's JSON."""
    if isinstance(data, dict) and "tables" in data:
        data = data["tables"].get("throughput", {}).get("rows", [])
    if not isinstance(data, list):
        raise ValueError("expected a JSON list of throughput rows or a report.json")
    return [
        r
        for r in data
        if isinstance(r, dict)
        and r.get("kind", "env") == "env"
        and isinstance(r.get("agent_steps_per_s"), (int, float))
    ]


def _line_key(row: dict[str, Any]) -> tuple:
    return (
        row["scenario"],
        row.get("obs_type", "?"),
        row.get("policy", "none"),
        row.get("driver", "scan"),
        row.get("devices", 1),
    )


def _line_label(key: tuple) -> str:
    scenario, obs, policy, driver, devices = key
    extras = [obs, "Python loop" if driver == "loop" else "scan"]
    if policy != "none":
        extras.append(f"{policy} policy")
    if devices != 1:
        extras.append(f"{devices} devices")
    return f"{scenario} ({', '.join(extras)})"


def plot_throughput(
    rows: list[dict],
    out: str | os.PathLike,
    obs_type: str | None = None,
    title: str = "",
    footer: str = "",
    description: dict[str, Any] | None = None,
) -> Path:
    """Agent-steps/s against parallel games, log-log; one line per configuration.

    Args:
        rows: throughput rows (`batch`, `agent_steps_per_s` and optionally `_min`/`_max`).
        obs_type: keep only rows of this observation type ("vector", "rgb", ...).
    """
    lines = defaultdict(list)
    for row in throughput_rows(rows):
        if obs_type is None or row.get("obs_type") == obs_type:
            lines[_line_key(row)].append(row)
    if not lines:
        what = f" of obs type {obs_type!r}" if obs_type else ""
        raise ValueError(f"no throughput rows (with 'agent_steps_per_s'){what} in the input")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    for key, group in sorted(lines.items()):
        group.sort(key=lambda r: r["batch"])
        batch = [r["batch"] for r in group]
        median = [r["agent_steps_per_s"] for r in group]
        (line,) = ax.plot(batch, median, marker="o", label=_line_label(key))
        low = [r.get("agent_steps_per_s_min", m) for r, m in zip(group, median, strict=True)]
        high = [r.get("agent_steps_per_s_max", m) for r, m in zip(group, median, strict=True)]
        if len(group) > 1:
            ax.fill_between(batch, low, high, color=line.get_color(), alpha=0.2)
        else:  # one batch size: the range as an error bar
            ax.vlines(batch, low, high, color=line.get_color(), alpha=0.5, linewidth=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parallel games (batch)")
    ax.set_ylabel("agent-steps per second (median; band: min–max of repeats)")
    ax.set_title(title or "Throughput" + (f" ({obs_type} observations)" if obs_type else ""))
    ax.grid(True, which="both", alpha=0.3)
    # Below the axes: inside, it would cover some of the lines.
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return save_figure(fig, out, title or "throughput", footer, description)


def plot_time_to(
    rows: list[dict],
    out: str | os.PathLike,
    target: float = 1e9,
    footer: str = "",
    description: dict[str, Any] | None = None,
) -> Path:
    """Seconds to simulate `target` agent-steps per configuration at its fastest batch size
    (stepping only: compile time is written beside each bar, not added)."""
    best: dict[tuple, dict] = {}
    for row in throughput_rows(rows):
        key = _line_key(row)
        if key not in best or row["agent_steps_per_s"] > best[key]["agent_steps_per_s"]:
            best[key] = row
    if not best:
        raise ValueError("no throughput rows (with 'agent_steps_per_s') in the input")
    items = sorted(best.items(), key=lambda kv: -kv[1]["agent_steps_per_s"])
    seconds = [target / r["agent_steps_per_s"] for _, r in items]
    labels = [f"{_line_label(k)}, batch {r['batch']:,}" for k, r in items]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 1.2 + 0.32 * len(items)))
    ax.barh(range(len(items)), seconds, color="tab:blue")
    for i, (_, r) in enumerate(items):
        compile_s = r.get("compile_s")
        note = f" {seconds[i]:,.0f} s" + (f" (+{compile_s:.1f} s compile)" if compile_s else "")
        ax.text(seconds[i], i, note, va="center", fontsize=6)
    ax.set_yticks(range(len(items)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(right=max(seconds) * 30)
    ax.set_xlabel(f"seconds to {_power_of_ten(target)} agent-steps (median rate, compile excluded)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return save_figure(
        fig, out, f"time to {_power_of_ten(target)} agent-steps", footer, description
    )


def _power_of_ten(x: float) -> str:
    """1e9 -> "10^9" in mathtext (matplotlib draws the superscript)."""
    exponent = math.log10(x)
    return f"$10^{{{exponent:.0f}}}$" if exponent.is_integer() else f"{x:g}"


def plot_learning_curves(
    runs: list[dict],
    out: str | os.PathLike,
    footer: str = "",
    description: dict[str, Any] | None = None,
) -> Path:
    """Win rate against each opponent and episode return against agent-steps, one line per
    (policy, scenario, seed) run (the `benchmarks.learning` JSON layout)."""
    runs = [r for r in runs if r.get("curve")]
    if not runs:
        raise ValueError("no learning runs with a non-empty 'curve' in the input")
    plt = _pyplot()
    fig, (ax_win, ax_ret) = plt.subplots(1, 2, figsize=(10.0, 4.4))
    for run in runs:
        name = f"{run.get('policy', '?')} on {run.get('scenario', '?')}, seed {run.get('seed')}"
        steps = [p["agent_steps"] for p in run["curve"]]
        opponents = sorted({o for p in run["curve"] for o in p.get("win_rate", {})})
        for opponent in opponents:
            pts = [
                (p["agent_steps"], p["win_rate"][opponent])
                for p in run["curve"]
                if opponent in p.get("win_rate", {})
            ]
            ax_win.plot(*zip(*pts, strict=True), marker=".", label=f"{name} vs {opponent}")
        returns = [p.get("episode_return") for p in run["curve"]]
        if any(v is not None for v in returns):
            ax_ret.plot(steps, returns, marker=".", label=name)
    ax_win.set_ylim(-0.02, 1.02)
    ax_win.set_ylabel("win rate (wins / games)")
    ax_ret.set_ylabel("mean episode return")
    from matplotlib.ticker import EngFormatter

    for ax in (ax_win, ax_ret):
        ax.set_xlabel("agent-steps of training")
        ax.xaxis.set_major_formatter(EngFormatter())  # 100 k, 1 M: no overlapping digits
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return save_figure(fig, out, "learning curves", footer, description)


def plot_heatmap(
    rows: list[str],
    cols: list[str],
    values: list[list[float | None]],
    out: str | os.PathLike,
    footer: str = "",
    description: dict[str, Any] | None = None,
) -> Path:
    """Win rate of each row policy (as team 0) against each column policy, annotated."""
    import numpy as np

    grid = np.array([[np.nan if v is None else v for v in row] for row in values], float)
    if grid.shape != (len(rows), len(cols)) or grid.size == 0:
        raise ValueError(f"heat map needs a {len(rows)}x{len(cols)} matrix, got {grid.shape}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.6 + 0.9 * len(cols), 1.4 + 0.7 * len(rows)))
    image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="RdYlGn")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, "–" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("opponent")
    ax.set_ylabel("policy")
    fig.colorbar(image, ax=ax, label="win rate (wins / games)")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save_figure(fig, out, "win-rate matrix", footer, description)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.plot", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "json",
        type=Path,
        help="a JSON list written by benchmarks.throughput, "
        "or a report.json written by benchmarks.report",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/throughput.png"),
        help="image path (default: results/throughput.png)",
    )
    parser.add_argument(
        "--obs", default=None, help="only rows of this observation type (vector, rgb, rgb_vector)"
    )
    args = parser.parse_args(argv)
    if not args.json.is_file():
        print(
            f"{args.json} does not exist. Make it first, for example:\n"
            f"  python -m benchmarks.throughput --paper --json {args.json}   (~7 min on "
            "2 cores)\n"
            f"  python -m benchmarks.throughput --quick --json {args.json}   (~1-2 min)\n"
            "or plot a report's output: python -m benchmarks.plot DIR/report.json",
            file=sys.stderr,
        )
        return 2
    try:
        rows = throughput_rows(json.loads(args.json.read_text()))
        out = plot_throughput(rows, args.out, obs_type=args.obs)
    except (json.JSONDecodeError, ValueError) as e:
        print(f"cannot plot {args.json}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
