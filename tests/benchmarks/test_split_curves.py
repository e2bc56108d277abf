"""The bookkeeping of the split curves (no training: checkpoints stand in by name)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from benchmarks import split_curves


def _folder(tmp_path, updates, name="run"):
    folder = tmp_path / name
    folder.mkdir()
    for u in updates:
        (folder / f"checkpoint_{u:06d}.pt").write_bytes(b"")
    (folder / "checkpoint.pt").write_bytes(b"")  # the latest: not a numbered point
    return folder


def test_points_are_evenly_spaced_and_keep_the_first_and_the_last(tmp_path):
    folder = _folder(tmp_path, range(10, 110, 10))  # updates 10..100
    picked = [p.name for p in split_curves.checkpoints_to_play(folder, 4)]
    # indices round(i * 9 / 3) = 0, 3, 6, 9
    assert picked == [f"checkpoint_{u:06d}.pt" for u in (10, 40, 70, 100)]
    assert len(split_curves.checkpoints_to_play(folder, 50)) == 10


def test_a_folder_without_numbered_checkpoints_says_how_to_keep_them(tmp_path):
    with pytest.raises(ValueError, match="--keep-checkpoints 0"):
        split_curves.checkpoints_to_play(_folder(tmp_path, []), 4)


class _Result:
    def __init__(self, update):
        self.update = update

    def mean_normalised(self, role):
        return {"train": 0.5 + self.update / 1000, "test": 0.4}[role]

    @property
    def gap(self):
        return self.mean_normalised("train") - 0.4

    def to_json(self):
        won = {"wins": 3, "games": 4}
        return {
            "rows": [
                {"item": "l", "role": "train", "opponent": "random", "policy": won},
                {"item": "u", "role": "test", "opponent": "random", "policy": won},
                {"item": "u", "role": "test", "opponent": "pursuit", "policy": won},
                {
                    "item": "v",
                    "role": "test",
                    "opponent": "pursuit",
                    "policy": {"wins": 1, "games": 4},
                },
                {"item": "w", "role": "test", "opponent": "pursuit", "policy": None},  # cannot play
            ]
        }


def test_main_scores_every_point_shares_the_reference_cache_and_writes_json_and_png(
    tmp_path, monkeypatch
):
    folders = [_folder(tmp_path, (10, 20), "a"), _folder(tmp_path, (30,), "b")]
    caches, calls = set(), []

    def fake_evaluate(split, policy, *, items, games, reference_cache):
        caches.add(id(reference_cache))
        calls.append((policy.rsplit("/", 2)[-2:], items, games))
        return _Result(int(policy[-9:-3]))

    def fake_load(path):
        u = int(str(path)[-9:-3])
        return {"update": u, "agent_steps": 1000 * u, "wall_s": 2.0 * u}

    monkeypatch.setattr("gigastep.eval.splits.evaluate_split", fake_evaluate)
    monkeypatch.setattr("baselines.checkpoint.load_checkpoint", fake_load)
    out = tmp_path / "out"
    argv = ["--split", "levels-v1", "--items", "levels-16,unseen", "--games", "4"]
    rows = split_curves.main([*argv, *map(str, folders), "--out", str(out)])
    assert [(r["update"], r["agent_steps"], r["train"], r["test"]) for r in rows] == [
        (10, 10_000, 0.51, 0.4),
        (20, 20_000, 0.52, 0.4),
        (30, 30_000, 0.53, 0.4),
    ]
    assert rows[2]["gap"] == pytest.approx(0.13)
    # mean win rates per role and opponent: (3/4 + 1/4) / 2 against pursuit on the test rows
    assert rows[0]["win_rate"] == {
        "train": {"random": 0.75},
        "test": {"random": 0.75, "pursuit": 0.5},
    }
    assert len(caches) == 1 and all(c[1:] == (["levels-16", "unseen"], 4) for c in calls)
    data = json.loads((out / "curves.json").read_text())
    assert data["split"].startswith("levels-v1@") and len(data["rows"]) == 3
    assert Image.open(out / "curves.png").size[0] > 300
    series = split_curves._series(rows, "win_rate")  # by opponent, training first
    assert list(series) == ["test vs pursuit", "train vs random", "test vs random"]
    assert series["test vs pursuit"] == [0.5, 0.5, 0.5]
    split_curves.main([*argv, *map(str, folders), "--out", str(out), "--metric", "win_rate"])
    assert Image.open(out / "curves.png").size[0] > 300


def test_main_checks_every_folder_before_playing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        "gigastep.eval.splits.evaluate_split",
        lambda *a, **k: pytest.fail("played before checking the folders"),
    )
    good = _folder(tmp_path, (10,), "good")
    with pytest.raises(SystemExit):
        split_curves.main(["--split", "levels-v1", str(good), str(tmp_path / "missing")])
    assert "missing is not a run folder" in capsys.readouterr().err
