"""Atomic writes (`gigastep._util.files`), which every writer of the library, the baselines and the
benchmarks goes through."""

from __future__ import annotations

import os

import pytest

from gigastep._util import files as _files


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_written_file_has_the_permissions_open_would_give_it(tmp_path, umask_022):
    _files.write_text(tmp_path / "a.json", "{}")
    plain = tmp_path / "b.json"
    plain.write_text("{}")
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "a.json").stat().st_mode == plain.stat().st_mode


def test_a_failed_write_leaves_neither_the_target_nor_a_temporary_file(tmp_path):
    with pytest.raises(RuntimeError), _files.atomic_path(tmp_path / "x.pt") as tmp:
        with open(tmp, "w") as f:
            f.write("partial")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_a_write_replaces_the_old_file_whole(tmp_path):
    target = tmp_path / "m.csv"
    target.write_text("old\n")
    _files.write_text(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.csv"]


def test_a_folder_or_a_device_is_never_replaced(tmp_path):
    (tmp_path / "out.gif").mkdir()
    with pytest.raises(IsADirectoryError, match="out.gif': it is a folder"):
        _files.write_text(tmp_path / "out.gif", "x")
    assert (tmp_path / "out.gif").is_dir()
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(FileExistsError, match="pipe.json': it exists and is not a plain file"):
        _files.write_text(tmp_path / "pipe.json", "x")
    (tmp_path / "dangling.csv").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError, match="not a plain file"):
        _files.write_text(tmp_path / "dangling.csv", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.csv", "out.gif", "pipe.json"]
