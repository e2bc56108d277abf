"""Compare two benchmark runs row by row and flag slow-downs beyond the noise of the repeats.

    python -m benchmarks.compare OLD.json NEW.json
    python -m benchmarks.compare results/old/report.json results/new/report.json --margin 0.1

Inputs: a `report.json` of `benchmarks.report`, or the JSON of `benchmarks.throughput`,
`benchmarks.scan` or `benchmarks.bridge` (`--json`). Rows are matched by their configuration
(for throughput: scenario, observation, resolution, batch, policy, driver, step function,
devices). For each pair it prints the ratio NEW / OLD of the median speed (for times: OLD
time / NEW time, so > 1 is always faster).

The noise rule: every row holds the slowest and the fastest of its repeats. A row is flagged
as a drop when NEW's fastest repeat is slower than OLD's slowest repeat by more than the
margin (default 5%): NEW max < (1 - margin) x OLD min, in speed. The two runs' ranges of
repeats then do not overlap, and the gap exceeds what drift between runs adds. In terms of
the medians this is a per-row threshold, printed as "flag below": ratio < (1 - margin) x
(OLD min / OLD median) / (NEW max / NEW median). A row whose repeats give no spread (a single
repeat) falls back to ratio < 1 - margin. Improvements are the mirror image. The exit
status is 1 when a drop is flagged, 0 otherwise, 2 when an input cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import _report_tables as rt
from benchmarks._common import format_number

__all__ = ["compare", "load_tables", "main", "render"]


def _tables_of_rows(path: Path, data: Any) -> dict[str, dict]:
    """The table of a single benchmark's JSON (throughput, scan or bridge)."""
    if isinstance(data, dict) and "rows" in data and "run_info" in data:
        kind = "bridge"
    elif isinstance(data, list) and any("agent_steps_per_s" in r or "skipped" in r for r in data):
        kind = "throughput"
    elif isinstance(data, list) and any("fwd_bwd_ms" in r for r in data):
        kind = "scan"
    elif isinstance(data, list) and any("busbw_gbps" in r for r in data):
        kind = "collectives"
    else:
        raise ValueError(
            "not a report.json nor the JSON of benchmarks.throughput, scan, bridge or collectives"
        )
    got, _ = rt.read_section(kind, path, kind, None)
    out = {}
    for name, rows in got.items():
        spec = rt.TABLES[name]
        out[name] = {
            "key": list(spec.key),
            "metric": spec.metric,
            "higher_is_better": spec.higher_is_better,
            "rows": rows,
        }
    return out


def load_tables(path: str | Path) -> dict[str, dict]:
    """{table: {"key", "metric", "higher_is_better", "rows"}} of a run's JSON file.

    Raises:
        ValueError: the file is missing, is not JSON or is not a benchmark's output.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON ({e})") from None
    if isinstance(data, dict) and "tables" in data:
        return {k: v for k, v in data["tables"].items() if v.get("metric")}
    try:
        return _tables_of_rows(path, data)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


def _speed(row: dict, metric: str, higher: bool) -> tuple[float, float, float] | None:
    """(median, slowest, fastest) as speeds (higher is better), or None if not measured."""
    med = row.get(metric)
    if not isinstance(med, (int, float)) or med <= 0:
        return None
    lo, hi = row.get(f"{metric}_min"), row.get(f"{metric}_max")
    lo = lo if isinstance(lo, (int, float)) and lo > 0 else med
    hi = hi if isinstance(hi, (int, float)) and hi > 0 else med
    if higher:
        return med, lo, hi
    return 1 / med, 1 / hi, 1 / lo  # times: the slowest repeat is the largest time


def _index(table: dict) -> dict[tuple, dict]:
    """Rows by configuration; a repeated configuration gets an occurrence number."""
    out: dict[tuple, dict] = {}
    for row in table["rows"]:
        key = tuple(row.get(k) for k in table["key"])
        n = 1
        while key + ((n,) if n > 1 else ()) in out:
            n += 1
        out[key + ((n,) if n > 1 else ())] = row
    return out


def compare(old: dict[str, dict], new: dict[str, dict], margin: float = 0.05) -> list[dict]:
    """One result per configuration found in either run (see the module docstring).

    Each result: table, config (text), verdict ("drop", "faster", "within noise",
    "only in OLD", "only in NEW", "not measured"), and for compared rows old/new medians (in
    the metric's own unit), ratio (NEW / OLD speed) and threshold (flag below this ratio).
    """
    results = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        spec = a or b
        ia, ib = _index(a) if a else {}, _index(b) if b else {}
        for key in list(ia) + [k for k in ib if k not in ia]:
            config = ", ".join(
                f"{k}={v}" for k, v in zip(spec["key"], key, strict=False) if v is not None
            )
            res = {"table": name, "config": config, "metric": spec["metric"]}
            if key not in ib or key not in ia:
                res["verdict"] = "only in OLD" if key not in ib else "only in NEW"
                results.append(res)
                continue
            so = _speed(ia[key], spec["metric"], spec["higher_is_better"])
            sn = _speed(ib[key], spec["metric"], spec["higher_is_better"])
            if so is None or sn is None:
                results.append({**res, "verdict": "not measured"})
                continue
            res.update(_judge(so, sn, margin))
            res.update(old=ia[key][spec["metric"]], new=ib[key][spec["metric"]])
            results.append(res)
    return results


def _judge(old: tuple, new: tuple, margin: float) -> dict[str, Any]:
    (om, olo, ohi), (nm, nlo, nhi) = old, new
    threshold = (1 - margin) * (olo / om) / (nhi / nm)
    if nhi < (1 - margin) * olo:
        verdict = "drop"
    elif nlo > (1 + margin) * ohi:
        verdict = "faster"
    else:
        verdict = "within noise"
    return {"ratio": nm / om, "threshold": threshold, "verdict": verdict}


def _machines(path: Path) -> set[str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return set()
    if isinstance(data, dict) and "tables" in data:
        rows = [r for t in data["tables"].values() for r in t.get("rows", [])]
        return {r["device"] for r in rows if r.get("device")}
    return set()


def render(results: list[dict], margin: float, old: str, new: str) -> str:
    lines = [
        f"OLD: {old}",
        f"NEW: {new}",
        f"Rule: a row is a drop when NEW's fastest repeat is slower than OLD's slowest by more "
        f"than {margin:.0%} (NEW max < {1 - margin:.2f} x OLD min, as speeds); 'flag below' is "
        "that rule as a threshold on the ratio of medians, from both rows' spread of repeats.",
        "",
    ]
    tables: dict[str, list[dict]] = {}
    for r in results:
        tables.setdefault(r["table"], []).append(r)
    for name, rows in tables.items():
        lines += [
            f"## {name} ({rows[0]['metric']}; ratio = NEW / OLD speed, > 1 is faster)",
            "",
            "| configuration | OLD | NEW | ratio | flag below | verdict |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for r in rows:
            verdict = "DROP" if r["verdict"] == "drop" else r["verdict"]
            if "ratio" in r:
                lines.append(
                    f"| {r['config']} | {format_number(r['old'])} | "
                    f"{format_number(r['new'])} | {r['ratio']:.3f} | "
                    f"{r['threshold']:.3f} | {verdict} |"
                )
            else:
                lines.append(f"| {r['config']} | – | – | – | – | {verdict} |")
        lines.append("")
    counts = {
        v: sum(r["verdict"] == v for r in results)
        for v in ("drop", "faster", "within noise", "only in OLD", "only in NEW", "not measured")
    }
    lines.append("Summary: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 3)[3],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("old", type=Path, help="the earlier run's JSON")
    parser.add_argument("new", type=Path, help="the later run's JSON")
    parser.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="relative gap beyond the repeats' ranges that counts as a drop (default: 0.05)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.margin < 1:
        parser.error(f"--margin must be in [0, 1), got {args.margin}")
    try:
        old, new = load_tables(args.old), load_tables(args.new)
    except ValueError as e:
        print(f"cannot compare: {e}", file=sys.stderr)
        return 2
    results = compare(old, new, args.margin)
    if not any("ratio" in r for r in results):
        print("cannot compare: no configuration was measured in both runs", file=sys.stderr)
        return 2
    print(render(results, args.margin, str(args.old), str(args.new)))
    ma, mb = _machines(args.old), _machines(args.new)
    if ma and mb and ma != mb:
        print(
            f"\nNote: the runs were on different machines ({', '.join(sorted(ma))} vs "
            f"{', '.join(sorted(mb))}): ratios compare the machines too."
        )
    return 1 if any(r["verdict"] == "drop" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
