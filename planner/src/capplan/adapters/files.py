"""Atomic file writes: a temporary file in the same folder, fsync, then a rename.

The new file gets the mode a normal file would get (0666 minus the umask, so 0644 under umask
022), or keeps the mode of the file it replaces. Any failure (a folder that is a file, /proc, a
read-only or full file system) is a :class:`WriteError` naming the path and the OS's reason, and
the old file is left as it was. SIGTERM and SIGHUP during the write remove the temporary file
before the process ends, as an exception does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from capplan.errors import InvalidInputError, WriteError

__all__ = ["atomic_write_text", "read_input_bytes"]

_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class _Terminated(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise _Terminated(signum)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into an exception while a temporary file exists (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _new_mode(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _fail(path: Path, error: OSError) -> WriteError:
    reason = error.strerror or str(error)
    return WriteError(
        f"cannot write {path}: {reason}",
        hint="choose a writable path with --output (the old file, if any, is unchanged)",
    )


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never a mix."""
    if not path.name or path.name in (".", ".."):
        raise WriteError(
            f"cannot write '{path}': not a file name", hint="give a file path with --output"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _fail(path, error) from None
    mode = _new_mode(path)
    tmp: str | None = None
    try:
        with _signals_raise():
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                    handle.write(text)
                    handle.flush()
                    os.fchmod(handle.fileno(), mode)
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
                tmp = None
            finally:
                if tmp is not None:
                    Path(tmp).unlink(missing_ok=True)
    except OSError as error:
        raise _fail(path, error) from None
    except _Terminated as stop:
        raise SystemExit(128 + stop.signum) from None


def read_input_bytes(path: Path, *, hint: str) -> bytes:
    """The bytes of an input file the user named; exit 4 with ``hint`` when it is missing, or
    with the OS's reason when it cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InvalidInputError(f"no such file: {path}", hint=hint) from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
