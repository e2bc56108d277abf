"""benchmarks.against_2023: the harness that times this library and the 2023 one alike."""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path

import pytest

from benchmarks import against_2023

# A stand-in for the 2023 library with its layout and its two needs on today's jax: it calls
# `jax.tree_map` and imports `type_enforced` (neither is available here).
_FAKE_2023 = """
import os

import jax
import jax.numpy as jnp
import type_enforced


def _log(var, line):
    with open(os.environ[var], "a") as log:
        log.write(line + "\\n")


class _Env:
    n_agents = 3
    discrete_actions = False

    @type_enforced.Enforcer
    def v_reset(self, keys):
        if os.environ.get("FAKE_RESET_LOG"):  # one line per reset, for the test of --fresh
            _log("FAKE_RESET_LOG", "reset")
        b = keys.shape[0]
        return jnp.zeros((b, 3, 2)), {"t": jnp.zeros(b)}

    def v_step(self, states, actions, keys):
        if os.environ.get("FAKE_STEP_LOG"):  # one line per step run, for the test of --warm
            jax.debug.callback(lambda: _log("FAKE_STEP_LOG", "step"))
        states = jax.tree_map(lambda t: t + 1, states)
        b = keys.shape[0]
        return actions[..., :2], states, jnp.zeros((b, 3)), jnp.zeros((b, 3)), jnp.zeros(b)


def make_scenario(name):
    if name == "identical_2_vs_2":  # stands in for a library that hangs
        import time

        time.sleep(60)
    assert name == "identical_5_vs_5_pobs_vec_maps_cont", name
    return _Env()
"""


def _fake_2023(tmp_path: Path) -> Path:
    root = tmp_path / "gigastep-2023"
    (root / "gigastep").mkdir(parents=True)
    (root / "gigastep" / "__init__.py").write_text(textwrap.dedent(_FAKE_2023))
    (root / "gigastep" / "gigastep_env.py").write_text("")
    return root


def test_the_reference_must_be_given_and_be_the_2023_library(tmp_path):
    with pytest.raises(ValueError, match="--reference is required.*mlech26l/gigastep"):
        against_2023.check_reference("")
    with pytest.raises(ValueError, match=f"--reference {tmp_path}: expected .*gigastep_env.py"):
        against_2023.check_reference(str(tmp_path))
    assert against_2023.check_reference(str(_fake_2023(tmp_path))) == tmp_path / "gigastep-2023"


def test_a_wrong_scenario_or_reference_stops_before_any_process(tmp_path, monkeypatch, capsys):
    def no_process(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(against_2023, "run_round", no_process)
    ref = str(_fake_2023(tmp_path))
    with pytest.raises(SystemExit):
        against_2023.main(["--reference", ref, "--scenario", "identical_5_vs_5_pobs_vec_maps_cnt"])
    assert "identical_5_vs_5_pobs_vec_maps_cont" in capsys.readouterr().err  # the closest name
    with pytest.raises(SystemExit):
        against_2023.main(["--reference", str(tmp_path / "nowhere")])
    assert "nowhere: expected the 2023 library's folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        against_2023.main(["--reference", ref, "--batch", "0"])
    assert "--batch, --steps, --repeats and --rounds must be at least 1" in capsys.readouterr().err


@pytest.mark.subprocess
def test_the_2023_side_imports_the_reference_and_is_timed_per_agent_step(tmp_path):
    ref = _fake_2023(tmp_path)
    options = against_2023.Options(reference=str(ref), batch=4, steps=3, repeats=3)
    (row,) = against_2023.run_round(["2023"], options, ref)
    assert "error" not in row, row.get("error")
    assert Path(row["gigastep_file"]) == ref / "gigastep" / "__init__.py"
    assert row["label"] == "2023" and row["n_agents"] == 3 and len(row["wall_s"]) == 3
    # 3 steps x 4 games x 3 agents per call, over the median call
    assert row["agent_steps_per_s"] == pytest.approx(36 / statistics.median(row["wall_s"]))
    assert row["env_steps_per_s"] == pytest.approx(12 / statistics.median(row["wall_s"]))
    assert row["agent_steps_per_s_min"] <= row["agent_steps_per_s"] <= row["agent_steps_per_s_max"]


def _logged_lines(tmp_path, monkeypatch, log_var: str, **options) -> int:
    """Lines the fake 2023 library writes to the file named by `log_var` in one round of 3
    timed calls of 2 steps (and one compiling call) with these options."""
    ref = _fake_2023(tmp_path)
    log = tmp_path / "fake.log"
    log.write_text("")
    monkeypatch.setenv(log_var, str(log))  # the workers inherit the environment
    options = against_2023.Options(reference=str(ref), batch=4, steps=2, repeats=3, **options)
    (row,) = against_2023.run_round(["2023"], options, ref)
    assert "error" not in row, row.get("error")
    return len(log.read_text().splitlines())


@pytest.mark.subprocess
@pytest.mark.parametrize(("fresh", "resets"), [(True, 1 + 3), (False, 1)])
def test_fresh_games_restart_before_every_timed_call_and_only_then(
    tmp_path, monkeypatch, fresh, resets
):
    """With `fresh` (the default) every timed call plays games just reset (the first reset,
    then one per call); without it the games run on from the first reset, into the steps
    after they ended."""
    assert against_2023.Options().fresh
    assert _logged_lines(tmp_path, monkeypatch, "FAKE_RESET_LOG", fresh=fresh) == resets


@pytest.mark.subprocess
@pytest.mark.parametrize(("warm", "steps"), [(True, 2 * (1 + 2 * 3)), (False, 2 * (1 + 3))])
def test_warm_runs_the_rollout_once_untimed_before_every_timed_call(
    tmp_path, monkeypatch, warm, steps
):
    """With `warm` (the default) each timed call of S steps follows an untimed one, so a
    process runs S steps for the compiling call and 2 S per timed call; without it S."""
    assert against_2023.Options().warm
    assert _logged_lines(tmp_path, monkeypatch, "FAKE_STEP_LOG", warm=warm) == steps


@pytest.mark.subprocess
def test_the_jax_side_runs_this_library_without_the_native_kernel(tmp_path):
    options = against_2023.Options(scenario="identical_2_vs_2", batch=2, steps=2, repeats=1)
    (row,) = against_2023.run_round(["jax"], options, None)
    assert "error" not in row, row.get("error")
    root = Path(against_2023.__file__).resolve().parent.parent
    assert Path(row["gigastep_file"]) == root / "gigastep" / "__init__.py"
    assert row["native"] == "0" and row["n_agents"] == 4


@pytest.mark.subprocess
def test_a_side_that_fails_or_hangs_gives_a_row_with_its_error(tmp_path):
    ref = _fake_2023(tmp_path)
    options = against_2023.Options(reference=str(ref), scenario="identical_1_vs_1", batch=2)
    (row,) = against_2023.run_round(["2023"], options, ref)
    assert row["label"] == "2023" and "AssertionError: identical_1_vs_1" in row["error"]
    options = against_2023.Options(reference=str(ref), scenario="identical_2_vs_2", timeout=3)
    (row,) = against_2023.run_round(["2023"], options, ref)
    assert row == {"label": "2023", "error": "timed out after 3 s"}


def test_each_side_is_divided_by_the_2023_library_of_its_own_round():
    rows = [
        {"round": 1, "label": "native", "agent_steps_per_s": 6.0},
        {"round": 1, "label": "jax", "agent_steps_per_s": 3.0},
        {"round": 1, "label": "2023", "agent_steps_per_s": 1.5},
        {"round": 2, "label": "native", "agent_steps_per_s": 4.0},
        {"round": 2, "label": "2023", "agent_steps_per_s": 2.0},
        {"round": 3, "label": "native", "agent_steps_per_s": 4.0},
        {"round": 3, "label": "2023", "error": "timed out after 900 s"},
    ]
    assert against_2023.ratios(rows) == {1: {"native": 4.0, "jax": 2.0}, 2: {"native": 2.0}}
    text = against_2023.render(
        [{**r, "agent_steps_per_s_min": 1.0, "agent_steps_per_s_max": 9.0} for r in rows]
    )
    assert "round 1: native / 2023 = 4.00×" in text and "2023 (failed)" in text
    assert "native / 2023 over rounds: median 3.00×, 2.00–4.00×" in text
