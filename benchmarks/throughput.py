"""Environment throughput: agent-steps per second of compiled `lax.scan` rollouts.

Sweeps scenarios x observation modes x batch sizes. Each configuration runs in a fresh Python
process (so its peak RSS is its own), compiles one rollout function — a `lax.scan` over
`steps` batched environment steps, with actions drawn inside the scan (uniform random, or a
small policy network applied to the previous observation) — reports the compile time apart,
then times `repeats` calls and reports the median and the spread. `--driver loop` times the
same batched step driven by a Python loop instead (one compiled call per step, `steps` calls
per timed repeat): what a training script that steps from Python gets. `--driver rollout`
times the library's own `gigastep.rollout` (`gigastep.parallel.sharded_rollout` with
`--devices N`): uniform random actions, auto-reset, per-game totals, a fresh reset per call.

A configuration whose estimated peak memory exceeds `--memory-fraction` of the memory
available to its device is skipped (a row with `skipped` says why) instead of being run.

Usage:
    python -m benchmarks.throughput --quick                 # ~2 min on 2 CPU cores
    python -m benchmarks.throughput --paper --json out.json --format latex
    python -m benchmarks.throughput --scenario identical_20_vs_20 --obs pobs_vec \\
        --batch 256 1024 --steps 50 --repeats 5 --policy mlp
    python -m benchmarks.throughput --baseline-frames       # memory-bandwidth bound only
    python -m benchmarks.throughput --quick --devices 2     # the batch sharded over 2 devices
    python -m benchmarks.throughput --batch 16 4096 --driver scan loop  # scan vs Python loop
    python -m benchmarks.throughput --batch 4096 --driver rollout --devices 2  # the library's

Counting (as in the Gigastep paper): one agent-step is one agent of one environment advanced
by one step; agent_steps_per_s = steps x batch x n_agents / seconds, and
env_steps_per_s = steps x batch / seconds, where seconds is the median wall time of one timed
call (`steps` steps; compile and warm-up excluded, compile reported as `compile_s`).

Devices: with `--devices N` each batch is split over N devices (`shard_map`: each device rolls
out its own games with its own keys and reward sum; nothing is communicated). On CPU each
configuration's process then gets `XLA_FLAGS=--xla_force_host_platform_device_count=N`, one
XLA host device per core, each running its own share of the step: scatters and small fusions
that XLA runs on one thread then run on all cores (on 2 cores: RGB ~2x, 20 vs 20 ~1.4x).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from benchmarks._common import (
    Column,
    config_hash,
    current_rss_mb,
    fixed,
    format_number,
    hardware_info,
    latex_table,
    markdown_table,
    option,
    parse_command_line,
    peak_rss_mb,
    run_info,
    run_worker,
    time_repeats,
    write_json,
)

__all__ = ["Case", "Options", "cases_from_options", "main", "resolve_config", "run_case"]

OBS_MODES = ("pobs_vec", "fobs_vec", "pobs_rgb", "fobs_rgb")
DRIVERS = ("scan", "loop", "rollout")
PAPER_BATCHES = (1, 8, 32, 128, 512, 2048, 8192, 32768, 131072)


@dataclass
class Options:
    """Command-line options (each field is one `--flag`; see `--help`)."""

    quick: bool = option(False, "run the quick preset (4 configurations, ~2 min on 2 cores)")
    paper: bool = option(False, "run the paper sweep (batch 1..131072, the 1 M agents case)")
    scenario: list = option(
        ["identical_5_vs_5"],
        "base scenario names, or full names with suffixes (then --obs is ignored for them)",
        type=str,
    )
    obs: list = option(
        ["pobs_vec"], "observation modes: pobs_vec fobs_vec pobs_rgb fobs_rgb", type=str
    )
    batch: list = option([1024], "batch sizes (environments per step)", type=int)
    steps: int = option(0, "scan length per timed call; 0 picks it from --work")
    work: float = option(5e5, "target agent-steps per timed call when --steps is 0")
    repeats: int = option(5, "timed calls per configuration (median and spread reported)")
    policy: str = option(
        "none",
        "actions: none (uniform random in the scan), mlp (2-layer tanh "
        "MLP on the vector obs; RGB cases use the cnn) or cnn (small CNN "
        "on RGB obs)",
        choices=("none", "mlp", "cnn"),
    )
    step_fn: str = option(
        "autoreset",
        "autoreset (v_step_autoreset: live play, the resets "
        "included) or step (v_step, no reset: random play finishes most "
        "games within 100 steps, so it times mostly finished games)",
        choices=("autoreset", "step"),
    )
    driver: list = option(
        ["scan"],
        "drivers of the step: scan (one compiled lax.scan per "
        "timed call), loop (a Python loop of the compiled step) and/or "
        "rollout (gigastep.rollout / sharded_rollout)",
        type=str,
    )
    memory_fraction: float = option(
        0.8,
        "skip a configuration whose estimated peak memory "
        "exceeds this fraction of the device's available memory "
        "(0: never skip)",
    )
    discrete: bool = option(False, "discrete actions (the _disc suffix) instead of continuous")
    resolution: int = option(84, "RGB resolution (square)")
    baseline_frames: bool = option(
        False,
        "also measure the cost of only writing the "
        "observation buffers (the memory-bandwidth bound)",
    )
    baseline_only: bool = option(False, "measure only the observation-write baselines")
    isolate: bool = option(
        True,
        "a fresh process per configuration (its own peak RSS); "
        "--no-isolate runs all in this process",
    )
    timeout: float = option(1800.0, "seconds allowed per configuration (isolated runs)")
    seed: int = option(0, "PRNG seed")
    devices: int = option(
        1,
        "shard each batch over this many devices; on CPU, as many XLA "
        "host devices (batches not divisible by it run on 1)",
    )
    json: str = option(None, "write the rows as a JSON list to this path")
    format: str = option("markdown", "table format printed", choices=("markdown", "latex", "none"))


@dataclass(frozen=True)
class Case:
    """One configuration to measure (JSON-able: it is the worker's payload)."""

    scenario: str
    """Base or full scenario name."""
    obs: str = "pobs_vec"
    """Observation mode suffix pair (ignored when `scenario` already has suffixes)."""
    batch: int = 1024
    steps: int = 0
    work: float = 5e5
    repeats: int = 5
    policy: str = "none"
    step_fn: str = "autoreset"
    discrete: bool = False
    resolution: int = 84
    seed: int = 0
    kind: str = "env"
    """"env" (environment rollout) or "write_rgb" / "write_vector" (observation-write bound)."""
    label: str = ""
    """Free text shown in the table (e.g. "1 M agents")."""
    devices: int = 1
    """Devices the batch is sharded over (see the module docstring)."""
    driver: str = "scan"
    """"scan" (one compiled `lax.scan` of `steps` steps), "loop" (a Python loop of `steps`
    calls of the compiled step) or "rollout" (`gigastep.rollout`, or
    `gigastep.parallel.sharded_rollout` over `devices`)."""
    memory_fraction: float = 0.8
    """Skip the case if its estimated peak memory exceeds this fraction of what is available
    (0: never skip)."""


# ------------------------------------------------------------------------------------------
# Configurations
# ------------------------------------------------------------------------------------------


def resolve_config(case: Case):
    """(full scenario name, EnvConfig) of a case."""
    actions = "disc" if case.discrete else "cont"
    res = dict(resolution_x=case.resolution, resolution_y=case.resolution)
    from gigastep import scenarios

    parsed = scenarios.parse_name(case.scenario)
    name = case.scenario if parsed.suffixes else f"{case.scenario}_{case.obs}_maps_{actions}"
    return name, scenarios.make_config(name, **res)


def _auto_steps(case: Case, n_agents: int) -> int:
    if case.steps > 0:
        return case.steps
    return int(min(1000, max(5, round(case.work / (case.batch * n_agents)))))


# ------------------------------------------------------------------------------------------
# Policies (pure JAX, parameters closed over as constants)
# ------------------------------------------------------------------------------------------


def _mlp_params(key, sizes):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(key, len(sizes) - 1)
    return [
        (jax.random.normal(keys[i], (a, b)) / jnp.sqrt(a), jnp.zeros(b))
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))
    ]


def _mlp(params, x):
    import jax.numpy as jnp

    for i, (w, b) in enumerate(params):
        x = x @ w + b
        if i < len(params) - 1:
            x = jnp.tanh(x)
    return x


def make_policy(kind: str, config, key):
    """`act(obs (B, n, ...), key) -> actions (B, n, 3) float32 or (B, n) int32`.

    none: uniform random actions. mlp: a 2-layer tanh MLP (64, 64) on the vector observation.
    cnn: two strided convolutions (16 8x8/4, 32 4x4/2) and a dense layer on the RGB
    observation. Policy outputs are squashed with tanh (continuous) or argmax (discrete).
    """
    import jax
    import jax.numpy as jnp

    n_out = 27 if config.discrete_actions else 3

    def squash(logits):
        if config.discrete_actions:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return jnp.tanh(logits)

    def vector_part(obs):
        return obs[1] if isinstance(obs, tuple) else obs

    def image_part(obs):
        return obs[0] if isinstance(obs, tuple) else obs

    if kind == "none":
        # Drawn flat, then reshaped: with jax_threefry_partitionable (the default), a
        # multi-dimensional threefry draw costs ~5x a flat one of the same size on CPU.
        def act(obs, k):
            b, n = vector_part(obs).shape[:2]
            if config.discrete_actions:
                return jax.random.randint(k, (b * n,), 0, 27).reshape(b, n)
            return jax.random.uniform(k, (b * n * 3,), minval=-1.0, maxval=1.0).reshape(b, n, 3)

        return act
    if kind == "mlp":
        if config.obs_type == "rgb":
            raise ValueError("--policy mlp needs vector observations; use --policy cnn for rgb")
        params = _mlp_params(key, (config.vector_size, 64, 64, n_out))
        return lambda obs, k: squash(_mlp(params, vector_part(obs)))
    if kind == "cnn":
        if config.obs_type == "vector":
            raise ValueError("--policy cnn needs rgb observations; use --policy mlp for vectors")
        k1, k2, k3 = jax.random.split(key, 3)
        w1 = jax.random.normal(k1, (8, 8, 3, 16)) / math.sqrt(8 * 8 * 3)
        w2 = jax.random.normal(k2, (4, 4, 16, 32)) / math.sqrt(4 * 4 * 16)
        dense = _mlp_params(k3, (32, 64, n_out))
        dims = ("NHWC", "HWIO", "NHWC")

        def act(obs, k):
            img = image_part(obs)
            b, n = img.shape[:2]
            x = img.reshape(b * n, *img.shape[2:]).astype(jnp.float32) / 255.0
            x = jnp.tanh(
                jax.lax.conv_general_dilated(x, w1, (4, 4), "VALID", dimension_numbers=dims)
            )
            x = jnp.tanh(
                jax.lax.conv_general_dilated(x, w2, (2, 2), "VALID", dimension_numbers=dims)
            )
            x = jnp.mean(x, axis=(1, 2))
            return squash(_mlp(dense, x)).reshape(b, n, *(() if config.discrete_actions else (3,)))

        return act
    raise ValueError(f"unknown policy {kind!r}; expected none, mlp or cnn")


# ------------------------------------------------------------------------------------------
# Rollouts
# ------------------------------------------------------------------------------------------


def _step_body(config, case: Case, env_step=None):
    """(body, initial carry): `body(carry, key) -> carry` advances every game one step.

    The carry is (states, last obs, return sum). Carrying the last observation forces every
    step's observation buffer to be written to memory (a loop-carried value cannot be fused
    away), and the summed rewards keep the reward computation alive, so XLA cannot
    dead-code-eliminate any part of the step.
    """
    import jax
    import jax.numpy as jnp

    from gigastep import env as genv

    k_reset, k_policy = jax.random.split(jax.random.PRNGKey(case.seed))
    reset_keys = jax.random.split(k_reset, case.batch)
    obs, states = jax.jit(partial(genv.batched_reset, config))(reset_keys)
    b = case.batch // case.devices  # games per device (the rollout runs once per device)
    act = make_policy(case.policy, config, k_policy)

    # The library's own batched forms (what GigastepEnv.v_step / v_step_autoreset compile).
    def plain_step(s, a, keys):
        return genv.batched_step(config, s, a, keys)[:3]

    def autoreset_step(s, a, keys):
        return genv.batched_step_autoreset(config, s, a, keys, False)[:3]

    if env_step is None:
        env_step = plain_step if case.step_fn == "step" else autoreset_step

    def body(c, k):
        states, obs, ret = c
        k_act, k_env = jax.random.split(k)
        obs, states, rewards = env_step(states, act(obs, k_act), jax.random.split(k_env, b))
        return states, obs, ret + jnp.sum(rewards)

    return body, (states, obs, jnp.zeros((), jnp.float32))


def build_rollout(config, case: Case, steps: int, env_step=None):
    """(rollout, initial carry): `rollout(carry, key) -> carry` runs `steps` batched steps in
    one `lax.scan` (see `_step_body` for the carry).

    Args:
        env_step: optional `(states, actions, keys) -> (obs, states, rewards)` replacing the
            batched step chosen by `case.step_fn` (used by the profiler's ablations).
    """
    import jax

    body, carry = _step_body(config, case, env_step)

    def rollout(carry, key):
        carry, _ = jax.lax.scan(
            lambda c, k: (body(c, k), None), carry, jax.random.split(key, steps)
        )
        return carry

    return rollout, carry


def build_loop_step(config, case: Case):
    """(step, initial carry) of the Python-loop driver: `step(carry) -> carry` is one batched
    step; the PRNG key travels in the carry, so a loop of compiled calls moves nothing
    between host and device (the best case for a Python driver)."""
    import jax

    body, carry = _step_body(config, case)

    def step(carry):
        *inner, key = carry
        key, sub = jax.random.split(key)
        return (*body(tuple(inner), sub), key)

    return step, (*carry, jax.random.PRNGKey(case.seed + 1))


def build_write_baseline(config, case: Case, steps: int):
    """(rollout, carry) that only writes the observation buffer every step: the RGB frames
    (B, n, res, res, 3) uint8 or the vector obs (B, n, L) float32, with `broadcast_to + 1`.

    Its speed shows the memory-bandwidth scale of producing that observation (a reference,
    not a strict bound: a renderer whose frames XLA writes with wider stores can beat it).
    """
    import jax
    import jax.numpy as jnp

    n, b = config.n_agents, case.batch
    if case.kind == "write_rgb":
        shape, dtype = (b, n, case.resolution, case.resolution, 3), jnp.uint8
    else:
        shape, dtype = (b, n, config.vector_size), jnp.float32

    def rollout(buf, key):
        def body(buf, t):
            # Reading one element makes each step depend on the last, so no step is skipped.
            value = t.astype(dtype) + buf[(0,) * buf.ndim]
            return jnp.broadcast_to(value, shape) + jnp.asarray(1, dtype), None

        buf, _ = jax.lax.scan(body, buf, jnp.arange(steps) + key[0].astype(jnp.int32))
        return buf

    return rollout, jnp.zeros(shape, dtype)


def _obs_bytes(config, resolution: int) -> int:
    rgb = resolution * resolution * 3
    vec = 4 * config.vector_size
    return {"vector": vec, "rgb": rgb, "rgb_vector": rgb + vec}[config.obs_type]


def _mesh(case: Case):
    """The 1-D device mesh ("batch",) of a case, checked before any compile."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    have = jax.devices()
    if case.devices < 1 or case.devices > len(have):
        hint = (
            " (on CPU, start the process with XLA_FLAGS=--xla_force_host_platform_device_"
            f"count={case.devices}; the isolated sweep does this)"
        )
        raise ValueError(
            f"devices={case.devices} but this process has {len(have)} "
            f"{jax.default_backend()} device(s){hint}"
        )
    if case.batch % case.devices:
        raise ValueError(f"batch {case.batch} does not split over {case.devices} devices")
    return Mesh(np.asarray(have[: case.devices]), ("batch",))


def _shard(rollout, carry, case: Case):
    """(rollout, carry) running on `case.devices` devices, each with its slice of the batch;
    unchanged for one device.

    Data parallel with `shard_map`: every device runs the per-device rollout on its games
    (its own random keys: the key is folded with the device index) and keeps its own reward
    sum, so no step communicates. A sharded `jit` would do the same for pure XLA code, but
    the partitioner cannot split the native observation kernel (an FFI custom call) and
    would run it on the whole batch on every device.
    """
    if case.devices == 1:
        return rollout, carry
    import jax
    import jax.numpy as jnp
    from jax import shard_map
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = _mesh(case)
    split = PartitionSpec("batch")

    def local(carry, key):
        states, obs, ret = carry
        key = jax.random.fold_in(key, jax.lax.axis_index("batch"))
        states, obs, ret = rollout((states, obs, ret[0]), key)
        return states, obs, ret[None]

    sharded = shard_map(local, mesh=mesh, in_specs=(split, PartitionSpec()), out_specs=split)
    states, obs, ret = carry
    carry = (states, obs, jnp.broadcast_to(ret, (case.devices,)))
    carry = jax.device_put(carry, NamedSharding(mesh, split))
    return sharded, carry


def _worker_env(case: Case) -> dict[str, str] | None:
    """Environment of a case's worker process: N XLA host devices when sharding over N."""
    if case.devices == 1:
        return None
    flags = os.environ.get("XLA_FLAGS", "")
    flags = " ".join(f for f in flags.split() if "xla_force_host_platform_device_count" not in f)
    return {"XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={case.devices}".strip()}


def _form() -> str:
    """Which platform forms of the library ran here (`gigastep.game.xla.platform_form`):
    "cpu" (the placement `while` loop, the conditionals on the count of finished games) on
    the CPU, "gpu" (counted loops and selects, no data-dependent control flow) elsewhere."""
    import jax

    return "cpu" if jax.default_backend() == "cpu" else "gpu"


def _obs_kernel(config) -> str:
    """Which code computes this config's observation here: "native" (a CPU kernel of
    gigastep/game/_native: the vector observation, the RGB drawing) or "jax"."""
    import jax

    from gigastep.game.observations.rgb import native_rgb_supported
    from gigastep.game.observations.vector import native_supported

    if jax.default_backend() != "cpu":
        return "jax"
    if config.obs_type == "vector":
        return "native" if native_supported(config) else "jax"
    return "native" if native_rgb_supported(config) else "jax"


# Peak memory of a case ~ MEMORY_FACTOR x (bytes of the reset's states and observations) +
# MEMORY_BASE_MB: XLA's own buffer count for a compiled rollout is 1.1-1.35x the reset's
# bytes (5v5 and 20v20 vector, 5v5 RGB); the factor 2 leaves room for the reset's
# temporaries and the allocator, and the base is the process (Python, JAX, compiled code).
MEMORY_FACTOR = 2.0
MEMORY_BASE_MB = 500.0


def estimate_peak_mb(config, batch: int) -> float:
    """Estimated peak memory (MiB) of a rollout of `batch` games, from the shapes of one
    game's reset (no memory is allocated)."""
    import jax
    import jax.numpy as jnp

    from gigastep import env as genv

    shapes = jax.eval_shape(
        partial(genv.batched_reset, config), jax.ShapeDtypeStruct((1, 2), jnp.uint32)
    )
    per_game = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(shapes))
    return MEMORY_FACTOR * per_game * batch / 2**20 + MEMORY_BASE_MB


def available_memory_mb() -> float | None:
    """Memory this process can still use on its default device (MiB): the GPU's free bytes
    under JAX's limit, or the host's MemAvailable on CPU; None if unknown."""
    import jax

    stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
    if stats and "bytes_limit" in stats:
        return (stats["bytes_limit"] - stats.get("bytes_in_use", 0)) / 2**20
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _memory_skip(config, case: Case) -> tuple[float, str | None]:
    """(estimated peak MiB, reason to skip the case or None)."""
    estimate = estimate_peak_mb(config, case.batch)
    available = available_memory_mb()
    if case.memory_fraction <= 0 or available is None:
        return estimate, None
    if estimate > case.memory_fraction * available:
        return estimate, (
            f"estimated peak {estimate / 1024:.1f} GiB > "
            f"{case.memory_fraction:.0%} of the {available / 1024:.1f} GiB "
            "available"
        )
    return estimate, None


def _program(config, case: Case, steps: int):
    """(program, carry): the function that one compile covers and its initial carry.

    scan: `program(carry, key)` runs all `steps` steps; loop: `program(carry)` runs one.
    """
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    if case.kind in ("write_rgb", "write_vector"):
        rollout, carry = build_write_baseline(config, case, steps)
        if case.devices > 1:
            carry = jax.device_put(carry, NamedSharding(_mesh(case), PartitionSpec("batch")))
        return rollout, carry
    if case.kind != "env":
        raise ValueError(f"unknown case kind {case.kind!r}")
    if case.driver == "loop":
        return build_loop_step(config, case)
    if case.driver != "scan":
        raise ValueError(f"unknown driver {case.driver!r}; expected scan or loop")
    return _shard(*build_rollout(config, case, steps), case)


def _compile_and_time(program, carry, case: Case, steps: int):
    """(timing, compile seconds dict): compile `program` once, then time `case.repeats` calls
    of `steps` steps each (one scan call, or `steps` loop calls)."""
    import jax

    # Raw uint32 keys: AOT-compiled calls with typed key arguments fail on jax 0.10.
    args = (
        (carry,)
        if case.driver == "loop" and case.kind == "env"
        else (carry, jax.random.PRNGKey(case.seed + 1))
    )
    c0, t0 = time.process_time(), time.perf_counter()
    lowered = jax.jit(program, donate_argnums=0).lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2, c2 = time.perf_counter(), time.process_time()
    state = {"carry": carry}

    def call(i):
        if len(args) == 1:
            for _ in range(steps):
                state["carry"] = compiled(state["carry"])
        else:
            state["carry"] = compiled(state["carry"], jax.random.PRNGKey(case.seed + 100 + i))
        return state["carry"]

    timing = time_repeats(call, repeats=case.repeats, warmup=1)
    return timing, {
        "compile_s": t2 - t0,
        "compile_cpu_s": c2 - c0,
        "lower_s": t1 - t0,
        "xla_compile_s": t2 - t1,
    }


def _time_program(config, case: Case, steps: int):
    """(timing, compile seconds, (RSS, peak RSS) before compiling) of the scan or loop
    driver's program."""
    import jax

    program, carry = _program(config, case, steps)
    jax.block_until_ready(carry)
    memory = current_rss_mb(), peak_rss_mb()
    return (*_compile_and_time(program, carry, case, steps), memory)


def _time_library_rollout(config, case: Case, steps: int):
    """(timing, compile seconds, (RSS, peak RSS) before compiling) of the library's rollout:
    `gigastep.rollout.rollout(config, batch, steps, key)` on one device, `sharded_rollout` over
    `case.devices`. Each timed call resets the games and plays `steps` steps; the first,
    untimed call compiles (`compile_s` = its time minus the median call's)."""
    import jax

    from gigastep.parallel import sharded_rollout
    from gigastep.rollout import rollout

    if case.policy != "none":
        raise ValueError(
            f"--driver rollout plays uniform random actions (policy=None); got "
            f"--policy {case.policy}"
        )
    if case.devices > 1:
        mesh = _mesh(case)
        play = lambda key: sharded_rollout(config, case.batch, steps, key, mesh=mesh)
    else:
        play = lambda key: rollout(config, case.batch, steps, key)
    memory = current_rss_mb(), peak_rss_mb()
    c0, t0 = time.process_time(), time.perf_counter()
    jax.block_until_ready(play(jax.random.PRNGKey(case.seed + 1)))
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    timing = time_repeats(
        lambda i: play(jax.random.PRNGKey(case.seed + 100 + i)), repeats=case.repeats, warmup=0
    )
    compile_times = {
        "compile_s": max(0.0, first - timing.median),
        "compile_cpu_s": max(0.0, first_cpu - timing.cpu_median),
        "lower_s": None,
        "xla_compile_s": None,
    }
    return timing, compile_times, memory


def _device_peak_mb() -> float | None:
    """Peak bytes in use on the default accelerator so far (MiB); None on CPU."""
    import jax

    if jax.default_backend() == "cpu":
        return None
    stats = jax.devices()[0].memory_stats() or {}
    return stats["peak_bytes_in_use"] / 2**20 if "peak_bytes_in_use" in stats else None


def run_case(case: Case) -> dict[str, Any]:
    """Measure one case in this process; returns its result row (or a `skipped` row when
    its estimated memory does not fit)."""
    rss_start = current_rss_mb()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    name, config = resolve_config(case)
    estimate, skip = _memory_skip(config, case)
    if skip:
        return {
            "scenario": name,
            "batch": case.batch,
            "skipped": skip,
            "estimated_peak_mb": estimate,
            "scenario_hash": config_hash(config),
            "case": dataclasses.asdict(case),
            "machine": run_info(),
        }
    # The native observation kernel is compiled (or loaded from its cache) here, before the
    # timed compile, and reported on its own.
    t_native = time.perf_counter()
    kernel = _obs_kernel(config) if case.kind == "env" else None
    native_build_s = time.perf_counter() - t_native
    steps = _auto_steps(case, config.n_agents)
    if case.kind != "env":
        name = f"{case.kind}:{name}"
    timer = _time_library_rollout if case.driver == "rollout" else _time_program
    timing, compile_times, (rss_ready, peak_ready) = timer(config, case, steps)
    row = _result_row(name, config, case, steps, timing)
    row.update(compile_times)
    row.update(
        {
            "obs_kernel": kernel,
            "form": _form(),
            "native_build_s": native_build_s,
            "obs_bytes_per_agent_step": _obs_bytes(config, case.resolution),
            "peak_rss_mb": peak_rss_mb(),
            "rss_start_mb": rss_start,
            "rss_after_reset_mb": rss_ready,
            "peak_rss_after_reset_mb": peak_ready,
            "device_peak_mb": _device_peak_mb(),
            "estimated_peak_mb": estimate,
            "scenario_hash": config_hash(config),
            "load_1m_before": load_before,
            "load_1m_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "case": dataclasses.asdict(case),
            "machine": run_info(),
        }
    )
    row["obs_gb_per_s"] = row["agent_steps_per_s"] * row["obs_bytes_per_agent_step"] / 1e9
    return row


def _result_row(name: str, config, case: Case, steps: int, timing) -> dict[str, Any]:
    """The measured part of a row: what ran and its rates (medians; min/max over repeats)."""
    env_steps = steps * case.batch
    agent_steps = env_steps * config.n_agents
    fobs = not config.stochastic_obs and config.cone_angle > math.pi
    return {
        "scenario": name,
        "label": case.label,
        "kind": case.kind,
        "obs_type": config.obs_type,
        "observability": "fobs" if fobs else "pobs",
        "resolution": case.resolution if config.obs_type != "vector" else None,
        "batch": case.batch,
        "devices": case.devices,
        "n_agents": config.n_agents,
        "agents_total": config.n_agents * case.batch,
        "steps": steps,
        "repeats": case.repeats,
        "policy": case.policy,
        "step_fn": case.step_fn,
        "driver": case.driver,
        "discrete": config.discrete_actions,
        "agent_steps_per_s": agent_steps / timing.median,
        "agent_steps_per_s_min": agent_steps / timing.max,
        "agent_steps_per_s_max": agent_steps / timing.min,
        "env_steps_per_s": env_steps / timing.median,
        "env_steps_per_s_min": env_steps / timing.max,
        "env_steps_per_s_max": env_steps / timing.min,
        "agent_steps_per_cpu_s": agent_steps / timing.cpu_median,
        "time_per_step_us": timing.median / steps * 1e6,
        "spread": timing.spread,
        "timing": timing.as_dict(),
    }


# ------------------------------------------------------------------------------------------
# Presets and the sweep
# ------------------------------------------------------------------------------------------


def quick_cases(opts: Options) -> list[Case]:
    """The quick preset: the four configurations of the issue's targets (scaled-down work)."""
    common = dict(
        repeats=min(opts.repeats, 3),
        work=2e5,
        policy=opts.policy,
        step_fn=opts.step_fn,
        discrete=opts.discrete,
        seed=opts.seed,
        devices=opts.devices,
    )
    return [
        Case("identical_5_vs_5", "pobs_vec", 1024, **common),
        Case("identical_5_vs_5", "fobs_vec", 1024, **common),
        Case("identical_20_vs_20", "pobs_vec", 256, **common),
        Case(
            "identical_5_vs_5",
            "fobs_rgb",
            64,
            **{**common, "policy": _policy_for(opts.policy, "fobs_rgb")},
        ),
    ]


def paper_cases(opts: Options) -> list[Case]:
    """The paper sweep: batch sizes 1..131072 for 5v5 (vector), 1..32768 for 20v20 (vector),
    1..2048 for 5v5 RGB 84x84, and the 1 M agents case (5v5, batch 100,000, vector)."""
    common = dict(
        repeats=opts.repeats,
        work=2e6,
        policy=opts.policy,
        step_fn=opts.step_fn,
        discrete=opts.discrete,
        seed=opts.seed,
        devices=opts.devices,
    )
    cases = []
    for obs in ("pobs_vec", "fobs_vec"):
        cases += [Case("identical_5_vs_5", obs, b, **common) for b in PAPER_BATCHES]
    cases += [
        Case("identical_20_vs_20", "pobs_vec", b, **common) for b in PAPER_BATCHES if b <= 32768
    ]
    rgb = {**common, "policy": _policy_for(opts.policy, "fobs_rgb")}
    for obs in ("pobs_rgb", "fobs_rgb"):
        cases += [Case("identical_5_vs_5", obs, b, **rgb) for b in PAPER_BATCHES if b <= 2048]
    cases.append(Case("identical_5_vs_5", "pobs_vec", 100_000, label="1 M agents", **common))
    return cases


def baseline_cases(opts: Options, env_cases: list[Case]) -> list[Case]:
    """Observation-write baselines at the batch sizes of the environment cases."""
    seen, out = set(), []
    for c in env_cases:
        kind = "write_vector" if c.obs.endswith("vec") else "write_rgb"
        key = (c.scenario, kind, c.batch)
        if key not in seen:
            seen.add(key)
            out.append(
                dataclasses.replace(
                    c, kind=kind, policy="none", step_fn="step", work=max(c.work, 2e6)
                )
            )
    return out


def _policy_for(policy: str, obs: str) -> str:
    """The network policy that fits an observation mode: the MLP reads vectors, the CNN
    images (so `--policy mlp` over a mixed sweep uses the CNN for its RGB cases)."""
    if policy == "none":
        return policy
    return "mlp" if obs.endswith("vec") else "cnn"


def cases_from_options(opts: Options) -> list[Case]:
    """Every case the options ask for, each driver innermost (so compared rows run close in
    time); a clear error for a bad option before anything runs."""
    if opts.devices < 1:
        raise ValueError(f"--devices must be >= 1, got {opts.devices}")
    for driver in opts.driver:
        if driver not in DRIVERS:
            raise ValueError(f"unknown --driver {driver!r}; expected some of {DRIVERS}")
    if "loop" in opts.driver and opts.devices > 1:
        raise ValueError(
            "--driver loop runs the step on one device; drop --devices "
            f"{opts.devices} or use --driver scan"
        )
    if "rollout" in opts.driver and opts.policy != "none":
        raise ValueError(
            "--driver rollout plays uniform random actions (gigastep.rollout's "
            f"policy=None); drop --policy {opts.policy} or use --driver "
            "scan"
        )
    if opts.quick:
        cases = quick_cases(opts)
    elif opts.paper:
        cases = paper_cases(opts)
    else:
        for obs in opts.obs:
            if obs not in OBS_MODES:
                raise ValueError(f"unknown --obs {obs!r}; expected one of {OBS_MODES}")
        cases = [
            Case(
                s,
                o,
                b,
                steps=opts.steps,
                work=opts.work,
                repeats=opts.repeats,
                policy=_policy_for(opts.policy, o),
                step_fn=opts.step_fn,
                discrete=opts.discrete,
                resolution=opts.resolution,
                seed=opts.seed,
                devices=opts.devices,
            )
            for s in opts.scenario
            for o in opts.obs
            for b in opts.batch
        ]
    # A batch that does not split evenly runs on one device (e.g. batch 1 of the paper sweep).
    cases = [c if c.batch % c.devices == 0 else dataclasses.replace(c, devices=1) for c in cases]
    cases = [dataclasses.replace(c, memory_fraction=opts.memory_fraction) for c in cases]
    if opts.baseline_only:
        return baseline_cases(opts, cases)
    baselines = baseline_cases(opts, cases) if opts.baseline_frames else []
    cases = [dataclasses.replace(c, driver=d) for c in cases for d in opts.driver]
    return cases + baselines


def _case_id(c: Case) -> str:
    what = c.kind if c.kind != "env" else f"{c.obs} policy={c.policy} {c.step_fn} {c.driver}"
    where = f" devices={c.devices}" if c.devices > 1 else ""
    return f"{c.scenario} {what} batch={c.batch}{where}"


def _failed_row(case: Case, row: dict[str, Any]) -> dict[str, Any]:
    """A row for a case whose worker failed: the case and the error (no JAX needed here)."""
    return {
        "scenario": case.scenario,
        "batch": case.batch,
        "case": dataclasses.asdict(case),
        **row,
        "machine": row.get("machine") or {"hardware": hardware_info()},
    }


def run_sweep(
    cases: list[Case],
    isolate: bool = True,
    timeout: float | None = None,
    log=sys.stderr,
    on_row=None,
) -> list[dict[str, Any]]:
    """Measure every case (each in a fresh process when `isolate`).

    Failed cases give rows with an `error` field, cases too large for the memory rows with
    `skipped`. Every row carries the `machine` block (`run_info()`) of the process that
    measured it; with `isolate` this process never starts JAX (on a GPU it would take the
    device memory the workers need). `on_row(rows)` is called after each row (to save
    partial results).
    """
    rows = []
    for i, case in enumerate(cases):
        print(f"[{i + 1}/{len(cases)}] {_case_id(case)} ...", file=log, flush=True)
        t0 = time.perf_counter()
        if isolate:
            row = run_worker(
                "benchmarks.throughput",
                dataclasses.asdict(case),
                timeout=timeout,
                env=_worker_env(case),
            )
        else:
            try:
                row = run_case(case)
            except Exception as e:  # a sweep goes on past one failing configuration
                row = {"error": f"{type(e).__name__}: {e}"}
        if "error" in row:
            row = _failed_row(case, row)
            print(f"    failed: {row['error'][-300:]}", file=log, flush=True)
        elif "skipped" in row:
            print(f"    skipped: {row['skipped']}", file=log, flush=True)
        else:
            print(
                f"    {format_number(row['agent_steps_per_s'])} agent-steps/s, compile "
                f"{row['compile_s']:.1f} s, peak RSS {row['peak_rss_mb']:.0f} MiB "
                f"({time.perf_counter() - t0:.0f} s)",
                file=log,
                flush=True,
            )
        rows.append(row)
        if on_row is not None:
            on_row(rows)
    return rows


def measured(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that hold a measurement (neither failed nor skipped)."""
    return [r for r in rows if "error" not in r and "skipped" not in r]


def _rate_range(row: dict[str, Any]) -> str:
    lo, hi = row.get("agent_steps_per_s_min"), row.get("agent_steps_per_s_max")
    return "–" if lo is None else f"{format_number(lo)}–{format_number(hi)}"


TABLE_COLUMNS = (
    Column("scenario", "scenario"),
    Column("label", "note"),
    Column("obs_type", "obs"),
    Column("obs_kernel", "obs kernel", lambda x: x or "–"),
    Column("batch", "batch [games]", str),
    Column("devices", "devices", str),
    Column("agents_total", "agents", str),
    Column("policy", "policy"),
    Column("driver", "driver"),
    Column("steps", "steps/call", str),
    Column("agent_steps_per_s", "agent-steps/s (median)", format_number),
    Column("_range", "agent-steps/s (min–max)"),
    Column("env_steps_per_s", "env-steps/s", format_number),
    Column("obs_gb_per_s", "obs written [GB/s]", format_number),
    Column("compile_s", "compile [s]", fixed(1)),
    Column("peak_rss_mb", "peak RSS [MiB]", fixed(0)),
)

LATEX_COLUMNS = (
    Column("scenario", "Scenario"),
    Column("obs_type", "Obs."),
    Column("batch", "Batch [games]", lambda x: f"{x:,}"),
    Column("devices", "Dev.", str),
    Column("agents_total", "Agents", lambda x: f"{x:,}"),
    Column("driver", "Driver"),
    Column("agent_steps_per_s", "Agent-steps/s", format_number),
    Column("env_steps_per_s", "Env-steps/s", format_number),
    Column("compile_s", "Compile [s]", fixed(1)),
    Column("peak_rss_mb", "Peak RSS [MiB]", fixed(0)),
)


def render(rows: list[dict[str, Any]], fmt: str) -> str:
    shown = [{**r, "_range": _rate_range(r)} for r in measured(rows)]
    if fmt == "latex":
        info = shown[0]["machine"] if shown else {}
        hw = info.get("hardware", {})
        caption = (
            f"Gigastep throughput on {hw.get('cpu_model', '?')} "
            f"({hw.get('cpu_cores_usable', '?')} cores, "
            f"{info.get('device', {}).get('backend', '?')}); median of repeats, "
            "compile time excluded."
        )
        return latex_table(shown, LATEX_COLUMNS, caption=caption, label="tab:throughput")
    return markdown_table(shown, TABLE_COLUMNS)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.throughput",
        description=__doc__.split("\n\n")[0],
    )
    opts, worker_rows = parse_command_line(parser, Options, Case, run_case, argv)
    if worker_rows is not None:
        return worker_rows
    try:
        cases = cases_from_options(opts)
    except ValueError as e:
        parser.error(str(e))
    # The JSON is rewritten after every row, so a sweep stopped part-way keeps what it measured.
    save = (lambda rows: write_json(opts.json, rows)) if opts.json else None
    rows = run_sweep(cases, isolate=opts.isolate, timeout=opts.timeout, on_row=save)
    if opts.json:
        print(f"wrote {len(rows)} rows to {opts.json}", file=sys.stderr)
    if opts.format != "none":
        hw = rows[0]["machine"]["hardware"] if rows else {}
        print(
            f"\n{hw.get('cpu_model')} ({hw.get('cpu_cores_usable')} usable cores, load "
            f"{hw.get('load_average_1m')} at start)\n"
        )
        print(render(rows, opts.format))
    return rows


if __name__ == "__main__":
    main()
