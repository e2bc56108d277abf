"""Scaling of the library's rollout over devices: `gigastep.rollout` on one device against
`gigastep.parallel.sharded_rollout` on N, with and without the native CPU kernel.

Every measurement is a `benchmarks.throughput` case with `--driver rollout` (a fresh process
each, `XLA_FLAGS=--xla_force_host_platform_device_count=N` for N devices on CPU), so the rates
are the throughput benchmark's (agent-steps/s = steps x games x agents / median seconds of a
call; compile excluded; each call resets the games, then plays `--steps` steps). For each
observation path (`GIGASTEP_NATIVE=0`: the pure JAX step, one XLA thread per device for most
of it; `GIGASTEP_NATIVE=1`: the native kernel, which already threads over the cores) and batch
size, the table gives the rate on each device count and the speed-up over one device.

The goal (issue 15): with the pure JAX path, 2 CPU devices reach >= 1.6x the one-device rate
at batch >= 4096.

Usage:
    python -m benchmarks.scaling --json scaling.json --png scaling.png   # ~4 min, 2 quiet cores
    python -m benchmarks.scaling --rounds 3 --json scaling.json          # ~12 min: less noise
    python -m benchmarks.scaling --quick                                  # ~1-2 min
    python -m benchmarks.scaling --native off --batch 4096 16384 --devices 1 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from benchmarks import throughput
from benchmarks._common import (
    Column,
    add_options,
    markdown_table,
    option,
    options_from_args,
    write_json,
)
from benchmarks.collectives import save_figure

__all__ = ["Options", "main", "speedups"]

GOAL = {"native": "off", "min_batch": 4096, "devices": 2, "speedup": 1.6}


@dataclass
class Options:
    """Command-line options (each field is one `--flag`; see `--help`)."""

    quick: bool = option(False, "quick preset: batch 1024 and 4096, 30 steps, 3 repeats")
    scenario: str = option("identical_5_vs_5_pobs_vec_maps_cont", "scenario name")
    batch: list = option([256, 1024, 4096, 16384], "batch sizes (games)", type=int)
    devices: list = option([1, 2], "device counts (the first is the reference)", type=int)
    native: list = option(
        ["off", "on"],
        "observation paths: off (GIGASTEP_NATIVE=0, pure JAX) and/or on (the native CPU kernel)",
        type=str,
    )
    steps: int = option(100, "steps per timed call (each call also resets the games)")
    repeats: int = option(5, "timed calls per configuration (median reported)")
    rounds: int = option(
        1,
        "measure every configuration this many times, alternating the "
        "device counts (the median over rounds is reported)",
    )
    timeout: float = option(1800.0, "seconds allowed per configuration")
    json: str = option(None, "write the throughput rows and the speed-ups as JSON here")
    png: str = option(None, "write agent-steps/s and speed-up against batch size here")


def _cases(opts: Options) -> list[throughput.Case]:
    for d in opts.devices:
        bad = [b for b in opts.batch if b % d]
        if d < 1 or bad:
            raise ValueError(f"--devices {d}: every batch must split evenly (not {bad})")
    if opts.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {opts.rounds}")
    return [
        throughput.Case(
            opts.scenario,
            batch=b,
            steps=opts.steps,
            repeats=opts.repeats,
            devices=d,
            driver="rollout",
            step_fn="autoreset",
        )
        for b in opts.batch
        for _ in range(opts.rounds)
        for d in opts.devices
    ]


@contextmanager
def _native(mode: str):
    """GIGASTEP_NATIVE for the worker processes started inside the block."""
    if mode not in ("on", "off"):
        raise ValueError(f"--native takes on and/or off, got {mode!r}")
    old = os.environ.get("GIGASTEP_NATIVE")
    os.environ["GIGASTEP_NATIVE"] = "1" if mode == "on" else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("GIGASTEP_NATIVE")
        else:
            os.environ["GIGASTEP_NATIVE"] = old


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (native mode, batch): the rate on each device count (the median over rounds) and
    its ratio to the smallest device count's (rows without a rate are left out)."""
    groups: dict[tuple, dict[int, list]] = {}
    for r in rows:
        if "agent_steps_per_s" in r:
            groups.setdefault((r["native"], r["batch"]), {}).setdefault(r["devices"], []).append(r)
    out = []
    for (mode, batch), by_devices in sorted(groups.items()):
        rate = {
            d: statistics.median(r["agent_steps_per_s"] for r in rs) for d, rs in by_devices.items()
        }
        base_devices = min(by_devices)
        for d, rs in sorted(by_devices.items()):
            out.append(
                {
                    "native": mode,
                    "batch": batch,
                    "devices": d,
                    "rounds": len(rs),
                    "agent_steps_per_s": rate[d],
                    "cpu_s_per_call": statistics.median(r["timing"]["cpu_median_s"] for r in rs),
                    "speedup": rate[d] / rate[base_devices],
                    "vs_devices": base_devices,
                    "obs_kernel": rs[0].get("obs_kernel"),
                }
            )
    return out


COLUMNS = (
    Column("native", "native kernel"),
    Column("obs_kernel", "obs code"),
    Column("batch", "games", str),
    Column("devices", "devices", str),
    Column("rounds", "rounds", str),
    Column("agent_steps_per_s", "agent-steps/s [M/s] (median)", lambda x: f"{x / 1e6:.3g}"),
    Column("speedup", "speed-up", lambda x: f"{x:.2f}×"),
    Column("cpu_s_per_call", "CPU s per call", lambda x: f"{x:.3g}"),
)


def _goal_lines(table: list[dict[str, Any]]) -> list[str]:
    hits = [
        t
        for t in table
        if t["native"] == GOAL["native"]
        and t["devices"] == GOAL["devices"]
        and t["batch"] >= GOAL["min_batch"]
    ]
    return [
        f"goal (pure JAX, {GOAL['devices']} devices, {t['batch']} games, >= "
        f"{GOAL['speedup']}x): {t['speedup']:.2f}x "
        f"{'met' if t['speedup'] >= GOAL['speedup'] else 'NOT met'}"
        for t in hits
    ]


def plot(table: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate, gain) = plt.subplots(1, 2, figsize=(11, 4.5))
    lines: dict[tuple, list] = {}
    for t in table:
        lines.setdefault((t["native"], t["devices"]), []).append(t)
    for (mode, d), points in sorted(lines.items()):
        b = [p["batch"] for p in points]
        label = f"native {mode}, {d} device{'s' if d > 1 else ''}"
        rate.plot(b, [p["agent_steps_per_s"] for p in points], marker="o", label=label)
        if d != points[0]["vs_devices"]:
            gain.plot(b, [p["speedup"] for p in points], marker="o", label=label)
    gain.axhline(GOAL["speedup"], color="grey", linestyle="--", label="goal (pure JAX)")
    rate.set(xscale="log", yscale="log", xlabel="games", ylabel="agent-steps/s")
    gain.set(xscale="log", xlabel="games", ylabel="speed-up over 1 device")
    for ax in (rate, gain):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scaling", description=__doc__.split("\n\n")[0]
    )
    add_options(parser, Options)
    opts = options_from_args(Options, parser.parse_args(argv))
    if opts.quick:
        opts.batch, opts.steps, opts.repeats = [1024, 4096], 30, 3
    cases = _cases(opts)
    rows = []
    for mode in opts.native:
        with _native(mode):
            print(f"native kernel {mode}:", file=sys.stderr, flush=True)
            for r in throughput.run_sweep(cases, isolate=True, timeout=opts.timeout):
                rows.append({**r, "native": mode})
    table = speedups(rows)
    if opts.json:
        write_json(opts.json, {"rows": rows, "speedups": table})
    if opts.png:
        plot(table, opts.png)
    print(markdown_table(table, COLUMNS))
    print("\n".join(_goal_lines(table)))
    return table


if __name__ == "__main__":
    main()
