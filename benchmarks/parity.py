"""Learning parity of the PyTorch and JAX PPO trainers: the same recipe, the same number of
updates, several seeds each, then the same evaluation.

Each run trains `python -m baselines.ppo --framework F` in its own process for a fixed number
of updates (no time budget, so the machine's speed cannot change what is learned), then its
final checkpoint plays fresh games against the scripted opponents (`gigastep.eval.matches`,
both sides of the symmetric game, Wilson 95% intervals). Across seeds, each framework gets the
interquartile mean (IQM) of its win rates with a stratified bootstrap interval, and the
probability that a PyTorch run beats a JAX run (`benchmarks.learning`'s rliable aggregates).
Last, every PyTorch checkpoint plays every JAX checkpoint (the cross-framework league): equal
learning puts the PyTorch side's score, (wins + draws / 2) / games, near 0.5.

    python -m benchmarks.parity --out results/parity          # ~22 min on 2 cores
    python -m benchmarks.parity --preset team --out results/parity_team   # the same, --signal team
    python -m benchmarks.parity --preset quick --out /tmp/p   # ~3 min: the plumbing

Writes DIR/parity.json (runs, aggregates, league) and prints the tables as markdown. A run
whose result file exists is not trained again, so an interrupted sweep continues where it
stopped when rerun with the same --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks._common import Column, fixed, markdown_table, run_info, write_json

__all__ = ["PRESETS", "Recipe", "aggregate", "league", "main", "train_and_evaluate"]

FRAMEWORKS = ("torch", "jax")


@dataclass(frozen=True)
class Recipe:
    """What every run of a sweep trains (the same for both frameworks)."""

    updates: int
    flags: tuple[str, ...]
    """Flags of `python -m baselines.ppo` after `--framework`."""
    scenario: str = "identical_5_vs_5_fobs_vec_void_disc"
    opponents: tuple[str, ...] = ("random", "pursuit")
    """Scripted opponents of the final evaluation."""


_CPU = ("--preset", "cpu", "--num-envs", "256", "--eval-every", "0")

PRESETS: dict[str, Recipe] = {
    # The `cpu` preset's recipe (S5 width 128, 32 steps, 4 epochs x 8 minibatches, pursuit 70% /
    # random 30%, reward_damage=1, constant rate 5e-4) at 256 games per update, for 120
    # updates (9.8 M agent-steps): ~4 min per PyTorch run and ~3 per JAX run on 2 cores, with
    # their evaluations; the league of 3 x 3 seeds adds ~2 min.
    "cpu": Recipe(
        updates=120,
        # the individual signal: the trainer's default when its table was measured
        flags=(*_CPU, "--signal", "individual"),
    ),
    # The same with the team training signal (issue 53's winner at 10 minutes), so both
    # trainers are shown to learn alike from it.
    "team": Recipe(
        updates=120,
        flags=(*_CPU, "--signal", "team"),
    ),
    # A small policy for a few updates: the plumbing, not a result.
    "quick": Recipe(
        updates=3,
        flags=tuple(
            "--preset cpu --num-envs 32 --rollout-steps 8 --hidden 16 --s5-state-dim 4 "
            "--epochs 1 --minibatches 2 --eval-every 0".split()
        ),
        opponents=("random",),
    ),
}


def _train(framework: str, seed: int, recipe: Recipe, folder: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    # JAX runs of different seeds compile the same program: share it through the cache.
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(folder.parent / ".jax_cache"))
    args = [
        "--framework",
        framework,
        *recipe.flags,
        "--scenario",
        recipe.scenario,
        "--updates",
        str(recipe.updates),
        "--time-budget-s",
        "0",
        "--seed",
        str(seed),
        "--out",
        str(folder),
        "--no-progress",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "baselines.ppo", *args], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"training {framework} seed {seed} failed ({proc.returncode}): "
            f"{proc.stderr.strip()[-2000:]}"
        )


def train_and_evaluate(
    framework: str, seed: int, recipe: Recipe, out: Path, games: int, log=sys.stderr
) -> dict:
    """One run: trained unless its result file exists, then evaluated on `games` games per
    scripted opponent (evaluation seed 10,000 + seed, never a training seed)."""
    from benchmarks.learning import evaluate_checkpoint, json_checkpoint_info

    folder = out / f"{framework}_seed{seed}"
    done = folder / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    if folder.exists():
        raise ValueError(f"{folder} exists without result.json: remove it to rerun that run")
    print(f"[parity] {framework} seed {seed}: {recipe.updates} updates", file=log, flush=True)
    t0 = time.perf_counter()
    _train(framework, seed, recipe, folder)
    process_s = time.perf_counter() - t0
    ckpt = json_checkpoint_info(folder)
    final = evaluate_checkpoint(
        folder / "checkpoint.pt", recipe.scenario, recipe.opponents, games, 10_000 + seed
    )
    for f in final:
        print(
            f"[parity]   vs {f['opponent']}: {f['win_rate']:.3f} "
            f"[{f['ci_low']:.3f}, {f['ci_high']:.3f}] over {f['games']} games",
            file=log,
            flush=True,
        )
    row = {
        "framework": framework,
        "seed": seed,
        "updates": ckpt["update"],
        "agent_steps": ckpt["agent_steps"],
        "trained_s": ckpt["wall_s"],
        "process_s": process_s,
        "final": final,
        "run_dir": str(folder),
    }
    write_json(done, row)
    return row


def aggregate(runs: list[dict], opponents: tuple[str, ...], seed: int = 0) -> dict:
    """Per framework and opponent: the seeds' win rates, their IQM and its stratified
    bootstrap interval; per opponent: P(a PyTorch run beats a JAX run) with its interval."""
    from benchmarks.learning import (
        interquartile_mean,
        probability_of_improvement,
        stratified_bootstrap_ci,
    )

    def scores(framework: str, opponent: str) -> list[float]:
        return [
            f["win_rate"]
            for r in runs
            if r["framework"] == framework
            for f in r["final"]
            if f["opponent"] == opponent
        ]

    out: dict = {"frameworks": {}, "improvement": {}}
    for framework in FRAMEWORKS:
        for opponent in opponents:
            s = scores(framework, opponent)
            if not s:
                continue
            low, high = stratified_bootstrap_ci([s], seed=seed)
            out["frameworks"][f"{framework}/{opponent}"] = {
                "framework": framework,
                "opponent": opponent,
                "seeds": len(s),
                "win_rates": s,
                "iqm": interquartile_mean([s]),
                "ci_low": low,
                "ci_high": high,
            }
    for opponent in opponents:
        t, j = scores("torch", opponent), scores("jax", opponent)
        if t and j:
            p, low, high = probability_of_improvement([t], [j], seed=seed)
            out["improvement"][opponent] = {"p": p, "ci_low": low, "ci_high": high}
    return out


def league(runs: list[dict], scenario: str, games: int, log=sys.stderr) -> dict:
    """Every PyTorch run's checkpoint against every JAX run's on `games` fresh games (both
    sides): per pair and pooled, the PyTorch side's score (wins + draws / 2) / games."""
    from gigastep.eval.matches import evaluate, wilson_interval

    torch_runs = [r for r in runs if r["framework"] == "torch"]
    jax_runs = [r for r in runs if r["framework"] == "jax"]
    pairs = []
    for t in torch_runs:
        for j in jax_runs:
            a, b = (str(Path(r["run_dir"]) / "checkpoint.pt") for r in (t, j))
            seed = 20_000 + 100 * t["seed"] + j["seed"]
            result = evaluate(a, b, scenario, games=games, seed=seed)
            score = (result.wins + 0.5 * result.draws) / result.games
            pairs.append(
                {
                    "torch_seed": t["seed"],
                    "jax_seed": j["seed"],
                    "games": result.games,
                    "wins": result.wins,
                    "draws": result.draws,
                    "losses": result.losses,
                    "score": score,
                }
            )
            print(
                f"[parity] league torch {t['seed']} vs jax {j['seed']}: score {score:.3f} "
                f"({result.wins} W, {result.draws} D, {result.losses} L)",
                file=log,
                flush=True,
            )
    total = sum(p["games"] for p in pairs)
    if not total:
        return {"pairs": [], "games": 0}
    points = sum(p["wins"] + 0.5 * p["draws"] for p in pairs)
    wins = sum(p["wins"] for p in pairs)
    decided = sum(p["wins"] + p["losses"] for p in pairs)
    # The interval is over decided games (a draw is half a point, not a Bernoulli trial).
    low, high = wilson_interval(wins, decided) if decided else (float("nan"), float("nan"))
    return {
        "pairs": pairs,
        "games": total,
        "score": points / total,
        "decided_games": decided,
        "decided_win_rate": wins / decided if decided else float("nan"),
        "decided_ci_low": low,
        "decided_ci_high": high,
    }


def tables(report: dict) -> str:
    """The sweep as markdown: per run, the aggregates, the league."""
    runs = [
        {
            "framework": r["framework"],
            "seed": r["seed"],
            "updates": r["updates"],
            "trained_s": r["trained_s"],
            "opponent": f["opponent"],
            "games": f["games"],
            "win_rate": f["win_rate"],
            "interval": f"[{f['ci_low']:.3f}, {f['ci_high']:.3f}]",
        }
        for r in report["runs"]
        for f in r["final"]
    ]
    parts = [
        markdown_table(
            runs,
            [
                Column("framework", "framework"),
                Column("seed", "seed"),
                Column("updates", "updates"),
                Column("trained_s", "training [s]", fixed(0)),
                Column("opponent", "vs"),
                Column("games", "games"),
                Column("win_rate", "win rate", fixed(3)),
                Column("interval", "Wilson 95%"),
            ],
        )
    ]
    agg = [
        {
            **a,
            "rates": ", ".join(f"{x:.3f}" for x in a["win_rates"]),
            "interval": f"[{a['ci_low']:.3f}, {a['ci_high']:.3f}]",
        }
        for a in report["aggregate"]["frameworks"].values()
    ]
    parts.append(
        markdown_table(
            agg,
            [
                Column("framework", "framework"),
                Column("opponent", "vs"),
                Column("seeds", "seeds"),
                Column("rates", "win rates"),
                Column("iqm", "IQM", fixed(3)),
                Column("interval", "bootstrap 95%"),
            ],
        )
    )
    for opponent, p in report["aggregate"]["improvement"].items():
        parts.append(
            f"P(PyTorch run > JAX run) vs {opponent}: {p['p']:.2f} "
            f"[{p['ci_low']:.2f}, {p['ci_high']:.2f}]"
        )
    lg = report.get("league") or {}
    if lg.get("games"):
        parts.append(
            f"League, PyTorch vs JAX: score {lg['score']:.3f} over {lg['games']} games; "
            f"decided games {lg['decided_games']}, PyTorch won {lg['decided_win_rate']:.3f} "
            f"[{lg['decided_ci_low']:.3f}, {lg['decided_ci_high']:.3f}]"
        )
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.parity", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--out", default="results/parity", help="folder of the runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--games", type=int, default=512, help="evaluation games per opponent")
    parser.add_argument(
        "--league-games", type=int, default=256, help="games per PyTorch-JAX pair (0: none)"
    )
    args = parser.parse_args(argv)
    if args.games < 1:
        parser.error(f"--games must be positive, got {args.games}")
    if args.league_games < 0:
        parser.error(f"--league-games must be 0 or more, got {args.league_games}")
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds must be distinct, got {args.seeds}")
    recipe = PRESETS[args.preset]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        runs = [
            train_and_evaluate(fw, s, recipe, out, args.games)
            for s in args.seeds
            for fw in args.frameworks
        ]
    except (ValueError, RuntimeError) as err:
        parser.exit(2, f"python -m benchmarks.parity: error: {err}\n")
    report = {
        "recipe": dataclasses.asdict(recipe),
        "runs": runs,
        "aggregate": aggregate(runs, recipe.opponents),
        "league": league(runs, recipe.scenario, args.league_games) if args.league_games else {},
        "machine": run_info(),
    }
    write_json(out / "parity.json", report)
    print(tables(report))
    print(f"wrote {out / 'parity.json'}", file=sys.stderr)
    return report


if __name__ == "__main__":
    main()
