"""Learning curves of the PPO baseline under wall-clock budgets, and final win rates.

Each run trains `python -m baselines.ppo` in its own process for a wall-clock budget (the
trainer's own clock: rollouts and updates, the JAX compilation of the first step included,
process start-up excluded), then plays its checkpoint against scripted opponents on fresh
games (`gigastep.eval.matches.evaluate`, both sides of the symmetric game, Wilson 95%
intervals). A run with several budgets is trained once and evaluated at each budget (it is
resumed from its checkpoint, which continues it exactly).

    python -m benchmarks.learning --preset paper --out results/learning   # ~80 min, 2 cores
    python -m benchmarks.learning --preset quick --out results/learning   # ~1.5 min

Writes DIR/learning.json (a list of runs: policy, scenario, scenario_hash, seed, budget_s,
curve, final — the layout `benchmarks.report` reads), DIR/learning.png, and each run's
folder (metrics, config, checkpoints — `checkpoint_<budget>s.pt` at each budget — and
`result_<budget>s.json` once a budget is evaluated).

An interrupted sweep continues where it stopped when rerun with the same --out: a budget whose
result file exists is not redone, and a run stopped short of its budget is resumed from its
last checkpoint (the trainer continues it exactly).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import run_info, write_json, write_text
from gigastep.eval.aggregates import (
    interquartile_mean,
    probability_of_improvement,
    stratified_bootstrap_ci,
)

__all__ = [
    "PRESETS",
    "PopulationSplit",
    "Run",
    "describe_final",
    "evaluate_checkpoint",
    "evaluate_player",
    "interquartile_mean",
    "main",
    "probability_of_improvement",
    "run_learning",
    "select_runs",
    "stratified_bootstrap_ci",
]

SCENARIO = "identical_5_vs_5_fobs_vec_void_disc"


@dataclass(frozen=True)
class PopulationSplit:
    """A `populations` split whose players are checkpoints of the preset's own runs: written
    to `--out` as `<name>_seed<seed>.toml` when a run is first scored on it, each opponent the
    checkpoint at the last evaluated budget of a run of the same seed, as a path relative to
    the file (so the split's hash is the same wherever `--out` is)."""

    name: str
    scenario: str
    items: tuple[tuple[str, str, tuple[str, ...]], ...]
    """(id, role, the runs whose checkpoints are its opponents) of each item."""
    description: str = ""
    games: int = 512
    reference: tuple[str, str] = ("random", "pursuit")

    def write(self, out: Path, seed: int) -> Path:
        """The split file of seed `seed`'s runs under `out` (rewritten on every call).

        Raises:
            ValueError: a run named by an item has no evaluated checkpoint yet.
        """
        path = out / f"{self.name}_seed{seed}.toml"
        lines = [
            "# Written by python -m benchmarks.learning: a populations split of its own runs.",
            f"name = {json.dumps(self.name)}",
            "version = 1",
            'family = "populations"',
            f"description = {json.dumps(self.description)}",
            f"games = {self.games}",
            f"reference = {json.dumps(list(self.reference))}",
        ]
        for i, (item, role, runs) in enumerate(self.items):
            players = [final_checkpoint(out, r, seed).relative_to(out).as_posix() for r in runs]
            lines += [
                "",
                "[[items]]",
                f"id = {json.dumps(item)}",
                f"role = {json.dumps(role)}",
                f"scenario = {json.dumps(self.scenario)}",
                f"opponents = {json.dumps(players)}",
                f"seed = {i}",
            ]
        write_text(path, "\n".join(lines) + "\n")
        return path


@dataclass(frozen=True)
class Run:
    """One training run, evaluated at each of its budgets."""

    name: str
    policy: str = "s5"
    scenario: str = SCENARIO
    budgets_s: tuple[float, ...] = (600.0,)
    opponents: tuple[str, ...] = ("random", "pursuit")
    """Scripted opponents of the final evaluation."""
    flags: tuple[str, ...] = ()
    """Extra flags of `python -m baselines.ppo`; `{run:NAME}` in a flag stands for the
    checkpoint of run NAME of the same seed and `--out` at its last evaluated budget (a
    frozen opponent: `--opponent {run:a}:0.5,pursuit:0.5`)."""
    seed: int = 0
    seed_offset: int = 0
    """Added to `seed` for the trainer's `--seed`: runs of one recipe at distinct seeds within
    a preset seed (a population)."""
    split: str | PopulationSplit | None = None
    """A generalisation split (`gigastep.eval.splits`): when set, the final evaluation plays
    `split_items` of it zero-shot (`evaluate_split`: the items' own opponents, beside the
    split's reference players, `games` per item and opponent) instead of `opponents` on
    `scenario`."""
    split_items: tuple[str, ...] = ()
    init_from: str | None = None
    """A run of the same preset whose latest checkpoint (same seed and `--out`) this run starts
    from (`--init-from`): a curriculum in stages, each run one stage."""
    evaluates: str | None = None
    """A run of the same preset whose checkpoint at each of `budgets_s` this run scores on its
    split, with no training of its own: an evaluation that needs later runs (an exploiter of
    that checkpoint) among its opponents."""

    @property
    def trainer_seed(self) -> int:
        return self.seed + self.seed_offset


# The training recipe of every run: the `cpu` preset of baselines.config (512 games x 32 steps
# per update, width 128, against pursuit 70% / random 30% with the auxiliary damage reward,
# constant learning rate) with the individual signal, the trainer's default when the tables of
# docs/results.md were measured (the team signal became the default on 2026-12-06; the runs
# that use it say so); each run is stopped by its time budget.
RECIPE = ("--preset", "cpu", "--signal", "individual")

# A checkpoint this far past a budget belongs to a later budget (the trainer stops within one
# update, a few seconds, of its budget).
_LATE_S = 60.0

# The pair of changes that won most in the first tuning on seed 2, the one the `tuned` preset
# runs on the reported seeds; the later runs of `tune` each change it once more (docs/results.md).
_TUNED = ("--hidden", "64", "--lr", "1e-3")
# Half the games per update, with the minibatches of the same size (320 sequences).
_HALF_BATCH = ("--num-envs", "256", "--minibatches", "4")
# The pair with twice its learning rate: the one follow-up that won more on seed 2 (on the
# reported seeds 0 and 1 it did not; docs/results.md).
_TUNED_LR_2E_3 = ("--hidden", "64", "--lr", "2e-3")
# The budgets of the learning table's long runs: 10 and 30 minutes.
_PAPER_BUDGETS = (600.0, 1800.0)

# Issue 53's changes to what the trainer learns from, each an option of baselines.ppo; the
# ablation runs each alone on the recipe and all of them together.
_TEAM = ("--signal", "team")
# The shooter credit sets the game's damage and death weights itself, so the recipe's
# `reward_damage=1` goes.
_SHOOTER = ("--env", "", "--shooter-credit", "0.2")
_FACTORED = ("--action-head", "factored")
_WARM = ("--warm-start", "pursuit")
_MAPPO = ("--algo", "mappo", "--value-norm")
# The egocentric features: the entity observation (own frame, headings as cos/sin) of the same
# game, read by the entity encoder. Cloning needs vector observations, so it is not combined.
_ENTITY_SCENARIO = "identical_5_vs_5_fobs_ent_void_disc"
# Another family for the ablation's winner: the same 5 vs 5 with mixed agent types per team.
_HETEROGENEOUS_SCENARIO = "special_5_vs_5_fobs_vec_void_disc"
# Issue 55's maps result: the entity policy with the team signal on a training item of the
# levels-ent-v1 split (16 or 1,024 procgen_dense levels; the recipe's reward_damage=1 kept
# beside the generator), every checkpoint kept for the train and test curves, then scored on
# the split's unseen levels and the 8 built-in maps.
_MAPS_SPLIT = "levels-ent-v1"
_MAPS_TESTS = ("unseen", "open", "two_rooms", "four_rooms", "center_block")

# Issue 55's opponents result: the ablation's winner (S5, team signal) trained 10 minutes
# against the opponents-v1 split's training opponents only, in equal parts, then scored
# zero-shot against its held-out ones (and the training ones).
_OPPONENTS_SPLIT = "opponents-v1"
_SEEN_OPPONENTS = "random:0.5,circle:0.5"


# Issue 55's sizes result: the same S5 with the team signal on sizes-drawn-v1's training items
# (3 vs 3 for 15 minutes, then 5 vs 5 for 15 minutes from those weights: one team draw cannot
# give both sizes without the held-out 5 vs 3 and 4 vs 4), read once through the entity
# encoder and once as the roster's vector observation by the fixed-size MLP encoder
# (sizes-drawn-vec-v1, the same games), then scored on every item. Width 64 and 256 games per
# update, the size of the sizes-ent-v1 runs (every game holds the roster's 20 slots).
_SIZES_ITEMS = ("3v3", "5v5", "2v2", "4v4", "8v8", "5v3")
_SIZES_SMALL = ("--hidden", "64", *_HALF_BATCH)


# Issue 55's population result: a population of the team signal's runs at other seeds, 5
# minutes each (S5 and MLP in the training pool; S5 and GRU held out), a focal S5 trained 15
# minutes against the pool (with `pursuit` and `random` beside it), an exploiter trained 10
# minutes from the focal policy's weights against it alone, and the focal policy scored on the
# pool, the held-out members and the exploiter; beside it the same S5 trained 15 minutes
# against `pursuit` and `random` only (the recipe's mix), scored on the same games.
_POOL = ("pop_s5_a", "pop_mlp_b")
_HELD_OUT = ("pop_s5_c", "pop_gru_d")
_POPULATION_SPLIT = PopulationSplit(
    "populations-runs",
    SCENARIO,
    items=(
        ("pool", "train", _POOL),
        ("held-out", "test", _HELD_OUT),
        ("exploiter", "test", ("exploiter",)),
    ),
    description="Train against a pool of runs; test against runs of other seeds and cores, "
    "and an exploiter of the focal policy.",
)
_POPULATION_ITEMS = ("pool", "held-out", "exploiter")
_FOCAL_S = (900.0,)


_POOL_MIX = ("--opponent", "{run:pop_s5_a}:0.35,{run:pop_mlp_b}:0.35,pursuit:0.15,random:0.15")


def _focal(name: str, mix: tuple[str, ...] = (), seed_offset: int = 0) -> Run:
    """A focal S5 of the team signal trained 15 minutes against `mix` (else the recipe's
    `pursuit` and `random`)."""
    return Run(name, budgets_s=_FOCAL_S, flags=(*_TEAM, *mix), seed_offset=seed_offset)


def _on_population(focal: str) -> Run:
    """`focal`'s checkpoint scored on the population split (no training)."""
    return Run(
        f"{focal}_on_population",
        budgets_s=_FOCAL_S,
        evaluates=focal,
        split=_POPULATION_SPLIT,
        split_items=_POPULATION_ITEMS,
    )


def _member(name: str, policy: str, offset: int) -> Run:
    return Run(
        name, policy=policy, budgets_s=(300.0,), opponents=(), flags=_TEAM, seed_offset=offset
    )


def _team_draw(size: int) -> str:
    return f'reward_damage=1,team_draw={{"sizes": [[{size}, {size}], [{size}, {size}]]}}'


def _sizes_runs(observation: str) -> list[Run]:
    """The two stages of the sizes curriculum on `observation` (`ent` or `vec`)."""
    split = "sizes-drawn-v1" if observation == "ent" else "sizes-drawn-vec-v1"
    common: dict[str, Any] = {
        "scenario": f"identical_3-10_vs_3-10_fobs_{observation}_void_disc",
        "budgets_s": (900.0,),
        "split": split,
    }
    flags = (*_TEAM, *_SIZES_SMALL, "--encoder", "entity" if observation == "ent" else "mlp")
    first = f"s5_{observation}_sizes_3v3"
    return [
        Run(
            first,
            flags=(*flags, "--env", _team_draw(3)),
            split_items=("3v3",),
            **common,
        ),
        Run(
            f"s5_{observation}_sizes",
            flags=(*flags, "--env", _team_draw(5)),
            split_items=_SIZES_ITEMS,
            init_from=first,
            **common,
        ),
    ]


def _levels_run(levels: int) -> Run:
    generator = f'map_generator={{"base": "procgen_dense", "seeds": [0, {levels}]}}'
    return Run(
        f"s5_entity_levels_{levels}",
        scenario="identical_5_vs_5_fobs_ent_maps_disc",
        budgets_s=(1800.0,),
        flags=(
            *_TEAM,
            "--encoder",
            "entity",
            "--env",
            f"reward_damage=1,{generator}",
            "--keep-checkpoints",
            "0",
        ),
        split=_MAPS_SPLIT,
        split_items=(f"levels-{levels}", *_MAPS_TESTS),
    )


PRESETS: dict[str, list[Run]] = {
    "paper": [
        Run("s5", budgets_s=_PAPER_BUDGETS),
        Run("gru", policy="gru"),
        Run("mlp", policy="mlp"),
        Run("s5_pobs", scenario="identical_5_vs_5_pobs_vec_void_disc"),
    ],
    # Issue 20's first goal is >= 95% against random within 5 minutes; 10 minutes is the
    # budget the table reported first.
    "random": [Run("s5_vs_random", budgets_s=(300.0, 600.0), flags=("--opponent", "random"))],
    "epochs": [Run("s5"), Run("s5_2_epochs", flags=("--epochs", "2"))],
    "tune": [
        Run("s5"),
        Run("s5_lr_1e-3", flags=("--lr", "1e-3")),
        Run("s5_width_64", flags=("--hidden", "64")),
        Run("s5_256_games", flags=_HALF_BATCH),
        Run("s5_width_64_lr_1e-3", flags=_TUNED),
        Run("s5_width_64_lr_1e-3_256_games", flags=_TUNED + _HALF_BATCH),
        Run("s5_width_64_lr_2e-3", flags=_TUNED_LR_2E_3),
        Run("s5_width_64_lr_1e-3_value_norm", flags=_TUNED + ("--value-norm",)),
        Run("s5_width_64_lr_1e-3_vs_pursuit", flags=_TUNED + ("--opponent", "pursuit")),
        Run("s5_width_64_lr_1e-3_2_epochs", flags=_TUNED + ("--epochs", "2")),
        Run("s5_width_64_lr_1e-3_anneal", flags=_TUNED + ("--anneal-lr",)),
        Run("s5_width_64_lr_2e-3_anneal", flags=_TUNED_LR_2E_3 + ("--anneal-lr",)),
    ],
    "tuned": [
        Run("s5_width_64_lr_1e-3", budgets_s=_PAPER_BUDGETS, flags=_TUNED),
        Run("s5_width_64_lr_2e-3", budgets_s=_PAPER_BUDGETS, flags=_TUNED_LR_2E_3),
        # The other cores at the recipe S5 reports (tuned for S5, not for them), so the table
        # compares memories at one recipe and budget.
        Run("gru_width_64_lr_1e-3", policy="gru", budgets_s=_PAPER_BUDGETS, flags=_TUNED),
        Run("mlp_width_64_lr_1e-3", policy="mlp", budgets_s=_PAPER_BUDGETS, flags=_TUNED),
    ],
    # In the order worth running first when time is short.
    "ablation": [
        Run("s5"),
        Run("s5_all", flags=_TEAM + _SHOOTER + _FACTORED + _WARM + _MAPPO),
        Run("s5_team", flags=_TEAM),
        Run("s5_entity", scenario=_ENTITY_SCENARIO, flags=("--encoder", "entity")),
        Run("s5_warm_pursuit", flags=_WARM),
        Run("s5_shooter_0.2", flags=_SHOOTER),
        Run("s5_factored", flags=_FACTORED),
        Run("s5_mappo_value_norm", flags=_MAPPO),
    ],
    # The ablation's winner (the team signal): S5 at 10 and 30 minutes (the same runs as the
    # ablation's s5_team up to 10 minutes, so its folders continue them), the other cores at 10,
    # and the recipe beside it on a heterogeneous scenario.
    "team": [
        Run("s5_team", budgets_s=_PAPER_BUDGETS, flags=_TEAM),
        Run("gru_team", policy="gru", flags=_TEAM),
        Run("mlp_team", policy="mlp", flags=_TEAM),
        Run("s5_special", scenario=_HETEROGENEOUS_SCENARIO),
        Run("s5_team_special", scenario=_HETEROGENEOUS_SCENARIO, flags=_TEAM),
    ],
    "maps": [_levels_run(1024), _levels_run(16)],
    "sizes": [*_sizes_runs("ent"), *_sizes_runs("vec")],
    "opponents": [
        Run(
            "s5_team_seen_opponents",
            flags=(*_TEAM, "--opponent", _SEEN_OPPONENTS),
            split=_OPPONENTS_SPLIT,
            split_items=("seen", "unseen"),
        )
    ],
    "population": [
        _member("pop_s5_a", "s5", 100),
        _member("pop_mlp_b", "mlp", 200),
        _member("pop_s5_c", "s5", 300),
        _member("pop_gru_d", "gru", 400),
        _focal("s5_pool", _POOL_MIX),
        Run(
            "exploiter",
            budgets_s=(600.0,),
            opponents=(),
            flags=(*_TEAM, "--opponent", "{run:s5_pool}"),
            seed_offset=500,
            init_from="s5_pool",
        ),
        _on_population("s5_pool"),
        _focal("s5_scripted"),
        _on_population("s5_scripted"),
        # The two focal policies again at another trainer seed, against the same population.
        _focal("s5_pool_b", _POOL_MIX, seed_offset=600),
        _on_population("s5_pool_b"),
        _focal("s5_scripted_b", seed_offset=600),
        _on_population("s5_scripted_b"),
    ],
    "quick": [
        Run(
            "s5_quick",
            budgets_s=(60.0,),
            opponents=("random",),
            flags=("--opponent", "random", "--num-envs", "256", "--hidden", "64"),
        )
    ],
}
"""paper: the learning results of docs/results.md (~70 min on 2 cores); random: the recipe trained
against random only, evaluated at 5 and 10 minutes (~11 min per seed); epochs: the recipe against
the same recipe with 2 epochs per update instead of 4 (half the update's cost), 10 minutes each
(~24 min per seed; `--seeds 0 1` runs them alternated, seed by seed); tune: runs for tuning on a
seed the results do not report, 10 minutes each (~12 min per run and seed; pick some with --runs):
the recipe, three single changes of it (learning rate 1e-3 instead of 5e-4, width 64 instead of
128, 256 games per update with 4 minibatches of the same size instead of 512 with 8), the pair
width 64 with rate 1e-3, and runs that change that pair once more (256 games, rate 2e-3, value
normalisation, `pursuit` only, 2 epochs, the rate annealed to zero over the budget); tuned: the
pair and the pair at rate 2e-3 on the reported seeds, and GRU and MLP at the pair's width and rate,
each at 10 and 30 minutes (~33 min per run and seed); ablation: the recipe, each of the trainer's
learning-signal options alone (team signal, shooter credit 0.2, factored action head, a warm start
cloned from `pursuit`, MAPPO with value normalisation, the entity observation with its encoder) and
the vector ones together, 10 minutes each (~11.5 min per run and seed); team: the team signal with
S5 at 10 and 30 minutes (continuing the ablation's s5_team folders when --out is the same), with
GRU and MLP at 10 minutes, and the recipe and the team signal on the heterogeneous
special_5_vs_5_fobs_vec_void_disc at 10 minutes (~11.5 min per 10-minute run and seed, ~33 for S5's
two budgets); opponents: the team signal with S5 trained 10 minutes against `random` and `circle`
only and scored on the opponents-v1 split, those two and the held-out `pursuit` and `evade` (~12.5
min per seed); maps: the entity policy with the team signal trained 30 minutes on 1,024 and on 16
procedural levels of the levels-ent-v1 split, each scored on its training item, the unseen levels
and the 8 built-in maps (~37 min per run and seed; the run folders keep every checkpoint for
`benchmarks.split_curves`); sizes: S5 with the team signal, 15 minutes on 3 vs 3 and then 15 on 5
vs 5 of the sizes-drawn-v1 roster, once with the entity encoder and once with the vector
observation and the fixed-size encoder (sizes-drawn-vec-v1), each scored on its split's every item
(~71 min per seed); population: four runs of the team signal at other seeds, 5 minutes each (S5 and
MLP form the training pool, S5 and GRU are held out), S5 trained 15 minutes against the pool with
`pursuit` and `random`, an exploiter trained 10 minutes from its weights against it alone, and that
S5 scored on a populations split of these runs (`<out>/populations-runs_seed<seed>.toml`: the pool,
the held-out runs, the exploiter), then the same S5 trained 15 minutes against `pursuit` and
`random` only and scored on the same split (~67 min per seed), then both focal runs again at
another trainer seed against the same population (`s5_pool_b`, `s5_scripted_b`: ~34 min more);
quick: one 60 s run against random for the benchmark report (~1.5 min with start-up and its
evaluation)."""


def _ppo(run: Run, out: Path, budget: float, resume: bool, init_from: Path | None = None) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if resume:
        args = ["--resume", "--out", str(out), "--time-budget-s", str(budget)]
    else:
        start = () if init_from is None else ("--init-from", str(init_from))
        args = [
            *RECIPE,
            "--policy",
            run.policy,
            "--scenario",
            run.scenario,
            "--seed",
            str(run.trainer_seed),
            "--time-budget-s",
            str(budget),
            "--out",
            str(out),
            *run.flags,
            *start,
        ]
    proc = subprocess.run(
        [sys.executable, "-m", "baselines.ppo", *args, "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"training {run.name} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )


def _curve(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x]
    keep = ("update", "agent_steps", "wall_s", "return_team0")
    curve = []
    for r in rows:
        point = {k: r.get(k) for k in keep}
        point["episode_return"] = point.pop("return_team0")
        point["win_rate"] = {
            k.split("/", 1)[1]: v
            for k, v in r.items()
            if k.startswith("win_rate/") and v is not None
        }
        curve.append(point)
    return curve


def _evaluate(checkpoint: Path, run: Run, games: int, seed: int) -> list[dict]:
    return evaluate_checkpoint(checkpoint, run.scenario, run.opponents, games, seed)


def _evaluate_split(
    checkpoint: Path, split: str, run: Run, games: int, cache: dict
) -> tuple[list[dict], dict]:
    """`run`'s items of `split` played zero-shot: one `evaluate_player` row per (item,
    opponent), its opponent named `item/opponent`, and the split's whole result (its JSON and
    its table)."""
    from gigastep.eval.splits import evaluate_split

    t0 = time.perf_counter()
    result = evaluate_split(
        split, str(checkpoint), items=list(run.split_items), games=games, reference_cache=cache
    )
    final = []
    for r in result.rows:
        if r.result is None:
            raise RuntimeError(f"{checkpoint} cannot play {split} item {r.item}: {r.error}")
        row = _match_row(r.result, f"{r.item}/{r.opponent}")
        final.append({**row, "normalised": r.normalised, "role": r.role})
    whole = {**result.to_json(), "table": result.table(), "eval_s": time.perf_counter() - t0}
    return final, whole


def _match_row(result, opponent: str) -> dict:
    """A match's counts, win rate and Wilson interval as one row of the results."""
    low, high = result.win_rate_ci
    return {
        "opponent": opponent,
        "games": result.games,
        "wins": result.wins,
        "draws": result.draws,
        "losses": result.losses,
        "win_rate": result.win_rate,
        "ci_low": low,
        "ci_high": high,
        "unfinished": result.unfinished,
        "eval_seed": result.seed,
    }


def evaluate_checkpoint(
    checkpoint: Path, scenario: str, opponents, games: int, seed: int
) -> list[dict]:
    """One row per scripted opponent: `games` fresh games of the checkpoint against it (both
    sides), wins, draws, losses, the win rate with its Wilson interval, and the seconds taken."""
    return evaluate_player(str(checkpoint), scenario, opponents, games, seed)


def evaluate_player(player, scenario: str, opponents, games: int, seed: int) -> list[dict]:
    """`evaluate_checkpoint` for any player form of `gigastep.eval.players` (a checkpoint
    path, a `TorchPlayer`, a scripted policy's name or callable)."""
    from gigastep.eval.matches import evaluate

    final = []
    for opponent in opponents:
        t0 = time.perf_counter()
        result = evaluate(player, opponent, scenario, games=games, seed=seed)
        final.append({**_match_row(result, opponent), "eval_s": time.perf_counter() - t0})
    return final


def describe_final(f: dict) -> str:
    """One row of `evaluate_player` as a line of a log: the win rate, its interval, the games."""
    return (
        f"vs {f['opponent']}: win rate {f['win_rate']:.3f} [{f['ci_low']:.3f}, "
        f"{f['ci_high']:.3f}] over {f['games']} games"
    )


def run_learning(runs: list[Run], out: Path, games: int, log=sys.stderr) -> list[dict]:
    """Train and evaluate every run; one result row per (run, budget)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    # Per split, its reference players play each item once.
    split_caches: dict[str, dict] = {}
    for run in runs:
        folder = out / f"{run.name}_seed{run.seed}"
        source = out / f"{run.evaluates}_seed{run.seed}" if run.evaluates else folder
        for budget in run.budgets_s:
            done = folder / f"result_{budget:.0f}s.json"
            if done.is_file():
                print(f"[learning] {run.name}: {budget:.0f} s already evaluated", file=log)
                rows.append(json.loads(done.read_text()))
                continue
            checkpoint = source / f"checkpoint_{budget:.0f}s.pt"
            if run.evaluates:
                if not checkpoint.is_file():
                    raise ValueError(
                        f"{run.name} scores run {run.evaluates}'s checkpoint at {budget:.0f} s, "
                        f"but {checkpoint} does not exist: run {run.evaluates} first (same seed "
                        "and --out)"
                    )
                folder.mkdir(exist_ok=True)
                ckpt = json_checkpoint_info(source, checkpoint.name)
            else:
                ckpt = _train(run, folder, budget, out, log)
            print(
                f"[learning] {run.name}: {ckpt['update']} updates, {ckpt['wall_s']:.0f} s; "
                f"evaluating on {games} games",
                file=log,
                flush=True,
            )
            split = None
            if run.split is None:
                final = _evaluate(checkpoint, run, games, seed=10_000 + run.seed)
            else:
                path = _split_path(run, out)
                final, split = _evaluate_split(
                    checkpoint, path, run, games, split_caches.setdefault(path, {})
                )
                print(f"[learning]   {split['table']}", file=log, flush=True)
            for f in final:
                print(f"[learning]   {describe_final(f)}", file=log, flush=True)
            config = json.loads((source / "config.json").read_text())
            rows.append(
                {
                    "name": run.name,
                    "policy": config.get("policy", run.policy),
                    "scenario": config.get("scenario", run.scenario),
                    "scenario_hash": config["scenario_hash"],
                    "seed": run.seed,
                    "trainer_seed": config.get("seed", run.trainer_seed),
                    "budget_s": budget,
                    "trained_s": ckpt["wall_s"],
                    "updates": ckpt["update"],
                    "agent_steps": ckpt["agent_steps"],
                    "curve": _curve(source),
                    "final": final,
                    "run_dir": str(source),
                    # An evaluation step's recipe is its source run's row.
                    "recipe": None if run.evaluates else [*RECIPE, *run.flags],
                    "starts_from": run.init_from,
                    "evaluates": run.evaluates,
                }
            )
            if split is not None:
                rows[-1]["split"] = split
            write_json(done, rows[-1])
    return rows


def _train(run: Run, folder: Path, budget: float, out: Path, log) -> dict:
    """Train `run` to `budget` seconds (resuming its folder's checkpoint when it has one),
    keep a copy of the checkpoint at that budget, and return its `json_checkpoint_info`."""
    started = (folder / "checkpoint.pt").is_file()
    trained_s = json_checkpoint_info(folder)["wall_s"] if started else 0.0
    if trained_s > budget + _LATE_S:
        raise ValueError(
            f"{folder} has trained past {budget:.0f} s without an evaluation at that "
            f"budget (result_{budget:.0f}s.json is missing): remove the folder to rerun it"
        )
    if folder.exists() and not started:
        raise ValueError(f"{folder} exists without a checkpoint: remove it to rerun it")
    print(
        f"[learning] {run.name} seed {run.seed}: training to {budget:.0f} s", file=log, flush=True
    )
    if trained_s < budget:
        if not started:  # the runs it names must exist before any training
            run = dataclasses.replace(run, flags=resolve_flags(run, out))
        _ppo(run, folder, budget, started, _stage_start(run, out, started))
    # The next budget continues this checkpoint; keep a copy of this one so that its
    # evaluation can be redone.
    shutil.copyfile(folder / "checkpoint.pt", folder / f"checkpoint_{budget:.0f}s.pt")
    return json_checkpoint_info(folder)


_RUN_REFERENCE = re.compile(r"\{run:([^{}]+)\}")


def final_checkpoint(out: Path, name: str, seed: int) -> Path:
    """Run `name`'s checkpoint at its last evaluated budget (seed `seed`, under `out`).

    Raises:
        ValueError: the run has no evaluated budget yet (it is named, with what to run).
    """
    folder = out / f"{name}_seed{seed}"
    budgets = sorted(
        float(p.stem.removeprefix("result_").removesuffix("s"))
        for p in folder.glob("result_*s.json")
    )
    if not budgets or not (folder / f"checkpoint_{budgets[-1]:.0f}s.pt").is_file():
        raise ValueError(
            f"run {name} (seed {seed}) has no evaluated checkpoint under {out}: run it first "
            "(same seed and --out)"
        )
    return folder / f"checkpoint_{budgets[-1]:.0f}s.pt"


def resolve_flags(run: Run, out: Path) -> tuple[str, ...]:
    """`run.flags` with each `{run:NAME}` replaced by `final_checkpoint` of run NAME.

    Raises:
        ValueError: a named run has no evaluated checkpoint yet.
    """

    def path(match: re.Match) -> str:
        return str(final_checkpoint(out, match.group(1), run.seed))

    return tuple(_RUN_REFERENCE.sub(path, flag) for flag in run.flags)


def _split_path(run: Run, out: Path) -> str:
    """The split `run` is scored on, as `evaluate_split` takes it (a population split of the
    preset's runs is written first)."""
    if isinstance(run.split, PopulationSplit):
        return str(run.split.write(out, run.seed))
    assert run.split is not None
    return run.split


def _stage_start(run: Run, out: Path, resume: bool) -> Path | None:
    """The checkpoint a fresh run of a later stage starts from (None: from scratch)."""
    if run.init_from is None or resume:
        return None
    start = out / f"{run.init_from}_seed{run.seed}" / "checkpoint.pt"
    if not start.is_file():
        raise ValueError(
            f"{run.name} starts from the checkpoint of run {run.init_from}, but {start} does not "
            f"exist: run {run.init_from} first (same seed and --out)"
        )
    return start


def json_checkpoint_info(folder: Path, name: str = "checkpoint.pt") -> dict:
    """update, agent_steps and wall_s of a run's checkpoint (its latest unless `name` says
    which; read without code)."""
    from baselines.checkpoint import load_checkpoint

    ckpt = load_checkpoint(folder / name)
    return {k: ckpt[k] for k in ("update", "agent_steps", "wall_s")}


def plot(rows: list[dict], path: Path) -> None:
    """learning.png: training win rate against wall-clock seconds, one line per run and
    opponent kind, with the final evaluations as points with their intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    last = {}
    for row in rows:
        if not row.get("evaluates"):  # an evaluation step's curve is its source run's
            last[row["name"]] = row  # the longest budget of each run has the whole curve
    for name, row in last.items():
        for label in ("random", "pursuit"):
            pts = [
                (p["wall_s"], p["win_rate"][label]) for p in row["curve"] if label in p["win_rate"]
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), lw=1, label=f"{name} vs {label} (training)")
    for row in rows:
        for f in row["final"]:
            err = [[f["win_rate"] - f["ci_low"]], [f["ci_high"] - f["win_rate"]]]
            ax.errorbar(
                [row["trained_s"]], [f["win_rate"]], yerr=err, fmt="o", ms=4, capsize=3, color="k"
            )
    ax.set_xlabel("training wall-clock [s]")
    ax.set_ylabel("win rate")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def select_runs(preset: str, names: list[str] | None) -> list[Run]:
    """The runs of `preset` named in `names`, in the preset's order (None: all of them).

    Raises:
        ValueError: a name that is not a run of the preset (the closest names suggested).
    """
    runs = PRESETS[preset]
    if names is None:
        return list(runs)
    known = [r.name for r in runs]
    for name in names:
        if name not in known:
            from gigastep.game.types import closest

            raise ValueError(
                f"--runs: preset {preset!r} has no run {name!r} (closest: "
                f"{', '.join(closest(name, known))}; all: {', '.join(known)})"
            )
    return [r for r in runs if r.name in names]


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.learning", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    parser.add_argument("--out", default="results/learning", help="folder of the runs")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--games", type=int, default=512, help="evaluation games per opponent")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds")
    parser.add_argument(
        "--runs", nargs="+", default=None, metavar="NAME", help="only these runs of the preset"
    )
    parser.add_argument(
        "--max-budget-s",
        type=float,
        default=None,
        metavar="S",
        help="train and evaluate each run only up to its budgets of at most S seconds",
    )
    args = parser.parse_args(argv)
    if args.games < 1:
        parser.error(f"--games must be positive, got {args.games}")
    if args.max_budget_s is not None and args.max_budget_s <= 0:
        parser.error(f"--max-budget-s must be positive, got {args.max_budget_s:g}")
    try:
        chosen = select_runs(args.preset, args.runs)
    except ValueError as err:
        parser.error(str(err))
    runs = [dataclasses.replace(r, seed=s) for s in args.seeds for r in chosen]
    if args.max_budget_s is not None:
        runs = [
            dataclasses.replace(
                r, budgets_s=tuple(b for b in r.budgets_s if b <= args.max_budget_s)
            )
            for r in runs
        ]
        if not any(r.budgets_s for r in runs):
            parser.error(
                f"--max-budget-s {args.max_budget_s:g}: no budget of the chosen runs is that "
                f"short (shortest: {min(b for r in chosen for b in r.budgets_s):g} s)"
            )
    out = Path(args.out)
    try:
        rows = run_learning(runs, out, args.games)
    except (ValueError, RuntimeError) as err:
        parser.exit(2, f"python -m benchmarks.learning: error: {err}\n")
    info = run_info()
    for row in rows:
        row["machine"] = info
    write_json(out / "learning.json", rows)
    if args.json:
        write_json(args.json, rows)
    plot(rows, out / "learning.png")
    print(f"wrote {out / 'learning.json'} and {out / 'learning.png'}", file=sys.stderr)
    return rows


if __name__ == "__main__":
    main()
