"""The benchmark suite for papers: one command runs every benchmark and writes every table
and figure.

    python -m benchmarks.report --preset quick --out results/report    # <= 10 min, 2 CPU cores
    python -m benchmarks.report --preset paper --out results/paper     # the full sweep
    python -m benchmarks.report --preset gpu --out results/gpu         # one GPU, <= 4 min
    python -m benchmarks.report --preset gpu --dry-run                 # the plan, no work

Each section of a preset (the table `SECTIONS` below) runs as its own subprocess with its own
time limit, its output under DIR/raw/ and its log under DIR/logs/. A section that fails or
runs out of time is reported with its error and what it had measured so far; the others are
unaffected. A section whose module is not importable is reported as not available.

Written into DIR: report.md (Markdown), report.json (everything), one CSV and one LaTeX table
(booktabs) per table, and PNG figures: throughput against batch size (log-log, one figure per
observation type), time to 10^9 agent-steps, learning curves and the win-rate matrix (when
those sections ran). Every file names the device, the versions, XLA_FLAGS and the scenario
hashes.

Counting: one agent-step is one agent of one game advanced by one step; agent-steps/s =
steps x games x agents / seconds, env-steps/s = steps x games / seconds; seconds are the
median wall time of the timed repeats, compile and warm-up excluded (compile is reported
apart).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import hardware_info, usable_cores

__all__ = [
    "PRESETS",
    "SECTIONS",
    "PlannedSection",
    "Preset",
    "Section",
    "format_plan",
    "main",
    "module_available",
    "plan",
    "probe",
    "run_report",
    "run_section",
]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Section:
    """One benchmark of a preset: `python -m <module> <args>` in its own process."""

    name: str
    """Its name in the report; its raw output is raw/<name>.json (tests: .xml)."""
    kind: str
    """How its output is read: throughput, bridge, scan, learning, league, collectives, tests."""
    module: str
    """The module run with `python -m`; if it cannot be found the section is not available."""
    args: str
    """Its command-line arguments; {raw} is its raw output file, {out} the report folder,
    {cores} the number of CPU cores this process may use."""
    timeout_s: float
    """Seconds it may run before it is stopped (what it wrote so far is kept)."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables of its process."""
    requires: str = ""
    """A module that must exist for the section to run (default: `module`)."""

    @property
    def needs(self) -> str:
        return self.requires or self.module

    def argv(self, raw, out) -> list[str]:
        """Its arguments with {raw}, {out} and {cores} (the CPU cores this process may use)
        filled in."""
        return shlex.split(self.args.format(raw=raw, out=out, cores=usable_cores()))


@dataclass(frozen=True)
class Preset:
    """A named set of sections, the device its time estimates assume and its time budget."""

    name: str
    device: str
    """"cpu" or "gpu": the cost model of `--dry-run`; "gpu" also requires a GPU."""
    budget_s: float | None
    """Total seconds for all sections: each runs with at most what is left (None: no limit)."""
    sections: tuple[Section, ...]


TP, BR, SC = "benchmarks.throughput", "benchmarks.bridge", "benchmarks.scan"
_T = "--format none --json {raw}"  # every throughput section: rows to its raw file only
# Bridge settings of the figures in docs/benchmarks.md: PyTorch's OpenMP threads must not
# spin on the cores XLA needs, and glibc must keep freed output buffers (else every step
# page-faults).
_BRIDGE_ENV = (
    ("OMP_WAIT_POLICY", "PASSIVE"),
    ("MALLOC_MMAP_THRESHOLD_", "4294967296"),
    ("MALLOC_TRIM_THRESHOLD_", "4294967296"),
)
_FAMILIES = "identical_20_vs_20 special_5_vs_5 waypoint_5_vs_5 hide_and_seek_5_vs_5"
_LEAGUE = (
    "league random circle pursuit evade --games {games} --scenario "
    "identical_5_vs_5_fobs_vec_void_cont --out {{out}}/league"
)
_EVAL = "gigastep.eval.matches"  # the league subcommand of gigastep.cli needs it
_CUDA_TESTS = (
    "tests/adapters/test_torch_bridge.py tests/baselines/test_s5.py "
    '-k "cuda or test_torch_bridge" '
    "-q -p no:randomly -p no:cacheprovider --junitxml {raw}"
)


def _s(name, kind, module, args, timeout_s, env=(), requires=""):
    return Section(name, kind, module, args, timeout_s, env, requires)


# The sections of every preset: (name, how its output is read, module, arguments, seconds).
# The 5v5, 20v20, special, waypoint and hide-and-seek families are represented by
# identical_5_vs_5, identical_20_vs_20, special_5_vs_5 (all five agent types), waypoint_5_vs_5
# and hide_and_seek_5_vs_5. learning, league and collectives come from other modules
# (benchmarks.learning, gigastep.cli league, benchmarks.collectives).
SECTIONS: dict[str, tuple[Section, ...]] = {
    # ~5 min on 2 quiet CPU cores for the sections of this package (8 min 45 s, two sections
    # cut by their limits, at load average 8), the rest for the optional ones. Each limit is
    # ~3x the section's quiet time; the 570 s budget keeps the whole run, probe and rendering
    # included, under 10 minutes however loaded the machine is.
    "quick": (
        _s(
            "throughput_vector",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            f"--batch 1 16 256 4096 131072 --work 2e5 --repeats 3 {_T}",
            120,
        ),
        _s(
            "throughput_rgb",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_rgb "
            f"--batch 1 16 256 --work 1e5 --repeats 3 {_T}",
            80,
        ),
        _s(
            "throughput_families_vector",
            "throughput",
            TP,
            f"--scenario {_FAMILIES} --obs pobs_vec --batch 1024 --work 2e5 --repeats 3 {_T}",
            90,
        ),
        _s(
            "throughput_families_rgb",
            "throughput",
            TP,
            f"--scenario {_FAMILIES} --obs pobs_rgb --batch 32 --work 5e4 --repeats 3 {_T}",
            90,
        ),
        _s(
            "throughput_policy",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            f"pobs_rgb --batch 256 --work 1e5 --repeats 3 --policy mlp {_T}",
            75,
        ),
        _s(
            "throughput_loop",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            f"--batch 16 4096 --work 2e5 --repeats 3 --driver loop {_T}",
            75,
        ),
        _s(
            "throughput_sharded",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            f"--batch 4096 --work 2e5 --repeats 3 --devices {{cores}} {_T}",
            45,
        ),
        _s("bridge", "bridge", BR, "--quick --gym-duration 0.5 --json {raw}", 150, _BRIDGE_ENV),
        _s("scan", "scan", SC, "--quick --omp-wait-policy PASSIVE --format none --json {raw}", 120),
        _s(
            "learning",
            "learning",
            "benchmarks.learning",
            "--preset quick --out {out}/learning --json {raw}",
            150,
        ),
        _s("league", "league", "gigastep.cli", _LEAGUE.format(games=64), 60, (), _EVAL),
        _s("collectives", "collectives", "benchmarks.collectives", "--quick --json {raw}", 60),
    ),
    # The full sweep on the machine at hand (~25 min on 2 quiet CPU cores; --dry-run estimates
    # it; the optional sections add their own time).
    "paper": (
        _s(
            "throughput_vector",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            "fobs_vec --batch 1 8 32 128 512 2048 8192 32768 131072 --work 2e6 --repeats 5 "
            f"{_T}",
            1800,
        ),
        _s(
            "throughput_rgb",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_rgb "
            "fobs_rgb --batch 1 8 32 128 512 2048 8192 32768 131072 --work 5e5 --repeats 5 "
            f"{_T}",
            2400,
        ),
        _s(
            "throughput_20v20",
            "throughput",
            TP,
            "--scenario identical_20_vs_20 --obs pobs_vec "
            f"--batch 1 8 32 128 512 2048 8192 32768 --work 2e6 --repeats 5 {_T}",
            1800,
        ),
        _s(
            "throughput_families_vector",
            "throughput",
            TP,
            f"--scenario {_FAMILIES} "
            "special_20_vs_20 --obs pobs_vec --batch 256 4096 --work 2e6 --repeats 5 "
            f"{_T}",
            1800,
        ),
        _s(
            "throughput_families_rgb",
            "throughput",
            TP,
            f"--scenario {_FAMILIES} --obs pobs_rgb --batch 64 --work 5e5 --repeats 5 {_T}",
            1200,
        ),
        _s(
            "throughput_policy",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            f"pobs_rgb --batch 64 512 4096 --work 1e6 --repeats 5 --policy mlp {_T}",
            1800,
        ),
        _s(
            "throughput_loop",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            "--batch 1 8 32 128 512 2048 8192 32768 131072 --work 2e6 --repeats 5 --driver loop "
            f"{_T}",
            1800,
        ),
        _s(
            "throughput_sharded",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            "fobs_vec pobs_rgb --batch 128 2048 32768 --work 1e6 --repeats 5 --devices {cores} "
            f"{_T}",
            1800,
        ),
        _s("bridge", "bridge", BR, "--json {raw}", 1800, _BRIDGE_ENV),
        _s(
            "scan",
            "scan",
            SC,
            "--T 128 --batch 1024 --state-dim 64 128 --omp-wait-policy "
            "PASSIVE --format none --json {raw}",
            1800,
        ),
        _s(
            "learning",
            "learning",
            "benchmarks.learning",
            "--preset paper --out {out}/learning --json {raw}",
            7200,
        ),
        _s("league", "league", "gigastep.cli", _LEAGUE.format(games=1000), 1800, (), _EVAL),
        _s("collectives", "collectives", "benchmarks.collectives", "--json {raw}", 600),
    ),
    # One H100-class GPU in <= 4 minutes (240 s). The sections' time limits add up to 210 s
    # and the budget is 225 s, so with the probe (~5-10 s: a process that starts JAX and
    # torch on the GPU) and the rendering (~5 s) the run cannot pass 240 s; a section that
    # hits its limit keeps the rows it finished. Expected times (the "gpu" COSTS: ~6 s to
    # start a process with JAX/torch on CUDA, ~6 s per compile):
    # * gpu_tests (~30 s): the 25 bridge tests, which run on JAX's default device (the GPU),
    #   and the 2 CUDA-only S5 tests; 22 s on 2 CPU cores here, mostly compiles.
    # * throughput (~40 s each): one process per obs type (--no-isolate: CUDA starts once),
    #   per batch one compile plus 4 calls (1 warm-up, 3 timed) of --work agent-steps. They
    #   time live play (the auto-reset step, the default since 2026-12-03), whose compile
    #   holds a reset too: ~12 s (on the CPU 2-3x the plain step's), so three batch sizes span
    #   each range. Vector: 1e8 agent-steps per call (1000 steps at 4096 games, 10 steps at
    #   2^20), 0.1-0.5 s per call at 2e8-1e9 agent-steps/s: 3 x ~13 s. RGB 84x84: 1e7 per
    #   call (1000 steps at 256 games, 61 at 16384 games, whose frames are 3.5 GB per step),
    #   0.1-1 s per call at 1e7-1e8 agent-steps/s: 3 x ~14 s.
    # * bridge (~35 s): the JAX scan and the TorchVecEnv loop at 2 batch sizes, 4 compiles of
    #   the auto-resetting step (~12 s each... less with the cache of the first) and 4 x 100
    #   steps of milliseconds each. Gymnasium's NumPy path is left out (CPU-bound).
    # * scan (~22 s): 3 processes (~6 s each to start) at the goal size T 128, batch 1024,
    #   P 64; 7 calls of each implementation (tens of ms; the sequential loop ~0.2 s).
    "gpu": (
        _s("gpu_tests", "tests", "pytest", _CUDA_TESTS, 40),
        _s(
            "throughput_vector",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_vec "
            "--batch 4096 65536 1048576 --work 1e8 --repeats 3 --no-isolate "
            f"{_T}",
            55,
        ),
        _s(
            "throughput_rgb",
            "throughput",
            TP,
            "--scenario identical_5_vs_5 --obs pobs_rgb "
            f"--batch 256 2048 16384 --work 1e7 --repeats 3 --no-isolate {_T}",
            50,
        ),
        _s(
            "bridge",
            "bridge",
            BR,
            "--device cuda --batch 16384 131072 --steps 100 --repeats 3 --gym-batch --json {raw}",
            40,
        ),
        _s(
            "scan",
            "scan",
            SC,
            "--device cuda --T 128 --batch 1024 --state-dim 64 --repeats 5 "
            "--format none --json {raw}",
            30,
        ),
    ),
    # For the tests: every section of this package at a minuscule size (~40 s on 2 cores).
    "tiny": (
        _s(
            "throughput",
            "throughput",
            TP,
            "--scenario identical_1_vs_1 --obs pobs_vec pobs_rgb "
            f"--batch 2 --steps 3 --repeats 2 --resolution 16 --driver scan loop --no-isolate {_T}",
            120,
        ),
        _s(
            "bridge",
            "bridge",
            BR,
            "--scenario identical_1_vs_1_fobs_vec_void_cont --batch 2 "
            "--steps 3 --repeats 2 --gym-batch --json {raw}",
            120,
        ),
        _s(
            "scan",
            "scan",
            SC,
            "--T 8 --batch 4 --state-dim 8 --d-model 8 --repeats 2 --impl "
            "torch_parallel jax --no-isolate --format none --json {raw}",
            120,
        ),
    ),
}

PRESETS: dict[str, Preset] = {
    "quick": Preset("quick", "cpu", 570.0, SECTIONS["quick"]),
    "paper": Preset("paper", "cpu", None, SECTIONS["paper"]),
    "gpu": Preset("gpu", "gpu", 225.0, SECTIONS["gpu"]),
    "tiny": Preset("tiny", "cpu", None, SECTIONS["tiny"]),
}


# ------------------------------------------------------------------------------------------
# The plan: configurations and estimated time of every section (no work done)
# ------------------------------------------------------------------------------------------

# Rough costs for --dry-run: seconds to start a Python process with JAX (and torch) ready,
# seconds of one compile of a rollout of the plain step (`compile_s`) and of the
# auto-resetting step (`reset_compile_s`; throughput's default and the bridge's step: on the
# CPU 4.2-4.6 s in the quick preset of 2026-12-03), the bridge's compiles per configuration
# (below 1 where its configurations share a compiled step), agent-steps/s by observation
# type, seconds per call of a Python-driven step, and S5 block milliseconds per element of
# T x batch x P (the sequential loop costs `seq_factor` times more, plus `seq_step_ms` per
# step). "cpu": from runs of the quick preset on a 2-core EPYC VM; "gpu": an H100-class guess
# (see the "gpu" preset above).
COSTS = {
    "cpu": {
        "process_s": 4.5,
        "compile_s": 2.5,
        "reset_compile_s": 4.5,
        "dispatch_s": 1e-3,
        "rate": {"vector": 4e6, "rgb": 3.5e5},
        "scan_ms_per_elem": 8e-5,
        "seq_factor": 5.0,
        "seq_step_ms": 0.0,
        "tests_s": 30.0,
        "bridge_compiles": 1.1,
    },
    "gpu": {
        "process_s": 6.0,
        "compile_s": 6.0,
        "reset_compile_s": 12.0,
        "dispatch_s": 2e-4,
        "rate": {"vector": 3e8, "rgb": 2e7},
        "scan_ms_per_elem": 1e-6,
        "seq_factor": 1.0,
        "seq_step_ms": 1.5,
        "tests_s": 30.0,
        "bridge_compiles": 0.5,
    },
}


def module_available(name: str) -> bool:
    """Whether `python -m name` would find the module, without importing (or running) it."""
    from importlib.machinery import PathFinder

    path: list[str] | None = [str(ROOT), *sys.path]
    for part in name.split("."):
        if path is None:
            return False
        spec = PathFinder.find_spec(part, path)
        if spec is None:
            return False
        path = list(spec.submodule_search_locations or []) or None
    return True


def _agents(scenario: str) -> int:
    m = re.search(r"(\d+)_vs_(\d+)", scenario)
    return int(m.group(1)) + int(m.group(2)) if m else 10


def _options(options_cls, args: list[str]):
    """Parse a benchmark's arguments into its options dataclass (as its own CLI would)."""
    from benchmarks._common import add_options, options_from_args

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_options(parser, options_cls)
    return options_from_args(options_cls, parser.parse_args(args))


def _throughput_plan(args: list[str], cost: dict) -> tuple[list[str], float]:
    from benchmarks import throughput

    opts = _options(throughput.Options, args)
    cases = throughput.cases_from_options(opts)
    total = 0.0 if opts.isolate else cost["process_s"]
    for c in cases:
        n = _agents(c.scenario)
        steps = c.steps or int(min(1000, max(5, round(c.work / (c.batch * n)))))
        rate = cost["rate"]["rgb" if c.obs.endswith("rgb") else "vector"]
        if c.driver == "loop":
            rate = min(rate, c.batch * n / cost["dispatch_s"])
        compile_s = cost["reset_compile_s" if c.step_fn == "autoreset" else "compile_s"]
        start = compile_s + (cost["process_s"] if opts.isolate else 0.0)
        total += start + (1 + c.repeats) * steps * c.batch * n / rate
    return [throughput._case_id(c) for c in cases], total


def _scan_plan(args: list[str], cost: dict) -> tuple[list[str], float]:
    from benchmarks import scan

    opts = _options(scan.Options, args)
    cases = scan.cases_from_options(opts)
    total = 0.0 if opts.isolate else cost["process_s"]
    for c in cases:
        seq = c.impl == "torch_sequential"
        ms = cost["scan_ms_per_elem"] * c.T * c.batch * c.state_dim * (
            cost["seq_factor"] if seq else 1.0
        ) + (cost["seq_step_ms"] * c.T if seq else 0.0)
        total += (cost["process_s"] if opts.isolate else 0.0) + (2 + c.repeats) * ms / 1e3
        total += cost["compile_s"] / 2 if c.impl == "jax" else 0.0
    return [f"{c.impl} T={c.T} batch={c.batch} P={c.state_dim}" for c in cases], total


def _bridge_plan(args: list[str], cost: dict) -> tuple[list[str], float]:
    from benchmarks import bridge

    opts = _options(bridge.Options, args)
    if opts.quick:
        for name, value in bridge.QUICK.items():
            setattr(opts, name, value)
    rows = bridge._plan(opts)
    n = _agents(opts.scenario)
    total = cost["process_s"]
    for impl, batch in rows:
        if impl == "gym_vector":
            total += cost["compile_s"] + opts.repeats * opts.gym_duration
        else:
            work = (1 + opts.repeats) * opts.steps * batch * n / cost["rate"]["vector"]
            total += cost["bridge_compiles"] * cost["reset_compile_s"] + work
    return [f"{impl} batch={b}" for impl, b in rows], total


def _section_plan(section: Section, cost: dict) -> tuple[list[str], float | None]:
    """(configurations, estimated seconds; None: unknown, bounded by its time limit)."""
    args = section.argv("RAW", "OUT")
    planners = {"throughput": _throughput_plan, "scan": _scan_plan, "bridge": _bridge_plan}
    if section.kind in planners:
        return planners[section.kind](args, cost)
    if section.kind == "tests":
        return [f"pytest {' '.join(a for a in args if a.startswith('tests/'))}"], cost["tests_s"]
    return [f"python -m {section.module} {shlex.join(args)}"], None


@dataclass
class PlannedSection:
    section: Section
    available: bool
    configurations: list[str]
    estimate_s: float | None

    @property
    def units(self) -> int:
        """Progress-bar units: one per configuration."""
        return max(1, len(self.configurations))


def plan(
    preset: Preset, only: list[str] | None = None, skip: list[str] | None = None
) -> list[PlannedSection]:
    """The sections to run (after --sections / --skip), each with its configurations and an
    estimate of its time. Raises ValueError for a section name the preset does not have."""
    names = [s.name for s in preset.sections]
    for given in (only or []) + (skip or []):
        if given not in names:
            from gigastep.game.types import closest

            near = ", ".join(closest(given, names))
            raise ValueError(
                f"preset {preset.name!r} has no section {given!r}; its sections: "
                f"{', '.join(names)} (closest: {near})"
            )
    cost = COSTS[preset.device]
    out = []
    for s in preset.sections:
        if (only and s.name not in only) or (skip and s.name in skip):
            continue
        available = module_available(s.needs)
        configs, estimate = _section_plan(s, cost) if available else ([], None)
        out.append(PlannedSection(s, available, configs, estimate))
    return out


def format_plan(preset: Preset, planned: list[PlannedSection]) -> str:
    """The plan as text: every section, its command, configurations and estimated time."""
    lines = [
        f"Preset {preset.name!r} ({preset.device} cost model"
        + (f", budget {preset.budget_s:.0f} s" if preset.budget_s else "")
        + "):"
    ]
    known = 0.0
    for p in planned:
        s = p.section
        if not p.available:
            lines.append(f"\n{s.name}: not available (module {s.needs} missing)")
            continue
        est = f"~{p.estimate_s:.0f} s" if p.estimate_s is not None else "unknown"
        bound = min(p.estimate_s, s.timeout_s) if p.estimate_s is not None else s.timeout_s
        known += bound
        lines.append(
            f"\n{s.name}: {len(p.configurations)} configuration(s), estimated {est} "
            f"(limit {s.timeout_s:.0f} s)"
        )
        lines.append(
            f"  python -m {s.module} "
            + s.args.format(raw="{raw}", out="{out}", cores=usable_cores())
        )
        lines += [f"    {c}" for c in p.configurations]
    limit = sum(p.section.timeout_s for p in planned if p.available)
    budget = f", {preset.budget_s:.0f} s by the budget." if preset.budget_s else "."
    lines.append(
        f"\nEstimated total: ~{known:.0f} s (sections with no estimate counted at "
        f"their limit); at most {limit:.0f} s by the sections' limits{budget}"
    )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------


def _child_env(extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(dict(extra))
    return env


def probe(league_scenarios: list[str], timeout: float = 180.0) -> dict[str, Any]:
    """The machine, versions and accelerators as seen by a fresh Python process (this one
    never starts JAX: on a GPU it would hold memory the sections need)."""
    cmd = [sys.executable, "-m", "benchmarks.report", "--probe", *league_scenarios]
    env = _child_env((("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),))
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        if proc.returncode == 0 and lines:
            return json.loads(lines[-1])
        error = (proc.stderr or proc.stdout)[-1500:]
    except subprocess.TimeoutExpired:
        error = f"timed out after {timeout:.0f} s"
    return {"run_info": {"hardware": hardware_info()}, "error": error, "gpu": {}}


def _probe_main(scenarios: list[str]) -> int:
    """Print the probe's JSON (run in a fresh process by `probe`)."""
    import jax

    from benchmarks._common import config_hash, run_info

    gpu = {"jax_backend": jax.default_backend(), "jax_devices": [str(d) for d in jax.devices()]}
    try:
        import torch

        gpu.update(
            torch=torch.__version__,
            torch_cuda=torch.cuda.is_available(),
            torch_cuda_version=torch.version.cuda,
        )
    except ImportError:
        gpu.update(torch=None, torch_cuda=False)
    hashes = {}
    for name in scenarios:
        try:
            from gigastep.scenarios import make_config

            hashes[name] = config_hash(make_config(name))
        except Exception as e:  # an unknown name is the section's problem, not the probe's
            hashes[name] = f"unknown ({type(e).__name__})"
    print(json.dumps({"run_info": run_info(), "gpu": gpu, "scenario_hashes": hashes}))
    return 0


_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)")


def _reader(stream, log_file, lines: queue.Queue) -> None:
    for line in stream:
        log_file.write(line)
        log_file.flush()
        lines.put(line)
    lines.put(None)


def _stop(proc: subprocess.Popen) -> None:
    """Stop a section's process and its workers (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _raw_path(out: Path, section: Section) -> Path:
    """Where a section's output goes: the league writes a folder, pytest JUnit XML."""
    if section.kind == "league":
        return out / "league"
    return out / "raw" / (section.name + (".xml" if section.kind == "tests" else ".json"))


def run_section(section: Section, out: Path, timeout: float, on_progress=None) -> dict[str, Any]:
    """Run one section in its own process (and process group); never raises for what the
    section does. Returns its record: status ("ok", "failed", "timed out"), return code,
    wall seconds, the command, its raw output and log paths and the tail of its log."""
    from benchmarks._report_files import remove_stale

    raw = _raw_path(out, section)
    remove_stale(raw)  # an earlier run's output must not pass as this one's
    raw.parent.mkdir(parents=True, exist_ok=True)
    args = section.argv(raw, out)
    cmd = [sys.executable, "-m", section.module, *args]
    log_path = out / "logs" / f"{section.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    lines: queue.Queue = queue.Queue()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=_child_env(section.env),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        thread = threading.Thread(target=_reader, args=(proc.stdout, log, lines), daemon=True)
        thread.start()
        timed_out = False
        while True:
            try:
                line = lines.get(timeout=max(0.05, t0 + timeout - time.perf_counter()))
            except queue.Empty:
                line = ""
            if line is None:
                break
            m = _PROGRESS.match(line) if line else None
            if m and on_progress is not None:
                on_progress(int(m.group(1)) - 1, m.group(3).strip())
            if time.perf_counter() - t0 > timeout:
                timed_out = True
                _stop(proc)
                break
        proc.wait()
        thread.join(timeout=5)
    wall = time.perf_counter() - t0
    tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
    status = "timed out" if timed_out else ("ok" if proc.returncode == 0 else "failed")
    return {
        "status": status,
        "returncode": proc.returncode,
        "wall_s": wall,
        "timeout_s": timeout,
        "command": shlex.join(["python", "-m", section.module, *args]),
        "raw": str(raw.relative_to(out)),
        "log": str(log_path.relative_to(out)),
        "error": None
        if status == "ok"
        else (f"timed out after {timeout:.0f} s" if timed_out else "\n".join(tail)),
    }


class _Progress:
    """One tqdm bar over every configuration of every section."""

    def __init__(self, total: int, enabled: bool):
        from tqdm.auto import tqdm

        # disable=None: no bar when stderr is not a terminal (a log keeps the section lines).
        self.bar = tqdm(
            total=total,
            unit="config",
            disable=None if enabled else True,
            dynamic_ncols=True,
            mininterval=0.5,
            file=sys.stderr,
        )
        self.base = 0

    def start(self, name: str) -> None:
        self.bar.set_description(name)

    def within(self, units: int):
        def update(done: int, what: str) -> None:
            self.bar.n = self.base + min(done, units)
            self.bar.set_postfix_str(what[:60], refresh=False)
            self.bar.refresh()

        return update

    def finish(self, units: int, message: str) -> None:
        self.base += units
        self.bar.n = self.base
        self.bar.refresh()
        self.bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def run_report(
    preset: Preset,
    planned: list[PlannedSection],
    out: Path,
    info: dict[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run every planned section in turn, then write every artefact; returns report.json's
    content. `info` is the probe's result (probed here if None)."""
    from benchmarks import _report_files

    out.mkdir(parents=True, exist_ok=True)
    if info is None:
        info = probe(_league_scenarios(planned))
    t_start = time.perf_counter()
    bar = _Progress(sum(p.units for p in planned), progress)
    records = []
    try:
        for p in planned:
            s = p.section
            record = {"name": s.name, "kind": s.kind, "module": s.module}
            left = (
                None
                if preset.budget_s is None
                else (preset.budget_s - (time.perf_counter() - t_start))
            )
            if not p.available:
                record.update(status="not available", error=f"module {s.needs} missing")
            elif left is not None and left < 5:
                record.update(
                    status="not run",
                    error=f"the preset's {preset.budget_s:.0f} s "
                    "budget was spent before this section",
                )
            else:
                bar.start(s.name)
                timeout = s.timeout_s if left is None else min(s.timeout_s, left)
                record.update(run_section(s, out, timeout, bar.within(p.units)))
            wall = f" ({record['wall_s']:.0f} s)" if "wall_s" in record else ""
            bar.finish(p.units, f"{s.name}: {record['status']}{wall}")
            records.append(record)
    finally:
        bar.close()
    return _report_files.write_all(out, preset.name, info, records)


def _league_scenarios(planned: list[PlannedSection]) -> list[str]:
    names = []
    for p in planned:
        if p.section.kind == "league" and p.available:
            args = p.section.argv("", "")
            if "--scenario" in args:
                names.append(args[args.index("--scenario") + 1])
    return names


def _gpu_problem(info: dict[str, Any]) -> str | None:
    """Why this machine cannot run the gpu preset (None if it can)."""
    gpu = info.get("gpu") or {}
    jax_ok = gpu.get("jax_backend") in ("gpu", "cuda")
    torch_ok = bool(gpu.get("torch_cuda"))
    if jax_ok and torch_ok:
        return None
    return (
        "--preset gpu needs a CUDA GPU that both JAX and PyTorch can use; here JAX's "
        f"backend is {gpu.get('jax_backend', 'unknown')!r} (devices: "
        f"{', '.join(gpu.get('jax_devices', [])) or 'unknown'}) and "
        f"torch.cuda.is_available() is {torch_ok}"
        + (f" (probe failed: {info['error'][-300:]})" if info.get("error") else "")
        + ". Install jax[cuda12] and a CUDA build of torch, or run --preset quick. "
        "Nothing was run."
    )


def summary(path: Path) -> str:
    """The peak-throughput table (each configuration at its fastest batch) of a report.json
    or a benchmarks.throughput JSON, as Markdown, with the machine it ran on."""
    from benchmarks import _report_tables as rt

    data = json.loads(path.read_text())
    if isinstance(data, dict) and "tables" in data:
        rows = data["tables"].get("throughput", {}).get("rows", [])
    else:
        rows = rt.read_section("throughput", path, "throughput", None)[0]["throughput"]
    if not rows:
        raise ValueError(f"{path} holds no measured throughput rows")
    machines = sorted({f"{r['device']}; {r['versions']}" for r in rows})
    return "\n".join(
        [rt.markdown(rt.SUMMARY, rt.best_rows(rows)), "", *(f"Measured on {m}." for m in machines)]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.report",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="presets: quick (<= 10 min on 2 CPU cores), paper (the full sweep), gpu (one "
        "GPU, <= 4 min). --dry-run prints a preset's plan and estimated time.",
    )
    parser.add_argument(
        "--preset",
        choices=("quick", "paper", "gpu", "tiny"),
        default="quick",
        help="which sections and sizes (tiny: for the tests)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the report (default: results/report-PRESET)",
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        default=None,
        metavar="NAME",
        help="run only these sections of the preset",
    )
    parser.add_argument(
        "--skip",
        nargs="+",
        default=None,
        metavar="NAME",
        help="leave these sections of the preset out",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (sections, configurations, estimated time), run nothing",
    )
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bar"
    )
    parser.add_argument(
        "--summary",
        type=Path,
        default=None,
        metavar="JSON",
        help="print the peak-throughput table of a report.json (or of a "
        "benchmarks.throughput JSON) and exit",
    )
    parser.add_argument("--probe", nargs="*", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        return _probe_main(args.probe)
    if args.summary is not None:
        try:
            print(summary(args.summary))
        except (OSError, ValueError, KeyError) as e:
            parser.error(f"cannot summarise {args.summary}: {e}")
        return 0
    preset = PRESETS[args.preset]
    try:
        planned = plan(preset, args.sections, args.skip)
    except ValueError as e:
        parser.error(str(e))
    if args.dry_run:
        print(format_plan(preset, planned))
        return 0
    out = args.out or ROOT / "results" / f"report-{preset.name}"
    info = probe(_league_scenarios(planned))
    problem = _gpu_problem(info) if preset.device == "gpu" else None
    if problem:
        print(problem, file=sys.stderr)
        return 2
    report = run_report(preset, planned, out, info=info, progress=args.progress)
    failed = [s["name"] for s in report["sections"] if s["status"] in ("failed", "timed out")]
    print(
        f"wrote {out / 'report.md'} ({len(report['files'])} files)"
        + (f"; problems in: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
