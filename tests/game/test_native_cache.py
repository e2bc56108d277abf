"""The native kernel cache (gigastep.game._native): what is loaded is what was built here.

A cached library is loaded only if it and its folder belong to this user, no one else can
write them, and its SHA-256 is the one recorded at its build; anything else is rebuilt (a
truncated or edited library, a wrong hash, a file of another owner) or, for a folder others
can write to, replaced by a private folder with a warning. A library planted in such a
folder never runs: the planted library here writes a marker file when it is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from gigastep.game import _native

ROOT = Path(__file__).resolve().parents[2]
OTHER_UID = 12345

pytestmark = [
    pytest.mark.skipif(_native._compiler() is None, reason="no C++ compiler"),
    pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes"),
]

PLANTED = """
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("MARKER", "w");
    if (f) { fputs("the planted library ran", f); fclose(f); }
}
"""

LOAD = """
import json, warnings
warnings.simplefilter("always")
from gigastep.game import _native
ok, detail = _native._load_cached()
print(json.dumps({"ok": ok, "detail": detail}))
"""


@pytest.fixture(scope="module")
def built() -> Path:
    """A good build of the kernels (the cache of the test run, reused when it is valid)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _native.build_library()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _seed(folder: Path, built: Path) -> Path:
    """A private cache folder holding a copy of the good build and its hash; the copy."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    library = folder / built.name
    shutil.copyfile(built, library)
    os.chmod(library, 0o755)
    record = _native._sidecar(library)
    record.write_text(_sha256(built) + "\n")
    os.chmod(record, 0o644)
    return library


def _load_in_subprocess(cache: Path, xdg: Path, cwd: Path) -> tuple[dict, str]:
    env = dict(
        os.environ,
        GIGASTEP_CACHE_DIR=str(cache),
        XDG_CACHE_HOME=str(xdg),
        JAX_PLATFORMS="cpu",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.pop("GIGASTEP_NATIVE", None)
    result = subprocess.run(
        [sys.executable, "-c", LOAD], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]  # a bus error is -7
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def _planted_library(tmp_path: Path, marker: Path) -> Path:
    source = tmp_path / "planted.c"
    source.write_text(PLANTED.replace("MARKER", str(marker)))
    out = tmp_path / "planted.so"
    cxx = _native._compiler()
    assert cxx is not None
    subprocess.run(
        [cxx, "-x", "c", "-shared", "-fPIC", str(source), "-o", str(out)], check=True, timeout=120
    )
    return out


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_truncated_cached_library_is_rebuilt_and_loads(built, tmp_path):
    library = _seed(tmp_path / "cache", built)
    with open(library, "r+b") as f:
        f.truncate(library.stat().st_size // 2)
    loaded, err = _load_in_subprocess(tmp_path / "cache", tmp_path / "xdg", tmp_path)
    assert loaded == {"ok": True, "detail": str(library)}, err
    assert "rebuilding the native kernels" in err and "truncated or replaced" in err
    assert _sha256(library) == _native._sidecar(library).read_text().strip()
    assert _native._library_problem(library) is None
    assert not (tmp_path / "xdg").exists()  # the folder was safe: nothing built elsewhere


def _world_writable(folder: Path) -> None:
    os.chmod(folder, 0o777)


def _other_owner(folder: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    os.chown(folder, OTHER_UID, -1)
    os.chmod(folder, 0o755)


def _inside_world_writable(folder: Path) -> None:
    os.chmod(folder, 0o700)  # the folder itself is private; the one above it is not
    os.chmod(folder.parent, 0o777)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "unsafe, why",
    [
        (_world_writable, "can be written by other users"),
        (_other_owner, f"is owned by uid {OTHER_UID}"),
        (_inside_world_writable, "which other users can write to"),
    ],
    ids=["world-writable folder", "folder of another user", "inside a world-writable folder"],
)
def test_a_library_planted_in_an_unsafe_cache_folder_is_never_loaded(built, tmp_path, unsafe, why):
    marker = tmp_path / "marker"
    shared = tmp_path / "open" / "shared"
    shared.mkdir(parents=True)
    planted = _planted_library(tmp_path, marker)
    # The planted library has the name the build would have, and its own hash beside it.
    shutil.copyfile(planted, shared / built.name)
    _native._sidecar(shared / built.name).write_text(_sha256(planted) + "\n")
    unsafe(shared)
    private = _seed(tmp_path / "xdg" / "gigastep", built)  # the per-user fallback, built
    loaded, err = _load_in_subprocess(shared, tmp_path / "xdg", tmp_path)
    assert not marker.exists(), "the planted library was loaded"
    assert loaded == {"ok": True, "detail": str(private)}, err
    assert "not using the native kernel cache" in err and why in err and str(shared) in err
    assert _sha256(shared / built.name) == _sha256(planted)  # left alone, never loaded


class _Compiler:
    """Stands in for the C++ compiler in process: "builds" by copying the good library."""

    def __init__(self, good: Path) -> None:
        self.good, self.calls = good, 0

    def __call__(self, cmd: list[str], tmp: str) -> None:
        self.calls += 1
        shutil.copyfile(self.good, tmp)


def _spoil_owner(library: Path, _: Path) -> str:
    if os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(library, OTHER_UID, -1)
    return f"is owned by uid {OTHER_UID}"


def _spoil_mode(library: Path, _: Path) -> str:
    os.chmod(library, 0o777)
    return "can be written by other users"


def _spoil_hash(library: Path, _: Path) -> str:
    _native._sidecar(library).write_text("0" * 64 + "\n")
    return "not the '" + "0" * 64 + "' recorded"


def _spoil_content(library: Path, planted: Path) -> str:
    shutil.copyfile(planted, library)  # the recorded hash stays the good build's
    return "truncated or replaced"


def _spoil_record_owner(library: Path, _: Path) -> str:
    if os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(_native._sidecar(library), OTHER_UID, -1)
    return f"is owned by uid {OTHER_UID}"


SPOILS = [_spoil_owner, _spoil_mode, _spoil_hash, _spoil_content, _spoil_record_owner]


@pytest.mark.parametrize("spoil", SPOILS, ids=[s.__name__[7:] for s in SPOILS])
def test_a_cached_library_that_fails_a_check_is_rebuilt(built, tmp_path, monkeypatch, spoil):
    library = _seed(tmp_path / "cache", built)
    planted = _planted_library(tmp_path, tmp_path / "marker")
    why = spoil(library, planted)
    assert _native._library_problem(library) is not None
    compiler = _Compiler(built)
    monkeypatch.setattr(_native, "_compile", compiler)
    monkeypatch.setenv("GIGASTEP_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.warns(RuntimeWarning, match="rebuilding the native kernels") as caught:
        assert _native.build_library() == library
    assert why in str(caught[0].message)
    assert compiler.calls == 1
    assert _native._library_problem(library) is None
    assert library.stat().st_uid == os.getuid() and _sha256(library) == _sha256(built)
    assert _native.build_library() == library and compiler.calls == 1  # now reused


def test_a_valid_cached_library_is_reused_without_a_build(built, tmp_path, monkeypatch):
    library = _seed(tmp_path / "cache", built)
    compiler = _Compiler(built)
    monkeypatch.setattr(_native, "_compile", compiler)
    monkeypatch.setenv("GIGASTEP_CACHE_DIR", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _native.build_library() == library
    assert compiler.calls == 0


def test_a_new_cache_folder_is_private_and_gets_the_library_and_its_hash(
    built, tmp_path, monkeypatch
):
    compiler = _Compiler(built)
    monkeypatch.setattr(_native, "_compile", compiler)
    monkeypatch.setenv("GIGASTEP_CACHE_DIR", str(tmp_path / "new" / "cache"))
    library = _native.build_library()
    assert library.parent == tmp_path / "new" / "cache" and compiler.calls == 1
    assert (library.parent.stat().st_mode & 0o777) == 0o700
    assert _native._sidecar(library).read_text().strip() == _sha256(built)
    assert sorted(p.name for p in library.parent.iterdir()) == [
        library.name,
        library.name + ".sha256",
    ]  # no temporary file left behind
