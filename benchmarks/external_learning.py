"""Learning with a peer's trainer: JaxMARL-style IPPO / MAPPO and BenchMARL's MAPPO on Gigastep,
beside the project's own PPO, on the same wall-clock budget and the same evaluation.

Each trainer trains team 0 of `identical_5_vs_5_fobs_vec_void_disc` against scripted opponents
played inside the environment's step, for `--budget-s` seconds of its own clock (from the
start of training: environments, networks and compilation included, process start-up and
imports excluded; two updates at least, and the last may end past the budget), then its policy plays
`--games` fresh games against each of `random` and `pursuit` with
`gigastep.eval.matches.evaluate` (both sides of the symmetric game, actions sampled from the
policy, Wilson 95% intervals: `benchmarks.learning.evaluate_player`, the evaluation of the
project's learning table).

Trainers:
    jaxmarl-ippo     JaxMARL's ippo_ff_mpe.py recipe on `gigastep.jaxmarl.make`
                     (benchmarks/_jaxmarl_ppo.py: hyperparameters and attribution)
    jaxmarl-mappo    mappo_rnn_smax.py's recipe, feed-forward, its critic on the adapter's
                     `world_state`
    benchmarl-mappo  BenchMARL's `Experiment` with `MappoConfig.get_from_yaml()`, MLP actor and
                     critic (`MlpConfig.get_from_yaml()`), its default experiment config, on
                     `gigastep.benchmarl.task` (benchmarks/_benchmarl_run.py)
    gigastep-ppo     the project's PPO, `python -m baselines.ppo --preset cpu --signal
                     individual` (as `benchmarks.learning` runs it)

Opponents in training (`--opponent auto`): pursuit on 70% of the games and random on 30% (the
`cpu` preset's mix) for the trainers that take a mix; BenchMARL's task takes one opponent,
so `auto` is `pursuit` there. Every row records what it trained against.

Throughput: each row has its trainer's training rate (env-steps/s and agent-steps/s over its
updates after the first, which holds the compilation) and its rollout rate (collection
only). Agent-steps count every agent of the game (10 here, both teams), as
`benchmarks.frameworks` counts them. `--references` adds the project's own rollouts on the
same machine: `TorchVecEnv` (the PyTorch PPO's rollout, `benchmarks.frameworks` kind `torch`)
and the JAX scan (`baselines.jax_ppo`'s rollout, kind `jax-phases`), at the `cpu` preset's
batch (512 games x 32 steps).

    python -m benchmarks.external_learning --trainer jaxmarl-ippo --out results/external
    python -m benchmarks.external_learning --table results/external/*.json
    # the whole table (about an hour on 2 cores; BenchMARL from its own environment):
    python -m benchmarks.external_learning --trainer all --references --budget-s 600 \\
        --out results/external --benchmarl-python /tmp/gigastep-benchmarl/bin/python

Writes DIR/<trainer>_seed<k>.json (trainer, versions, scenario and its hash, seed, budget,
updates and frames reached, compile / warm-up time, throughput, win/draw/loss against each
opponent with Wilson 95% intervals and the number of games, the training curve), the
trainer's files in DIR/<trainer>_seed<k>/ (JaxMARL: `params.npz`; BenchMARL: its experiment
folder and `policy.pt`; PPO: its run folder), DIR/references.json with `--references`, and
prints the markdown table of the rows written. In a row, `trained_s` is the trainer's clock at
its last update, `warmup_s` the same clock at the end of its first update (environment set-up
and compilation), `compile_s` the JAX compilation of the rollout and the update (JaxMARL only:
null for the others, whose compilation happens inside their first update),
`training_opponents` [name, share of the games] and `training_games` [name, games] (JaxMARL
and BenchMARL).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import (
    Column,
    format_number,
    markdown_table,
    run_info,
    training_throughput,
    versions,
    write_json,
)

__all__ = ["TRAINERS", "main", "render_table", "run_trainer"]

SCENARIO = "identical_5_vs_5_fobs_vec_void_disc"
TRAINERS = ("jaxmarl-ippo", "jaxmarl-mappo", "benchmarl-mappo", "gigastep-ppo")
EVAL_OPPONENTS = ("random", "pursuit")
MIX = (("pursuit", 0.7), ("random", 0.3))
"""The `cpu` preset's training mix (baselines.config)."""

FIELDS = (
    "trainer",
    "versions",
    "scenario",
    "scenario_hash",
    "seed",
    "budget_s",
    "trained_s",
    "updates",
    "env_steps",
    "agent_steps",
    "compile_s",
    "warmup_s",
    "training_opponents",
    "throughput",
    "final",
)
"""The fields every row has (`--table` reads them)."""


def _log(message: str) -> None:
    print(f"[external_learning] {message}", file=sys.stderr, flush=True)


def parse_opponents(text: str, trainer: str) -> tuple[tuple[str, float], ...]:
    """`name[:share],...` -> ((name, share), ...); `auto` -> the `cpu` preset's mix, or
    `pursuit` for BenchMARL (one opponent per task).

    Raises:
        ValueError: a bad share, or a mix for BenchMARL.
    """
    if text == "auto":
        return (("pursuit", 1.0),) if trainer == "benchmarl-mappo" else MIX
    out = []
    for token in filter(None, (t.strip() for t in text.split(","))):
        name, _, share = token.partition(":")
        try:
            weight = float(share) if share else 1.0
        except ValueError:
            raise ValueError(f"--opponent: {token!r} is not name or name:share") from None
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"--opponent: the share in {token!r} must be a positive number")
        out.append((name, weight))
    if not out:
        raise ValueError(f"--opponent {text!r} names no opponent")
    if trainer == "benchmarl-mappo" and len(out) > 1:
        raise ValueError(
            f"--opponent {text!r}: a BenchMARL task plays one scripted opponent; name one "
            "(e.g. pursuit)"
        )
    return tuple(out)


def _shares(mix) -> list[tuple[str, float]]:
    total = sum(w for _, w in mix)
    return [(n, w / total) for n, w in mix]


def _evaluate(player, opts, seed: int) -> list[dict[str, Any]]:
    from benchmarks.learning import describe_final, evaluate_player

    final = evaluate_player(player, opts.scenario, opts.eval_opponents, opts.games, 10_000 + seed)
    for f in final:
        _log(f"  {describe_final(f)}")
    return final


# ------------------------------------------------------------------------------------------
# Trainers
# ------------------------------------------------------------------------------------------


def _jaxmarl(trainer: str, opts, folder: Path) -> dict[str, Any]:
    from benchmarks import _jaxmarl_ppo as jp

    base = jp.IPPO if trainer == "jaxmarl-ippo" else jp.MAPPO
    changes: dict[str, Any] = {
        "scenario": opts.scenario,
        "opponents": parse_opponents(opts.opponent, trainer),
    }
    for name in ("num_envs", "num_steps", "hidden", "num_minibatches"):
        if getattr(opts, name):
            changes[name] = getattr(opts, name)
    config = dataclasses.replace(base, **changes)
    jp.check_config(config)
    _log(f"{trainer} seed {opts.seed}: training for {opts.budget_s:.0f} s")
    result = jp.train(config, opts.budget_s, opts.seed, log=_log)
    import gigastep

    game = gigastep.make(opts.scenario)
    meta = {
        "config": jp.config_dict(config),
        "obs_size": game.config.vector_size,
        "scenario_hash": game.spec.hash,
        "seed": opts.seed,
        "updates": result.updates,
        "wall_s": result.wall_s,
    }
    params_file = folder / "params.npz"
    jp.save_params(params_file, result.params, meta)
    _log(f"{trainer}: {result.updates} updates in {result.wall_s:.0f} s; evaluating")
    player = jp.JaxPolicyPlayer.load(params_file, name=trainer)
    n = game.n_agents
    timed = result.rollout_s + result.learn_s
    return {
        "updates": result.updates,
        "env_steps": result.env_steps,
        "agent_steps": result.agent_steps,
        "trained_s": result.wall_s,
        "compile_s": result.compile_s,
        "warmup_s": result.curve[0]["wall_s"],
        "training_opponents": [[o, n / config.num_envs] for o, n in result.opponents],
        "training_games": [list(o) for o in result.opponents],
        "hyperparameters": jp.config_dict(config),
        "throughput": training_throughput(
            result.timed_env_steps, timed, result.rollout_s, n, config.num_envs
        ),
        "curve": result.curve,
        "files": {"params": str(params_file)},
        "final": _evaluate(player, opts, opts.seed),
    }


def _gigastep_ppo(opts, folder: Path) -> dict[str, Any]:
    from benchmarks.learning import RECIPE, Run, run_learning

    flags: list[str] = []
    if opts.opponent != "auto":
        mix = parse_opponents(opts.opponent, "gigastep-ppo")
        flags += ["--opponent", ",".join(f"{n}:{w:g}" for n, w in mix)]
    if opts.num_envs:
        flags += ["--num-envs", str(opts.num_envs)]
    if opts.num_steps:
        flags += ["--rollout-steps", str(opts.num_steps)]
    if opts.hidden:
        flags += ["--hidden", str(opts.hidden)]
    if opts.num_minibatches:
        flags += ["--minibatches", str(opts.num_minibatches)]
    run = Run(
        "gigastep-ppo",
        scenario=opts.scenario,
        budgets_s=(float(opts.budget_s),),
        opponents=tuple(opts.eval_opponents),
        flags=tuple(flags),
        seed=opts.seed,
    )
    _log(f"gigastep-ppo seed {opts.seed}: training for {opts.budget_s:.0f} s")
    (row,) = run_learning([run], folder.parent, opts.games)  # it trains in `folder`
    run_dir = Path(row["run_dir"])
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    config = json.loads((run_dir / "config.json").read_text())
    timed = metrics[1:]
    env_steps = metrics[-1]["env_steps"] - metrics[0]["env_steps"]
    rollout_s = sum(m["rollout_s"] for m in timed)
    update_s = sum(m["update_s"] for m in timed)
    import gigastep

    n = gigastep.make(opts.scenario).n_agents
    games = int(config.get("num_envs", 0))
    return {
        "updates": row["updates"],
        "env_steps": row["agent_steps"] // n,
        "agent_steps": row["agent_steps"],
        "trained_s": row["trained_s"],
        "compile_s": None,
        "warmup_s": metrics[0]["wall_s"] if metrics else None,
        "training_opponents": [
            [o, w] for o, w in _shares(parse_opponents(config["opponent"], "gigastep-ppo"))
        ],
        "hyperparameters": {"recipe": [*RECIPE, *flags], "config": config},
        "throughput": training_throughput(env_steps, rollout_s + update_s, rollout_s, n, games),
        "curve": row["curve"],
        "files": {"run_dir": str(run_dir)},
        "final": row["final"],
        "scenario_hash": row["scenario_hash"],
    }


def _benchmarl(opts, folder: Path) -> dict[str, Any]:
    from benchmarks import _benchmarl_run as bm

    opponent = parse_opponents(opts.opponent, "benchmarl-mappo")[0][0]
    _log(f"benchmarl-mappo seed {opts.seed}: training for {opts.budget_s:.0f} s")
    result = bm.train(
        opts.scenario,
        opponent,
        opts.budget_s,
        opts.seed,
        folder,
        num_envs=opts.num_envs,
        num_steps=opts.num_steps,
        hidden=opts.hidden,
        minibatch_iters=opts.num_minibatches,
    )
    _log(f"benchmarl-mappo: {result['updates']} iterations in {result['trained_s']:.0f} s")
    player = result.pop("player")
    return {**result, "final": _evaluate(player, opts, opts.seed)}


def run_trainer(trainer: str, opts) -> dict[str, Any]:
    """Train and evaluate one trainer in this process; write and return its row."""
    import gigastep

    out = Path(opts.out)
    folder = out / f"{trainer}_seed{opts.seed}"
    extra: tuple[str, ...]
    if trainer == "gigastep-ppo":
        body = _gigastep_ppo(opts, folder)
        extra = ("torch",)
    elif trainer == "benchmarl-mappo":
        body = _benchmarl(opts, folder)
        extra = ("benchmarl", "torch", "torchrl", "tensordict")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        body = _jaxmarl(trainer, opts, folder)
        extra = ("jaxmarl", "flax", "optax")
    game = gigastep.make(opts.scenario)
    row = {
        "trainer": trainer,
        "versions": versions(*extra),
        "scenario": opts.scenario,
        "scenario_hash": game.spec.hash,
        "seed": opts.seed,
        "budget_s": float(opts.budget_s),
        **body,
        "eval_games": opts.games,
        "machine": run_info(),
    }
    missing = [f for f in FIELDS if f not in row]
    if missing:  # a trainer that forgot a field is a bug of this file
        raise RuntimeError(f"the row of {trainer} lacks {missing}")
    path = out / f"{trainer}_seed{opts.seed}.json"
    write_json(path, row)
    _log(f"wrote {path}")
    return row


# ------------------------------------------------------------------------------------------
# Several trainers: each in its own process
# ------------------------------------------------------------------------------------------


def _has_benchmarl() -> bool:
    return importlib.util.find_spec("benchmarl") is not None


def _child_argv(trainer: str, opts) -> list[str]:
    argv = [
        "--trainer",
        trainer,
        "--budget-s",
        str(opts.budget_s),
        "--seed",
        str(opts.seed),
        "--out",
        str(opts.out),
        "--games",
        str(opts.games),
        "--scenario",
        opts.scenario,
        "--opponent",
        opts.opponent,
        "--eval-opponents",
        *opts.eval_opponents,
    ]
    for name in ("num_envs", "num_steps", "hidden", "num_minibatches"):
        if getattr(opts, name):
            argv += ["--" + name.replace("_", "-"), str(getattr(opts, name))]
    return argv


def _run_child(trainer: str, opts) -> bool:
    """Run one trainer in a fresh process (its output passes through); whether it succeeded."""
    python = sys.executable
    if trainer == "benchmarl-mappo" and opts.benchmarl_python:
        python = opts.benchmarl_python
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    cmd = [python, "-m", "benchmarks.external_learning", *_child_argv(trainer, opts)]
    _log(f"{trainer}: {' '.join(cmd)}")
    proc = subprocess.run(cmd, cwd=root, env=env)
    if proc.returncode != 0:
        _log(f"{trainer} failed (exit status {proc.returncode}); going on with the others")
    return proc.returncode == 0


def run_references(opts) -> list[dict[str, Any]]:
    """The project's rollouts on this machine (`benchmarks.frameworks`, `cpu` preset):
    TorchVecEnv (kind torch) and the JAX scan (kind jax-phases), each in its own process."""
    from benchmarks._common import run_cases
    from benchmarks.frameworks import Case

    cases = [Case("torch", "cpu", 0, 3), Case("jax-phases", "cpu", 0, 3)]
    rows = run_cases("benchmarks.frameworks", cases, 1800.0, lambda c: c.kind)
    import gigastep
    from baselines.config import preset

    n = gigastep.make(preset("cpu").scenario).n_agents
    for row in rows:
        row["n_agents"] = n  # agents per game, for the env-steps/s column
    write_json(Path(opts.out) / "references.json", rows)
    return rows


# ------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------


def _rate(f: dict[str, Any]) -> str:
    return (
        f"{f['win_rate']:.3f} [{f['ci_low']:.3f}, {f['ci_high']:.3f}] "
        f"({f['wins']}/{f['draws']}/{f['losses']})"
    )


def _opponents(x: Any) -> str:
    return ", ".join(f"{n} {w:.2f}" for n, w in x)


def render_table(rows: Sequence[dict[str, Any]], references: Sequence[dict[str, Any]] = ()) -> str:
    """Two markdown tables: learning (win rate [Wilson 95%] (wins/draws/losses) per
    evaluation opponent) and throughput (the trainers' rollouts and training, and the
    references)."""
    learning = []
    opponents = list(dict.fromkeys(f["opponent"] for r in rows for f in r["final"]))
    for r in rows:
        cells = {
            "trainer": r["trainer"],
            "seed": r["seed"],
            "budget": f"{r['budget_s']:.0f}",
            "updates": r["updates"],
            "env_steps": r["env_steps"],
            "trained_against": _opponents(r["training_opponents"]),
        }
        for f in r["final"]:
            cells[f"vs_{f['opponent']}"] = _rate(f)
            cells["games"] = f["games"]
        learning.append(cells)
    columns = [
        Column("trainer", "trainer"),
        Column("seed", "seed", str),
        Column("budget", "budget [s]"),
        Column("updates", "updates", str),
        Column("env_steps", "env-steps", format_number),
        Column("trained_against", "trained against (share of games)"),
        *[Column(f"vs_{o}", f"vs {o}: win rate [95% CI] (W/D/L)") for o in opponents],
        Column("games", "games per opponent", str),
    ]
    parts = [markdown_table(learning, columns)] if rows else []
    speed = []
    for r in rows:
        t = r["throughput"]
        speed.append(
            {
                "who": r["trainer"],
                "games": t["rollout"]["games"],
                "rollout_env": t["rollout"]["env_steps_per_s"],
                "rollout_agent": t["rollout"]["agent_steps_per_s"],
                "train_agent": t["training"]["agent_steps_per_s"],
                "warmup": r.get("warmup_s"),
            }
        )
    names = {
        "torch": "reference: TorchVecEnv (PyTorch PPO rollout)",
        "jax-phases": "reference: JAX scan (JAX PPO rollout)",
    }
    for ref in references:
        if "error" in ref:
            continue
        rate = ref["rollout_agent_steps_per_s"]
        n = ref.get("n_agents")
        speed.append(
            {
                "who": names.get(ref["kind"], ref["kind"]),
                "games": ref["num_envs"],
                "rollout_env": rate / n if n else None,
                "rollout_agent": rate,
                "train_agent": ref["end_to_end_samples_per_s"],
                "warmup": ref.get("warmup_s"),
            }
        )
    speed_columns = [
        Column("who", "rollout of"),
        Column("games", "games", str),
        Column("rollout_env", "rollout [env-steps/s]", format_number),
        Column("rollout_agent", "rollout [agent-steps/s]", format_number),
        Column("train_agent", "training [agent-steps/s]", format_number),
        Column("warmup", "warm-up [s]", lambda x: "–" if x is None else f"{x:.0f}"),
    ]
    parts.append(markdown_table(speed, speed_columns))
    return "\n\n".join(parts)


def _read_rows(paths: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, refs = [], []
    for p in paths:
        data = json.loads(Path(p).read_text())
        if isinstance(data, list):  # references.json
            refs.extend(data)
            continue
        missing = [f for f in FIELDS if f not in data]
        if missing:
            raise ValueError(f"{p} is not a row of this benchmark: it lacks {missing}")
        rows.append(data)
    return rows, refs


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.external_learning",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--trainer",
        nargs="+",
        default=None,
        metavar="NAME",
        help=f"trainers to run, one after the other, each in its own process: "
        f"{', '.join(TRAINERS)}, or all",
    )
    p.add_argument("--budget-s", type=float, default=600.0, help="training seconds (default 600)")
    p.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    p.add_argument("--out", default="results/external", help="folder of the rows and runs")
    p.add_argument("--games", type=int, default=512, help="evaluation games per opponent")
    p.add_argument("--scenario", default=SCENARIO, help=f"the game (default {SCENARIO})")
    p.add_argument(
        "--opponent",
        default="auto",
        help="training opponents, name[:share],... (auto: pursuit:0.7,random:0.3; pursuit "
        "for BenchMARL)",
    )
    p.add_argument(
        "--eval-opponents", nargs="+", default=list(EVAL_OPPONENTS), help="evaluation opponents"
    )
    p.add_argument("--num-envs", type=int, default=0, help="games per rollout (0: trainer's)")
    p.add_argument("--num-steps", type=int, default=0, help="steps per rollout (0: trainer's)")
    p.add_argument("--hidden", type=int, default=0, help="network width (0: trainer's)")
    p.add_argument(
        "--num-minibatches",
        type=int,
        default=0,
        help="minibatches per epoch (BenchMARL: minibatch iterations; 0: trainer's)",
    )
    p.add_argument(
        "--benchmarl-python",
        default=None,
        help="the Python that has BenchMARL, for benchmarl-mappo (default: this one)",
    )
    p.add_argument(
        "--references",
        action="store_true",
        help="also measure the project's TorchVecEnv and JAX scan rollouts (references.json)",
    )
    p.add_argument(
        "--table", nargs="+", default=None, metavar="JSON", help="print the table of these rows"
    )
    return p


def _closest(name: str, names) -> str:
    from gigastep.game.types import closest

    return ", ".join(closest(name, names))


def _check(parser: argparse.ArgumentParser, opts) -> list[str]:
    if opts.table is not None:
        if opts.trainer:
            parser.error("--table prints rows already written; leave out --trainer")
        return []
    if not opts.trainer and not opts.references:
        parser.error("name --trainer (or --references, or --table JSON...)")
    trainers = list(TRAINERS) if opts.trainer == ["all"] else list(opts.trainer or [])
    for t in trainers:
        if t not in TRAINERS:
            parser.error(
                f"unknown trainer {t!r} (closest: {_closest(t, TRAINERS)}; all: "
                f"{', '.join(TRAINERS)}, or all)"
            )
    if not opts.budget_s > 0:
        parser.error(f"--budget-s must be positive, got {opts.budget_s}")
    if opts.games < 1:
        parser.error(f"--games must be positive, got {opts.games}")
    for name in ("num_envs", "num_steps", "hidden", "num_minibatches"):
        if getattr(opts, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be 0 or positive")
    from gigastep.opponents import POLICIES

    for o in opts.eval_opponents:
        if o not in POLICIES:
            parser.error(
                f"unknown evaluation opponent {o!r} (closest: {_closest(o, POLICIES)}; all: "
                f"{sorted(POLICIES)})"
            )
    for t in trainers:
        try:
            for name, _ in parse_opponents(opts.opponent, t):
                if name not in POLICIES:
                    raise ValueError(
                        f"--opponent: unknown scripted policy {name!r} (closest: "
                        f"{_closest(name, POLICIES)}; all: {sorted(POLICIES)})"
                    )
        except ValueError as err:
            parser.error(str(err))
    if opts.benchmarl_python and not os.path.isfile(opts.benchmarl_python):
        parser.error(f"--benchmarl-python {opts.benchmarl_python!r} is not a file")
    if "benchmarl-mappo" in trainers and not opts.benchmarl_python and not _has_benchmarl():
        parser.error(
            "benchmarl-mappo needs BenchMARL, which this Python cannot import; pass "
            "--benchmarl-python /path/to/an/environment/with/benchmarl/bin/python "
            '(docs/install.md: pip install "torch==2.13.0" -e ".[benchmarl]")'
        )
    return trainers


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = _parser()
    opts = parser.parse_args(argv)
    trainers = _check(parser, opts)
    if opts.table is not None:
        try:
            read, refs = _read_rows(opts.table)
        except (OSError, ValueError) as err:
            parser.exit(2, f"python -m benchmarks.external_learning: error: {err}\n")
        print(render_table(read, refs))
        return read
    out = Path(opts.out)
    rows: list[dict[str, Any]] = []
    single = len(trainers) == 1 and not opts.references
    in_process = single and not (trainers[0] == "benchmarl-mappo" and opts.benchmarl_python)
    if in_process:
        rows.append(run_trainer(trainers[0], opts))
        print(render_table(rows))
        return rows
    started = time.perf_counter()
    failed = []
    # each trainer in a fresh process: one's compile caches and memory never help another
    for t in trainers:
        if _run_child(t, opts):
            rows.append(json.loads((out / f"{t}_seed{opts.seed}.json").read_text()))
        else:
            failed.append(t)
    refs = run_references(opts) if opts.references else []
    _log(f"done in {time.perf_counter() - started:.0f} s")
    print(render_table(rows, refs))
    if failed:
        parser.exit(1, f"python -m benchmarks.external_learning: failed: {', '.join(failed)}\n")
    return rows


if __name__ == "__main__":
    main()
