"""Train and test scores of a run's checkpoints on a generalisation split: the curves that show
when a policy starts to fit its training items rather than the game (Procgen's train and test
curves).

    python -m baselines.ppo --scenario identical_5_vs_5_fobs_vec_maps_disc \\
        --env 'map_generator={"base": "procgen_dense", "seeds": [0, 16]}' --keep-checkpoints 0 \\
        --time-budget-s 1800 --out runs/levels16
    python -m benchmarks.split_curves --split levels-v1 --items levels-16,unseen \\
        --games 128 --points 8 runs/levels16 --out results/curves

Up to `--points` numbered checkpoints of each run folder (`checkpoint_000123.pt`; keep them
all with `--keep-checkpoints 0`), evenly spaced by update and always the last, play the
split's chosen items zero-shot (`gigastep.eval.splits.evaluate_split`); the references play
each item once, shared by every checkpoint. Writes `curves.json` (per run and checkpoint: the
update, agent-steps and training seconds, each row's win rate with its interval and normalised
score, the mean normalised score of the training and the test rows and their gap) and
`curves.png` (the two means against agent-steps: training solid, test dashed, one colour per
run). The games per point default to 128, a quarter of a split's table: enough to see a curve
bend, not to quote; the final checkpoint's 512-game table comes from `gigastep eval --split`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks._common import run_info, write_json

__all__ = ["checkpoints_to_play", "curve_rows", "main", "plot_curves"]


def checkpoints_to_play(folder: Path, points: int) -> list[Path]:
    """Up to `points` numbered checkpoints of `folder`, evenly spaced by their order, the
    first and the last included.

    Raises:
        ValueError: a folder without numbered checkpoints (the error says how to keep them).
    """
    from baselines.checkpoint import numbered_checkpoints

    if not folder.is_dir():
        raise ValueError(f"{folder} is not a run folder")
    found = [p for _, p in numbered_checkpoints(folder)]
    if not found:
        raise ValueError(
            f"{folder} holds no numbered checkpoint (checkpoint_NNNNNN.pt); train with "
            f"--keep-checkpoints 0 to keep every one"
        )
    if len(found) <= points:
        return found
    picks = sorted({round(i * (len(found) - 1) / (points - 1)) for i in range(points)})
    return [found[i] for i in picks]


def curve_rows(
    folder: Path,
    split: Any,
    items: list[str] | None,
    games: int,
    points: int,
    cache: dict,
    progress=None,
) -> list[dict[str, Any]]:
    """One row per chosen checkpoint of `folder`: its counters and `split`'s scores."""
    from baselines.checkpoint import load_checkpoint
    from gigastep.eval.splits import evaluate_split

    rows = []
    for path in checkpoints_to_play(folder, points):
        ckpt = load_checkpoint(path)
        if progress is not None:
            progress(f"{folder.name}: update {ckpt['update']}")
        result = evaluate_split(
            split,
            str(path),
            items=items,
            games=games,
            reference_cache=cache,
        )
        table = result.to_json()
        rows.append(
            {
                "win_rate": _mean_win_rates(table["rows"]),
                "run": str(folder),
                "checkpoint": path.name,
                "update": ckpt["update"],
                "agent_steps": ckpt["agent_steps"],
                "wall_s": ckpt["wall_s"],
                "train": result.mean_normalised("train"),
                "test": result.mean_normalised("test"),
                "gap": result.gap,
                "rows": table["rows"],
            }
        )
    return rows


def _mean_win_rates(table_rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """role -> opponent -> the mean win rate of that role's rows against that opponent (rows
    the policy could not play left out)."""
    rates: dict[str, dict[str, list[float]]] = {}
    for r in table_rows:
        match = r.get("policy")
        if match and match["games"]:
            per_role = rates.setdefault(r["role"], {})
            per_role.setdefault(r["opponent"], []).append(match["wins"] / match["games"])
    return {role: {opp: sum(v) / len(v) for opp, v in per.items()} for role, per in rates.items()}


def _series(rows: list[dict[str, Any]], metric: str) -> dict[str, list[float | None]]:
    """label -> one value per row: 'train' and 'test' (mean normalised score), or 'train vs
    OPPONENT' and 'test vs OPPONENT' (mean win rate)."""
    if metric == "normalised":
        return {role: [r[role] for r in rows] for role in ("train", "test")}
    labels = sorted(
        {(role, opp) for r in rows for role, per in r["win_rate"].items() for opp in per},
        key=lambda k: (k[1], k[0] != "train"),
    )
    return {
        f"{role} vs {opp}": [r["win_rate"].get(role, {}).get(opp) for r in rows]
        for role, opp in labels
    }


def plot_curves(
    rows: list[dict[str, Any]], split_label: str, path: Path, metric: str = "normalised"
) -> None:
    """curves.png: mean normalised training and test scores (or, with metric 'win_rate', the
    mean win rates against each opponent) against agent-steps."""
    from matplotlib.ticker import EngFormatter

    from benchmarks.plot import _pyplot, save_figure

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    runs = list(dict.fromkeys(r["run"] for r in rows))
    for i, run in enumerate(runs):
        mine = [r for r in rows if r["run"] == run]
        steps = [r["agent_steps"] for r in mine]
        colour = f"C{i % 10}"
        markers = iter(".x^sv*")
        for label, values in _series(mine, metric).items():
            if any(v is not None for v in values):
                style = "-" if label.startswith("train") else "--"
                marker = "." if metric == "normalised" else next(markers, ".")
                name = f"{Path(run).name}: {label}"
                ax.plot(steps, values, style, color=colour, marker=marker, label=name)
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_xlabel("agent-steps of training")
    ax.set_ylabel(
        "mean normalised score (0: random, 1: pursuit)"
        if metric == "normalised"
        else "mean win rate"
    )
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small")
    ax.set_title(split_label, fontsize="small")
    fig.tight_layout()
    save_figure(fig, path, "split curves", footer=f"split {split_label}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.split_curves", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("runs", nargs="+", help="run folders with numbered checkpoints")
    parser.add_argument("--split", required=True, help="a shipped split's name or a .toml file")
    parser.add_argument(
        "--items", default=None, metavar="ID,ID", help="only these items (default: all)"
    )
    parser.add_argument("--games", type=int, default=128, help="games per item and opponent")
    parser.add_argument("--points", type=int, default=8, help="checkpoints per run, at most")
    parser.add_argument("--out", default="results/split_curves", help="folder of the outputs")
    parser.add_argument(
        "--metric",
        choices=("normalised", "win_rate"),
        default="normalised",
        help="what curves.png draws: the mean normalised score per role, or the mean win rate "
        "per role and opponent (for items whose references play alike, which have no "
        "normalised score)",
    )
    args = parser.parse_args(argv)
    for name in ("games", "points"):
        value = getattr(args, name)
        if value < (2 if name == "points" else 1):
            parser.error(f"--{name} must be at least {2 if name == 'points' else 1}, got {value}")
    from gigastep.eval.splits import load_split

    items = None
    if args.items is not None:
        items = [i.strip() for i in args.items.split(",") if i.strip()]
    try:
        split = load_split(args.split)
        folders = [Path(r) for r in args.runs]
        for folder in folders:  # every folder checked before any game is played
            checkpoints_to_play(folder, args.points)
        cache: dict = {}
        rows = []
        for folder in folders:
            rows += curve_rows(
                folder,
                split,
                items,
                args.games,
                args.points,
                cache,
                progress=lambda what: print(f"[split_curves] {what}", file=sys.stderr),
            )
    except ValueError as err:
        parser.exit(2, f"python -m benchmarks.split_curves: error: {err}\n")
    out = Path(args.out)
    write_json(
        out / "curves.json",
        {"split": split.label, "games": args.games, "machine": run_info(), "rows": rows},
    )
    plot_curves(rows, split.label, out / "curves.png", args.metric)
    print(f"wrote {out / 'curves.json'} and {out / 'curves.png'}", file=sys.stderr)
    return rows


if __name__ == "__main__":
    main()
