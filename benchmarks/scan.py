"""S5 block forward+backward: PyTorch parallel scan vs PyTorch sequential loop vs JAX.

Each row is one implementation at one size: the S5 block of `baselines.s5` (or its JAX
reference `baselines.s5_jax`, loaded with the same parameters) runs forward over [T, batch,
d_model] inputs with episode resets, then backward of the mean squared output with respect to
all parameters. Every row runs in a fresh Python process. Warm-up calls (and JAX's compile,
reported apart as `compile_s`) are excluded; `fwd_bwd_ms` is the median over `repeats` timed
calls, with min, max and interquartile range; `fwd_bwd_cpu_ms` is the median process CPU
time of the same calls (all threads; a steadier number than wall time on a shared machine).
For JAX rows `xla_temp_mb` is XLA's own count of the call's temporary and output buffers.
With `--part scan` the rows time the recurrence alone instead: the scans on Ā [P/2] of a
HiPPO-initialised layer and b [T, batch, P/2] complex64, gradients with respect to both.

Implementations: `torch_parallel` (`resettable_scan`, the log-depth scan), `torch_sequential`
(`sequential_scan`, a Python loop over time with autograd), `jax` (`jax.lax.associative_scan`
under `jax.jit(jax.value_and_grad(...))`).

Peak memory (`peak_mb`, MiB) is the extra memory of one forward+backward call on top of what
the process holds before it (parameters, inputs, compiled code), measured with one more call
after the timed ones:
  * CPU (`peak_mb_method` = "vmhwm_delta"): after a 0.5 s pause (XLA frees buffers on a
    background thread), freed memory is made to go back to the OS (glibc
    `mallopt(M_MMAP_THRESHOLD, 64 KiB)` + `malloc_trim`), the kernel's peak-RSS counter is
    restarted (`/proc/self/clear_refs` = 5), and peak_mb = VmHWM after the call - VmRSS
    before it. For the JAX block this agrees with `xla_temp_mb`. Where that is unavailable,
    "ru_maxrss_delta": the growth of `resource.getrusage().ru_maxrss` over the call (an
    underestimate when earlier calls peaked higher).
  * CUDA, torch: `torch.cuda.max_memory_allocated` - `memory_allocated` before the call
    ("cuda_max_allocated_delta"); JAX: the device's `peak_bytes_in_use` - `bytes_in_use`
    before the call ("jax_peak_bytes_in_use_delta"; a process-lifetime peak).

Usage:
    python -m benchmarks.scan --quick --json results/scan.json  # ~1-2 min on 2 CPU cores
    python -m benchmarks.scan --json results/scan_full.json     # full preset (GPU-sized)
    python -m benchmarks.scan --quick --format latex
    python -m benchmarks.scan --T 128 --batch 64 --state-dim 32 --impl torch_parallel jax
    python -m benchmarks.scan --quick --part scan             # the recurrence alone
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import os
import resource
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from benchmarks._common import (
    Column,
    fixed,
    format_number,
    hardware_info,
    latex_table,
    markdown_table,
    option,
    parse_command_line,
    run_info,
    run_worker,
    time_repeats,
    write_json,
)

__all__ = ["IMPLS", "Case", "Options", "cases_from_options", "main", "run_case"]

IMPLS = ("torch_parallel", "torch_sequential", "jax")
QUICK = {"T": [32, 128], "batch": 256, "state_dim": [64], "repeats": 5}
_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


@dataclass
class Options:
    """Command-line options (each field is one `--flag`; see `--help`)."""

    quick: bool = option(
        False,
        "quick preset: T 32 128, batch 256, state 64, 5 repeats "
        "(~1-2 min on 2 CPU cores); overrides --T --batch --state-dim "
        "--repeats",
    )
    T: list = option([32, 128, 512], "sequence lengths [steps]", type=int)
    batch: int = option(1024, "sequences per call")
    state_dim: list = option([64, 128], "S5 state sizes P (P/2 complex states)", type=int)
    d_model: int = option(64, "block width H (input and output features)")
    n_layers: int = option(1, "S5 layers in the block")
    impl: list = option(list(IMPLS), "implementations: " + " ".join(IMPLS), type=str)
    part: str = option(
        "block",
        "what runs: block (the S5 block, parameter gradients) or scan "
        "(the recurrence alone, gradients of a and b)",
        choices=("block", "scan"),
    )
    repeats: int = option(10, "timed calls per row (median and spread reported)")
    reset_prob: float = option(1 / 32, "probability that an episode starts at a step")
    device: str = option(
        "cpu", "torch device; JAX uses its default backend", choices=("cpu", "cuda")
    )
    cpus: int = option(0, "pin each worker process to this many CPU cores (0: no pinning)")
    omp_wait_policy: str = option(
        "",
        "OMP_WAIT_POLICY of the workers: PASSIVE keeps idle "
        "OpenMP threads from spinning, which matters on shared, "
        "busy CPUs; empty: inherited",
        choices=("", "PASSIVE", "ACTIVE"),
    )
    timeout: float = option(1800.0, "seconds allowed per row")
    isolate: bool = option(
        True,
        "a fresh process per row (its own memory peak); --no-isolate runs all rows in this process",
    )
    seed: int = option(0, "seed of parameters and inputs")
    json: str = option(None, "write the rows as a JSON list to this path")
    format: str = option("markdown", "table format printed", choices=("markdown", "latex", "none"))


@dataclass(frozen=True)
class Case:
    """One row to measure (JSON-able: it is the worker's payload)."""

    impl: str
    T: int
    batch: int
    state_dim: int
    d_model: int = 64
    n_layers: int = 1
    repeats: int = 10
    reset_prob: float = 1 / 32
    device: str = "cpu"
    cpus: int = 0
    seed: int = 0
    part: str = "block"
    """"block" (the S5 block) or "scan" (the recurrence alone)."""


# ------------------------------------------------------------------------------------------
# Memory
# ------------------------------------------------------------------------------------------


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _restart_peak_rss() -> bool:
    """Return freed memory to the OS from now on and restart the kernel's peak-RSS counter.

    Waits briefly first: XLA frees a call's buffers on a background thread after it returns.
    """
    gc.collect()
    time.sleep(0.5)
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
        libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except (OSError, AttributeError):
        return False
    return _status_kib("VmHWM") is not None


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_cpu_peak(fn) -> tuple[float, str]:
    """(peak MiB of one call of `fn` above the memory held before it, method name)."""
    if _restart_peak_rss():
        before = _status_kib("VmRSS")
        fn(0)
        return (_status_kib("VmHWM") - before) / 1024, "vmhwm_delta"
    before = _maxrss_mib()
    fn(0)
    return _maxrss_mib() - before, "ru_maxrss_delta"


def _jax_device_bytes(key: str) -> int:
    import jax

    return (jax.devices()[0].memory_stats() or {}).get(key, 0)


def measure_peak(case: Case, fn) -> tuple[float | None, str]:
    """Peak extra memory of one call of `fn` (MiB) and how it was measured."""
    if case.impl == "jax":
        import jax

        if jax.default_backend() != "cpu":
            before = _jax_device_bytes("bytes_in_use")
            fn(0)
            peak = _jax_device_bytes("peak_bytes_in_use") - before
            return peak / 2**20, "jax_peak_bytes_in_use_delta"
        return measure_cpu_peak(fn)
    if case.device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn(0)
        return (torch.cuda.max_memory_allocated() - before) / 2**20, "cuda_max_allocated_delta"
    return measure_cpu_peak(fn)


# ------------------------------------------------------------------------------------------
# The measured calls
# ------------------------------------------------------------------------------------------


def _torch_inputs(case: Case) -> dict[str, Any]:
    """Seeded inputs. Block: the torch block, u [T, B, H], reset [T, B]. Scan: Ā [N] of a
    HiPPO-initialised layer, B̄u-like b [T, B, N] complex64, reset [T, B]."""
    import torch

    from baselines.s5 import S5Block, S5Layer

    torch.manual_seed(case.seed)
    t, batch = case.T, case.batch
    if case.part == "scan":
        a_bar = S5Layer(case.d_model, case.state_dim).discretize()[0].detach()
        b = torch.randn(t, batch, case.state_dim // 2, dtype=torch.complex64)
        return {"a": a_bar, "b": b, "reset": torch.rand(t, batch) < case.reset_prob}
    scan = "sequential" if case.impl == "torch_sequential" else "parallel"
    block = S5Block(case.d_model, case.state_dim, n_layers=case.n_layers, scan=scan)
    u = torch.randn(t, batch, case.d_model)
    return {"block": block, "u": u, "reset": torch.rand(t, batch) < case.reset_prob}


def torch_fwd_bwd(case: Case):
    """`fn(i)`: one forward+backward in torch (block: parameter gradients; scan: a and b)."""
    import torch

    from baselines.s5 import resettable_scan, sequential_scan

    inp = {k: v.to(case.device) for k, v in _torch_inputs(case).items()}
    if case.part == "scan":
        leaves = [inp["a"].requires_grad_(), inp["b"].requires_grad_()]
        scan = sequential_scan if case.impl == "torch_sequential" else resettable_scan

        def loss():
            x = scan(inp["a"], inp["b"], inp["reset"])
            return torch.view_as_real(x).square().sum(-1).mean()
    else:
        leaves = list(inp["block"].parameters())

        def loss():
            return inp["block"](inp["u"], inp["reset"])[0].square().mean()

    def fn(_i: int) -> None:
        for p in leaves:
            p.grad = None
        loss().backward()
        if case.device == "cuda":
            torch.cuda.synchronize()

    return fn


def _jax_problem(case: Case):
    """(loss, args): the JAX loss and its arguments; gradients are taken for args[0]."""
    import jax.numpy as jnp

    from baselines.s5_jax import block_params_from_state_dict, resettable_scan, s5_block

    inp = _torch_inputs(case)
    reset = jnp.asarray(inp["reset"].numpy())
    if case.part == "scan":

        def loss(ab, reset):
            x = resettable_scan(ab[0], ab[1], reset)
            return jnp.mean(jnp.square(x.real) + jnp.square(x.imag))

        return loss, ((jnp.asarray(inp["a"].numpy()), jnp.asarray(inp["b"].numpy())), reset)
    state = {k: v.detach().numpy() for k, v in inp["block"].state_dict().items()}

    def block_loss(p, u, reset):
        return jnp.mean(jnp.square(s5_block(p, u, reset)[0]))

    u = jnp.asarray(inp["u"].numpy())
    return block_loss, (block_params_from_state_dict(state), u, reset)


def jax_fwd_bwd(case: Case):
    """(`fn(i)`, extras): one jitted value_and_grad call in JAX; extras hold the compile
    time and XLA's own account of the call's buffers."""
    import jax

    loss, args = _jax_problem(case)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.value_and_grad(loss)).lower(*args).compile()
    extras = {"compile_s": time.perf_counter() - t0, "xla_temp_mb": None}
    try:
        stats = compiled.memory_analysis()
        extras["xla_temp_mb"] = (stats.temp_size_in_bytes + stats.output_size_in_bytes) / 2**20
    except (AttributeError, NotImplementedError, RuntimeError):
        pass
    return (lambda _i: jax.block_until_ready(compiled(*args))), extras


def _pin(cpus: int) -> None:
    if cpus > 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cpus])


def _with_cpu_time(fn, cpu_ms: list[float]):
    """`fn`, also appending each call's process CPU time (all threads) in ms to `cpu_ms`."""

    def timed(i: int):
        t0 = time.process_time()
        out = fn(i)
        cpu_ms.append((time.process_time() - t0) * 1e3)
        return out

    return timed


def run_case(case: Case) -> dict[str, Any]:
    """Measure one row in this process (pin CPUs first, so thread pools size to them)."""
    _pin(case.cpus)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if case.impl == "jax":
        fn, extras = jax_fwd_bwd(case)
    elif case.impl in IMPLS:
        fn, extras = torch_fwd_bwd(case), {"compile_s": None, "xla_temp_mb": None}
    else:
        raise ValueError(f"unknown impl {case.impl!r}; expected one of {IMPLS}")
    cpu_ms: list[float] = []
    timing = time_repeats(_with_cpu_time(fn, cpu_ms), repeats=case.repeats, warmup=2)
    peak_mb, method = measure_peak(case, fn)
    return {
        "impl": case.impl,
        "part": case.part,
        "T": case.T,
        "batch": case.batch,
        "state_dim": case.state_dim,
        "d_model": case.d_model,
        "n_layers": case.n_layers,
        "repeats": case.repeats,
        "fwd_bwd_ms": timing.median * 1e3,
        "fwd_bwd_ms_min": timing.min * 1e3,
        "fwd_bwd_ms_max": timing.max * 1e3,
        "fwd_bwd_ms_iqr": timing.iqr * 1e3,
        "spread": timing.spread,
        "fwd_bwd_cpu_ms": statistics.median(cpu_ms[2:]),
        "peak_mb": peak_mb,
        "peak_mb_method": method,
        **extras,
        **_environment(case, load),
        "case": dataclasses.asdict(case),
        "machine": run_info(),
    }


def _environment(case: Case, load: float | None) -> dict[str, Any]:
    import jax
    import torch

    return {
        "device": case.device if case.impl != "jax" else jax.default_backend(),
        "torch_version": torch.__version__,
        "jax_version": jax.__version__,
        "torch_threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_1m": load,
    }


# ------------------------------------------------------------------------------------------
# The sweep, ratios and tables
# ------------------------------------------------------------------------------------------


def cases_from_options(opts: Options) -> list[Case]:
    """All rows to measure, implementations innermost (so compared rows run close in time)."""
    sizes = dict(T=opts.T, batch=opts.batch, state_dim=opts.state_dim, repeats=opts.repeats)
    if opts.quick:
        sizes = QUICK
    for impl in opts.impl:
        if impl not in IMPLS:
            raise ValueError(f"unknown --impl {impl!r}; expected some of {IMPLS}")
    common = dict(
        d_model=opts.d_model,
        n_layers=opts.n_layers,
        repeats=sizes["repeats"],
        reset_prob=opts.reset_prob,
        device=opts.device,
        cpus=opts.cpus,
        seed=opts.seed,
        part=opts.part,
    )
    return [
        Case(impl, t, sizes["batch"], p, **common)
        for p in sizes["state_dim"]
        for t in sizes["T"]
        for impl in opts.impl
    ]


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Per size, add `time_vs_jax`, `speedup_vs_sequential` and `memory_vs_jax` to rows."""
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        if "error" not in r:
            key = (r.get("part", "block"), r["T"], r["batch"], r["state_dim"], r["d_model"])
            groups[key][r["impl"]] = r
    for by_impl in groups.values():
        jax_row, seq = by_impl.get("jax"), by_impl.get("torch_sequential")
        for r in by_impl.values():
            if jax_row:
                r["time_vs_jax"] = r["fwd_bwd_ms"] / jax_row["fwd_bwd_ms"]
                if jax_row["peak_mb"] and r["peak_mb"] is not None:
                    r["memory_vs_jax"] = r["peak_mb"] / jax_row["peak_mb"]
            if seq:
                r["speedup_vs_sequential"] = seq["fwd_bwd_ms"] / r["fwd_bwd_ms"]


def _measure(case: Case, timeout: float, env: dict[str, str] | None, isolate: bool) -> dict:
    if isolate:
        return run_worker("benchmarks.scan", dataclasses.asdict(case), timeout=timeout, env=env)
    try:
        return run_case(case)
    except Exception as e:  # a sweep goes on past one failing row
        return {"error": f"{type(e).__name__}: {e}"}


def run_sweep(
    cases: list[Case],
    timeout: float,
    env: dict[str, str] | None = None,
    log=sys.stderr,
    isolate: bool = True,
    on_row=None,
) -> list[dict[str, Any]]:
    """Measure every case, each in a fresh process (with `env` added to its environment)
    when `isolate`; failures give rows with an `error` field. `on_row(rows)` is called after
    each row (to save partial results)."""
    rows = []
    for i, case in enumerate(cases):
        print(
            f"[{i + 1}/{len(cases)}] {case.impl} T={case.T} batch={case.batch} "
            f"P={case.state_dim} ...",
            file=log,
            flush=True,
        )
        row = _measure(case, timeout, env, isolate)
        if "error" in row:
            row = {**dataclasses.asdict(case), **row, "machine": {"hardware": hardware_info()}}
            print(f"    failed: {row['error'][-300:]}", file=log, flush=True)
        else:
            print(
                f"    {row['fwd_bwd_ms']:.1f} ms, peak {row['peak_mb']:.0f} MiB",
                file=log,
                flush=True,
            )
        rows.append(row)
        add_ratios(rows)
        if on_row is not None:
            on_row(rows)
    return rows


TABLE_COLUMNS = (
    Column("impl", "implementation"),
    Column("part", "part"),
    Column("T", "T [steps]"),
    Column("batch", "batch [seqs]"),
    Column("state_dim", "P [states]"),
    Column("fwd_bwd_ms", "fwd+bwd median [ms]", format_number),
    Column("fwd_bwd_ms_iqr", "IQR [ms]", format_number),
    Column("fwd_bwd_cpu_ms", "CPU time median [ms]", format_number),
    Column("peak_mb", "peak mem [MiB]", fixed(1)),
    Column("xla_temp_mb", "XLA buffers [MiB]", fixed(1)),
    Column("compile_s", "JAX compile [s]", fixed(1)),
    Column("time_vs_jax", "time / JAX [×]", fixed(2)),
    Column("speedup_vs_sequential", "speed-up vs sequential [×]", fixed(1)),
    Column("memory_vs_jax", "mem / JAX [×]", fixed(2)),
)


def render(rows: list[dict[str, Any]], fmt: str) -> str:
    shown = [r for r in rows if "error" not in r]
    if fmt == "latex":
        caption = (
            "S5 block forward+backward: median of repeats, compile and warm-up "
            "excluded; peak memory above the pre-call footprint."
        )
        return latex_table(shown, TABLE_COLUMNS, caption=caption, label="tab:s5-scan")
    return markdown_table(shown, TABLE_COLUMNS)


# The S5 targets and the size they are defined at (the sizes of the S5 issue: batch 1024,
# T 128, any state size P); at other sizes the ratios mean something else (at batch 256 the
# projections both PyTorch versions share dominate the block), so they are not judged there.
GOAL_SIZE = {"T": 128, "batch": 1024}
GOALS = (
    ("time / JAX <= 1.5", "time_vs_jax", lambda x: x <= 1.5),
    ("speed-up vs sequential >= 5", "speedup_vs_sequential", lambda x: x >= 5),
    ("mem / JAX <= 1.5", "memory_vs_jax", lambda x: x <= 1.5),
)


def goal_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The S5 targets, checked against the parallel-scan block rows at `GOAL_SIZE` only."""
    size = ", ".join(f"{k} = {v}" for k, v in GOAL_SIZE.items())
    at_size = [
        r
        for r in rows
        if r.get("impl") == "torch_parallel"
        and "error" not in r
        and r.get("part", "block") == "block"
        and all(r.get(k) == v for k, v in GOAL_SIZE.items())
    ]
    if not at_size:
        return [
            f"Goals are defined at {size} (`--T 128 --batch 1024`); this run has no row "
            "at that size, so none is evaluated."
        ]
    out = [f"Goals (defined at {size}):"]
    for r in at_size:
        for name, key, ok in GOALS:
            value = r.get(key)
            if value is not None:
                verdict = "met" if ok(value) else "MISSED"
                out.append(f"  P={r['state_dim']}: {name}: {value:.2f} ({verdict})")
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scan", description=__doc__.split("\n\n")[0]
    )
    opts, worker_rows = parse_command_line(parser, Options, Case, run_case, argv)
    if worker_rows is not None:
        return worker_rows
    env = {"OMP_WAIT_POLICY": opts.omp_wait_policy} if opts.omp_wait_policy else None
    try:
        cases = cases_from_options(opts)
    except ValueError as e:
        parser.error(str(e))

    def save(rows):  # after every row, so a run stopped part-way keeps what it measured
        write_json(opts.json, rows)

    # Each row carries the `machine` block of the process that measured it: this one never
    # starts JAX (on a GPU it would take the memory the JAX rows need).
    rows = run_sweep(
        cases,
        timeout=opts.timeout,
        env=env,
        isolate=opts.isolate,
        on_row=save if opts.json else None,
    )
    if opts.json:
        print(f"wrote {len(rows)} rows to {opts.json}", file=sys.stderr)
    if opts.format != "none":
        hw = hardware_info()
        print(
            f"\n{hw.get('cpu_model')} ({hw.get('cpu_cores_usable')} usable cores, load "
            f"{hw.get('load_average_1m')} at the end)\n"
        )
        print(render(rows, opts.format))
        print("\n" + "\n".join(goal_lines(rows)))
    return rows


if __name__ == "__main__":
    main()
