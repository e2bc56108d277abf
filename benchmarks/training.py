"""Training throughput of the PPO baseline: the rollout and the update phase, against the
same rollout's per-step work as one JAX scan.

Every configuration runs in a fresh process. A PPO case builds the trainer
(`baselines.train.Trainer`, opponent "self": the policy acts for every agent), compiles and
warms up with one rollout and one update (`warmup_s`, reported apart), then times `repeats`
rollouts and updates (medians, min-max). The JAX case does in one compiled scan what the
PyTorch MLP learner does per step: normalise the observations, run a same-width policy
(linear + ReLU encoder and core, one head for logits and value), sample actions and their
log-probabilities, accumulate the observation statistics, step the auto-resetting games,
and write the rollout buffers (normalised observations, actions, log-probs, values, masked
rewards, alive masks); its compile time is reported apart.

    python -m benchmarks.training                             # 1024 games of 5 vs 5, ~3 min
    python -m benchmarks.training --batch 256 4096 --policies s5 gru mlp --json t.json
    python -m benchmarks.training --preset cpu --batch 512 --policies s5 gru --no-jax

Counting: agent-steps = steps x games x agents per game (every agent of every game, whoever
acts for it); a PPO update processes the rollout's agent-steps, so its rate is rollout
agent-steps / update seconds. Compile time is excluded (reported apart). Every rate is given
per wall second and per CPU second of the process (all threads): on a shared machine the CPU
time excludes waiting for a core, so ratios of CPU-time rates are the steadier comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from dataclasses import dataclass
from functools import partial
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
    jax: bool = option(True, "also time the JAX scan doing the PyTorch MLP learner's per-step work")
    timeout: float = option(1800.0, "seconds allowed per configuration")
    json: str = option(None, "write the rows as a JSON list to this path")
    preset: str = option(None, "PPO preset whose recipe the PPO cases train with (e.g. cpu)")
    threads: int = option(0, "torch threads of the PPO cases (0: torch's default)")


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
    preset: str | None = None
    """PPO preset of the recipe (None: the PPOConfig defaults)."""
    threads: int = 0


def _ppo_case(case: Case) -> dict[str, Any]:
    import torch

    from baselines.config import preset
    from baselines.train import Trainer, keep_freed_memory

    keep_freed_memory()  # as python -m baselines.ppo does

    with tempfile.TemporaryDirectory() as tmp:
        config = dataclasses.replace(
            preset(case.preset),
            scenario=case.scenario,
            threads=case.threads,
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
        rollout, update, rollout_cpu, update_cpu = [], [], [], []
        for _ in range(case.repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            trainer.collect()
            c1, t1 = time.process_time(), time.perf_counter()
            trainer.learn(0)
            update.append(time.perf_counter() - t1)
            update_cpu.append(time.process_time() - c1)
            rollout.append(t1 - t0)
            rollout_cpu.append(c1 - c0)
        agent_steps = case.steps * case.batch * trainer.game.n_agents
        return {
            "threads": torch.get_num_threads(),
            "warmup_s": warmup_s,
            "n_agents": trainer.game.n_agents,
            "agent_steps": agent_steps,
            "rollout_s": rollout,
            "update_s": update,
            "rollout_cpu_s": rollout_cpu,
            "update_cpu_s": update_cpu,
            "rollout_agent_steps_per_cpu_s": agent_steps / statistics.median(rollout_cpu),
            "update_agent_steps_per_cpu_s": agent_steps / statistics.median(update_cpu),
            "rollout_agent_steps_per_s": agent_steps / statistics.median(rollout),
            "rollout_min": agent_steps / max(rollout),
            "rollout_max": agent_steps / min(rollout),
            "update_agent_steps_per_s": agent_steps / statistics.median(update),
            "scenario_hash": trainer.game.scenario_hash,
        }


def _jax_policy(config, hidden: int, key):
    """`act(obs (B, n, L), mean, scale, key) -> (normalised obs, actions, log-probs, values)`:
    what the PyTorch MLP learner does per step, in JAX: normalise the observation (frozen
    statistics, clipped at 10), a linear + ReLU encoder, a linear + ReLU core, one head for
    the 27 logits (3 means) and the value, a sample and its log-probability."""
    import jax
    import jax.numpy as jnp

    n_out = 27 if config.discrete_actions else 3
    k1, k2, k3 = jax.random.split(key, 3)
    width = config.vector_size
    w1 = jax.random.normal(k1, (width, hidden)) / jnp.sqrt(width)
    w2 = jax.random.normal(k2, (hidden, hidden)) / jnp.sqrt(hidden)
    w3 = jax.random.normal(k3, (hidden, n_out + 1)) * 0.01
    log_std = jnp.full((3,), -0.5)

    def act(obs, mean, scale, k):
        x = jnp.clip((obs - mean) * scale, -10.0, 10.0)
        y = jax.nn.relu(jax.nn.relu(x @ w1) @ w2) @ w3
        out, value = y[..., :n_out], y[..., n_out]
        if config.discrete_actions:
            logp_all = jax.nn.log_softmax(out)
            actions = jax.random.categorical(k, logp_all)
            logp = jnp.take_along_axis(logp_all, actions[..., None], -1)[..., 0]
            return x, actions.astype(jnp.int32), logp, value
        z = jax.random.normal(k, out.shape)
        actions = out + jnp.exp(log_std) * z
        logp = jnp.sum(-0.5 * z * z - log_std - 0.5 * jnp.log(2 * jnp.pi), -1)
        return x, actions, logp, value

    return act


def _jax_case(case: Case) -> dict[str, Any]:
    """The PyTorch rollout's per-step work as one JAX scan: the policy above acting for every
    agent, running sums of the observation statistics, and the rollout buffers (normalised
    observations, actions, log-probs, values, rewards, alive masks) as the scan's outputs."""
    import jax
    import jax.numpy as jnp

    import gigastep
    from baselines.config import PPOConfig
    from benchmarks._common import time_repeats
    from gigastep import env as genv

    config = gigastep.make(case.scenario).config
    act = _jax_policy(config, PPOConfig().hidden, jax.random.PRNGKey(1))
    b = case.batch
    obs, states = jax.jit(partial(genv.batched_reset, config))(
        jax.random.split(jax.random.PRNGKey(0), b)
    )
    width = config.vector_size

    def body(carry, key):
        states, obs, alive, mean, scale, sums = carry
        k_act, k_env = jax.random.split(key)
        x, actions, logp, value = act(obs, mean, scale, k_act)
        m = alive.reshape(-1).astype(jnp.float32)
        flat = obs.reshape(-1, width)
        sums = sums + jnp.stack([m @ flat, m @ (flat * flat)])
        nxt, states, rewards, dones, ended, _ = genv.batched_step_autoreset(
            config, states, actions, jax.random.split(k_env, b)
        )
        alive_next = ~dones | ended[:, None]
        out = (x, actions, logp, value, jnp.where(alive, rewards, 0.0), alive)
        return (states, nxt, alive_next, mean, scale, sums), out

    def rollout(carry, key):
        return jax.lax.scan(body, carry, jax.random.split(key, case.steps))

    n = config.n_agents
    carry = (
        states,
        obs,
        jnp.ones((b, n), bool),
        jnp.zeros(width),
        jnp.ones(width),
        jnp.zeros((2, width)),
    )
    t0 = time.perf_counter()
    compiled = jax.jit(rollout).lower(carry, jax.random.PRNGKey(2)).compile()
    compile_s = time.perf_counter() - t0
    state = {"carry": carry}

    def call(i):
        state["carry"], buffers = compiled(state["carry"], jax.random.PRNGKey(100 + i))
        return state["carry"], buffers

    timing = time_repeats(call, repeats=case.repeats, warmup=1)
    agent_steps = case.steps * b * n
    return {
        "n_agents": n,
        "agent_steps": agent_steps,
        "rollout_agent_steps_per_s": agent_steps / timing.median,
        "rollout_min": agent_steps / max(timing.times),
        "rollout_max": agent_steps / min(timing.times),
        "rollout_cpu_s": list(timing.cpu_times),
        "rollout_agent_steps_per_cpu_s": agent_steps / statistics.median(timing.cpu_times),
        "compile_s": compile_s,
        "scenario_hash": gigastep.scenario_hash(config),
    }


def run_case(case: Case) -> dict[str, Any]:
    """Measure one case in this process; returns its row."""
    out = _ppo_case(case) if case.kind == "ppo" else _jax_case(case)
    return {**dataclasses.asdict(case), **out, "peak_rss_mb": peak_rss_mb()}


def _label(row: dict[str, Any]) -> str:
    if row["kind"] == "ppo":
        return f"PyTorch PPO rollout, {row['policy']}"
    return "JAX scan, same per-step work (mlp)"


COLUMNS = (
    Column("_label", "driver"),
    Column("batch", "games", str),
    Column("rollout_agent_steps_per_s", "rollout [agent-steps/s]", format_number),
    Column("_range", "rollout min-max [agent-steps/s]"),
    Column("_ratio", "vs JAX scan"),
    Column("_rollout_cpu", "rollout [agent-steps/CPU-s]"),
    Column("_cpu_ratio", "vs JAX scan, CPU time"),
    Column("update_agent_steps_per_s", "update [agent-steps/s]", format_number),
    Column("_update_range", "update min-max [agent-steps/s]"),
    Column("_update_cpu", "update [agent-steps/CPU-s]"),
    Column("_compile", "compile or warm-up [s]"),
    Column("peak_rss_mb", "peak RSS [MiB]", lambda x: f"{x:.0f}"),
)


def _update_range(row: dict[str, Any]) -> str:
    if row["kind"] != "ppo" or not row.get("update_s"):
        return "–"
    n, times = row["agent_steps"], row["update_s"]
    return f"{format_number(n / max(times))}–{format_number(n / min(times))}"


def render(rows: list[dict[str, Any]]) -> str:
    jax = {
        r["batch"]: r["rollout_agent_steps_per_s"]
        for r in rows
        if r.get("kind") == "jax" and "error" not in r
    }
    jax_cpu = {
        r["batch"]: r.get("rollout_agent_steps_per_cpu_s")
        for r in rows
        if r.get("kind") == "jax" and "error" not in r
    }
    shown = []
    for r in rows:
        if "error" in r:
            continue
        ref, ref_cpu = jax.get(r["batch"]), jax_cpu.get(r["batch"])
        ratio = (
            "–"
            if r["kind"] == "jax" or ref is None
            else f"{r['rollout_agent_steps_per_s'] / ref:.2f}"
        )
        rollout_cpu = r.get("rollout_agent_steps_per_cpu_s")  # absent in rows of older files
        cpu_ratio = (
            "–"
            if r["kind"] == "jax" or ref_cpu is None or rollout_cpu is None
            else f"{rollout_cpu / ref_cpu:.2f}"
        )
        update_cpu = r.get("update_agent_steps_per_cpu_s")
        shown.append(
            {
                **r,
                "_label": _label(r),
                "_ratio": ratio,
                "_cpu_ratio": cpu_ratio,
                "_rollout_cpu": "–" if rollout_cpu is None else format_number(rollout_cpu),
                "_update_cpu": "–" if update_cpu is None else format_number(update_cpu),
                "_range": f"{format_number(r['rollout_min'])}–{format_number(r['rollout_max'])}",
                "_update_range": _update_range(r),
                "_compile": f"{r.get('compile_s', r.get('warmup_s', 0.0)):.1f}",
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
            Case(
                "ppo", opts.scenario, batch, opts.steps, opts.repeats, p, opts.preset, opts.threads
            )
            for p in opts.policies
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
