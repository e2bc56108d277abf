"""Atomic file writes: write to a temporary file in the same folder, then rename over the target,
so that a reader never sees a half-written file and an interrupted write leaves nothing."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

__all__ = ["TEMP_PREFIX", "atomic_path", "is_temporary", "write_text"]

TEMP_PREFIX = ".gigastep-tmp-"
"""How the name of every temporary file written here starts: a folder's owner (holding its
lock) recognises the ones an interrupted write left (`is_temporary`) and removes them."""
_OLD_PREFIX = ".tmp-"  # the prefix of the versions before 2026-12


def is_temporary(name: str) -> bool:
    """`name` is the name of a temporary file of `atomic_path` (this or an earlier version)."""
    return name.startswith(TEMP_PREFIX) or name.startswith(_OLD_PREFIX)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str | None = None) -> Iterator[str]:
    """Yield a temporary path beside `path` (same suffix, so writers that pick a format by
    extension still do); it replaces `path` when the block ends without an exception and is
    removed otherwise.

    Raises:
        FileNotFoundError: the folder of `path` does not exist.
        IsADirectoryError: `path` is a folder.
        FileExistsError: `path` exists and is not a plain file (a device such as /dev/null,
            a pipe, a socket: the rename would replace it, even /dev/null for root).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {path!r}: it is a folder")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise FileExistsError(
            f"cannot write {path!r}: it exists and is not a plain file (a device, pipe, socket "
            "or broken link would be replaced)"
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {path!r}: the folder {folder!r} does not exist")
    suffix = os.path.splitext(path)[1] if suffix is None else suffix
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=folder, prefix=TEMP_PREFIX)
    os.close(fd)
    try:
        yield tmp
        # mkstemp creates the file readable by its owner only; give it the permissions that
        # open() would have (0o666 less the umask), so results on a shared disk stay readable.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
