"""The same PPO in PyTorch (eager and `torch.compile`) and in JAX: one table per machine.

Every row runs in a fresh process on the same recipe (the `cpu` preset of
`baselines.config`, S5 policy, against pursuit and random) and the same batch:

    torch eager     `baselines.train.Trainer`: `collect()` (the rollout) and `learn(0)` (GAE
                    and the epochs) timed apart; end to end is their sum;
    torch compiled  the same with the policy's `act` and `evaluate` wrapped in
                    `torch.compile` (the environment step is JAX in both);
    jax             `baselines.jax_ppo`: the one-program update (`make_update`), end to end;
    jax-phases      its rollout and its learning compiled as two programs, timed apart (the
                    phase rates; end to end is their sum);
    jax xK          K runs vmapped in one program (`--seeds K`) against K sequential runs
                    (whose total rate is one run's rate: they run one after the other).

Warm-up (the first rollout and update, or the compiles) is reported apart and excluded from
the rates; then `repeats` updates are timed (median, min-max). Counting: agent-steps =
steps x games x agents per game; an update processes its rollout's agent-steps.

    python -m benchmarks.frameworks                       # every row, cpu preset
    python -m benchmarks.frameworks --kinds jax --repeats 3 --json j.json
    python -m benchmarks.frameworks --kinds jax-seeds --seeds 8
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

KINDS = ("torch", "torch-compiled", "jax", "jax-phases", "jax-seeds")


@dataclass
class Options:
    """Command-line options (each field is one `--flag`; see `--help`)."""

    kinds: list = option(list(KINDS), "rows to measure", type=str)
    preset: str = option("cpu", "the recipe (a preset of baselines.config)")
    batch: int = option(0, "games per rollout (0: the preset's)")
    repeats: int = option(3, "timed updates per row")
    seeds: int = option(8, "runs vmapped together in the jax-seeds row")
    opponent: str = option("", "the opponent mix, e.g. auto (empty: the preset's)")
    timeout: float = option(900.0, "seconds allowed per row")
    json: str = option(None, "write the rows as a JSON list to this path")


@dataclass(frozen=True)
class Case:
    """One row (the worker's payload)."""

    kind: str
    preset: str
    batch: int
    repeats: int
    seeds: int = 1
    opponent: str = ""
    """The opponent mix (empty: the preset's)."""


def _config(case: Case, out: str):
    from baselines.config import preset

    config = preset(case.preset)
    changes: dict[str, Any] = dict(
        out=out, progress=False, tensorboard=False, plots=False, eval_every=0
    )  # timed phases only; the JAX side has none
    if case.batch:
        changes["num_envs"] = case.batch
    if case.opponent:
        changes["opponent"] = case.opponent
    return dataclasses.replace(config, **changes)


def _rates(agent_steps: int, rollout: list[float], update: list[float]) -> dict[str, Any]:
    total = [a + b for a, b in zip(rollout, update, strict=True)]
    return {
        "rollout_agent_steps_per_s": agent_steps / statistics.median(rollout),
        "update_samples_per_s": agent_steps / statistics.median(update),
        "end_to_end_samples_per_s": agent_steps / statistics.median(total),
        "end_to_end_min": agent_steps / max(total),
        "end_to_end_max": agent_steps / min(total),
    }


def _torch_case(case: Case) -> dict[str, Any]:
    import torch

    from baselines.train import Trainer, keep_freed_memory

    keep_freed_memory()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(_config(case, tmp))
        if case.kind == "torch-compiled":
            net = trainer.learners[0].net
            for name in ("act", "evaluate"):  # the policy's two passes, compiled
                setattr(net, name, torch.compile(getattr(net, name)))
        trainer.start()
        t0 = time.perf_counter()
        trainer.update = 1
        trainer.collect()
        trainer.learn(0)
        warmup = time.perf_counter() - t0
        rollout, update = [], []
        for _ in range(case.repeats):
            trainer.update += 1
            t0 = time.perf_counter()
            trainer.collect()
            t1 = time.perf_counter()
            trainer.learn(0)
            update.append(time.perf_counter() - t1)
            rollout.append(t1 - t0)
        steps = trainer.config.rollout_steps * trainer.config.num_envs * trainer.game.n_agents
        return {
            "threads": torch.get_num_threads(),
            "num_envs": trainer.config.num_envs,
            "agent_steps": steps,
            "warmup_s": warmup,
            **_rates(steps, rollout, update),
        }


def _block(tree):
    import jax

    return jax.block_until_ready(tree)


def _jax_case(case: Case) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from baselines.jax_ppo.trainer import RUNS, make_setup
    from baselines.jax_ppo.update import initial_state, learn, make_update, rollout

    config = _config(case, "unused")
    setup = make_setup(config)
    lr = jnp.float32(config.lr)
    steps = config.rollout_steps * config.num_envs * setup.game.n_agents
    k = case.seeds
    state = initial_state(setup, 0)
    if k > 1:
        runs = [state] + [initial_state(setup, s) for s in range(1, k)]
        state = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *runs)
    out: dict[str, Any] = {"num_envs": config.num_envs, "agent_steps": steps * k}
    if case.kind == "jax-phases":
        key = jax.random.key(0)
        t0 = time.perf_counter()
        # one learner: its buffer is the first (and only) one
        roll = jax.jit(lambda s, key: rollout(setup, s, key)).lower(state, key).compile()
        _, (buf,), _ = _block(roll(state, key))
        fit_fn = jax.jit(lambda s, b, key: learn(setup, s.learner(0), b, lr, key))
        fit = fit_fn.lower(state, buf, key).compile()
        _block(fit(state, buf, key))
        out["warmup_s"] = time.perf_counter() - t0
        r_times, u_times = [], []
        for _ in range(case.repeats):
            t0 = time.perf_counter()
            new, (buf,), _ = _block(roll(state, key))
            t1 = time.perf_counter()
            _block(fit(new, buf, key))
            u_times.append(time.perf_counter() - t1)
            r_times.append(t1 - t0)
        return {**out, **_rates(steps, r_times, u_times)}
    if k > 1:
        update = jax.vmap(make_update(setup, RUNS), in_axes=(0, None), axis_name=RUNS)
    else:
        update = make_update(setup)
    t0 = time.perf_counter()
    whole = jax.jit(update).lower(state, lr).compile()
    out["warmup_s"] = time.perf_counter() - t0
    state, _ = _block(whole(state, lr))  # first call: allocations
    times = []
    for _ in range(case.repeats):
        t0 = time.perf_counter()
        state, _ = _block(whole(state, lr))
        times.append(time.perf_counter() - t0)
    return {
        **out,
        "end_to_end_samples_per_s": steps * k / statistics.median(times),
        "end_to_end_min": steps * k / max(times),
        "end_to_end_max": steps * k / min(times),
    }


def run_case(case: Case) -> dict[str, Any]:
    """Measure one row in this process."""
    out = _torch_case(case) if case.kind.startswith("torch") else _jax_case(case)
    return {**dataclasses.asdict(case), **out, "peak_rss_mb": peak_rss_mb()}


def _label(row: dict[str, Any]) -> str:
    names = {
        "torch": "PyTorch eager",
        "torch-compiled": "PyTorch compiled",
        "jax": "JAX, one program",
        "jax-phases": "JAX, two programs",
    }
    return names.get(row["kind"], f"JAX, {row['seeds']} runs vmapped")


COLUMNS = (
    Column("_label", "framework"),
    Column("num_envs", "games", str),
    Column("rollout_agent_steps_per_s", "rollout [agent-steps/s]", format_number),
    Column("update_samples_per_s", "update [samples/s]", format_number),
    Column("end_to_end_samples_per_s", "end to end [samples/s]", format_number),
    Column("_range", "end to end min-max"),
    Column("_ratio", "vs PyTorch eager"),
    Column("peak_rss_mb", "peak RSS [MiB]", lambda x: f"{x:.0f}"),
    Column("warmup_s", "compile / warm-up [s]", lambda x: f"{x:.1f}"),
)


def render(rows: list[dict[str, Any]]) -> str:
    """The markdown table of measured rows (failed rows left out)."""
    eager = next(
        (r["end_to_end_samples_per_s"] for r in rows if r["kind"] == "torch" and "error" not in r),
        None,
    )
    shown = []
    for r in rows:
        if "error" in r:
            continue
        ratio = "–" if eager is None else f"{r['end_to_end_samples_per_s'] / eager:.2f}"
        lo, hi = format_number(r["end_to_end_min"]), format_number(r["end_to_end_max"])
        shown.append({**r, "_label": _label(r), "_ratio": ratio, "_range": f"{lo}–{hi}"})
    return markdown_table(shown, COLUMNS)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.frameworks", description=__doc__.split("\n\n")[0]
    )
    opts, worker_rows = parse_command_line(parser, Options, Case, run_case, argv)
    if worker_rows is not None:
        return worker_rows
    unknown = sorted(set(opts.kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown --kinds {unknown}; expected some of {list(KINDS)}")
    cases = [
        Case(
            k,
            opts.preset,
            opts.batch,
            opts.repeats,
            opts.seeds if k == "jax-seeds" else 1,
            opts.opponent,
        )
        for k in opts.kinds
    ]
    rows = run_cases("benchmarks.frameworks", cases, opts.timeout, lambda c: c.kind)
    if opts.json:
        write_json(opts.json, rows)
    print(render(rows))
    return rows


if __name__ == "__main__":
    main()
