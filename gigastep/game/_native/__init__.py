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
version, the compiler and its flags. A cached library is loaded only if it and its folder
belong to this user and no one else can write them, and if its SHA-256 is the one recorded
when it was built; otherwise it is rebuilt, and an unsafe folder is replaced by a private
one, with a warning (docs/install.md). Without a compiler, or with ``GIGASTEP_NATIVE=0``, the
pure JAX path runs: same observations, slower (see docs/install.md, "Native CPU kernel").
``GIGASTEP_NATIVE_FLAGS`` adds compiler flags (split as a shell would; they enter the cache
key), for instance the sanitizer build of tools/sanitize_native.py.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from functools import cache
from pathlib import Path
from typing import Any

from gigastep._util.environ import flag

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
# bit. No -march=native: one user's cache on a disk that several machines mount must not
# hold code that some of them cannot run (-mfma is added only where XLA itself fuses, i.e.
# the host has it; it enters the cache key).
_FLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-w"]
_lock = threading.Lock()


class BuildError(RuntimeError):
    """The kernel library could not be compiled or loaded."""


def enabled() -> bool:
    """Whether the native kernels may be used: ``GIGASTEP_NATIVE`` unset, empty or on
    (1/true/yes/on); 0/false/no/off switch them off.

    Raises:
        ValueError: ``GIGASTEP_NATIVE`` has another value (`gigastep._util.environ.flag`).
    """
    return flag("GIGASTEP_NATIVE", True)


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
    """The cache folder asked for: ``$GIGASTEP_CACHE_DIR``, else the per-user default."""
    if os.environ.get("GIGASTEP_CACHE_DIR"):
        return Path(os.environ["GIGASTEP_CACHE_DIR"])
    return _user_cache_dir()


def _user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gigastep"


def _owner_problem(path: Path, st: os.stat_result) -> str | None:
    """Why a file or folder with this stat is not this user's alone (None if it is)."""
    if not hasattr(os, "getuid"):  # Windows: no POSIX owners and modes to check
        return None
    if st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{path} can be written by other users (mode {stat.filemode(st.st_mode)}); "
            "it must be writable by its owner only"
        )
    return None


def _folder_problem(folder: Path) -> str | None:
    """Why libraries in `folder` may not be trusted, or None: it must be a folder owned by
    this user that no one else can write to (else anyone could plant a library in it)."""
    try:
        st = os.stat(folder)
    except OSError as err:
        return f"{folder} cannot be read ({err.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{folder} is not a folder"
    problem = _owner_problem(folder, st)
    if problem is not None or not hasattr(os, "getuid"):
        return problem
    # Whoever can write to a folder above it can swap it for their own between the checks
    # and the load, unless that folder is sticky (as /tmp is: entries are renamed only by
    # their owner) and belongs to root or this user.
    for parent in Path(os.path.realpath(folder)).parents:
        st = os.stat(parent)
        if st.st_uid not in (0, os.getuid()):
            return f"{folder} is inside {parent}, which belongs to uid {st.st_uid}"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return (
                f"{folder} is inside {parent}, which other users can write to "
                f"(mode {stat.filemode(st.st_mode)}) and so replace {folder}"
            )
    return None


_private: list[Path] = []


def _private_dir() -> Path:
    """A folder for this process only (mode 0700, removed at exit)."""
    if not _private:
        folder = Path(tempfile.mkdtemp(prefix="gigastep-native-"))
        atexit.register(shutil.rmtree, folder, True)
        _private.append(folder)
    return _private[0]


def _trusted_cache_dir() -> Path:
    """The cache folder to build in and load from: the one asked for if it is this user's
    alone (created with mode 0700 if missing); otherwise, with a warning, the per-user
    default if that is, else a private temporary folder of this process."""
    chosen = _cache_dir()
    try:
        chosen.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = _folder_problem(chosen)
    except OSError as err:
        problem = f"{chosen} cannot be created ({err.strerror})"
    if problem is None:
        return chosen
    fallback = _user_cache_dir()
    try:
        if fallback == chosen:
            raise FileExistsError
        fallback.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _folder_problem(fallback) is not None:
            raise PermissionError
    except OSError:
        fallback = _private_dir()
    warnings.warn(
        f"gigastep: not using the native kernel cache: {problem}. Building in {fallback} "
        "instead (see docs/install.md, 'Native CPU kernels')",
        RuntimeWarning,
        stacklevel=3,
    )
    return fallback


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sidecar(library: Path) -> Path:
    """The file holding the SHA-256 of `library`, written when it was built."""
    return library.with_name(library.name + ".sha256")


def _library_problem(library: Path) -> str | None:
    """Why the cached `library` may not be loaded, or None: it and its recorded SHA-256
    must be plain files owned by this user, writable by no one else, and the library's
    content must have that hash (a truncated or replaced library does not)."""
    record = _sidecar(library)
    for path in (library, record):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return f"{path} is missing"
        if not stat.S_ISREG(st.st_mode):
            return f"{path} is not a plain file"
        problem = _owner_problem(path, st)
        if problem is not None:
            return problem
    recorded = record.read_text(encoding="ascii", errors="replace").strip()
    actual = _sha256(library)
    if actual != recorded:
        return (
            f"the SHA-256 of {library} is {actual}, not the {recorded[:64]!r} recorded when it "
            "was built (a truncated or replaced file)"
        )
    return None


def _write_private(folder: Path, prefix: str, suffix: str) -> str:
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    os.close(fd)
    return tmp


def _compile(cmd: list[str], tmp: str) -> None:
    """Run the compiler `cmd`, which writes the library to `tmp`."""
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout)[-3000:]
        raise BuildError(f"compiling the native kernels failed: {' '.join(cmd)}\n{tail}")


def build_library(force: bool = False) -> Path:
    """Compile the kernels (or reuse the cached build) and return the library's path.

    The cached library is reused only if it passes `_library_problem` (owner, mode and the
    SHA-256 recorded at its build); otherwise it is rebuilt, with a warning if it had a
    recorded hash. A build writes a private temporary file beside the target, renames it
    over the target, then writes the hash the same way: concurrent builders (pytest
    workers) never see a half-written library, and a reader that finds the library without
    its hash (or with another build's) rebuilds rather than loading it.

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
    out = _trusted_cache_dir() / f"gigastep_native_{digest.hexdigest()[:16]}{suffix}"
    if not force:
        problem = _library_problem(out)
        if problem is None:
            return out
        if os.path.lexists(_sidecar(out)):  # not a first build (nor one of an older Gigastep)
            warnings.warn(
                f"gigastep: rebuilding the native kernels: {problem}", RuntimeWarning, stacklevel=2
            )
    tmp = _write_private(out.parent, out.stem + ".", suffix)
    cmd = [cxx, *flags, f"-I{include}", *map(str, _SOURCES), "-o", tmp]
    record = None
    try:
        _compile(cmd, tmp)
        os.chmod(tmp, 0o755)  # the linker's mode follows the umask: writable by us alone
        sha = _sha256(Path(tmp))
        os.replace(tmp, out)
        record = _write_private(out.parent, out.name + ".", ".tmp")
        Path(record).write_text(sha + "\n", encoding="ascii")
        os.chmod(record, 0o644)
        os.replace(record, _sidecar(out))
    except (OSError, subprocess.SubprocessError) as err:
        raise BuildError(f"compiling the native kernels failed: {' '.join(cmd)}: {err}") from None
    finally:
        for path in (tmp, record):
            if path is not None and os.path.exists(path):
                os.unlink(path)
    return out


@cache
def _load_cached() -> tuple[bool, str]:
    import jax.ffi

    try:
        path = build_library()
        # Checked again just before loading: what dlopen runs is what was built here.
        problem = _library_problem(path)
        if problem is not None:
            path = build_library(force=True)
            problem = _library_problem(path)
            if problem is not None:
                raise BuildError(f"refusing to load the native kernels: {problem}")
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
