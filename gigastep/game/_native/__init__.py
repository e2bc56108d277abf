"""Optional CPU kernels, compiled on first use and registered as XLA FFI targets.

Three kernels. ``gigastep_rgb_obs`` (``rgb_obs.cc``) draws the ego images of the RGB
observation from the integer inputs that `gigastep.game.observations.rgb` computes, the same
bytes as its JAX drawing, one image at a time. ``gigastep_vector_obs`` (``vector_obs.cc``) is
visibility plus the vector observation of a batch of games in one pass. On the CPU it
replaces the XLA lowering of
`gigastep.game.observations.visibility` + `gigastep.game.observations.vector` with the same values
bit for bit on every state, finite or not, except that where both give NaN its sign and
payload bits are not promised (`gigastep.game.observations.vector` defines non-finite states; the
tests compare both paths); on other platforms the JAX code runs. ``gigastep_hazards``
(``hazards.cc``) is `gigastep.game.interactions.hazards` (leaving the map, collisions, boxes),
the same booleans. Every operand's shape and dtype is checked by the kernel itself (an FFI
error naming the operand, never a read out of bounds) and before the call.

Bit for bit agreement needs one fact about the machine: whether XLA's CPU backend fuses
``a * b + c * d`` into one multiply-add (it does where the host has them). XLA is asked once
per process (`xla_fuses_multiply_add`) and the kernels are compiled to do the same.

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

__all__ = ["BuildError", "build_library", "enabled", "load", "status", "xla_fuses_multiply_add"]

_SOURCES = [
    Path(__file__).with_name(name) for name in ("vector_obs.cc", "rgb_obs.cc", "hazards.cc")
]
_HEADERS = [Path(__file__).with_name("common.h")]
_TARGETS = {
    "gigastep_vector_obs": "GigastepVectorObs",
    "gigastep_rgb_obs": "GigastepRgbObs",
    "gigastep_hazards": "GigastepHazards",
}
# -ffp-contract=off: the compiler fuses no multiply-add of its own accord; the kernels fuse
# exactly where XLA does (`xla_fuses_multiply_add`), so every result matches XLA's bit for
# bit. No -march=native: a cache shared by machines of a cluster must not hold code that
# some of them cannot run (-mfma is added only where XLA itself fuses, i.e. the host has it).
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
    """The compiler flags: ours, those that make the kernels fuse multiply-adds where XLA
    does, then those of ``$GIGASTEP_NATIVE_FLAGS`` (later flags win).

    Raises:
        BuildError: XLA's way of computing multiply-adds here is neither of the known two.
    """
    fused = xla_fuses_multiply_add()
    if fused is None:
        raise BuildError(
            "XLA's CPU backend computes a * b + c * d here neither as one fused "
            "multiply-add nor as two roundings (or has no CPU backend in this process), so "
            "the kernels cannot match it"
        )
    fma: list[str] = []
    if fused:
        fma = ["-DGIGASTEP_XLA_FMA=1"]
        if platform.machine().lower() in ("x86_64", "amd64"):
            fma.append("-mfma")
    return [*_FLAGS, *fma, *shlex.split(os.environ.get("GIGASTEP_NATIVE_FLAGS", ""))]


@cache
def xla_fuses_multiply_add() -> bool | None:
    """How XLA's CPU backend computes ``a * b + c * d`` in float32 on this machine: True if it
    fuses it into fma(a, b, c * d) (one rounding; hosts with fused multiply-adds), False if
    it rounds the product and the sum apart, None if neither (then no kernel is built: they
    could not match XLA's values). Asked of XLA once per process, on values where the two
    differ.

    With a = 1 + 2^-12 and b = d = 2^-12 (c = b): a^2 + b^2 = 1 + 2^-11 + 2^-23 exactly,
    which fma gives; rounding a^2 first gives 1 + 2^-11 and the sum rounds back to it.
    """
    import jax
    import numpy as np

    a = np.float32(1 + 2.0**-12)
    b = np.float32(2.0**-12)
    values = np.asarray([[a, b], [b, a]], np.float32)  # both operand orders
    # Compiled and run apart from any trace in progress (this is asked while tracing a step),
    # on this process's CPU (never a computation spanning the processes of a distributed run).
    try:
        with jax.ensure_compile_time_eval():
            arg = jax.device_put(values, jax.local_devices(backend="cpu")[0])
            square_sum = jax.jit(lambda v: v[:, 0] * v[:, 0] + v[:, 1] * v[:, 1])
            out = np.asarray(square_sum.lower(arg).compile()(arg))
    except RuntimeError:  # no CPU backend in this process (say JAX_PLATFORMS=cuda)
        return None
    fused = np.float32(1 + 2.0**-11 + 2.0**-23)
    apart = np.float32(1 + 2.0**-11)
    if out[0] == fused and out[1] == apart:
        return True  # fma(first product's operands, second product)
    if out[0] == apart and out[1] == apart:
        return False
    return None


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
            jax.ffi.register_ffi_target(
                target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu"
            )
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
    return {"native": ok, "detail": detail, "xla_fuses_multiply_add": xla_fuses_multiply_add()}
