"""The `gigastep` command (gigastep.cli.main): every subcommand, help and bad arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gigastep.cli import main
from gigastep.scenarios import base_scenarios, list_scenarios, make_config, scenario_hash


def test_list_prints_every_base_with_its_teams_and_the_count(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for base in base_scenarios():
        assert base in out
    row = next(line for line in out.splitlines() if line.startswith("special_5_vs_1 "))
    assert row.split()[1] == "6"  # agents
    assert "more_health, more_range, faster, default x2" in row and "super" in row
    assert "18 base scenarios, 432 named variants" in out


def test_list_all_prints_the_432_names_in_order(capsys):
    assert main(["list", "--all"]) == 0
    assert capsys.readouterr().out.splitlines() == list_scenarios()


def test_info_describes_teams_types_maps_spaces_version_and_hash(capsys):
    assert main(["info", "identical_5_vs_1"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(maxsplit=1)[0]: line for line in out.splitlines() if line.strip()}
    assert lines["version"].split() == ["version", "1"]
    assert lines["hash"].split() == ["hash", scenario_hash(make_config("identical_5_vs_1"))]
    assert "6 (team 0: 5, team 1: 1)" in lines["agents"]
    assert "team 0        default x5" in out and "team 1        super" in out
    assert lines["maps"].split()[1] == "all" and "8 maps" in lines["maps"]
    assert "(84, 84, 3)" in lines["observation"] and "uint8" in lines["observation"]
    assert "continuous" in lines["action"] and "(3,)" in lines["action"]
    agent5 = next(line for line in out.splitlines() if line.startswith("5 "))
    assert agent5.split() == ["5", "1", "super", "6", "3", "1", "1", "0.8", "0"]


def test_info_shows_the_vector_length_and_discrete_actions(capsys):
    assert main(["info", "identical_5_vs_1_fobs_vec_void_disc"]) == 0
    out = capsys.readouterr().out
    assert "(54,)" in out  # 9 x 6 agents, no boxes
    assert "discrete" in out and "27" in out
    assert "stochastic_obs=False" in out


def test_info_reads_a_scenario_file(tmp_path, capsys):
    path = tmp_path / "duel.toml"
    path.write_text(
        textwrap.dedent("""
        [scenarios.duel]
        version = 3
        team0 = { faster = 1 }
        team1 = { super = 1 }
        map = "center_block"
    """)
    )
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "scenario      duel" in out and "version       3" in out
    assert "center_block (1 map:" in out


def test_info_describes_a_procedural_map(tmp_path, capsys):
    path = tmp_path / "duel.toml"
    path.write_text(
        '[scenarios.duel]\nteam0 = ["default"]\nteam1 = ["default"]\nmap = "procgen_dense"\n'
        '[scenarios.duel.env]\nobs_type = "vector"\n'
    )
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    # envs/maps.toml: 8 to 14 boxes in 16 slots; vector length 9 x 2 agents + 4 x 16 slots
    assert "procgen_dense (procedural: 8-14 boxes drawn at each reset in 16 slots" in out
    assert "(82,)" in out


def test_an_unknown_name_exits_2_with_a_suggestion_and_no_traceback(capsys):
    assert main(["info", "identical_5_vs_4"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unknown scenario 'identical_5_vs_4'" in captured.err
    assert "identical_5_vs_5" in captured.err
    assert "Traceback" not in captured.err


def test_a_missing_command_exits_2(capsys):
    assert main([]) == 2
    assert "usage: gigastep" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# Every subcommand end to end, as a separate process in a temporary folder
# ------------------------------------------------------------------------------------------

RGB = "identical_2_vs_2_fobs_rgb_void_cont"
VEC = "identical_2_vs_2_fobs_vec_void_disc"
SMALL = ["--set", "resolution_x=24", "--set", "resolution_y=24"]
SHORT = ["--set", "max_episode_length=60"]


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory):
    """One JAX persistent compilation cache for every command run by these tests: each
    process still runs its command end to end, but compiles a function only once."""
    return tmp_path_factory.mktemp("jax-cache")


def _gigastep(*args, cwd, env=None, cache=None):
    run_env = dict(os.environ, SDL_VIDEODRIVER="dummy", **(env or {}))
    if cache is not None:
        run_env.update(
            JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0"
        )
    return subprocess.run(
        [sys.executable, "-m", "gigastep.cli", *map(str, args)],
        cwd=cwd,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.subprocess
def test_version_list_and_info_run_as_commands(tmp_path):
    script = Path(sys.executable).with_name("gigastep")
    if script.exists():  # the console script of the installed package
        out = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=300)
        assert out.stdout.strip().startswith("gigastep ")
    assert "18 base scenarios" in _ok(_gigastep("list", cwd=tmp_path))
    assert "agents        4 (team 0: 2, team 1: 2)" in _ok(_gigastep("info", VEC, cwd=tmp_path))


def _gif_frames(path):
    from PIL import Image

    with Image.open(path) as gif:
        frames = []
        for i in range(gif.n_frames):
            gif.seek(i)
            frames.append(np.asarray(gif.convert("RGB")))
    return frames


@pytest.mark.subprocess
def test_render_saves_a_replay_whose_video_has_the_same_frames(tmp_path, compile_cache):
    out = _ok(
        _gigastep(
            "render",
            RGB,
            "--policy",
            "pursuit",
            "--opponent",
            "random",
            "--out",
            "game.gif",
            "--steps",
            12,
            "--seed",
            4,
            "--scale",
            2,
            "--save-replay",
            "game.replay",
            *SMALL,
            cwd=tmp_path,
            cache=compile_cache,
        )
    )
    assert "wrote game.gif: 13 frames" in out and "wrote game.replay" in out
    out = _ok(
        _gigastep("replay", "game.replay", "--out", "again.gif", cwd=tmp_path, cache=compile_cache)
    )
    assert "re-simulated exactly" in out
    first, again = _gif_frames(tmp_path / "game.gif"), _gif_frames(tmp_path / "again.gif")
    assert len(first) == len(again) == 13
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


@pytest.mark.subprocess
def test_eval_writes_wins_draws_losses_and_games_as_json(tmp_path, compile_cache):
    out = _ok(
        _gigastep(
            "eval",
            "pursuit",
            "random",
            "--games",
            8,
            "--scenario",
            VEC,
            *SHORT,
            "--json",
            "result.json",
            cwd=tmp_path,
            cache=compile_cache,
        )
    )
    assert "pursuit vs random" in out and "win rate" in out
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["games"] == 8
    assert result["wins"] + result["draws"] + result["losses"] == 8
    assert result["player_a"] == "pursuit" and result["scenario"] == VEC


@pytest.mark.subprocess
def test_league_writes_the_matrix_ratings_json_and_heat_map(tmp_path, compile_cache):
    out = _ok(
        _gigastep(
            "league",
            "random",
            "circle",
            "pursuit",
            "--games",
            8,
            "--scenario",
            VEC,
            *SHORT,
            "--out",
            "league",
            cwd=tmp_path,
            cache=compile_cache,
        )
    )
    assert "rating" in out
    files = sorted(p.name for p in (tmp_path / "league").iterdir())
    assert files == ["heatmap.png", "league.json", "matrix.csv", "ratings.csv", "results.csv"]


@pytest.mark.subprocess
def test_play_and_view_run_headless_for_a_few_frames(tmp_path, compile_cache):
    run = dict(cwd=tmp_path, cache=compile_cache)
    out = _ok(
        _gigastep(
            "play",
            VEC,
            *SHORT,
            "--agent",
            2,
            "--max-frames",
            3,
            "--fps",
            100,
            "--save-replay",
            "mine.replay",
            **run,
        )
    )
    assert "3 frames, 3 steps played" in out
    out = _ok(_gigastep("view", "mine.replay", "--max-frames", 5, "--fps", 100, **run))
    assert "5 frames, 3 steps shown" in out  # the replay holds 3 steps
    out = _ok(_gigastep("view", VEC, *SHORT, "--max-frames", 2, "--fps", 100, **run))
    assert "2 frames, 2 steps shown" in out


def _fake_package(root: Path, package: str, module: str | None) -> None:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    if module:
        (root / package / f"{module}.py").write_text(
            "import sys\nprint('forwarded', sys.argv[1:])\nsys.exit(3)\n"
        )


@pytest.mark.subprocess
def test_bench_and_train_forward_their_arguments_and_exit_status(tmp_path):
    _fake_package(tmp_path / "fake", "benchmarks", "report")
    _fake_package(tmp_path / "fake", "baselines", "ppo")
    env = {"PYTHONPATH": str(tmp_path / "fake")}
    bench = _gigastep("bench", "--quick", "--json", "x.json", cwd=tmp_path, env=env)
    assert bench.returncode == 3 and "forwarded ['--quick', '--json', 'x.json']" in bench.stdout
    train = _gigastep("train", "--help", cwd=tmp_path, env=env)
    assert train.returncode == 3 and "forwarded ['--help']" in train.stdout
    assert "forwards its arguments to `python -m baselines.ppo`" in train.stdout


@pytest.mark.subprocess
def test_a_missing_forward_target_is_named_with_a_non_zero_exit(tmp_path):
    _fake_package(tmp_path / "fake", "baselines", None)
    result = _gigastep(
        "train", "--steps", 5, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "fake")}
    )
    assert result.returncode == 2
    assert (
        "runs `python -m gigastep_baselines.ppo` or `python -m baselines.ppo`, but neither"
        in result.stderr
    )
    assert "the package 'baselines'" in result.stderr and "has no module 'ppo'" in result.stderr
    assert "Traceback" not in result.stderr


def _hide(monkeypatch, *packages: str) -> None:
    """Make top-level packages unimportable in this process for the test."""

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in packages:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(sys, "meta_path", [Block(), *sys.meta_path])
    for name in list(sys.modules):
        if name.split(".")[0] in packages:
            monkeypatch.delitem(sys.modules, name)


def test_bench_outside_a_checkout_says_it_needs_one(monkeypatch, capsys):
    # an installed wheel has no benchmarks/: one line that says where they are, exit status 2
    _hide(monkeypatch, "benchmarks")
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gigastep: error: `gigastep bench` runs `python -m benchmarks.report`")
    assert "no package 'benchmarks' is installed" in err
    assert "part of the Gigastep repository, not of the installed package" in err
    assert "pip install -e '.[bench]'" in err and len(err.strip().splitlines()) == 1


def test_train_without_the_baseline_names_both_of_its_names(monkeypatch, capsys):
    _hide(monkeypatch, "gigastep_baselines", "baselines")
    assert main(["train", "--updates", "1"]) == 2
    err = capsys.readouterr().err
    assert "`python -m gigastep_baselines.ppo` or `python -m baselines.ppo`" in err
    assert "no package 'gigastep_baselines' is installed" in err
    assert "no package 'baselines' is installed" in err
    assert "pip install 'gigastep[train]'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.subprocess
def test_a_bad_argument_exits_2_with_one_line_and_no_traceback(tmp_path):
    result = _gigastep("eval", "pursuitt", "random", "--games", 4, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert "unknown player 'pursuitt'" in result.stderr and "'pursuit'" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------
# Help and bad arguments (in process: they fail before any compute)
# ------------------------------------------------------------------------------------------

COMMANDS = ("list", "info", "render", "replay", "eval", "league", "play", "view")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(command, capsys):
    assert main([command, "--help"]) == 0
    assert f"usage: gigastep {command}" in capsys.readouterr().out


def test_version_prints_the_package_version(capsys):
    from gigastep import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"gigastep {__version__}"


BAD = [
    (["rendr", "x"], "closest: render"),
    (["render", "identical_5_vs_4", "--out", "g.gif"], "`gigastep list --all` lists all 432"),
    (["render", VEC, "--out", "g.avi"], "ends in .gif or .mp4"),
    (["render", VEC, "--out", "no/such/folder/g.gif"], "does not exist"),
    (
        ["render", VEC, "--out", "g.gif", "--set", "max_episode_lenght=9"],
        "unknown EnvConfig field 'max_episode_lenght' (closest: 'max_episode_length')",
    ),
    (["render", VEC, "--out", "g.gif", "--set", "oops"], "--set takes FIELD=VALUE"),
    (["render", VEC, "--out", "g.gif", "--steps", "0"], "expected a positive integer, got '0'"),
    (["eval", "pursuit", "nobody", "--games", "4"], "unknown player 'nobody'"),
    (["eval", "pursuit", "random", "--scenario", "identical_2_vs_3"], "closest: identical_2_vs_2"),
    (["eval", "pursuit", "random", "--a-team", "2"], "invalid choice: 2"),
    (["league", "pursuit", "--out", "x"], "at least 2 players"),
    (["replay", "missing.replay", "--out", "g.gif"], "no replay file 'missing.replay'"),
    (["play", VEC, "--agent", "9"], "this game has agents 0..3"),
    (["view", "nowhere_5_vs_5"], "`gigastep list --all`"),
    (["info", "missing.toml"], "no scenario file 'missing.toml'"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(a[:2]) for a, _ in BAD])
def test_bad_arguments_name_the_value_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_eval_plays_the_game_a_checkpoint_was_trained_on():
    from types import SimpleNamespace

    from gigastep.cli import _match_scenario

    trained = SimpleNamespace(name="ppo", scenario="identical_2_vs_2_fobs_vec_void_cont")
    assert _match_scenario(SimpleNamespace(scenario=None), [trained]) == trained.scenario
    assert _match_scenario(SimpleNamespace(scenario=VEC), [trained]) == VEC


CORE_ONLY = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "scipy", "matplotlib", "tqdm", "imageio", "pygame"}:
            raise ImportError(f"{name} is an optional extra")

sys.meta_path.insert(0, Block())
from gigastep.eval.matches import evaluate
from gigastep.viz.render import recording_frames, save_gif
from gigastep.viz.replay import record_game

r = evaluate("pursuit", "random", "VEC", 8, max_episode_length=60)
rec = record_game("VEC", ("pursuit", "random"), steps=5, overrides={"max_episode_length": 60})
save_gif(recording_frames(rec), "core.gif")
rec.replay().save("core.replay")
print(r.games, len(rec.actions))
"""


@pytest.mark.subprocess
def test_scripted_evaluation_videos_and_replays_need_only_the_core(tmp_path, compile_cache):
    env = dict(
        os.environ,
        JAX_COMPILATION_CACHE_DIR=str(compile_cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    result = subprocess.run(
        [sys.executable, "-c", CORE_ONLY.replace("VEC", VEC)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["8", "5"]
    assert (tmp_path / "core.gif").exists() and (tmp_path / "core.replay").exists()
