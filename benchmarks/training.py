"""Training throughput of the PPO baseline: the rollout and the update phase, against the
same rollout as one JAX scan with a same-sized JAX policy.

Every configuration runs in a fresh process. A PPO case builds the trainer
(`baselines.train.Trainer`, opponent "self": the policy acts for every agent), compiles and
warms up with one rollout and one update, then times `repeats` rollouts and updates
(medians, min-max). The JAX case is `benchmarks.throughput` with `--policy mlp` (a 2-layer
tanh MLP, 64 units, on every agent's vector observation, inside the compiled scan) and the
auto-resetting step, on the same scenario, batch and number of steps.

    python -m benchmarks.training                             # 1024 games of 5 vs 5, ~3 min
    python -m benchmarks.training --batch 256 4096 --policies s5 gru mlp --json t.json

Counting: agent-steps = steps x games x agents per game (every agent of every game, whoever
acts for it); a PPO update processes the rollout's agent-steps, so its rate is rollout
agent-steps / update seconds. Compile time is excluded (reported apart).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from benchmarks._common import (
    Column,
    format_number,
    markdown_table,
    option,
    parse_command_line,
    peak_rss_mb,
    run_cases,
    write_json,
)

__all__ = ["Case", "Options", "main", "run_case"]


@dataclass
class Options:
    """Command-line options (each field is one `--flag`; see `--help`)."""

    scenario: str = option("identical_5_vs_5_fobs_vec_void_disc", "full scenario name")
    batch: list = option([1024], "games per rollout", type=int)
    policies: list = option(["s5", "mlp"], "PPO policy cores to time", type=str)
    steps: int = option(32, "rollout steps per update")
    repeats: int = option(5, "timed rollouts and updates per PPO configuration")
    jax: bool = option(True, "also time the JAX scan with the JAX MLP policy")
    timeout: float = option(1800.0, "seconds allowed per configuration")
    json: str = option(None, "write the rows as a JSON list to this path")


@dataclass(frozen=True)
class Case:
    """One configuration (the worker's payload)."""

    kind: str
    """"ppo" or "jax"."""
    scenario: str
    batch: int
    steps: int
    repeats: int
    policy: str = "mlp"


def _ppo_case(case: Case) -> dict[str, Any]:
    import torch

    from baselines.config import PPOConfig
    from baselines.train import Trainer, keep_freed_memory

    keep_freed_memory()  # as python -m baselines.ppo does

    with tempfile.TemporaryDirectory() as tmp:
        config = PPOConfig(
            scenario=case.scenario,
            num_envs=case.batch,
            rollout_steps=case.steps,
            policy=case.policy,
            opponent="self",
            out=tmp,
            progress=False,
            tensorboard=False,
            plots=False,
        )
        trainer = Trainer(config)
        trainer.start()
        t0 = time.perf_counter()
        trainer.collect()
        trainer.learn(0)
        warmup_s = time.perf_counter() - t0
        rollout, update = [], []
        for _ in range(case.repeats):
            t0 = time.perf_counter()
            trainer.collect()
            t1 = time.perf_counter()
            trainer.learn(0)
            update.append(time.perf_counter() - t1)
            rollout.append(t1 - t0)
        agent_steps = case.steps * case.batch * trainer.game.n_agents
        return {
            "threads": torch.get_num_threads(),
            "warmup_s": warmup_s,
            "n_agents": trainer.game.n_agents,
            "agent_steps": agent_steps,
            "rollout_s": rollout,
            "update_s": update,
            "rollout_agent_steps_per_s": agent_steps / statistics.median(rollout),
            "rollout_min": agent_steps / max(rollout),
            "rollout_max": agent_steps / min(rollout),
            "update_agent_steps_per_s": agent_steps / statistics.median(update),
            "scenario_hash": trainer.game.scenario_hash,
        }


def _jax_case(case: Case) -> dict[str, Any]:
    from benchmarks import throughput

    row = throughput.run_case(
        throughput.Case(
            case.scenario,
            batch=case.batch,
            steps=case.steps,
            repeats=case.repeats,
            policy="mlp",
            step_fn="autoreset",
        )
    )
    return {
        "n_agents": row["n_agents"],
        "rollout_agent_steps_per_s": row["agent_steps_per_s"],
        "rollout_min": row["agent_steps_per_s_min"],
        "rollout_max": row["agent_steps_per_s_max"],
        "compile_s": row["compile_s"],
        "scenario_hash": row["scenario_hash"],
    }


def run_case(case: Case) -> dict[str, Any]:
    """Measure one case in this process; returns its row."""
    out = _ppo_case(case) if case.kind == "ppo" else _jax_case(case)
    return {**dataclasses.asdict(case), **out, "peak_rss_mb": peak_rss_mb()}


def _label(row: dict[str, Any]) -> str:
    return f"PyTorch PPO rollout, {row['policy']}" if row["kind"] == "ppo" else "JAX scan, mlp"


COLUMNS = (
    Column("_label", "driver"),
    Column("batch", "games", str),
    Column("rollout_agent_steps_per_s", "rollout [agent-steps/s]", format_number),
    Column("_range", "rollout min-max [agent-steps/s]"),
    Column("_ratio", "vs JAX scan"),
    Column("update_agent_steps_per_s", "update [agent-steps/s]", format_number),
    Column("peak_rss_mb", "peak RSS [MiB]", lambda x: f"{x:.0f}"),
)


def render(rows: list[dict[str, Any]]) -> str:
    jax = {
        r["batch"]: r["rollout_agent_steps_per_s"]
        for r in rows
        if r.get("kind") == "jax" and "error" not in r
    }
    shown = []
    for r in rows:
        if "error" in r:
            continue
        ref = jax.get(r["batch"])
        ratio = (
            "–"
            if r["kind"] == "jax" or ref is None
            else f"{r['rollout_agent_steps_per_s'] / ref:.2f}"
        )
        shown.append(
            {
                **r,
                "_label": _label(r),
                "_ratio": ratio,
                "_range": f"{format_number(r['rollout_min'])}–{format_number(r['rollout_max'])}",
            }
        )
    return markdown_table(shown, COLUMNS)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.training", description=__doc__.split("\n\n")[0]
    )
    opts, worker_rows = parse_command_line(parser, Options, Case, run_case, argv)
    if worker_rows is not None:
        return worker_rows
    cases = []
    for batch in opts.batch:
        if opts.jax:
            cases.append(Case("jax", opts.scenario, batch, opts.steps, opts.repeats))
        cases += [
            Case("ppo", opts.scenario, batch, opts.steps, opts.repeats, p) for p in opts.policies
        ]
    rows = run_cases(
        "benchmarks.training",
        cases,
        opts.timeout,
        lambda c: f"{c.kind} {c.policy} batch {c.batch}",
    )
    if opts.json:
        write_json(opts.json, rows)
    print(render(rows))
    return rows


if __name__ == "__main__":
    main()
