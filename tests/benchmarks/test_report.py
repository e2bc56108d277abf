"""The benchmark report (`benchmarks.report`) and the regression check (`benchmarks.compare`).

One run of the hidden `tiny` preset (every section of this package at a minuscule size, in a
subprocess, as a user runs it) feeds the artefact tests; the sections of other issues
(learning, league, collectives) are rendered from synthetic files in their documented
layouts; failing, slow and missing sections use stand-in commands that cost nothing
(`python -m json.tool`, `python -m timeit`). They check files and rules, never speed.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from benchmarks import _report_files, compare, report
from benchmarks._report_tables import TABLES

ROOT = Path(__file__).resolve().parents[2]
CPU_INFO = {
    "run_info": {
        "hardware": {"cpu_model": "Test CPU", "cpu_cores_usable": 2, "memory_gb": 8.0},
        "device": {"backend": "cpu", "devices": ["cpu:0"], "device_kind": "cpu"},
        "versions": {"python": "3.x", "jax": "9.9.9", "gigastep": "0.1.0"},
        "xla_flags": "--xla_test_flag=1",
        "git_commit": "abc1234",
        "time_utc": "T",
    },
    "gpu": {"jax_backend": "cpu", "jax_devices": ["cpu:0"], "torch_cuda": False},
    "scenario_hashes": {"identical_5_vs_5_fobs_vec_void_cont": "feedfacecafe"},
}


# ------------------------------------------------------------------------------------------
# The tiny preset, run once as a user runs it
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.report",
            "--preset",
            "tiny",
            "--out",
            str(out),
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def tiny_json(tiny) -> dict:
    return json.loads((tiny / "report.json").read_text())


@pytest.mark.subprocess
def test_tiny_preset_writes_every_artefact(tiny, tiny_json):
    assert [s["status"] for s in tiny_json["sections"]] == ["ok", "ok", "ok"]
    names = {p.name for p in tiny.iterdir()}
    want = {
        "report.md",
        "report.json",
        "throughput.csv",
        "throughput.tex",
        "bridge.csv",
        "bridge.tex",
        "scan.csv",
        "scan.tex",
        "throughput_vector.png",
        "throughput_rgb.png",
        "time_to_1e9.png",
    }
    assert want <= names, want - names
    assert set(tiny_json["files"]) == want
    assert (tiny / "logs" / "throughput.log").is_file() and (tiny / "raw" / "scan.json").is_file()


def _balanced(tex: str) -> bool:
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{([^}]*)\}", tex):
        if kind == "begin":
            stack.append(env)
        elif not stack or stack.pop() != env:
            return False
    return not stack


def test_balance_check_rejects_crossed_and_unclosed_environments():
    assert _balanced(r"\begin{a}\begin{b}\end{b}\end{a}")
    assert not _balanced(r"\begin{a}\begin{b}\end{a}\end{b}")
    assert not _balanced(r"\begin{a}")


@pytest.mark.subprocess
def test_latex_tables_have_balanced_environments_and_booktabs_rules(tiny):
    for path in tiny.glob("*.tex"):
        tex = path.read_text()
        assert _balanced(tex), path.name
        assert tex.count(r"\begin{table}") == 1 and tex.count(r"\begin{tabular}") == 1
        assert all(rule in tex for rule in (r"\toprule", r"\midrule", r"\bottomrule")), path.name


@pytest.mark.subprocess
def test_every_latex_row_has_as_many_cells_as_the_column_spec(tiny):
    for path in tiny.glob("*.tex"):
        tex = path.read_text()
        spec = re.search(r"\\begin\{tabular\}\{([lrc]+)\}", tex).group(1)
        body = tex.split(r"\toprule", 1)[1].split(r"\bottomrule", 1)[0]
        rows = [r for r in body.replace(r"\midrule", "").split(r"\\") if r.strip()]
        assert rows and all(r.count("&") == len(spec) - 1 for r in rows), path.name


def _same(csv_value: str, json_value) -> bool:
    if json_value is None:
        return csv_value == ""
    if isinstance(json_value, bool):
        return csv_value == str(json_value)
    if isinstance(json_value, (int, float)):
        return float(csv_value) == float(json_value)
    return csv_value == str(json_value)


@pytest.mark.subprocess
def test_csv_and_json_hold_the_same_rows(tiny, tiny_json):
    for name, table in tiny_json["tables"].items():
        rows = list(csv.DictReader(io.StringIO((tiny / f"{name}.csv").read_text())))
        assert len(rows) == len(table["rows"]) > 0, name
        for from_csv, from_json in zip(rows, table["rows"], strict=True):
            assert list(from_csv) == list(from_json), name
            bad = [k for k in from_json if not _same(from_csv[k], from_json[k])]
            assert not bad, (name, bad)


@pytest.mark.subprocess
def test_pngs_are_images_with_data(tiny):
    for path in tiny.glob("*.png"):
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            rgb = image.convert("RGB")
            assert rgb.width > 200 and rgb.height > 200, path.name
            # A blank or one-colour canvas has a handful of colours; lines, bands and text
            # anti-aliased on it have hundreds.
            assert len(rgb.getcolors(maxcolors=1 << 20)) > 50, path.name


@pytest.mark.subprocess
def test_throughput_rows_count_agent_steps_as_env_steps_times_agents(tiny_json):
    rows = tiny_json["tables"]["throughput"]["rows"] + tiny_json["tables"]["bridge"]["rows"]
    for r in rows:
        assert r["agent_steps_per_s"] == pytest.approx(r["env_steps_per_s"] * r["n_agents"])
        for end in ("_min", "_max"):
            assert r["agent_steps_per_s" + end] == pytest.approx(
                r["env_steps_per_s" + end] * r["n_agents"]
            )


@pytest.mark.subprocess
def test_rates_come_from_the_timed_calls_alone(tiny, tiny_json):
    """rate x median seconds of the timed calls = the work of one call; had compile been
    counted, the rate would be work / (median + compile), which these rows are not."""
    raw = {
        (r["scenario"], r["driver"]): r
        for r in json.loads((tiny / "raw" / "throughput.json").read_text())
    }
    for r in tiny_json["tables"]["throughput"]["rows"]:
        work = r["steps"] * r["batch"] * r["n_agents"]
        assert r["agent_steps_per_s"] * r["median_s"] == pytest.approx(work)
        timing = raw[(r["scenario"], r["driver"])]["timing"]
        assert len(timing["times_s"]) == r["repeats"]  # the warm-up call is not among them
        assert work / (r["median_s"] + r["compile_s"]) < r["agent_steps_per_s"]


@pytest.mark.subprocess
def test_every_numeric_field_declares_its_unit(tiny_json):
    for name, table in tiny_json["tables"].items():
        for row in table["rows"]:
            numeric = {
                k for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            assert numeric <= set(table["units"]), (name, numeric - set(table["units"]))


@pytest.mark.subprocess
def test_every_number_column_of_the_markdown_names_its_unit(tiny):
    md = (tiny / "report.md").read_text()
    for spec in (TABLES["throughput"], TABLES["bridge"], TABLES["scan"]):
        for col, field in zip(spec.columns(), [f for f in spec.fields if f.header], strict=True):
            if field.unit:
                assert field.unit in col.header, col.header
                assert f"| {col.header} |" in md, col.header


@pytest.mark.subprocess
def test_every_file_records_device_versions_flags_and_scenario_hashes(tiny, tiny_json):
    import jax

    hashes = tiny_json["scenario_hashes"]
    assert hashes and all(re.fullmatch(r"[0-9a-f]{12}", h) for h in hashes.values())
    md, tex = (tiny / "report.md").read_text(), (tiny / "throughput.tex").read_text()
    for text in (md, tex):
        assert f"jax {jax.__version__}" in text and "XLA_FLAGS" in text and "Device: cpu" in text
        assert all(
            h in text
            for h in {r["scenario_hash"] for r in tiny_json["tables"]["throughput"]["rows"]}
        )
    rows = list(csv.DictReader(io.StringIO((tiny / "throughput.csv").read_text())))
    assert all(
        r["device"].startswith("cpu")
        and f"jax {jax.__version__}" in r["versions"]
        and re.fullmatch(r"[0-9a-f]{12}", r["scenario_hash"])
        for r in rows
    )
    assert all("xla_flags" in r for r in rows)
    with Image.open(tiny / "throughput_vector.png") as image:
        meta = json.loads(image.info["Description"])
    assert meta["run_info"]["versions"]["jax"] == jax.__version__
    assert "xla_flags" in meta["run_info"] and meta["scenario_hashes"] == hashes


# ------------------------------------------------------------------------------------------
# Sections of other issues, from synthetic files in their documented layouts
# ------------------------------------------------------------------------------------------

LEARNING = [
    {
        "policy": "s5",
        "scenario": "identical_5_vs_5_fobs_vec_void_cont",
        "scenario_hash": "0123456789ab",
        "seed": seed,
        "budget_s": 60.0,
        "curve": [
            {
                "wall_s": 10.0 * i,
                "agent_steps": 100_000 * i,
                "update": i,
                "win_rate": {"random": 0.1 * i + 0.05 * seed, "circle": 0.05 * i},
                "episode_return": -1.0 + 0.2 * i,
            }
            for i in range(1, 6)
        ],
        "final": [
            {
                "opponent": "random",
                "games": 200,
                "wins": 150,
                "draws": 10,
                "losses": 40,
                "win_rate": 0.75,
                "ci_low": 0.69,
                "ci_high": 0.80,
            },
            {
                "opponent": "circle",
                "games": 200,
                "wins": 50,
                "draws": 0,
                "losses": 150,
                "win_rate": 0.25,
                "ci_low": 0.19,
                "ci_high": 0.31,
            },
        ],
    }
    for seed in (0, 1)
]
COLLECTIVES = [
    {
        "framework": "torch",
        "op": "all_reduce",
        "bytes": 1 << 20,
        "processes": 2,
        "latency_us": 812.5,
        "algbw_gbps": 1.29,
        "busbw_gbps": 1.29,
        "flags": [],
    },
    {
        "framework": "jax",
        "op": "all_gather",
        "bytes": 1 << 24,
        "processes": 2,
        "latency_us": 9100.0,
        "algbw_gbps": 1.84,
        "busbw_gbps": 0.92,
        "flags": ["busbw under 1 GB/s: a shared-memory transport?", "one repeat only"],
    },
]
POLICIES = ["random", "circle", "pursuit", "evade"]


@pytest.fixture(scope="module")
def others(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("others")
    (out / "raw").mkdir()
    (out / "raw" / "learning.json").write_text(json.dumps(LEARNING))
    (out / "raw" / "collectives.json").write_text(json.dumps(COLLECTIVES))
    league = out / "league"
    league.mkdir()
    lines = ["policy," + ",".join(POLICIES)]  # a square matrix, the diagonal left empty
    for i, a in enumerate(POLICIES):
        cells = ["" if a == b else f"{(i + 2 * j) % 5 / 4:.2f}" for j, b in enumerate(POLICIES)]
        lines.append(f"{a}," + ",".join(cells))
    (league / "matrix.csv").write_text("\n".join(lines) + "\n")
    (league / "ratings.csv").write_text(
        "policy,rating,ci_low,ci_high,games\n"
        "pursuit,1612.5,1580.0,1645.0,300\n"
        "random,1387.5,1350.0,1425.0,300\n"
    )
    Image.new("RGB", (40, 30), (200, 30, 30)).save(league / "heatmap.png")
    records = [
        {
            "name": "learning",
            "kind": "learning",
            "module": "benchmarks.learning",
            "status": "ok",
            "raw": "raw/learning.json",
        },
        {
            "name": "league",
            "kind": "league",
            "module": "gigastep.cli",
            "status": "ok",
            "raw": "league",
        },
        {
            "name": "collectives",
            "kind": "collectives",
            "module": "benchmarks.collectives",
            "status": "ok",
            "raw": "raw/collectives.json",
        },
    ]
    return out, _report_files.write_all(out, "quick", CPU_INFO, records)


def test_learning_runs_give_one_final_row_per_opponent_and_a_curve_figure(others):
    out, rep = others
    rows = rep["tables"]["learning"]["rows"]
    assert [(r["seed"], r["opponent"], r["win_rate"]) for r in rows] == [
        (0, "random", 0.75),
        (0, "circle", 0.25),
        (1, "random", 0.75),
        (1, "circle", 0.25),
    ]
    assert rows[0]["agent_steps"] == 500_000 and rows[0]["wall_s"] == 50.0  # the last point
    assert rows[0]["ci_low"] == 0.69 and rows[0]["scenario_hash"] == "0123456789ab"
    assert (out / "learning.csv").is_file() and (out / "learning.tex").is_file()
    pytest.importorskip("matplotlib")  # the report draws figures only with matplotlib
    with Image.open(out / "learning_curves.png") as image:
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 50


def test_league_ratings_table_and_win_rate_heat_map(others):
    out, rep = others
    rows = rep["tables"]["league_ratings"]["rows"]
    assert [(r["policy"], r["rating"], r["games"]) for r in rows] == [
        ("pursuit", 1612.5, 300),
        ("random", 1387.5, 300),
    ]
    assert rows[0]["scenario_hash"] == "feedfacecafe"  # the league's scenario, via the probe
    assert rep["tables"]["league_ratings"]["units"]["rating"] == "rating points"
    md = (out / "report.md").read_text()
    assert "![heat map written by the league](league/heatmap.png)" in md
    pytest.importorskip("matplotlib")  # the report draws figures only with matplotlib
    assert "winrate_heatmap.png" in rep["files"]
    with Image.open(out / "winrate_heatmap.png") as image:
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20)) > 50


def test_collectives_rows_keep_their_units_and_flags(others):
    out, rep = others
    table = rep["tables"]["collectives"]
    assert [(r["framework"], r["op"], r["bytes"], r["busbw_gbps"]) for r in table["rows"]] == [
        ("torch", "all_reduce", 1 << 20, 1.29),
        ("jax", "all_gather", 1 << 24, 0.92),
    ]
    assert table["rows"][1]["flags"] == (
        "busbw under 1 GB/s: a shared-memory transport?; one repeat only"
    )
    assert table["units"]["latency_us"] == "µs" and table["units"]["busbw_gbps"] == "GB/s"
    tex = (out / "collectives.tex").read_text()
    assert _balanced(tex) and r"$\mu$s" in tex


# ------------------------------------------------------------------------------------------
# Sections that fail, run too long, are missing or were not asked for
# ------------------------------------------------------------------------------------------


def _preset(tmp_path: Path, *sections, budget=None) -> report.Preset:
    return report.Preset("test", "cpu", budget, tuple(sections))


def _copy_collectives(tmp_path: Path, name: str = "collectives") -> report.Section:
    src = tmp_path / "src.json"
    src.write_text(json.dumps(COLLECTIVES))
    return report.Section(name, "collectives", "json.tool", f"{src} {{raw}}", 60)


def test_a_failing_section_is_reported_and_the_others_are_still_written(tmp_path):
    failing = report.Section(
        "broken", "collectives", "json.tool", f"{tmp_path / 'missing.json'} {{raw}}", 60
    )
    preset = _preset(tmp_path, failing, _copy_collectives(tmp_path))
    out = tmp_path / "out"
    rep = report.run_report(preset, report.plan(preset), out, info=CPU_INFO, progress=False)
    status = {s["name"]: s["status"] for s in rep["sections"]}
    assert status == {"broken": "failed", "collectives": "ok"}
    broken = rep["sections"][0]
    assert "missing.json" in broken["error"] and broken["returncode"] != 0
    assert len(rep["tables"]["collectives"]["rows"]) == 2 and (out / "collectives.csv").is_file()
    md = (out / "report.md").read_text()
    assert "**broken: failed**" in md and "missing.json" in md


def test_a_section_past_its_time_limit_is_stopped_and_the_next_one_runs(tmp_path):
    slow = report.Section(
        "slow", "collectives", "timeit", '-n 1 -r 1 "import time; time.sleep(60)"', 2
    )
    preset = _preset(tmp_path, slow, _copy_collectives(tmp_path))
    rep = report.run_report(
        preset, report.plan(preset), tmp_path / "out", info=CPU_INFO, progress=False
    )
    first, second = rep["sections"]
    assert first["status"] == "timed out" and first["error"] == "timed out after 2 s"
    assert 2 <= first["wall_s"] < 20
    assert second["status"] == "ok"


def test_a_missing_module_is_not_available_rather_than_failed(tmp_path):
    missing = report.Section(
        "learning", "learning", "benchmarks.no_such_module", "--json {raw}", 60
    )
    preset = _preset(tmp_path, missing, _copy_collectives(tmp_path))
    planned = report.plan(preset)
    assert [p.available for p in planned] == [False, True]
    rep = report.run_report(preset, planned, tmp_path / "out", info=CPU_INFO, progress=False)
    assert rep["sections"][0]["status"] == "not available"
    assert rep["sections"][0]["error"] == "module benchmarks.no_such_module missing"
    assert (
        "not available (module benchmarks.no_such_module missing)"
        in (tmp_path / "out" / "report.md").read_text()
    )


def test_a_spent_budget_leaves_the_remaining_sections_not_run(tmp_path):
    preset = _preset(tmp_path, _copy_collectives(tmp_path), budget=0.0)
    rep = report.run_report(
        preset, report.plan(preset), tmp_path / "out", info=CPU_INFO, progress=False
    )
    assert rep["sections"][0]["status"] == "not run"
    assert "budget" in rep["sections"][0]["error"]


def test_an_unknown_section_name_is_a_clear_error_naming_the_closest():
    with pytest.raises(ValueError, match=r"no section 'scna'.*closest: scan"):
        report.plan(report.PRESETS["quick"], only=["scna"])


@pytest.mark.subprocess
def test_module_lookup_does_not_import_the_module():
    assert report.module_available("benchmarks.throughput")
    assert not report.module_available("benchmarks.no_such_module")
    code = (
        "import sys; from benchmarks.report import module_available; "
        "module_available('gigastep.env'); print('jax' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr


# ------------------------------------------------------------------------------------------
# The GPU preset, prepared on a CPU
# ------------------------------------------------------------------------------------------


def test_gpu_preset_on_a_machine_without_gpu_stops_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "probe", lambda scenarios: CPU_INFO)
    ran = []
    monkeypatch.setattr(report, "run_section", lambda *a, **k: ran.append(a))
    out = tmp_path / "gpu"
    assert report.main(["--preset", "gpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "'cpu'" in err and "Nothing was run" in err
    assert not ran and not out.exists()


def test_gpu_dry_run_lists_every_section_and_configuration(capsys):
    assert report.main(["--preset", "gpu", "--dry-run"]) == 0
    text = capsys.readouterr().out
    for name in ("gpu_tests", "throughput_vector", "throughput_rgb", "bridge", "scan"):
        assert f"\n{name}: " in text, name
    for batch in (4096, 65536, 1048576, 256, 2048, 16384):
        assert f"batch={batch}\n" in text, batch
    assert "--device cuda" in text and '-k "cuda or test_torch_bridge"' in text
    assert "Estimated total" in text


def test_gpu_preset_covers_the_issue_ranges_and_fits_four_minutes():
    gpu = report.PRESETS["gpu"]
    planned = report.plan(gpu)
    by_name = {p.section.name: p for p in planned}
    batches = {
        name: [int(m) for m in re.findall(r"batch=(\d+)", "\n".join(by_name[name].configurations))]
        for name in ("throughput_vector", "throughput_rgb")
    }
    assert min(batches["throughput_vector"]) == 2**12 and max(batches["throughput_vector"]) == 2**20
    assert min(batches["throughput_rgb"]) == 2**8 and max(batches["throughput_rgb"]) == 2**14
    limits = sum(s.timeout_s for s in gpu.sections)
    assert limits <= gpu.budget_s <= 240 - 15  # probe and rendering fit in what is left
    assert sum(p.estimate_s for p in planned) < limits


def test_quick_preset_estimate_fits_ten_minutes():
    quick = report.PRESETS["quick"]
    planned = report.plan(quick)
    assert quick.budget_s <= 600 - 30
    assert sum(p.estimate_s or p.section.timeout_s for p in planned if p.available) < 600


# ------------------------------------------------------------------------------------------
# benchmarks.compare
# ------------------------------------------------------------------------------------------


def _throughput_report(scale: float, path: Path, order=1) -> Path:
    rows = [
        {
            "scenario": "identical_5_vs_5_pobs_vec_maps_cont",
            "obs_type": "vector",
            "resolution": None,
            "batch": b,
            "policy": "none",
            "driver": "scan",
            "step_fn": "step",
            "devices": 1,
            "agent_steps_per_s": 10e6 * scale,
            "agent_steps_per_s_min": 9e6 * scale,
            "agent_steps_per_s_max": 11e6 * scale,
            "device": "cpu: Test CPU (2 cores)",
        }
        for b in (256, 1024)
    ][::order]
    spec = TABLES["throughput"]
    path.write_text(
        json.dumps(
            {
                "tables": {
                    "throughput": {
                        "key": list(spec.key),
                        "metric": spec.metric,
                        "higher_is_better": True,
                        "units": spec.units(),
                        "rows": rows,
                    }
                }
            }
        )
    )
    return path


def test_compare_flags_a_30_percent_drop_and_exits_non_zero(tmp_path, capsys):
    old = _throughput_report(1.0, tmp_path / "old.json")
    new = _throughput_report(0.7, tmp_path / "new.json")
    assert compare.main([str(old), str(new)]) == 1
    text = capsys.readouterr().out
    # NEW's fastest repeat 7.7 M < 0.95 x OLD's slowest 9 M = 8.55 M: a drop. As a threshold
    # on the medians' ratio: 0.95 x (9 / 10) / (11 / 10) = 0.777.
    assert text.count("| DROP |") == 2 and "| 0.700 | 0.777 |" in text
    assert "more than 5%" in text and "NEW max < 0.95 x OLD min" in text


def test_compare_passes_identical_files(tmp_path, capsys):
    old = _throughput_report(1.0, tmp_path / "old.json")
    assert compare.main([str(old), str(old)]) == 0
    assert capsys.readouterr().out.count("| within noise |") == 2


def test_compare_does_not_flag_a_drop_inside_the_spread_of_repeats(tmp_path):
    old = _throughput_report(1.0, tmp_path / "old.json")
    new = _throughput_report(0.9, tmp_path / "new.json")  # NEW max 9.9 M >= 8.55 M
    assert compare.main([str(old), str(new)]) == 0


def test_compare_matches_rows_by_configuration_not_by_order(tmp_path):
    old = _throughput_report(1.0, tmp_path / "old.json")
    new = _throughput_report(1.0, tmp_path / "new.json", order=-1)
    results = compare.compare(compare.load_tables(old), compare.load_tables(new))
    assert [r["ratio"] for r in results] == [1.0, 1.0]


def test_compare_treats_longer_times_as_slower(tmp_path):
    def scan_rows(ms):  # a benchmarks.scan JSON list: fwd_bwd_ms, lower is better
        return [
            {
                "impl": "jax",
                "part": "block",
                "device": "cpu",
                "T": 128,
                "batch": 1024,
                "state_dim": 64,
                "d_model": 64,
                "n_layers": 1,
                "fwd_bwd_ms": ms,
                "fwd_bwd_ms_min": 0.9 * ms,
                "fwd_bwd_ms_max": 1.1 * ms,
            }
        ]

    (tmp_path / "old.json").write_text(json.dumps(scan_rows(100.0)))
    (tmp_path / "new.json").write_text(json.dumps(scan_rows(100.0 / 0.7)))
    result = compare.compare(
        compare.load_tables(tmp_path / "old.json"), compare.load_tables(tmp_path / "new.json")
    )[0]
    assert result["verdict"] == "drop" and result["ratio"] == pytest.approx(0.7)


@pytest.mark.subprocess
def test_compare_reads_a_report_and_a_benchmark_json_of_the_same_run(tiny):
    results = compare.compare(
        compare.load_tables(tiny / "raw" / "throughput.json"),
        compare.load_tables(tiny / "report.json"),
    )
    throughput = [r for r in results if r["table"] == "throughput"]
    assert len(throughput) == 4 and all(r["ratio"] == 1.0 for r in throughput)


def test_compare_of_an_unreadable_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    assert compare.main([str(tmp_path / "nope.json"), str(tmp_path / "bad.json")]) == 2
    assert "nope.json does not exist" in capsys.readouterr().err
    old = _throughput_report(1.0, tmp_path / "old.json")
    assert compare.main([str(old), str(tmp_path / "bad.json")]) == 2
    assert "bad.json is not JSON" in capsys.readouterr().err
