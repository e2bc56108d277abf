"""Shared utilities of the benchmarks: machine description, timing, memory, tables, JSON.

Every benchmark records where and how it ran (`run_info`), times a compiled function with
`time_repeats` (median and spread over repeats, compile time reported apart), measures the
peak resident memory of its process (`peak_rss_mb`; run each configuration in a fresh
process with `run_worker` so that peaks do not accumulate), and prints its rows with
`markdown_table` or `latex_table` and writes them with `write_json`. The trainers that
`benchmarks.external_learning` compares share their rows' throughput (`training_throughput`)
and their players' check (`check_vector_player`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Column",
    "Timing",
    "add_options",
    "check_vector_player",
    "config_hash",
    "cpu_model",
    "device_info",
    "fixed",
    "format_number",
    "hardware_info",
    "latex_table",
    "markdown_table",
    "option",
    "options_from_args",
    "peak_rss_mb",
    "rate",
    "run_info",
    "run_worker",
    "time_interleaved",
    "time_repeats",
    "training_throughput",
    "versions",
    "write_json",
    "run_cases",
    "write_text",
]


# ------------------------------------------------------------------------------------------
# Where and how a benchmark ran
# ------------------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU model name (Linux /proc/cpuinfo, else `platform.processor()`)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_total_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def usable_cores() -> int:
    """The logical CPUs this process may run on (its affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def hardware_info() -> dict[str, Any]:
    """CPU model, logical cores (total and usable by this process), memory and load."""
    usable = usable_cores()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": usable,
        "memory_gb": _memory_total_gb(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "load_average_1m": round(load[0], 2) if load else None,
    }


def device_info() -> dict[str, Any]:
    """The JAX backend and its devices (imports jax)."""
    import jax

    devices = jax.devices()
    return {
        "backend": jax.default_backend(),
        "devices": [str(d) for d in devices],
        "device_kind": devices[0].device_kind if devices else None,
        "device_count": len(devices),
    }


def versions(*packages: str) -> dict[str, str | None]:
    """Versions of Python, jax, jaxlib, numpy, gigastep (and torch if already imported), and
    of each installed distribution named in `packages` (None where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    import jax
    import jaxlib
    import numpy as np

    import gigastep

    out = {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "gigastep": getattr(gigastep, "__version__", None),
    }
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].__version__
    for name in packages:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
        if out.returncode != 0:
            return None
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def run_info() -> dict[str, Any]:
    """Everything needed to reproduce or compare a benchmark run, as one JSON-able dict."""
    return {
        "hardware": hardware_info(),
        "device": device_info(),
        "versions": versions(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_platforms": os.environ.get("JAX_PLATFORMS", ""),
        "git_commit": _git_commit(),
        "argv": sys.argv,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def config_hash(config) -> str:
    """`gigastep.scenarios.scenario_hash(config)` when available, else the first 12 hex
    digits of the SHA-256 of `repr(config)`."""
    try:
        from gigastep.scenarios import scenario_hash

        return scenario_hash(config)
    except (ImportError, AttributeError, TypeError):
        return hashlib.sha256(repr(config).encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------------
# Timing and memory
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Seconds of `repeats` timed calls (compile and warm-up excluded).

    `times` is wall-clock time. `cpu_times` is the CPU time of the whole process (all
    threads) over the same calls: on a machine shared with other jobs it excludes the time
    spent waiting for a core, so it is far less noisy than wall time and is the better
    measure of the work a phase costs (it exceeds wall time when XLA runs several threads).
    """

    times: tuple[float, ...]
    """Wall seconds of each timed call, in call order."""
    cpu_times: tuple[float, ...] = ()
    """Process CPU seconds (user + system, all threads) of each timed call."""

    @property
    def cpu_min(self) -> float | None:
        return min(self.cpu_times) if self.cpu_times else None

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu_times) if self.cpu_times else None

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    @property
    def iqr(self) -> float:
        """Interquartile range (0 for fewer than 2 times)."""
        if len(self.times) < 2:
            return 0.0
        q = statistics.quantiles(self.times, n=4, method="inclusive")
        return q[2] - q[0]

    @property
    def spread(self) -> float:
        """(max - min) / median: the relative noise of the repeats."""
        return (self.max - self.min) / self.median if self.median > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "times_s": list(self.times),
            "median_s": self.median,
            "min_s": self.min,
            "max_s": self.max,
            "iqr_s": self.iqr,
            "spread": self.spread,
            "cpu_times_s": list(self.cpu_times),
            "cpu_median_s": self.cpu_median,
            "cpu_min_s": self.cpu_min,
        }


def _block(out):
    import jax

    return jax.block_until_ready(out)


def time_repeats(fn: Callable[[int], Any], repeats: int = 5, warmup: int = 1) -> Timing:
    """Time `fn(i)` for i = 0..repeats-1 after `warmup` untimed calls.

    `fn` gets the repeat index (use it to vary the PRNG key) and must return the JAX outputs
    of the work; the timer stops only once they are ready (`jax.block_until_ready`), so
    asynchronous dispatch cannot hide work.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for i in range(warmup):
        _block(fn(-1 - i))
    times, cpu = [], []
    for i in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        _block(fn(i))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return Timing(tuple(times), tuple(cpu))


def time_interleaved(
    fns: dict[str, Callable[[int], Any]], repeats: int = 5, warmup: int = 1
) -> dict[str, Timing]:
    """Time several functions round-robin: repeat r calls every `fns[name](r)` once.

    On a shared, loaded machine the load changes over seconds; interleaving exposes every
    variant to the same load, so their ratios (and minima) stay comparable.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for fn in fns.values():
        for i in range(warmup):
            _block(fn(-1 - i))
    times: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeats):
        for name, fn in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            _block(fn(r))
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {name: Timing(tuple(times[name]), tuple(cpu[name])) for name in fns}


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (never decreases)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / 1024**2 if sys.platform == "darwin" else peak / 1024


def current_rss_mb() -> float | None:
    """Current resident set size of this process in MiB (Linux), else None."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1024**2
    except (OSError, ValueError, IndexError):
        return None


def run_worker(
    module: str,
    payload: dict[str, Any],
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run `python -m <module> --worker <json payload>` in a fresh process; return the JSON
    object it prints on its last stdout line.

    A fresh process per measurement keeps peak RSS and compile caches independent. On a
    failure the returned dict holds `error` (the tail of stderr) instead of raising, so a
    sweep goes on past one configuration that runs out of memory.
    """
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, "-m", module, "--worker", json.dumps(payload)]
    run_env = dict(os.environ)
    run_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), run_env.get("PYTHONPATH")]))
    if env:
        run_env.update(env)
    try:
        proc = subprocess.run(
            cmd, cwd=root, capture_output=True, text=True, timeout=timeout, env=run_env
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-2000:]
        return {"error": f"worker exited with {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def run_cases(
    module: str, cases: Sequence[Any], timeout: float | None, describe: Callable[[Any], str]
) -> list[dict[str, Any]]:
    """Each case (a dataclass) in its own `run_worker` process, one after the other, with
    progress on stderr; a failed case's row holds the case's fields and `error`. Every row
    gets `machine` (`run_info`)."""
    info = run_info()
    env = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    rows = []
    for i, case in enumerate(cases):
        print(f"[{i + 1}/{len(cases)}] {describe(case)} ...", file=sys.stderr, flush=True)
        row = run_worker(module, dataclasses.asdict(case), timeout, env)
        if "error" in row:
            print(f"    failed: {row['error'][-300:]}", file=sys.stderr)
            row = {**dataclasses.asdict(case), **row}
        row["machine"] = info
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------
# Trainers' rows (benchmarks.external_learning and the trainers it runs)
# ------------------------------------------------------------------------------------------


def rate(env_steps: int, seconds: float, n_agents: int, games: int) -> dict[str, Any]:
    """env-steps/s and agent-steps/s (every agent of the game) of `env_steps` steps of `games`
    games in `seconds` (rates None where no time was measured)."""
    per_s = env_steps / seconds if seconds > 0 else None
    return {
        "env_steps_per_s": per_s,
        "agent_steps_per_s": None if per_s is None else per_s * n_agents,
        "env_steps": env_steps,
        "seconds": seconds,
        "games": games,
    }


def training_throughput(
    env_steps: int, training_s: float, rollout_s: float, n_agents: int, games: int
) -> dict[str, dict[str, Any]]:
    """A trainer's `throughput` field: the `rate` of `env_steps` over its training (rollouts
    and updates, `training_s`) and over its rollouts alone (`rollout_s`)."""
    return {
        "training": rate(env_steps, training_s, n_agents, games),
        "rollout": rate(env_steps, rollout_s, n_agents, games),
    }


def check_vector_player(name: str, obs_size: int, config: Any) -> None:
    """The `check` of a player trained on vector observations of length `obs_size` with
    discrete actions: raises ValueError naming what `config`'s game has instead."""
    if config.obs_type != "vector" or not config.discrete_actions:
        raise ValueError(
            f"{name} plays vector observations and discrete actions; this game has "
            f"obs_type={config.obs_type!r}, discrete_actions={config.discrete_actions}"
        )
    if config.vector_size != obs_size:
        raise ValueError(
            f"{name} was trained on observations of length {obs_size}; this "
            f"game's have length {config.vector_size}"
        )


# ------------------------------------------------------------------------------------------
# Tables and files
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One table column: the row key it shows, its header (with the unit) and its format."""

    key: str
    header: str
    fmt: Callable[[Any], str] = str


def format_number(x: Any, digits: int = 3) -> str:
    """A number with an SI suffix and exactly `digits` significant digits, trailing zeros kept
    and never an exponent, so that one column reads alike: 6.00 M, 8.07 M, 938 k, 0.0412.

    Integers below 1000 print as they are; None and NaN as an en dash.
    """
    if x is None or (isinstance(x, float) and x != x):
        return "–"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int) and abs(x) < 1000:
        return str(x)
    scales = ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k"), (1.0, ""))
    i = next((j for j, (s, _) in enumerate(scales) if abs(x) >= s), len(scales) - 1)
    while True:
        scale, suffix = scales[i]
        text = _significant(x / scale, digits)
        # 999.7 rounds to "1000": show it as 1.00 k instead.
        if abs(float(text)) < 1000 or i == 0:
            return text + suffix
        i -= 1


def _significant(v: float, digits: int) -> str:
    """`v` with `digits` significant digits in fixed notation (trailing zeros kept)."""
    if v == 0 or math.isinf(v):
        return f"{v:.{max(digits - 1, 0)}f}"
    exponent = math.floor(math.log10(abs(v)))
    text = f"{v:.{max(0, digits - 1 - exponent)}f}"
    if abs(float(text)) >= 10 ** (exponent + 1):  # rounding carried (0.9997 -> 1.00)
        text = f"{v:.{max(0, digits - 2 - exponent)}f}"
    return text


def fixed(decimals: int) -> Callable[[Any], str]:
    """A column format with a fixed number of decimals (one format for the whole column)."""
    return lambda x: f"{x:.{decimals}f}"


def _cell(row: dict[str, Any], col: Column) -> str:
    value = row.get(col.key)
    return "–" if value is None else col.fmt(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    """A GitHub Markdown table of `rows` (dicts) showing `columns`."""
    header = "| " + " | ".join(c.header for c in columns) + " |"
    rule = "| " + " | ".join("---" for _ in columns) + " |"
    body = ["| " + " | ".join(_cell(r, c) for c in columns) + " |" for r in rows]
    return "\n".join([header, rule, *body])


_LATEX_ESCAPES = {
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "\\": r"\textbackslash{}",
    "~": r"\textasciitilde{}",
    "^": r"\^{}",
    "–": "--",
    "—": "---",
    "×": r"$\times$",
    "µ": r"$\mu$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "⁹": r"$^9$",
}


def _latex(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text)


def latex_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], caption: str = "", label: str = ""
) -> str:
    """A booktabs LaTeX table of `rows` showing `columns` (needs \\usepackage{booktabs})."""
    spec = "l" * 1 + "r" * (len(columns) - 1)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(_latex(c.header) for c in columns) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(_latex(_cell(r, c)) for c in columns) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption:
        lines.append(rf"\caption{{{_latex(caption)}}}")
    if label:
        lines.append(rf"\label{{{label}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` atomically (temporary file in the same folder, then rename), creating
    the folder if needed: a reader never sees a half-written file."""
    # Imported here: the report's parent process must not import JAX (gigastep's __init__).
    from gigastep._util import files as _files

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _files.write_text(path, text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write `obj` as indented JSON atomically (see `write_text`)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


# ------------------------------------------------------------------------------------------
# Command lines from option dataclasses (cleanrl-style `Args`, without extra dependencies)
# ------------------------------------------------------------------------------------------


def option(default: Any, help: str, **kwargs: Any) -> Any:
    """A dataclass field with a default and its `--help` line (`metadata["help"]`).

    Extra keyword arguments (`choices`, `nargs`, `metavar`) go to `argparse.add_argument`.
    Mutable defaults (lists) are copied per instance.
    """
    meta = {"help": help, **kwargs}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def add_options(parser, options_cls) -> None:
    """Add one `--flag` per field of the dataclass `options_cls` to an argparse parser.

    bool fields become `--flag/--no-flag`; list fields take one or more values of the type
    of their default's elements (or of `metadata["type"]`).
    """
    import argparse

    for f in dataclasses.fields(options_cls):
        meta = dict(f.metadata)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"{options_cls.__name__}.{f.name} needs a default to be a flag")
        flag = "--" + f.name.replace("_", "-")
        kwargs: dict[str, Any] = {"help": meta.pop("help", "") + f" (default: {default})"}
        elem_type = meta.pop("type", None)
        if isinstance(default, bool):
            kwargs["action"] = argparse.BooleanOptionalAction
        elif isinstance(default, list):
            kwargs["nargs"] = meta.pop("nargs", "+")
            kwargs["type"] = elem_type or (type(default[0]) if default else str)
        elif default is None:
            kwargs["type"] = elem_type or str
        else:
            kwargs["type"] = elem_type or type(default)
        kwargs.update(meta)
        parser.add_argument(flag, dest=f.name, default=default, **kwargs)


def options_from_args(options_cls, args) -> Any:
    """The `options_cls` instance of parsed argparse `args`."""
    return options_cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(options_cls)})


def parse_command_line(parser, options_cls, case_cls, run_case, argv):
    """Parse a benchmark's command line (options from `options_cls` plus the hidden
    `--worker JSON` used by `run_worker`).

    Returns `(options, None)` for a normal run; in a worker process it runs the one case,
    prints its row as JSON for the parent and returns `(None, [row])`.
    """
    import argparse

    add_options(parser, options_cls)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        row = run_case(case_cls(**json.loads(args.worker)))
        print(json.dumps(row))
        return None, [row]
    return options_from_args(options_cls, args), None
