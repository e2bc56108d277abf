"""Optional CPU kernels, compiled on first use and registered as XLA FFI targets.

Two kernels. ``gigastep_rgb_obs`` (``rgb_obs.cc``) draws the ego images of the RGB
observation from the integer inputs that `gigastep.game.observations.rgb` computes, the same
bytes as its JAX drawing, one image at a time. ``gigastep_vector_obs`` (``vector_obs.cc``) is
visibility plus the vector observation of a batch of games in one pass. On the CPU it
replaces the XLA lowering of
`gigastep.game.observations.visibility` + `gigastep.game.observations.vector` with the same values
bit for bit on every state, finite or not, except that where both give NaN its sign and
payload bits are not promised (`gigastep.game.observations.vector` defines non-finite states; the
tests compare both paths); on other platforms the JAX code runs. Every operand's shape and
dtype is checked by the kernel itself (an FFI error naming the operand, never a read out of
bounds) and before the call.

The shared library is built with the system C++ compiler the first time a CPU step needs it
(a few seconds) and cached under ``$GIGASTEP_CACHE_DIR`` (default
``$XDG_CACHE_HOME/gigastep`` or ``~/.cache/gigastep``), keyed by the source, the jaxlib
version, the compiler and its flags. Without a compiler, or with ``GIGASTEP_NATIVE=0``, the
pure JAX path runs: same observations, slower (see docs/install.md, "Native CPU kernel").
``GIGASTEP_NATIVE_FLAGS`` adds compiler flags (split as a shell would; they enter the cache
key), for instance the sanitizer build of tools/sanitize_native.py.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["BuildError", "build_library", "enabled", "load", "status"]

_SOURCES = [Path(__file__).with_name(name) for name in ("vector_obs.cc", "rgb_obs.cc")]
_HEADERS = [Path(__file__).with_name("common.h")]
_TARGETS = {"gigastep_vector_obs": "GigastepVectorObs", "gigastep_rgb_obs": "GigastepRgbObs"}
# -ffp-contract=off: no fused multiply-adds, so every result matches XLA's (which does not
# contract) bit for bit. No -march=native: a cache shared by machines of a cluster must not
# hold code that some of them cannot run.
_FLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-w"]
_lock = threading.Lock()


class BuildError(RuntimeError):
    """The kernel library could not be compiled or loaded."""


def enabled() -> bool:
    """Whether the native kernels may be used (``GIGASTEP_NATIVE`` is not 0/false/off)."""
    return os.environ.get("GIGASTEP_NATIVE", "1").strip().lower() not in ("0", "false", "off", "no")


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _flags() -> list[str]:
    """The compiler flags: ours, then those of ``$GIGASTEP_NATIVE_FLAGS`` (later flags win)."""
    return [*_FLAGS, *shlex.split(os.environ.get("GIGASTEP_NATIVE_FLAGS", ""))]


def _cache_dir() -> Path:
    if os.environ.get("GIGASTEP_CACHE_DIR"):
        return Path(os.environ["GIGASTEP_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gigastep"


def build_library(force: bool = False) -> Path:
    """Compile the kernels (or reuse the cached build) and return the library's path.

    Raises:
        BuildError: no C++ compiler, or compilation failed (the message holds the command and
            the compiler's output).
    """
    import jax.ffi
    import jaxlib

    cxx = _compiler()
    if cxx is None:
        raise BuildError("no C++ compiler found (looked for $CXX, c++, g++, clang++)")
    include = jax.ffi.include_dir()
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
        cxx_version = version.stdout.splitlines()[0] if version.stdout else ""
    except (OSError, subprocess.SubprocessError) as err:
        raise BuildError(f"{cxx} --version failed: {err}") from None
    flags = _flags()
    digest = hashlib.sha256()
    for part in (
        *(path.read_bytes() for path in (*_SOURCES, *_HEADERS)),
        jaxlib.__version__.encode(),
        cxx.encode(),
        cxx_version.encode(),
        "\0".join(flags).encode(),
        platform.machine().encode(),
    ):
        digest.update(part)
        digest.update(b"\0")
    suffix = ".dll" if sys.platform == "win32" else ".so"
    out = _cache_dir() / f"gigastep_native_{digest.hexdigest()[:16]}{suffix}"
    if out.exists() and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: concurrent builders (pytest workers) never see a
    # half-written library, and the last rename wins with identical content.
    fd, tmp = tempfile.mkstemp(prefix=out.stem + ".", suffix=suffix, dir=out.parent)
    os.close(fd)
    cmd = [cxx, *flags, f"-I{include}", *map(str, _SOURCES), "-o", tmp]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout)[-3000:]
            raise BuildError(f"compiling the native kernels failed: {' '.join(cmd)}\n{tail}")
        os.replace(tmp, out)
    except (OSError, subprocess.SubprocessError) as err:
        raise BuildError(f"compiling the native kernels failed: {' '.join(cmd)}: {err}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


@cache
def _load_cached() -> tuple[bool, str]:
    import jax.ffi

    try:
        path = build_library()
        lib = ctypes.cdll.LoadLibrary(str(path))
        for target, symbol in _TARGETS.items():
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)),
                                        platform="cpu")  # fmt: skip
    except (BuildError, OSError, AttributeError) as err:
        return False, str(err)
    return True, str(path)


def load() -> bool:
    """Build (once per machine), load and register the kernels; False if unavailable.

    The first failure is reported once as a warning; the JAX path is used instead.
    """
    if not enabled():
        return False
    with _lock:
        ok, detail = _load_cached()
    if not ok and not _warned:
        _warned.append(True)
        warnings.warn(
            "gigastep: native CPU kernels unavailable, using the (slower) pure JAX "
            f"observation path. Reason: {detail}. Set GIGASTEP_NATIVE=0 to silence this.",
            RuntimeWarning,
            stacklevel=2,
        )
    return ok


_warned: list[bool] = []


def status() -> dict[str, Any]:
    """What the native kernels are doing here (for benchmark records and bug reports)."""
    if not enabled():
        return {"native": False, "detail": "disabled by GIGASTEP_NATIVE"}
    ok, detail = _load_cached()
    return {"native": ok, "detail": detail}
