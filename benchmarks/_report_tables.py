"""The report's tables: how each section's raw output becomes rows, and how rows are written.

Every table is a `TableSpec`: its fields (each with its unit), the fields that identify a
configuration (what `benchmarks.compare` matches rows on) and the metric compared. The rows
written to `<table>.csv` and to `report.json` are the same flat dicts, field for field, so the
CSV and the JSON agree by construction. Every row carries `device`, `versions` and
`xla_flags` (from the machine block of the process that measured it), and `scenario_hash`
where a scenario is involved.

This module never imports JAX: the report's own process stays off the accelerator.
"""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import Column, fixed, format_number, latex_table, markdown_table

__all__ = [
    "SUMMARY",
    "TABLES",
    "Field",
    "TableSpec",
    "best_rows",
    "family",
    "read_section",
    "table_rows",
]


@dataclass(frozen=True)
class Field:
    """One column of a table: its key, its unit (None for text), and how tables show it."""

    key: str
    unit: str | None = None
    """Unit of the number ("agent-steps/s", "s", "MiB", ...); None for a text field."""
    header: str | None = None
    """Header in the Markdown and LaTeX tables (None: in the CSV and JSON only)."""
    fmt: Callable[[Any], str] = str


@dataclass(frozen=True)
class TableSpec:
    """A table of the report and how `benchmarks.compare` reads it."""

    name: str
    title: str
    fields: tuple[Field, ...]
    key: tuple[str, ...] = ()
    """Fields that identify a configuration (rows are matched on them)."""
    metric: str | None = None
    """Compared metric (its median); `<metric>_min` and `<metric>_max` hold its range."""
    higher_is_better: bool = True

    def units(self) -> dict[str, str]:
        return {f.key: f.unit for f in self.fields if f.unit is not None}

    def columns(self) -> list[Column]:
        """Markdown/LaTeX columns; each header names its unit."""
        out = []
        for f in self.fields:
            if f.header is not None:
                unit = f" [{f.unit}]" if f.unit and not f.header.startswith(f.unit) else ""
                out.append(Column(f.key, f.header + unit, f.fmt))
        return out


_COMMON = (Field("device"), Field("versions"), Field("xla_flags"))


def _int_commas(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


_THROUGHPUT = TableSpec(
    "throughput",
    "Environment throughput",
    (
        Field("section"),
        Field("family", None, "family"),
        Field("scenario", None, "scenario"),
        Field("scenario_hash"),
        Field("obs_type", None, "obs"),
        Field("observability"),
        Field("resolution", "px"),
        Field("batch", "games", "batch", _int_commas),
        Field("n_agents", "agents"),
        Field("agents_total", "agents", "agents", _int_commas),
        Field("policy", None, "policy"),
        Field("driver", None, "driver"),
        Field("step_fn"),
        Field("devices", "devices"),
        Field("steps", "steps per call"),
        Field("repeats", "repeats"),
        Field("median_s", "s"),
        Field("agent_steps_per_s", "agent-steps/s", "agent-steps/s", format_number),
        Field("agent_steps_per_s_min", "agent-steps/s"),
        Field("agent_steps_per_s_max", "agent-steps/s"),
        Field("env_steps_per_s", "env-steps/s", "env-steps/s", format_number),
        Field("env_steps_per_s_min", "env-steps/s"),
        Field("env_steps_per_s_max", "env-steps/s"),
        Field("time_to_1e9_s", "s", "time to 10⁹ agent-steps", format_number),
        Field("compile_s", "s", "compile", fixed(1)),
        Field("peak_rss_mb", "MiB", "peak RSS", fixed(0)),
        Field("device_peak_mb", "MiB"),
        Field("obs_kernel"),
        Field("form"),
        *_COMMON,
    ),
    key=("scenario", "obs_type", "resolution", "batch", "policy", "driver", "step_fn", "devices"),
    metric="agent_steps_per_s",
)

_BRIDGE = TableSpec(
    "bridge",
    "PyTorch bridge",
    (
        Field("impl", None, "driver"),
        Field("scenario", None, "scenario"),
        Field("scenario_hash"),
        Field("batch", "games", "batch", _int_commas),
        Field("steps", "steps per call", "steps per call"),
        Field("n_agents", "agents"),
        Field("median_s", "s"),
        Field("env_steps_per_s", "env-steps/s", "env-steps/s", format_number),
        Field("env_steps_per_s_min", "env-steps/s"),
        Field("env_steps_per_s_max", "env-steps/s"),
        Field("agent_steps_per_s", "agent-steps/s", "agent-steps/s", format_number),
        Field("agent_steps_per_s_min", "agent-steps/s"),
        Field("agent_steps_per_s_max", "agent-steps/s"),
        Field("vs_jax", "ratio", "vs JAX scan", fixed(2)),
        Field("compile_s", "s", "compile/warm-up", fixed(1)),
        *_COMMON,
    ),
    key=("impl", "scenario", "batch", "steps"),
    metric="env_steps_per_s",
)

_SCAN = TableSpec(
    "scan",
    "S5 block forward+backward",
    (
        Field("impl", None, "implementation"),
        Field("part", None, "part"),
        Field("backend", None, "device"),
        Field("T", "steps", "T"),
        Field("batch", "sequences", "batch"),
        Field("state_dim", "states", "P"),
        Field("d_model", "features"),
        Field("n_layers", "layers"),
        Field("repeats", "repeats"),
        Field("fwd_bwd_ms", "ms", "fwd+bwd", format_number),
        Field("fwd_bwd_ms_min", "ms"),
        Field("fwd_bwd_ms_max", "ms"),
        Field("fwd_bwd_cpu_ms", "ms"),
        Field("peak_mb", "MiB", "peak memory", fixed(1)),
        Field("xla_temp_mb", "MiB"),
        Field("compile_s", "s", "JAX compile", fixed(1)),
        Field("time_vs_jax", "ratio", "time / JAX", fixed(2)),
        Field("speedup_vs_sequential", "ratio", "speed-up vs sequential", fixed(1)),
        Field("memory_vs_jax", "ratio", "memory / JAX", fixed(2)),
        *_COMMON,
    ),
    key=("impl", "part", "backend", "T", "batch", "state_dim", "d_model", "n_layers"),
    metric="fwd_bwd_ms",
    higher_is_better=False,
)

_LEARNING = TableSpec(
    "learning",
    "Learning: final evaluation",
    (
        Field("policy", None, "policy"),
        Field("scenario", None, "scenario"),
        Field("scenario_hash"),
        Field("seed", "seed", "seed"),
        Field("budget_s", "s", "budget", fixed(0)),
        Field("agent_steps", "agent-steps", "trained", format_number),
        Field("wall_s", "s"),
        Field("opponent", None, "opponent"),
        Field("games", "games", "games"),
        Field("wins", "games"),
        Field("draws", "games"),
        Field("losses", "games"),
        Field("win_rate", "wins/games", "win rate", fixed(3)),
        Field("ci_low", "wins/games", "95% CI low", fixed(3)),
        Field("ci_high", "wins/games", "95% CI high", fixed(3)),
        *_COMMON,
    ),
    key=("policy", "scenario", "seed", "opponent"),
)

_COLLECTIVES = TableSpec(
    "collectives",
    "Collectives preflight",
    (
        Field("framework", None, "framework"),
        Field("op", None, "op"),
        Field("bytes", "B", "size", format_number),
        Field("processes", "processes", "procs"),
        Field("latency_us", "µs", "latency", format_number),
        Field("algbw_gbps", "GB/s", "algbw", format_number),
        Field("busbw_gbps", "GB/s", "busbw", format_number),
        Field("flags", None, "flags"),
        *_COMMON,
    ),
    key=("framework", "op", "bytes", "processes"),
    metric="busbw_gbps",
)

_TESTS = TableSpec(
    "gpu_tests",
    "CUDA tests",
    (
        Field("test", None, "test"),
        Field("outcome", None, "outcome"),
        Field("duration_s", "s", "time", fixed(2)),
        Field("message"),
        *_COMMON,
    ),
    key=("test",),
)


def _rate_range(row: dict[str, Any]) -> str:
    lo, hi = row.get("agent_steps_per_s_min"), row.get("agent_steps_per_s_max")
    return "–" if lo is None or hi is None else f"{format_number(lo)}–{format_number(hi)}"


# The summary of a throughput table: each configuration at its fastest batch size.
SUMMARY = TableSpec(
    "summary",
    "Peak throughput of each configuration",
    (
        Field("family", None, "family"),
        Field("scenario", None, "scenario"),
        Field("obs_type", None, "obs"),
        Field("policy", None, "policy"),
        Field("driver", None, "driver"),
        Field("devices", "devices", "devices"),
        Field("batch", "games", "best batch", _int_commas),
        Field("agent_steps_per_s", "agent-steps/s", "agent-steps/s (median)", format_number),
        Field("range", None, "agent-steps/s (min–max)"),
        Field("env_steps_per_s", "env-steps/s", "env-steps/s", format_number),
        Field("time_to_1e9_s", "s", "time to 10⁹ agent-steps", format_number),
        Field("compile_s", "s", "compile", fixed(1)),
        Field("peak_rss_mb", "MiB", "peak RSS", fixed(0)),
    ),
)


def best_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fastest row (median agent-steps/s) of each configuration (scenario, observation,
    policy, driver; any batch size and device count), vector first, fastest first."""
    best: dict[tuple, dict] = {}
    for r in rows:
        key = tuple(r.get(k) for k in ("scenario", "obs_type", "policy", "driver"))
        if key not in best or r["agent_steps_per_s"] > best[key]["agent_steps_per_s"]:
            best[key] = r
    out = sorted(best.values(), key=lambda r: (r["obs_type"] != "vector", -r["agent_steps_per_s"]))
    return [{**r, "range": _rate_range(r)} for r in out]


# The ratings columns are those of the league's ratings.csv; these are the units of the
# names it is expected to use (others are shown as written, without a unit).
_RATING_UNITS = {
    "rating": "rating points",
    "elo": "rating points",
    "mu": "rating points",
    "sigma": "rating points",
    "ci_low": "rating points",
    "ci_high": "rating points",
    "games": "games",
    "wins": "games",
    "draws": "games",
    "losses": "games",
    "win_rate": "wins/games",
    "rank": "rank",
}

TABLES: dict[str, TableSpec] = {
    t.name: t for t in (_THROUGHPUT, _BRIDGE, _SCAN, _LEARNING, _COLLECTIVES, _TESTS)
}


# ------------------------------------------------------------------------------------------
# Rows
# ------------------------------------------------------------------------------------------


def family(scenario: str) -> str:
    """The scenario family of a name: "5v5", "20v20", "special", "waypoint", ..."""
    m = re.match(r"identical_(\d+)_vs_(\d+)", scenario)
    if m:
        return f"{m.group(1)}v{m.group(2)}"
    for prefix, name in (
        ("special_", "special"),
        ("waypoint_", "waypoint"),
        ("hide_and_seek_", "hide-and-seek"),
    ):
        if scenario.startswith(prefix):
            return name
    return scenario.split("_", 1)[0]


def machine_fields(machine: dict[str, Any] | None) -> dict[str, str]:
    """`device`, `versions` and `xla_flags` of a `run_info()` block, as short text."""
    machine = machine or {}
    dev, hw = machine.get("device") or {}, machine.get("hardware") or {}
    backend = dev.get("backend")
    if backend in (None, "cpu"):
        cores = hw.get("cpu_cores_usable")
        device = f"cpu: {hw.get('cpu_model', '?')}" + (f" ({cores} cores)" if cores else "")
    else:
        device = f"{backend}: {dev.get('device_kind', '?')} x{dev.get('device_count', 1)}"
    versions = "; ".join(f"{k} {v}" for k, v in (machine.get("versions") or {}).items() if v)
    return {"device": device, "versions": versions, "xla_flags": machine.get("xla_flags", "")}


def table_rows(
    spec: TableSpec, raw_rows: list[dict[str, Any]], machine: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Flat rows holding exactly `spec`'s fields (missing ones as None)."""
    out = []
    for raw in raw_rows:
        row = {f.key: raw.get(f.key) for f in spec.fields}
        row.update(machine_fields(raw.get("machine") or machine))
        out.append(row)
    return out


def _problem(what: str, raw: dict[str, Any]) -> dict[str, str]:
    if "skipped" in raw:
        return {"what": what, "status": "skipped", "reason": str(raw["skipped"])}
    return {"what": what, "status": "failed", "reason": str(raw.get("error", ""))[-600:]}


def _read_throughput(path: Path, section: str, machine) -> tuple[dict, list]:
    rows, problems = [], []
    for raw in json.loads(path.read_text()):
        if "error" in raw or "skipped" in raw:
            case = raw.get("case", {})
            what = (
                f"{raw.get('scenario')} {case.get('obs', '')} batch {raw.get('batch')} "
                f"{case.get('driver', 'scan')}"
            )
            problems.append(_problem(what, raw))
            continue
        if raw.get("kind", "env") != "env":
            continue
        timing = raw.get("timing") or {}
        rows.append(
            {
                "driver": "scan",  # rows written before the loop driver existed
                **raw,
                "section": section,
                "family": family(raw["scenario"]),
                "median_s": timing.get("median_s"),
                "time_to_1e9_s": 1e9 / raw["agent_steps_per_s"],
            }
        )
    return {"throughput": table_rows(_THROUGHPUT, rows, machine)}, problems


def _read_bridge(path: Path, section: str, machine) -> tuple[dict, list]:
    data = json.loads(path.read_text())
    machine = data.get("run_info") or machine
    rows, problems = [], []
    for raw in data.get("rows", []):
        if "error" in raw:
            problems.append(_problem(f"{raw.get('impl')} batch {raw.get('batch')}", raw))
        else:
            rows.append(raw)
    return {"bridge": table_rows(_BRIDGE, rows, machine)}, problems


def _read_scan(path: Path, section: str, machine) -> tuple[dict, list]:
    rows, problems = [], []
    for raw in json.loads(path.read_text()):
        if "error" in raw:
            what = f"{raw.get('impl')} T={raw.get('T')} batch={raw.get('batch')}"
            problems.append(_problem(what, raw))
        else:  # the row's own "device" is the torch device (or JAX's backend)
            rows.append({**raw, "backend": raw.get("device")})
    return {"scan": table_rows(_SCAN, rows, machine)}, problems


def _read_learning(path: Path, section: str, machine) -> tuple[dict, list]:
    runs = json.loads(path.read_text())
    if not isinstance(runs, list):
        raise ValueError(f"{path.name}: expected a JSON list of runs, got {type(runs).__name__}")
    rows = []
    for run in runs:
        last = (run.get("curve") or [{}])[-1]
        for final in run.get("final", []):
            rows.append(
                {
                    **{
                        k: run.get(k)
                        for k in ("policy", "scenario", "scenario_hash", "seed", "budget_s")
                    },
                    "agent_steps": last.get("agent_steps"),
                    "wall_s": last.get("wall_s"),
                    **final,
                }
            )
    return {"learning": table_rows(_LEARNING, rows, machine)}, []


def _read_collectives(path: Path, section: str, machine) -> tuple[dict, list]:
    rows = json.loads(path.read_text())
    if not isinstance(rows, list):
        raise ValueError(f"{path.name}: expected a JSON list of rows")
    rows = [
        {**r, "flags": "; ".join(r.get("flags") or [])} if isinstance(r.get("flags"), list) else r
        for r in rows
    ]
    return {"collectives": table_rows(_COLLECTIVES, rows, machine)}, []


def _read_tests(path: Path, section: str, machine) -> tuple[dict, list]:
    """JUnit XML of pytest: one row per test."""
    root = ET.parse(path).getroot()
    rows, problems = [], []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (node.get("message") or "")[:300]
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        rows.append(
            {
                "test": name,
                "outcome": outcome,
                "message": message,
                "duration_s": float(case.get("time", 0.0)),
            }
        )
        if outcome in ("failed", "error"):
            problems.append({"what": name, "status": outcome, "reason": message})
    return {"gpu_tests": table_rows(_TESTS, rows, machine)}, problems


def read_league(folder: Path, machine, scenario_hashes: dict[str, str]) -> dict[str, Any]:
    """The league folder: ratings.csv as a table (columns as written), matrix.csv as a
    square win-rate matrix if it is one (first column: policy; header: opponents)."""
    out: dict[str, Any] = {}
    ratings = folder / "ratings.csv"
    if ratings.is_file():
        rows = [
            {k: _number(v) for k, v in r.items()}
            for r in csv.DictReader(io.StringIO(ratings.read_text()))
        ]
        out["ratings"] = rows
    matrix = folder / "matrix.csv"
    if matrix.is_file():
        lines = list(csv.reader(io.StringIO(matrix.read_text())))
        try:
            cols = lines[0][1:]
            names = [r[0] for r in lines[1:]]
            values = [[_number(v) if v != "" else None for v in r[1:]] for r in lines[1:]]
            if (
                names
                and all(len(v) == len(cols) for v in values)
                and all(isinstance(x, (int, float)) or x is None for v in values for x in v)
            ):
                out["matrix"] = {"rows": names, "cols": cols, "values": values}
        except IndexError:
            pass
    return out


def league_spec(rows: list[dict[str, Any]]) -> TableSpec:
    """A table of the league's ratings.csv, its columns in the file's order."""
    keys = list(rows[0]) if rows else []
    fields = []
    for k in keys:
        unit = _RATING_UNITS.get(k.lower())
        values = [r.get(k) for r in rows]
        numeric = any(isinstance(v, (int, float)) for v in values)
        floats = any(isinstance(v, float) for v in values)
        fmt = fixed(3) if k.lower() == "win_rate" else (fixed(1) if floats else str)
        fields.append(Field(k, unit if numeric else None, k, fmt))
    return TableSpec(
        "league_ratings",
        "Evaluation league: ratings",
        (*fields, Field("scenario_hash"), *_COMMON),
        key=tuple(keys[:1]),
    )


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


READERS = {
    "throughput": _read_throughput,
    "bridge": _read_bridge,
    "scan": _read_scan,
    "learning": _read_learning,
    "collectives": _read_collectives,
    "tests": _read_tests,
}


def read_section(kind: str, path: Path, section: str, machine) -> tuple[dict, list]:
    """({table name: rows}, problems) of one section's raw output file."""
    return READERS[kind](path, section, machine)


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------


def csv_text(spec: TableSpec, rows: list[dict[str, Any]]) -> str:
    """The rows as CSV: one column per field; numbers as Python writes them (repr of
    floats, so they parse back to the same value), None as an empty cell."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[f.key for f in spec.fields], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def markdown(spec: TableSpec, rows: list[dict[str, Any]]) -> str:
    return markdown_table(rows, spec.columns())


def latex(spec: TableSpec, rows: list[dict[str, Any]], caption: str, header: str) -> str:
    """A booktabs table, preceded by `header` as LaTeX comments (device, versions, ...)."""
    comments = "\n".join(f"% {line}" for line in header.splitlines())
    label = "tab:" + spec.name.replace("_", "-")
    return f"{comments}\n{latex_table(rows, spec.columns(), caption=caption, label=label)}\n"
