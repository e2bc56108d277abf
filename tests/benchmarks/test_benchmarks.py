"""Smoke tests of the benchmark harness on a minuscule configuration (1 vs 1, batch 2, 3 steps).

They check that the harness runs end to end, that its rows carry the documented JSON schema
and that the rates are computed from the timed work; they say nothing about speed.
"""

from __future__ import annotations

import io
import json
import re

import jax
import pytest

from benchmarks import _common, scan, throughput
from tools.profile_step import hlo_census

ROW_KEYS = {
    "scenario": str,
    "obs_type": str,
    "batch": int,
    "n_agents": int,
    "steps": int,
    "repeats": int,
    "agent_steps_per_s": float,
    "env_steps_per_s": float,
    "compile_s": float,
    "peak_rss_mb": float,
    "spread": float,
    "scenario_hash": str,
    "timing": dict,
    "machine": dict,
}
TINY = throughput.Case("identical_1_vs_1", "pobs_vec", batch=2, steps=3, repeats=2)


@pytest.fixture(scope="module")
def env_row():
    rows = throughput.run_sweep([TINY], isolate=False, log=io.StringIO())
    assert len(rows) == 1 and "error" not in rows[0], rows
    return rows[0]


def test_row_has_the_documented_fields_and_types(env_row):
    for key, kind in ROW_KEYS.items():
        assert isinstance(env_row[key], kind), (key, env_row.get(key))
    assert env_row["batch"] == 2 and env_row["n_agents"] == 2 and env_row["steps"] == 3
    assert env_row["scenario"] == "identical_1_vs_1_pobs_vec_maps_cont"
    assert env_row["obs_type"] == "vector"
    # Which observation code ran is part of the record (a compiler makes it "native").
    from gigastep.game import _native

    want = "native" if _native._compiler() is not None and _native.enabled() else "jax"
    assert env_row["obs_kernel"] == want and env_row["native_build_s"] >= 0
    # and which platform forms (gigastep.game.xla.platform_form) ran
    assert env_row["form"] == ("cpu" if jax.default_backend() == "cpu" else "gpu")


def test_rates_count_steps_times_batch_times_agents_per_median_second(env_row):
    median = env_row["timing"]["median_s"]
    assert env_row["env_steps_per_s"] == pytest.approx(3 * 2 / median)
    assert env_row["agent_steps_per_s"] == pytest.approx(3 * 2 * 2 / median)
    assert env_row["agent_steps_per_s_min"] <= env_row["agent_steps_per_s"]
    assert env_row["agent_steps_per_s"] <= env_row["agent_steps_per_s_max"]


def test_machine_block_records_hardware_device_and_versions(env_row):
    machine = env_row["machine"]
    assert machine["hardware"]["cpu_cores"] >= 1
    assert machine["device"]["backend"] == jax.default_backend()
    assert machine["versions"]["jax"] == jax.__version__
    assert "xla_flags" in machine


def test_rows_round_trip_through_json(env_row, tmp_path):
    path = tmp_path / "sub" / "rows.json"
    _common.write_json(path, [env_row])
    assert json.loads(path.read_text())[0]["scenario"] == env_row["scenario"]


def test_tables_show_every_row_with_units_in_headers(env_row):
    md = throughput.render([env_row], "markdown")
    assert "agent-steps/s (median)" in md and "| env-steps/s |" in md and "compile [s]" in md
    assert md.count("\n") == 2  # header, rule, one row
    tex = throughput.render([env_row], "latex")
    assert r"\begin{tabular}" in tex and r"identical\_1\_vs\_1" in tex


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (6e6, "6.00 M"),
        (8.07e6, "8.07 M"),
        (3300.0, "3.30 k"),
        (999.7, "1.00 k"),
        (131072, "131 k"),
        (0.0412, "0.0412"),
        (12, "12"),
        (-2500.0, "-2.50 k"),
        (None, "–"),
    ],
)
def test_numbers_keep_three_significant_digits_and_never_an_exponent(value, text):
    assert _common.format_number(value) == text


@pytest.fixture(scope="module")
def loop_row():
    case = throughput.dataclasses.replace(TINY, driver="loop")
    rows = throughput.run_sweep([case], isolate=False, log=io.StringIO())
    assert "error" not in rows[0], rows
    return rows[0]


def test_python_loop_driver_counts_like_the_scan(loop_row):
    assert loop_row["driver"] == "loop" and loop_row["steps"] == 3
    median = loop_row["timing"]["median_s"]
    assert loop_row["agent_steps_per_s"] == pytest.approx(3 * 2 * 2 / median)
    assert len(loop_row["timing"]["times_s"]) == 2


def test_drivers_multiply_the_cases_and_loop_refuses_several_devices():
    opts = throughput.Options(batch=[8], driver=["scan", "loop"])
    assert [c.driver for c in throughput.cases_from_options(opts)] == ["scan", "loop"]
    with pytest.raises(ValueError, match="--driver loop runs the step on one device"):
        throughput.cases_from_options(throughput.Options(driver=["loop"], devices=2))
    with pytest.raises(ValueError, match="unknown --driver 'jit'"):
        throughput.cases_from_options(throughput.Options(driver=["jit"]))


def test_a_case_whose_memory_estimate_does_not_fit_is_skipped_with_the_reason():
    case = throughput.dataclasses.replace(TINY, batch=2**40)
    row = throughput.run_case(case)
    assert "timing" not in row and row["batch"] == 2**40
    assert re.fullmatch(
        r"estimated peak [\d.]+ GiB > 80% of the [\d.]+ GiB available", row["skipped"]
    )


def test_the_sweep_reports_rows_as_they_finish():
    seen = []
    cases = [throughput.Case("no_such_scenario", batch=2), throughput.Case("nor_this", batch=2)]
    rows = throughput.run_sweep(
        cases, isolate=False, log=io.StringIO(), on_row=lambda rows: seen.append(len(rows))
    )
    assert seen == [1, 2]
    assert "no_such_scenario" in rows[0]["error"] and "nor_this" in rows[1]["error"]


def test_scan_goals_are_judged_only_at_the_size_they_are_defined_at():
    quick = {
        "impl": "torch_parallel",
        "part": "block",
        "T": 128,
        "batch": 256,
        "state_dim": 64,
        "speedup_vs_sequential": 2.2,
        "time_vs_jax": 0.5,
    }
    lines = scan.goal_lines([quick])
    assert len(lines) == 1 and "MISSED" not in lines[0]
    assert "defined at T = 128, batch = 1024" in lines[0]
    at_size = {**quick, "batch": 1024}
    lines = scan.goal_lines([at_size])
    assert "  P=64: speed-up vs sequential >= 5: 2.20 (MISSED)" in lines
    assert "  P=64: time / JAX <= 1.5: 0.50 (met)" in lines


def test_plot_without_its_input_says_how_to_make_it(tmp_path, capsys):
    from benchmarks import plot

    missing = tmp_path / "results" / "throughput.json"
    assert plot.main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing} does not exist" in err
    assert f"python -m benchmarks.throughput --paper --json {missing}" in err


@pytest.mark.parametrize(
    "name",
    [
        "benchmarks.throughput",
        "benchmarks.bridge",
        "benchmarks.scan",
        "benchmarks.plot",
        "benchmarks.report",
        "benchmarks.compare",
        "tools.profile_step",
    ],
)
def test_every_benchmark_help_names_python_m_as_its_program(name, capsys):
    import importlib

    module = importlib.import_module(name)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m {name}")


@pytest.mark.subprocess
def test_observation_write_baseline_runs_in_a_fresh_process():
    case = throughput.Case(
        "identical_1_vs_1", "pobs_vec", batch=2, steps=3, repeats=1, kind="write_vector"
    )
    row = _common.run_worker(
        "benchmarks.throughput", throughput.dataclasses.asdict(case), timeout=120
    )
    assert "error" not in row, row
    assert row["scenario"].startswith("write_vector:") and row["agent_steps_per_s"] > 0
    assert row["peak_rss_mb"] > 0


def test_quick_and_paper_presets_cover_the_issue_targets():
    opts = throughput.Options(quick=True)
    quick = {(c.scenario, c.obs, c.batch) for c in throughput.cases_from_options(opts)}
    assert ("identical_5_vs_5", "pobs_vec", 1024) in quick
    assert ("identical_20_vs_20", "pobs_vec", 256) in quick
    assert ("identical_5_vs_5", "fobs_rgb", 64) in quick
    paper = throughput.cases_from_options(throughput.Options(paper=True))
    assert any(c.batch == 100_000 and c.obs == "pobs_vec" for c in paper)
    assert max(c.batch for c in paper) == 131072


def test_every_sweep_times_live_play_unless_told_to_step_without_resets():
    # Random play finishes most games within 100 steps; the plain step would time those.
    for opts in (
        throughput.Options(),
        throughput.Options(quick=True),
        throughput.Options(paper=True),
    ):
        assert {c.step_fn for c in throughput.cases_from_options(opts)} == {"autoreset"}
    plain = throughput.cases_from_options(throughput.Options(step_fn="step"))
    assert {c.step_fn for c in plain} == {"step"}


def test_command_line_options_parse_lists_and_flags():
    import argparse

    parser = argparse.ArgumentParser()
    _common.add_options(parser, throughput.Options)
    opts = _common.options_from_args(
        throughput.Options,
        parser.parse_args(["--batch", "8", "16", "--no-isolate", "--policy", "mlp"]),
    )
    assert opts.batch == [8, 16] and opts.isolate is False and opts.policy == "mlp"


def test_timing_statistics_are_those_of_the_recorded_times():
    t = _common.Timing((3.0, 1.0, 2.0, 10.0))
    assert t.median == 2.5 and t.min == 1.0 and t.max == 10.0
    assert t.spread == pytest.approx(9.0 / 2.5)


def test_a_trainers_throughput_is_its_steps_per_second_of_training_and_of_rollout():
    # 1200 env-steps of 4 games of 10 agents: training 6 s -> 200/s, rollouts 2 s -> 600/s
    t = _common.training_throughput(1200, 6.0, 2.0, n_agents=10, games=4)
    assert t["training"] == {
        "env_steps_per_s": 200.0,
        "agent_steps_per_s": 2000.0,
        "env_steps": 1200,
        "seconds": 6.0,
        "games": 4,
    }
    assert t["rollout"]["env_steps_per_s"] == 600.0 and t["rollout"]["seconds"] == 2.0
    # no measured time: no rate (never a division by zero)
    none = _common.rate(0, 0.0, 10, 4)
    assert none["env_steps_per_s"] is None and none["agent_steps_per_s"] is None


def test_versions_name_the_asked_distributions_and_none_for_a_missing_one():
    v = _common.versions("numpy", "no-such-distribution-gigastep")
    assert v["numpy"] and v["no-such-distribution-gigastep"] is None
    assert {"python", "jax", "jaxlib", "gigastep"} <= set(v)


def test_a_vector_player_refuses_a_game_it_was_not_trained_for():
    import gigastep

    vec = gigastep.make("identical_2_vs_2_fobs_vec_void_disc").config
    _common.check_vector_player("p", vec.vector_size, vec)  # its own game: no error
    with pytest.raises(ValueError, match="p was trained on observations of length 3; this game"):
        _common.check_vector_player("p", 3, vec)
    cont = gigastep.make("identical_2_vs_2_fobs_vec_void_cont").config
    with pytest.raises(
        ValueError, match="discrete actions; this game has .*discrete_actions=False"
    ):
        _common.check_vector_player("p", cont.vector_size, cont)


def test_hlo_census_counts_opcodes():
    text = """ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %s = (f32[4]{0}, s32[4]{0}) sort(%p, %p), dimensions={0}
  ROOT %g = f32[4]{0} gather(%p, %p), offset_dims={}
}"""
    census = hlo_census(text)
    assert census["watched"]["sort"] == 1 and census["watched"]["gather"] == 1
    assert census["f64_instructions"] == 0


def test_plot_writes_an_image_with_one_line_per_configuration(tmp_path):
    from PIL import Image

    from benchmarks.plot import plot_throughput

    rows = [
        {"scenario": "a", "obs_type": "vector", "batch": b, "agent_steps_per_s": 1e6 * b}
        for b in (1, 8, 64)
    ] + [{"scenario": "b", "obs_type": "rgb", "batch": 4, "agent_steps_per_s": 5.0}]
    out = plot_throughput(rows, tmp_path / "plot.png")
    with Image.open(out) as image:
        assert image.size[0] > 100 and image.size[1] > 100


def test_plot_refuses_input_without_throughput_rows(tmp_path):
    import pytest

    from benchmarks.plot import plot_throughput

    with pytest.raises(ValueError, match="no throughput rows"):
        plot_throughput([{"impl": "jax", "T": 32}], tmp_path / "plot.png")


@pytest.mark.slow
def test_devices_shard_the_batch_in_a_worker_with_that_many_host_devices():
    case = throughput.dataclasses.replace(TINY, devices=2)
    rows = throughput.run_sweep([case], isolate=True, timeout=300, log=io.StringIO())
    assert "error" not in rows[0], rows[0]
    assert rows[0]["devices"] == 2 and rows[0]["batch"] == 2
    assert rows[0]["machine"]["device"]["backend"] == jax.default_backend()


@pytest.mark.slow
def test_more_devices_than_the_process_has_is_a_clear_error_before_compiling():
    case = throughput.dataclasses.replace(TINY, devices=jax.device_count() + 1)
    with pytest.raises(ValueError, match="xla_force_host_platform_device_count"):
        throughput.run_case(case)


def test_batches_that_do_not_split_over_the_devices_run_on_one():
    opts = throughput.Options(batch=[3, 4], devices=2)
    assert [(c.batch, c.devices) for c in throughput.cases_from_options(opts)] == [(3, 1), (4, 2)]
    with pytest.raises(ValueError, match="--devices must be >= 1, got 0"):
        throughput.cases_from_options(throughput.Options(devices=0))
