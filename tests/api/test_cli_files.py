"""The command's promise for files: one line, exit status 2, no traceback, before any compute.

Every bad input file (a truncated or edited replay, missing metadata, absurd render options)
and every bad output path (a read-only or full folder, a folder where a file is asked for, a
file where a folder is asked for, a device, a video too large to hold) is walked through
`gigastep.cli.main`. Playing a game is made to fail the test, so each error is known to come
before any compute; nothing may be written.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import os
import shutil
import subprocess
from collections import namedtuple

import numpy as np
import pytest

from gigastep import cli
from gigastep.viz.replay import Replay, _digest, record_game

VEC = "identical_2_vs_2_fobs_vec_void_disc"


@pytest.fixture(scope="module")
def replay_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "game.replay"
    record_game(VEC, ("pursuit", "random"), steps=5).replay().save(path)
    return path


def _edited(src, dst, forge=True, meta=None, **arrays_changed):
    with np.load(src, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    fields = json.loads(str(arrays["meta"]))
    for key, value in (meta or {}).items():
        if value is None:
            del fields[key]
        else:
            fields[key] = value
    arrays["meta"] = np.asarray(json.dumps(fields))
    arrays.update(arrays_changed)
    if forge:
        arrays["digest"] = np.asarray(_digest(arrays))
    with open(dst, "wb") as f:
        np.savez_compressed(f, **arrays)
    return dst


@pytest.fixture
def read_only(tmp_path):
    """A folder in which no file can be created, even by root (chattr +i) where needed."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    os.chmod(folder, 0o555)
    immutable = False
    if _writable(folder):  # root ignores the mode
        if shutil.which("chattr") is None:
            pytest.skip("root, and no chattr to make a folder read-only")
        result = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
        immutable = result.returncode == 0 and not _writable(folder)
        if not immutable:
            pytest.skip("root, and this file system has no immutable folders")
    yield folder
    if immutable:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    os.chmod(folder, 0o755)


def _writable(folder) -> bool:
    try:
        (folder / "probe").touch()
    except OSError:
        return False
    (folder / "probe").unlink()
    return True


Case = namedtuple("Case", "name argv message")


def _cases(tmp, replay, read_only):
    """(name, argv, message) for every file problem; paths are made here."""
    (tmp / "folder.gif").mkdir()
    (tmp / "folder.json").mkdir()
    (tmp / "folder.replay").mkdir()
    (tmp / "a-file").write_text("not a folder")
    (tmp / "league").mkdir()
    (tmp / "league" / "matrix.csv").mkdir()
    os.mkfifo(tmp / "pipe.gif")
    data = replay.read_bytes()
    (tmp / "truncated.replay").write_bytes(data[: len(data) // 2])
    (tmp / "empty.replay").write_bytes(b"")
    (tmp / "garbage.pt").write_bytes(b"garbage")
    (tmp / "empty.pt").write_bytes(b"")
    _edited(replay, tmp / "no-seed.replay", meta={"seed": None})
    _edited(replay, tmp / "no-players.replay", meta={"players": None, "agents": None})
    _edited(replay, tmp / "edited.replay", forge=False, seed=np.asarray(1))
    actions = Replay.load(replay).actions.copy()
    actions[0, 0] = (actions[0, 0] + 1) % 27
    _edited(replay, tmp / "edited-action.replay", forge=False, actions=actions)
    _edited(replay, tmp / "scale.replay", meta={"render_options": {"scale": "big"}})
    _edited(replay, tmp / "fps.replay", meta={"render_options": {"fps": 0}})
    _edited(replay, tmp / "huge.replay", meta={"render_options": {"scale": 100_000}})
    _edited(replay, tmp / "actions.replay", actions=np.zeros((3, 4, 5), np.float64))
    _edited(replay, tmp / "override.replay", meta={"overrides": {"max_episode_lenght": 9}})
    _edited(replay, tmp / "hash.replay", meta={"config_hash": "0123456789ab"})
    _edited(replay, tmp / "shape.replay", actions=np.zeros((3, 5), np.int32))
    ro = str(read_only)
    render = ["render", VEC, "--steps", "10"]
    return [
        Case("replay truncated", ["replay", "truncated.replay", "--out", "g.gif"], "truncated"),
        Case("replay empty", ["replay", "empty.replay", "--out", "g.gif"], "empty.replay"),
        Case("replay a folder", ["replay", "folder.replay", "--out", "g.gif"], "is a folder"),
        Case(
            "replay without seed",
            ["replay", "no-seed.replay", "--out", "g.gif"],
            "its metadata lacks seed",
        ),
        Case(
            "replay without players",
            ["replay", "no-players.replay", "--out", "g.gif"],
            "its metadata lacks players, agents",
        ),
        Case(
            "replay edited",
            ["replay", "edited.replay", "--out", "g.gif"],
            "was changed after it was written",
        ),
        Case(
            "replay action edited",
            ["replay", "edited-action.replay", "--out", "g.gif"],
            "was changed after it was written",
        ),
        Case(
            "replay bad actions",
            ["replay", "actions.replay", "--out", "g.gif"],
            "its actions are float64 (3, 4, 5)",
        ),
        Case(
            "replay unknown override",
            ["replay", "override.replay", "--out", "g.gif"],
            "'override.replay': scenario 'identical_2_vs_2_fobs_vec_void_disc': unknown EnvConfig "
            "field 'max_episode_lenght'",
        ),
        Case(
            "replay of a changed scenario",
            ["replay", "hash.replay", "--out", "g.gif"],
            "'hash.replay': the replay was recorded on scenario",
        ),
        Case(
            "replay actions of another game",
            ["replay", "shape.replay", "--out", "g.gif"],
            "'shape.replay': the replay's actions have shape (5,) per step",
        ),
        Case(
            "replay scale not a number",
            ["replay", "scale.replay", "--out", "g.gif"],
            "render option scale is 'big', expected a positive integer",
        ),
        Case(
            "replay fps zero",
            ["replay", "fps.replay", "--out", "g.gif"],
            "render option fps is 0, expected a positive number",
        ),
        Case(
            "replay scale too large for a GIF",
            ["replay", "huge.replay", "--out", "g.gif"],
            "a GIF is at most 65535x65535",
        ),
        Case(
            "replay into a read-only folder",
            ["replay", "game.replay", "--out", f"{ro}/g.gif"],
            "no file can be created in",
        ),
        Case("render into a folder", [*render, "--out", "folder.gif"], "is a folder"),
        Case("render into a pipe", [*render, "--out", "pipe.gif"], "is not a plain file"),
        Case(
            "render into a read-only folder",
            [*render, "--out", f"{ro}/g.gif"],
            "no file can be created in",
        ),
        Case(
            "render --save-replay a folder",
            [*render, "--out", "g.gif", "--save-replay", "folder.replay"],
            "--save-replay 'folder.replay' is a folder",
        ),
        Case(
            "render --save-replay read-only",
            [*render, "--out", "g.gif", "--save-replay", f"{ro}/g.replay"],
            "no file can be created in",
        ),
        Case(
            "render at terabytes",
            [*render, "--scale", "700", "--out", "g.gif"],
            "--scale 700, --steps 10: 11 frames of 59014x58822 pixels need 106.7 GiB",
        ),
        Case(
            "render wider than a GIF",
            [*render, "--scale", "100000", "--out", "g.gif"],
            "a GIF is at most 65535x65535",
        ),
        Case(
            "eval --json a folder",
            ["eval", "pursuit", "random", "--games", "2", "--json", "folder.json"],
            "--json 'folder.json' is a folder",
        ),
        Case(
            "eval --json read-only",
            ["eval", "pursuit", "random", "--games", "2", "--json", f"{ro}/r.json"],
            "no file can be created in",
        ),
        Case(
            "league --out a file",
            ["league", "pursuit", "random", "--out", "a-file"],
            "--out 'a-file' is a file, not a folder",
        ),
        Case(
            "league --out holds a folder matrix.csv",
            ["league", "pursuit", "random", "--out", "league"],
            "matrix.csv' is a folder",
        ),
        Case(
            "league --out under a file",
            ["league", "pursuit", "random", "--out", "a-file/results"],
            "a-file' is not a folder",
        ),
        Case(
            "league --out in a read-only folder",
            ["league", "pursuit", "random", "--out", f"{ro}/results"],
            "no file can be created in",
        ),
        # checkpoints: their loaders' own messages (baselines/checkpoint.py), naming the file
        Case("eval a checkpoint of garbage", ["eval", "garbage.pt", "random"], "'garbage.pt'"),
        Case("eval an empty checkpoint", ["eval", "empty.pt", "random"], "'empty.pt'"),
        Case(
            "league a missing checkpoint", ["league", "gone.pt", "random", "--out", "r"], "gone.pt"
        ),
        Case("view a truncated replay", ["view", "truncated.replay"], "truncated"),
        Case("view an edited replay", ["view", "edited.replay"], "was changed after"),
        Case(
            "view wider than a window",
            ["view", VEC, "--scale", "1000"],
            "--scale 1000: a window of 84214x",
        ),
        Case(
            "view a replay wider than a window",
            ["view", "game.replay", "--scale", "1000"],
            "the largest that opens is 16384x16384",
        ),
        Case(
            "play wider than a window",
            ["play", VEC, "--scale", "1000"],
            "the largest that opens is 16384x16384",
        ),
        Case(
            "play --save-replay a folder",
            ["play", VEC, "--save-replay", "folder.replay"],
            "--save-replay 'folder.replay' is a folder",
        ),
        Case(
            "play --save-replay read-only",
            ["play", VEC, "--save-replay", f"{ro}/g.replay"],
            "no file can be created in",
        ),
    ]


CASE_NAMES = [
    "replay truncated",
    "replay empty",
    "replay a folder",
    "replay without seed",
    "replay without players",
    "replay edited",
    "replay action edited",
    "replay bad actions",
    "replay unknown override",
    "replay of a changed scenario",
    "replay actions of another game",
    "replay scale not a number",
    "replay fps zero",
    "replay scale too large for a GIF",
    "replay into a read-only folder",
    "render into a folder",
    "render into a pipe",
    "render into a read-only folder",
    "render --save-replay a folder",
    "render --save-replay read-only",
    "render at terabytes",
    "render wider than a GIF",
    "eval --json a folder",
    "eval --json read-only",
    "league --out a file",
    "league --out holds a folder matrix.csv",
    "league --out under a file",
    "league --out in a read-only folder",
    "eval a checkpoint of garbage",
    "eval an empty checkpoint",
    "league a missing checkpoint",
    "view a truncated replay",
    "view an edited replay",
    "view wider than a window",
    "view a replay wider than a window",
    "play wider than a window",
    "play --save-replay a folder",
    "play --save-replay read-only",
]


def _played(*args, **kwargs):
    raise AssertionError("a game was played before the files were checked")


def _no_compute(monkeypatch):
    """Playing any game fails the test (AssertionError is not one of the CLI's errors)."""
    played = _played

    import gigastep.eval.matches
    import gigastep.eval.ratings
    import gigastep.viz.replay

    monkeypatch.setattr(gigastep.viz.replay, "record_game", played)
    monkeypatch.setattr(gigastep.viz.replay, "GameRunner", played)
    monkeypatch.setattr(gigastep.viz.replay.Replay, "simulate", played)
    monkeypatch.setattr(gigastep.eval.matches, "evaluate", played)
    monkeypatch.setattr(gigastep.eval.ratings, "play_league", played)


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_file_problem_is_one_line_and_exit_2_before_any_compute(
    name, replay_file, read_only, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GIGASTEP_DEBUG", raising=False)
    shutil.copyfile(replay_file, tmp_path / "game.replay")
    cases = {c.name: c for c in _cases(tmp_path, tmp_path / "game.replay", read_only)}
    assert sorted(cases) == sorted(CASE_NAMES)
    case = cases[name]
    if ".pt" in " ".join(case.argv) and importlib.util.find_spec("torch") is None:
        pytest.skip("checkpoints need torch")
    if case.argv[0] in ("play", "view"):
        import gigastep.viz.viewer  # before pygame: it hides pygame's greeting on stdout

        if importlib.util.find_spec("pygame") is None:
            pytest.skip("play and view need the viewer extra (pygame)")

        monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
        monkeypatch.setattr(gigastep.viz.viewer, "GameRunner", _played, raising=False)
    before = _listing(tmp_path)
    _no_compute(monkeypatch)
    assert cli.main(case.argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith(f"gigastep {case.argv[0]}: error: ")
    assert case.message in lines[0], lines[0]
    assert _listing(tmp_path) == before  # nothing written, no probe left behind


def test_a_full_output_folder_is_refused_before_any_compute(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _no_compute(monkeypatch)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        cli.shutil, "disk_usage", lambda path: usage._replace(free=4096)
    )  # the file system says: 4 KiB left
    for argv in (
        ["render", VEC, "--out", "g.gif"],
        ["eval", "pursuit", "random", "--json", "r.json"],
        ["league", "pursuit", "random", "--out", "results"],
    ):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert "has 4.0 KiB free, and at least 1.0 MiB are needed" in err
    assert not any(tmp_path.iterdir())


def test_a_write_that_fails_after_the_games_is_one_line_and_leaves_no_file(
    tmp_path, monkeypatch, capsys
):
    """The disk can fill up while the games are played: the late write error is one line."""
    import gigastep._util.files

    monkeypatch.chdir(tmp_path)
    real = gigastep._util.files.atomic_path

    @contextlib.contextmanager
    def full(path, suffix=None):
        with real(path, suffix) as tmp:
            yield tmp
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(gigastep._util.files, "atomic_path", full)
    argv = ["eval", "pursuit", "random", "--games", "2", "--scenario", VEC, "--json", "r.json"]
    argv += ["--set", "max_episode_length=5"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "gigastep eval: error: [Errno 28] No space left on device: 'r.json'"
    ]
    assert not any(tmp_path.iterdir())


@pytest.mark.subprocess
def test_as_a_process_an_edited_or_truncated_replay_is_one_line_and_exit_2(replay_file, tmp_path):
    """The same as the command people run: no 're-simulated exactly' for an edited file."""
    import sys

    actions = Replay.load(replay_file).actions.copy()
    actions[0, 0] = (actions[0, 0] + 1) % 27
    _edited(replay_file, tmp_path / "edited.replay", forge=False, actions=actions)
    data = replay_file.read_bytes()
    (tmp_path / "truncated.replay").write_bytes(data[: len(data) - 40])
    env = {k: v for k, v in os.environ.items() if k != "GIGASTEP_DEBUG"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    for name, message in (
        ("edited.replay", "'edited.replay' was changed after it was written"),
        ("truncated.replay", "'truncated.replay' is not a Gigastep replay file"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "gigastep.cli", "replay", name, "--out", "g.gif"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "g.gif").exists()
