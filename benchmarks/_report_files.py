"""Writing the report: report.md, report.json, one CSV and one LaTeX file per table, figures.

`write_all(out, preset, info, records)` reads each section's raw output (named in its
record), builds the tables of `benchmarks._report_tables`, and writes every file atomically.
A section whose output cannot be read, or a figure that cannot be drawn, becomes a problem in
the report; it never stops the other files from being written. No JAX here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks import _report_tables as rt
from benchmarks._common import write_json, write_text

__all__ = ["COUNTING", "remove_stale", "write_all"]

COUNTING = (
    "One agent-step is one agent of one game advanced by one step: agent-steps/s = steps x "
    "games x agents / s, env-steps/s = steps x games / s (so agent-steps/s = env-steps/s x "
    "agents per game). Seconds are the median wall time of the timed repeats; compile and "
    "warm-up are excluded and reported apart (compile [s]). min/max are the slowest and "
    "fastest repeat. Throughput runs the library's batched step as one compiled `lax.scan` "
    "per timed call (driver scan) or as a Python loop of the compiled step (driver loop), "
    "random actions drawn inside unless a policy (mlp: vector, cnn: RGB) is in the loop; "
    "the step resets every game that ends (live play; the rows' step_fn field says "
    "autoreset, or step where a run chose the plain step)."
)


def _header(info: dict[str, Any], preset: str) -> dict[str, str]:
    machine = info.get("run_info") or {}
    fields = rt.machine_fields(machine)
    hw = machine.get("hardware") or {}
    fields.update(
        preset=preset,
        commit=str(machine.get("git_commit")),
        time=str(machine.get("time_utc")),
        load=str(hw.get("load_average_1m")),
        memory=f"{hw.get('memory_gb')} GB",
        devices=", ".join((machine.get("device") or {}).get("devices", [])) or "?",
    )
    return fields


def _header_lines(h: dict[str, str], hashes: dict[str, str]) -> list[str]:
    lines = [
        f"Gigastep benchmarks, preset {h['preset']}",
        f"Device: {h['device']} (JAX devices: {h['devices']}; memory {h['memory']})",
        f"Versions: {h['versions']}",
        f"XLA_FLAGS: {h['xla_flags'] or '(none)'}",
        f"Commit: {h['commit']}; run at {h['time']}; load average {h['load']}",
    ]
    if hashes:
        lines.append("Scenario hashes: " + ", ".join(f"{k} {v}" for k, v in sorted(hashes.items())))
    return lines


def _footer(h: dict[str, str]) -> str:
    return (
        f"{h['device']} | {h['versions']} | XLA_FLAGS={h['xla_flags'] or '(none)'} | "
        f"commit {h['commit']} | {h['time']}"
    )


# ------------------------------------------------------------------------------------------
# Reading the sections
# ------------------------------------------------------------------------------------------


def _read_records(out: Path, records: list[dict], info: dict) -> dict[str, Any]:
    """Tables, learning runs and league data of every section; updates each record with
    its row counts and problems (and marks unreadable output as failed)."""
    machine = info.get("run_info")
    tables: dict[str, list[dict]] = {}
    extra: dict[str, Any] = {"learning_runs": [], "league": {}}
    for rec in records:
        rec.setdefault("problems", [])
        if rec["status"] not in ("ok", "failed", "timed out") or not rec.get("raw"):
            continue
        raw = out / rec["raw"]
        try:
            if rec["kind"] == "league":
                extra["league"] = rt.read_league(raw, machine, info.get("scenario_hashes", {}))
                got = {"league_ratings": extra["league"].get("ratings", [])}
                if not got["league_ratings"] and rec["status"] == "ok":
                    raise ValueError(f"{rec['raw']}/ratings.csv is missing or empty")
            elif raw.is_file():
                got, problems = rt.read_section(rec["kind"], raw, rec["name"], machine)
                rec["problems"] += problems
                if rec["kind"] == "learning":
                    extra["learning_runs"] += json.loads(raw.read_text())
            elif rec["status"] == "ok":
                raise FileNotFoundError(f"the section wrote no {rec['raw']}")
            else:
                got = {}
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            rec["status"] = "failed"
            rec["error"] = (
                (rec.get("error") or "") + f"\noutput unreadable: {type(e).__name__}: {e}"
            ).strip()
            continue
        rec["rows"] = {name: len(rows) for name, rows in got.items()}
        for name, rows in got.items():
            tables.setdefault(name, []).extend(rows)
    extra["tables"] = tables
    return extra


def _league_table(league: dict, info: dict, rows: list[dict]):
    spec = rt.league_spec(rows)
    hashes = info.get("scenario_hashes") or {}
    scenario_hash = next(iter(hashes.values()), None) if len(hashes) == 1 else None
    return spec, [
        {**r, "scenario_hash": scenario_hash, **rt.machine_fields(info.get("run_info"))}
        for r in rows
    ]


# ------------------------------------------------------------------------------------------
# Figures
# ------------------------------------------------------------------------------------------


def _figures(out: Path, data: dict, h: dict, description: dict) -> tuple[list, list]:
    """(figure records, problems): every figure the data allows."""
    from benchmarks import plot

    footer = _footer(h)
    jobs = []
    throughput = data["tables"].get("throughput", [])
    kw = {"footer": footer, "description": description}
    for obs in sorted({r["obs_type"] for r in throughput}):
        jobs.append(
            (
                f"throughput_{obs}.png",
                f"Agent-steps/s against games ({obs} obs)",
                lambda p, o=obs: plot.plot_throughput(throughput, p, obs_type=o, **kw),
            )
        )
    if throughput:
        jobs.append(
            (
                "time_to_1e9.png",
                "Time to 10⁹ agent-steps",
                lambda p: plot.plot_time_to(throughput, p, **kw),
            )
        )
    if data["learning_runs"]:
        jobs.append(
            (
                "learning_curves.png",
                "Learning curves",
                lambda p: plot.plot_learning_curves(data["learning_runs"], p, **kw),
            )
        )
    matrix = data["league"].get("matrix")
    if matrix:
        jobs.append(
            (
                "winrate_heatmap.png",
                "Win-rate matrix",
                lambda p: plot.plot_heatmap(
                    matrix["rows"], matrix["cols"], matrix["values"], p, **kw
                ),
            )
        )
    figures, problems = [], []
    for name, title, draw in jobs:
        try:
            draw(out / name)
            figures.append({"file": name, "title": title})
        except Exception as e:  # one figure failing must not lose the report
            problems.append(
                {"what": name, "status": "failed", "reason": f"{type(e).__name__}: {e}"}
            )
    return figures, problems


# ------------------------------------------------------------------------------------------
# Markdown
# ------------------------------------------------------------------------------------------

_TITLES = {
    "throughput": "Environment throughput",
    "bridge": "PyTorch bridge",
    "scan": "S5 block forward+backward",
    "learning": "Learning curves",
    "league_ratings": "Evaluation league",
    "collectives": "Collectives preflight",
    "gpu_tests": "CUDA tests",
}
_FIGURES_OF = {
    "throughput": ("throughput_", "time_to_1e9"),
    "learning": ("learning_curves",),
    "league_ratings": ("winrate_heatmap",),
}


def _section_table(records: list[dict]) -> str:
    lines = [
        "| section | status | wall [s] | limit [s] | rows | command |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        wall = f"{r['wall_s']:.0f}" if "wall_s" in r else "–"
        limit = f"{r['timeout_s']:.0f}" if "timeout_s" in r else "–"
        rows = sum((r.get("rows") or {}).values()) if r.get("rows") else "–"
        status = r["status"] + (
            f" ({r['error']})" if r["status"] in ("not available", "not run") else ""
        )
        command = f"`{r['command']}`" if r.get("command") else "–"
        lines.append(f"| {r['name']} | {status} | {wall} | {limit} | {rows} | {command} |")
    return "\n".join(lines)


def _markdown(h, hashes, records, tables, figures, extras) -> str:
    parts = ["# " + _header_lines(h, {})[0], ""]
    parts += [f"- {line}" for line in _header_lines(h, {})[1:]]
    parts += ["", COUNTING, "", "## Sections", "", _section_table(records), ""]
    for name, (spec, rows) in tables.items():
        parts += [f"## {_TITLES.get(name, spec.title)}", ""]
        for fig in figures:
            if fig["file"].startswith(_FIGURES_OF.get(name, ("\0",))):
                parts += [f"![{fig['title']}]({fig['file']})", ""]
        if name == "league_ratings" and extras.get("league_heatmap"):
            parts += [f"![heat map written by the league]({extras['league_heatmap']})", ""]
        parts += [rt.markdown(spec, rows), "", f"Files: `{name}.csv`, `{name}.tex`.", ""]
        if name == "scan":
            from benchmarks.scan import goal_lines

            parts += ["```", *goal_lines(rows), "```", ""]
        if name == "gpu_tests":
            counts = {
                o: sum(r["outcome"] == o for r in rows)
                for o in ("passed", "failed", "error", "skipped")
            }
            parts += [", ".join(f"{v} {k}" for k, v in counts.items()) + ".", ""]
    problems = [(r["name"], p) for r in records for p in r.get("problems", [])]
    problems += [("figures", p) for p in extras.get("figure_problems", [])]
    failed = [r for r in records if r["status"] in ("failed", "timed out")]
    if problems or failed:
        parts += ["## Problems", ""]
        for r in failed:
            parts += [
                f"**{r['name']}: {r['status']}** (log: `{r.get('log')}`)",
                "",
                "```",
                str(r.get("error") or "").strip()[-3000:],
                "```",
                "",
            ]
        parts += [
            f"- {sec}: {p['what']}: {p['status']}: {p['reason'][-400:]}" for sec, p in problems
        ]
        parts.append("")
    if hashes:
        parts += ["## Scenario hashes", "", "| scenario | hash |", "| --- | --- |"]
        parts += [f"| {k} | {v} |" for k, v in sorted(hashes.items())] + [""]
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------
# Everything
# ------------------------------------------------------------------------------------------


def _scenario_hashes(tables: dict[str, tuple]) -> dict[str, str]:
    out = {}
    for _, rows in tables.values():
        for r in rows:
            if r.get("scenario") and r.get("scenario_hash"):
                out[str(r["scenario"])] = str(r["scenario_hash"])
    return out


def write_all(out: Path, preset: str, info: dict[str, Any], records: list[dict]) -> dict:
    """Write every artefact of a report into `out`; returns report.json's content."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = _read_records(out, records, info)
    tables: dict[str, tuple] = {}
    for name in rt.TABLES:
        if data["tables"].get(name):
            tables[name] = (rt.TABLES[name], data["tables"][name])
    if data["tables"].get("league_ratings"):
        tables["league_ratings"] = _league_table(
            data["league"], info, data["tables"]["league_ratings"]
        )
    h = _header(info, preset)
    hashes = {**(info.get("scenario_hashes") or {}), **_scenario_hashes(tables)}
    description = {"preset": preset, "run_info": info.get("run_info"), "scenario_hashes": hashes}
    files = []
    for name, (spec, rows) in tables.items():
        table_hashes = _scenario_hashes({name: (spec, rows)})
        write_text(out / f"{name}.csv", rt.csv_text(spec, rows))
        caption = (
            f"{spec.title}. {h['device']}; {h['versions']}. Medians of repeats, compile excluded."
            if spec.metric
            else f"{spec.title}. {h['device']}."
        )
        header = "\n".join(_header_lines(h, table_hashes))
        write_text(out / f"{name}.tex", rt.latex(spec, rows, caption, header))
        files += [f"{name}.csv", f"{name}.tex"]
    figures, figure_problems = _figures(out, data, h, description)
    files += [f["file"] for f in figures]
    extras = {"figure_problems": figure_problems}
    league_png = out / "league" / "heatmap.png"
    if league_png.is_file():
        extras["league_heatmap"] = "league/heatmap.png"
    write_text(out / "report.md", _markdown(h, hashes, records, tables, figures, extras))
    report = {
        "preset": preset,
        "run_info": info.get("run_info"),
        "probe": info,
        "counting": COUNTING,
        "sections": records,
        "figures": figures,
        "figure_problems": figure_problems,
        "scenario_hashes": hashes,
        "tables": {
            name: {
                "title": spec.title,
                "units": spec.units(),
                "key": list(spec.key),
                "metric": spec.metric,
                "higher_is_better": spec.higher_is_better,
                "rows": rows,
            }
            for name, (spec, rows) in tables.items()
        },
        "files": ["report.md", "report.json", *files],
    }
    write_json(out / "report.json", report)
    return report


def remove_stale(path: Path) -> None:
    """Remove an earlier run's output at `path` (a file or a folder), so that it cannot pass
    as this run's."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
