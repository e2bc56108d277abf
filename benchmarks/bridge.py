"""PyTorch bridge throughput: a Python loop over `TorchVecEnv` versus the same rollout in JAX.

Rows (per batch size B, scenario with n agents):
  * `jax_scan`: one compiled `lax.scan` of `steps` auto-resetting batched steps, the same
    step `TorchVecEnv` runs (final observation kept; on CPU `batched_step_autoreset`, which
    resets only the finished games, elsewhere `vmap(step_autoreset)`) with uniform random
    actions drawn inside the scan: the ceiling for any driver of the environment.
  * `torch_loop`: a Python loop of `steps` calls `TorchVecEnv.step(actions)` with actions drawn
    by `torch.rand` on the env's device; outputs arrive as torch tensors (DLPack, no copy).
    `vs_jax` = its env-steps/s over the `jax_scan` figure at the same B (goal >= 0.9).
  * `gym_vector`: `gigastep.adapters.gymnasium.TeamVectorEnv` (NumPy in/out, scripted random
    opponent, NEXT_STEP autoreset) measured by Gymnasium's own `benchmark_vector_step` (random
    actions from the action space, counting only environments that really stepped).

Counting: env_steps_per_s = games advanced per second; agent_steps_per_s = env_steps_per_s x n
(every agent of both teams is simulated). Timed figures are medians over `repeats` (with the
slowest and fastest repeat as `_min` / `_max`); compile (or warm-up) time is reported apart in
`compile_s`.

Usage:
    python -m benchmarks.bridge --quick --json results/bridge.json    # ~1-2 min on 2 CPU cores
    python -m benchmarks.bridge --batch 1024 8192 --steps 200 --repeats 5
    python -m benchmarks.bridge --device cuda                  # TorchVecEnv on the GPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from benchmarks._common import (
    Column,
    add_options,
    config_hash,
    fixed,
    format_number,
    markdown_table,
    option,
    options_from_args,
    run_info,
    time_repeats,
    write_json,
)

__all__ = ["Options", "jax_scan_row", "main", "torch_loop_row", "gym_vector_row"]

QUICK = {"steps": 20, "repeats": 3, "gym_duration": 1.0}


@dataclass
class Options:
    """Command-line options (each field is one `--flag`; see `--help`)."""

    quick: bool = option(
        False,
        "quick preset: 20 steps, 3 repeats, 1 s Gymnasium runs "
        "(~2 min on 2 CPU cores); overrides --steps --repeats --gym-duration",
    )
    scenario: str = option("identical_5_vs_5_fobs_vec_void_cont", "scenario name")
    batch: list = option([1024, 8192], "batch sizes (games per step)", type=int)
    steps: int = option(100, "steps per timed rollout")
    repeats: int = option(5, "timed rollouts per row (median reported)")
    gym_batch: list = option(
        [1024], "TeamVectorEnv batch sizes (none given: skip)", type=int, nargs="*"
    )
    gym_duration: float = option(5.0, "seconds per benchmark_vector_step call")
    device: str = option(None, "torch device of TorchVecEnv (default: JAX's default device)")
    seed: int = option(0, "seed of the environments and actions")
    json: str = option(None, "write the run info and rows as JSON to this path")


# ------------------------------------------------------------------------------------------
# Rows
# ------------------------------------------------------------------------------------------


def _rates(env_rates: list[float], n_agents: int) -> dict[str, float]:
    """Median, min and max env-steps/s and agent-steps/s (= env-steps/s x agents)."""
    med, lo, hi = statistics.median(env_rates), min(env_rates), max(env_rates)
    return {
        "env_steps_per_s": med,
        "env_steps_per_s_min": lo,
        "env_steps_per_s_max": hi,
        "agent_steps_per_s": med * n_agents,
        "agent_steps_per_s_min": lo * n_agents,
        "agent_steps_per_s_max": hi * n_agents,
    }


def _row(
    impl: str, scenario: str, config, batch: int, steps: int, seconds: list[float], compile_s: float
) -> dict[str, Any]:
    n_agents = config.n_agents
    return {
        "impl": impl,
        "scenario": scenario,
        "scenario_hash": config_hash(config),
        "batch": batch,
        "steps": steps,
        "n_agents": n_agents,
        "median_s": statistics.median(seconds),
        "times_s": seconds,
        "compile_s": compile_s,
        **_rates([batch * steps / t for t in seconds], n_agents),
    }


def jax_scan_row(scenario: str, batch: int, steps: int, repeats: int, seed: int) -> dict:
    """The rollout as one compiled `lax.scan` (actions drawn inside)."""
    import jax
    import jax.numpy as jnp

    from gigastep.env import batched_step_autoreset, step_autoreset
    from gigastep.registry import make

    env = make(scenario)
    config = env.config
    n = config.n_agents
    shape = (batch, n) if config.discrete_actions else (batch, n, 3)

    def draw(key):
        if config.discrete_actions:
            return jax.random.randint(key, shape, 0, 27)
        return jax.random.uniform(key, shape, minval=-1.0, maxval=1.0)

    if jax.default_backend() == "cpu":  # as TorchVecEnv chooses for its device
        env_step = partial(batched_step_autoreset, config)
    else:
        env_step = jax.vmap(partial(step_autoreset, config))

    def one_step(states, k):
        k_act, k_step = jax.random.split(k)
        out = env_step(states, draw(k_act), jax.random.split(k_step, batch))
        return out[1], (out[0], *out[2:])

    @partial(jax.jit, donate_argnums=0)
    def rollout(states, key):
        # Every output is carried through the loop, so it is written to memory each step as
        # TorchVecEnv's outputs are (a reduction alone would let XLA fuse the observations
        # away and flatter the scan).
        keys = jax.random.split(key, steps)
        carry = one_step(states, keys[0])
        carry, _ = jax.lax.scan(lambda c, k: (one_step(c[0], k), None), carry, keys[1:])
        states, outputs = carry
        return states, sum(x.astype(jnp.float32).sum() for x in jax.tree_util.tree_leaves(outputs))

    key = jax.random.PRNGKey(seed)
    _, states = env.v_reset(jax.random.split(key, batch))
    t0 = time.perf_counter()
    compiled = rollout.lower(states, key).compile()
    compile_s = time.perf_counter() - t0
    holder = {"states": states}

    def run(i):
        holder["states"], total = compiled(holder["states"], jax.random.fold_in(key, i + 10))
        return total

    timing = time_repeats(run, repeats=repeats, warmup=1)
    return _row("jax_scan", scenario, config, batch, steps, list(timing.times), compile_s)


def torch_loop_row(
    scenario: str, batch: int, steps: int, repeats: int, seed: int, device: str | None
) -> dict:
    """A Python loop over `TorchVecEnv.step` with torch random actions."""
    import jax
    import torch

    from gigastep.adapters.torch import TorchVecEnv

    venv = TorchVecEnv(scenario, batch, seed=seed, device=device)
    n = venv.n_agents
    discrete = venv.config.discrete_actions
    gen = torch.Generator(device=venv.device).manual_seed(seed)

    def actions():
        if discrete:
            return torch.randint(
                0, 27, (batch, n), generator=gen, device=venv.device, dtype=torch.int32
            )
        return torch.rand(batch, n, 3, generator=gen, device=venv.device) * 2 - 1

    def sync(out):
        if venv.device.type == "cuda":
            torch.cuda.synchronize(venv.device)
        jax.block_until_ready(venv.states)
        return out

    t0 = time.perf_counter()
    sync(venv.reset())
    sync(venv.step(actions()))
    compile_s = time.perf_counter() - t0
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            out = venv.step(actions())
        sync(out)
        seconds.append(time.perf_counter() - t0)
    return _row("torch_loop", scenario, venv.config, batch, steps, seconds, compile_s)


def gym_vector_row(scenario: str, batch: int, duration: float, repeats: int, seed: int) -> dict:
    """Gymnasium's `benchmark_vector_step` on `TeamVectorEnv` (env-steps/s, median)."""
    from gymnasium.utils.performance import benchmark_vector_step

    from gigastep.adapters.gymnasium import TeamVectorEnv

    envs = TeamVectorEnv(scenario, batch, team=0, opponent="random")
    config = envs.versus.config
    t0 = time.perf_counter()
    envs.reset(seed=seed)
    envs.step(envs.action_space.sample())
    compile_s = time.perf_counter() - t0
    rates = [
        benchmark_vector_step(envs, target_duration=duration, seed=seed + i) for i in range(repeats)
    ]
    return {
        "impl": "gym_vector",
        "scenario": scenario,
        "scenario_hash": config_hash(config),
        "batch": batch,
        "steps": None,
        "n_agents": config.n_agents,
        "median_s": None,
        "rates": rates,
        "compile_s": compile_s,
        **_rates(rates, config.n_agents),
    }


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------

COLUMNS = [
    Column("impl", "driver"),
    Column("batch", "batch [games]"),
    Column("steps", "steps per rollout"),
    Column("env_steps_per_s", "env-steps/s", format_number),
    Column("agent_steps_per_s", "agent-steps/s", format_number),
    Column("vs_jax", "vs jax_scan [ratio]", fixed(2)),
    Column("compile_s", "compile/warm-up [s]", fixed(1)),
]


def _plan(opts: Options) -> list[tuple[str, int]]:
    """(driver, batch) of every row, in the order they run."""
    plan = [(impl, b) for b in opts.batch for impl in ("jax_scan", "torch_loop")]
    return plan + [("gym_vector", b) for b in opts.gym_batch]


def _measure(opts: Options, impl: str, batch: int) -> dict[str, Any]:
    if impl == "jax_scan":
        return jax_scan_row(opts.scenario, batch, opts.steps, opts.repeats, opts.seed)
    if impl == "torch_loop":
        return torch_loop_row(
            opts.scenario, batch, opts.steps, opts.repeats, opts.seed, opts.device
        )
    return gym_vector_row(opts.scenario, batch, opts.gym_duration, opts.repeats, opts.seed)


def run(opts: Options, on_row=None, log=sys.stderr) -> list[dict]:
    """Measure every row of the plan; a row that fails holds `error` and the others go on.
    `on_row(rows)` is called after each row (to save partial results)."""
    if opts.quick:
        for name, value in QUICK.items():
            setattr(opts, name, value)
    plan = _plan(opts)
    rows: list[dict] = []
    for i, (impl, batch) in enumerate(plan):
        print(f"[{i + 1}/{len(plan)}] {impl} batch={batch} ...", file=log, flush=True)
        try:
            row = _measure(opts, impl, batch)
        except Exception as e:  # one failing driver does not lose the others
            row = {
                "impl": impl,
                "scenario": opts.scenario,
                "batch": batch,
                "error": f"{type(e).__name__}: {e}",
            }
            print(f"    failed: {row['error'][-300:]}", file=log, flush=True)
        refs = [r for r in rows if r["impl"] == "jax_scan" and r["batch"] == batch]
        if impl != "jax_scan" and refs and "error" not in row and "error" not in refs[0]:
            row["vs_jax"] = row["env_steps_per_s"] / refs[0]["env_steps_per_s"]
        if "error" not in row:
            print(
                f"    {format_number(row['agent_steps_per_s'])} agent-steps/s", file=log, flush=True
            )
        rows.append(row)
        if on_row is not None:
            on_row(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bridge",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser, Options)
    opts = options_from_args(Options, parser.parse_args(argv))
    import gigastep.adapters.torch  # noqa: F401  (sets JAX's GPU memory policy before JAX starts)

    info = run_info()

    def save(rows):
        write_json(opts.json, {"run_info": info, "options": vars(opts), "rows": rows})

    rows = run(opts, on_row=save if opts.json else None)
    print(f"\nScenario {opts.scenario}; medians over {opts.repeats} repeats.\n")
    print(markdown_table([r for r in rows if "error" not in r], COLUMNS))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
