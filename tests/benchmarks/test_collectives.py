"""`benchmarks/collectives.py`, the preflight: a quick run over two local processes writes
rows with the stated units, the bus-bandwidth formulas are nccl-tests', sizes parse, and the
slow-link flag fires on a link 40x below the others (and not on a uniform table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks.collectives import (
    annotate_flags,
    bus_factor,
    elements,
    format_bytes,
    make_row,
    parse_size,
    slow_links,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REQUIRED = ("framework", "op", "bytes", "processes", "latency_us", "algbw_gbps", "busbw_gbps")
SIZES = (4096, 262144)
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("preflight")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.collectives",
        "--quick",
        "--processes",
        "2",
        "--devices",
        "2",
        "--sizes",
        "4KiB",
        "256KiB",
        "--repeats",
        "2",
        "--sample-seconds",
        "0.01",
        "--json",
        str(out / "rows.json"),
        "--markdown",
        str(out / "rows.md"),
        "--png",
        str(out / "rows.png"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, json.loads((out / "rows.json").read_text()), result.stdout


@pytest.mark.subprocess
def test_quick_run_measures_every_op_and_size_on_each_link(quick_run):
    _, rows, _ = quick_run
    links = {(r["framework"], r["scope"], r["processes"], r["devices"]) for r in rows}
    assert links == {
        ("jax", "in-process", 1, 2),
        ("jax", "cross-process", 2, 2),
        ("torch", "cross-process", 2, 2),
    }
    for link in links:
        mine = [
            r for r in rows if (r["framework"], r["scope"], r["processes"], r["devices"]) == link
        ]
        assert sorted((r["op"], r["bytes"]) for r in mine) == sorted(
            (op, size) for op in OPS for size in SIZES
        ), link


@pytest.mark.subprocess
def test_quick_run_rows_carry_the_stated_units(quick_run):
    _, rows, _ = quick_run
    for r in rows:
        assert all(k in r for k in REQUIRED), sorted(r)
        assert r["latency_us"] > 0 and len(r["times_us"]) == r["repeats"] == 2
        # algbw = bytes / latency in GB/s (1e9 bytes/s); busbw = algbw x nccl-tests' factor
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["latency_us"] * 1e-6) / 1e9)
        n = r["devices"]
        factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(r["op"], (n - 1) / n)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * factor)
        assert "machine" in r and r["backend"] and isinstance(r["flags"], list)


@pytest.mark.subprocess
def test_quick_run_writes_the_markdown_table_and_a_png(quick_run):
    out, _, stdout = quick_run
    text = (out / "rows.md").read_text()
    assert "busbw = algbw × 2(n−1)/n (all-reduce)" in text
    assert "| all-reduce | 4 KiB |" in text and "Links more than 10×" in text
    assert (out / "rows.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| reduce-scatter | 256 KiB |" in stdout


# ------------------------------------------------------------------------------------------
# Formulas, sizes and the slow-link flag (no processes)
# ------------------------------------------------------------------------------------------


def test_bus_bandwidth_factors_are_those_of_nccl_tests():
    assert bus_factor("all_reduce", 2) == 1.0 and bus_factor("all_reduce", 4) == 1.5
    assert bus_factor("all_gather", 4) == 0.75 and bus_factor("reduce_scatter", 8) == 0.875
    assert bus_factor("broadcast", 16) == 1.0


def test_sizes_parse_in_binary_and_decimal_units():
    assert parse_size("64MiB") == 64 * 2**20 and parse_size("1KiB") == 1024
    assert parse_size("4096") == 4096 and parse_size("1MB") == 10**6
    assert format_bytes(256 * 2**20) == "256 MiB" and format_bytes(1000) == "1000 B"
    with pytest.raises(ValueError, match="cannot read the size '12 parsecs'"):
        parse_size("12 parsecs")


def test_gather_and_scatter_sizes_round_down_to_equal_parts():
    assert elements("all_gather", 1000, 3) == (83, 996)  # 83 floats from each of 3
    assert elements("reduce_scatter", 1000, 3) == (249, 996)  # 249 in, 83 out each
    assert elements("all_reduce", 1000, 3) == (250, 1000)


def _table(slow_link=None, slowdown=40.0):
    """Rows of three links x two ops x three sizes at 10 GB/s bus bandwidth (n = 2), with
    `slow_link`'s all-reduce `slowdown` times slower."""
    rows = []
    links = [
        ("jax", "in-process", 1, "xla-cpu"),
        ("jax", "cross-process", 2, "xla-cpu/gloo"),
        ("torch", "cross-process", 2, "gloo"),
    ]
    for framework, scope, processes, backend in links:
        for op in ("all_reduce", "all_gather"):
            for size in (2**20, 2**24, 2**26):
                t = size * bus_factor(op, 2) / 10e9
                if (framework, scope) == slow_link and op == "all_reduce":
                    t *= slowdown
                rows.append(
                    make_row(
                        op,
                        size,
                        2,
                        [t, t],
                        framework=framework,
                        scope=scope,
                        processes=processes,
                        backend=backend,
                    )
                )
    return rows


def test_slow_link_flag_fires_on_a_link_40x_below_the_others():
    flags = slow_links(_table(slow_link=("jax", "cross-process")))
    assert flags == [
        "JAX cross-process (2 processes, xla-cpu/gloo) all-reduce at 64 MiB is 40× below "
        "JAX in-process (2 devices, xla-cpu) (40–40× at 3 sizes from 1 MiB to 64 MiB)"
    ]


def test_slow_link_flag_stays_quiet_on_a_uniform_table_and_below_the_threshold():
    assert slow_links(_table()) == []
    assert slow_links(_table(slow_link=("torch", "cross-process"), slowdown=8.0)) == []


def test_each_row_of_the_slow_link_carries_its_flag_for_the_report():
    rows = annotate_flags(_table(slow_link=("jax", "cross-process")), 10.0)
    flagged = [r for r in rows if r["flags"]]
    assert [(r["framework"], r["scope"], r["op"]) for r in flagged] == [
        ("jax", "cross-process", "all_reduce")
    ] * 3
    assert flagged[0]["flags"] == ["40× below JAX in-process (2 devices, xla-cpu)"]
