"""Atomic file writes, and bounded reads of the files a user names.

Writes (:func:`atomic_write_text`, the one writer of every file capplan writes: ``generate``,
``ci github --output``, ``limits read --update-kb --write``, failure records): a temporary file
in the same folder, fsync, then a rename. What may be replaced is decided once, by
:func:`output_target`:

- a regular file, or a new name in a folder that exists (a missing folder is an error: a typo
  in ``--output`` must not create a tree somewhere; only a default path such as generate's
  ``overlays/plan.json`` creates its folder);
- a symlink is written *through*: the file it points to (followed to the end) is replaced, or
  created in its existing folder, and the link stays a link, as ``sed -i --follow-symlinks``,
  editors and the shell's ``>`` do; a symlink loop is refused;
- anything else (a folder, a FIFO, a character or block device, a socket) is refused: a rename
  would put a regular file in its place, and whatever read the FIFO or device gets nothing.

The new file gets the mode a normal file would get (0666 minus the umask, so 0644 under umask
022), or keeps the mode of the file it replaces. Any failure (a folder that is a file, /proc, a
read-only or full file system) is a :class:`WriteError` naming the path and the OS's reason, and
the old file is left as it was. SIGTERM and SIGHUP during the write remove the temporary file
before the process ends, as an exception does. A writer killed outright (``kill -9``, a lost
runner) cannot remove its temporary file, so each writer holds an ``flock`` on its own
temporary file, and the next write to the same file removes the ones no live writer holds.

Reads (:func:`open_regular`, :func:`read_bounded`): every file capplan reads from a user (a
config, a job list, a knowledge-base folder, /proc and sysfs, an environment's metadata) is
opened without blocking and refused unless it is a regular file (a FIFO would hang the open, a
character device such as /dev/zero would never end), and read up to a limit. Refusals are
OSErrors whose ``strerror`` says what the file is, so every caller's existing "cannot read
<path>: <reason>" line and exit code apply.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import BinaryIO

from capplan.errors import InvalidInputError, WriteError

__all__ = [
    "INT_DIGITS_MESSAGE",
    "MAX_INPUT_BYTES",
    "MAX_PROC_BYTES",
    "atomic_write_text",
    "link_target",
    "numbered_lines",
    "open_regular",
    "output_folder",
    "output_target",
    "read_bounded",
    "read_input_bytes",
    "remove_stale_temporaries",
    "special_kind",
]

# The default limit of :func:`read_bounded`: far above any config, source or metadata file
# capplan reads (torch's cpp_extension.py is about 120 KB), far below what would hurt.
MAX_INPUT_BYTES = 16 * 1024 * 1024
# What a JSON reader says of the ValueError json.loads raises past JSONDecodeError: an integer
# longer than Python converts (sys.get_int_max_str_digits(), 4,300 digits by default).
INT_DIGITS_MESSAGE = "a number with more digits than Python reads"
# A /proc or sysfs file (a driver's version, a GPU's information, a KFD node's properties).
MAX_PROC_BYTES = 256 * 1024

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)

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


def _fail(path: Path, error: OSError | str) -> WriteError:
    reason = error if isinstance(error, str) else (error.strerror or str(error))
    return WriteError(
        f"cannot write {path}: {reason}",
        hint="choose a writable path: a regular file, or a new name in an existing folder "
        "(the old file, if any, is unchanged)",
    )


def output_target(path: Path, *, make_parents: bool = False) -> Path:
    """The file a write to ``path`` replaces (see the module doc): ``path`` itself, or the end
    of the symlink ``path`` is; a WriteError for anything that may not be replaced.

    ``make_parents`` creates a missing folder: only for a default path, never for one a user
    typed.
    """
    if not path.name or path.name in (".", ".."):
        raise WriteError(
            f"cannot write '{path}': not a file name", hint="give a file path with --output"
        )
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return _new_file(path, make_parents)
    except OSError as error:
        raise _fail(path, error) from None
    target = path
    if stat.S_ISLNK(mode):
        try:
            target = link_target(path)
            mode = os.stat(target).st_mode
        except FileNotFoundError:
            return _new_file(target, False)  # the link's file is new: created through it
        except OSError as error:
            why = "a symlink loop" if error.errno == errno.ELOOP else error.strerror or str(error)
            raise _fail(path, why) from None
    if stat.S_ISDIR(mode):
        raise _fail(path, "a folder, not a regular file")
    if not stat.S_ISREG(mode):
        raise _fail(path, f"{_kind(mode)}, not a regular file (it is left as it is)")
    return target


def output_folder(path: Path) -> Path:
    """``path`` as a folder to write files into (``export --output DIR``): kept when it is one,
    made when it is missing and its parent is a folder (as ``mkdir DIR`` would), never with
    missing parents, the rule of a typed ``--output``; a WriteError otherwise."""
    if path.is_dir():
        return path
    if path.exists():
        raise WriteError(
            f"cannot write into {path}: it is a file, not a folder",
            hint="give --output a folder (it is made when missing)",
        )
    if not path.parent.is_dir():
        raise WriteError(
            f"cannot write into {path}: no folder {path.parent} (create it first)",
            hint="give --output a folder whose parent exists",
        )
    try:
        path.mkdir()
    except OSError as error:
        raise _fail(path, error) from None
    return path


def link_target(path: Path) -> Path:
    """Where a write to ``path`` lands: ``path``, or the end of the symlink ``path`` is, which
    may not exist yet; OSError (ELOOP) for a symlink loop."""
    if not path.is_symlink():
        return path
    try:
        return Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:
        return Path(os.path.realpath(path))


def _new_file(path: Path, make_parents: bool) -> Path:
    parent = path.parent
    try:
        if make_parents:
            parent.mkdir(parents=True, exist_ok=True)
        is_dir = stat.S_ISDIR(os.stat(parent).st_mode)
    except FileNotFoundError:
        raise _fail(path, f"no folder {parent} (create it first)") from None
    except OSError as error:
        raise _fail(path, error) from None
    if not is_dir:
        raise _fail(path, f"{parent} is not a folder")
    return path


# tempfile.mkstemp's names: the prefix, 8 characters of this alphabet, the suffix.
_TEMP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _is_temp_of(name: str, target: str) -> bool:
    prefix = f".{target}."
    middle = name[len(prefix) : -len(".tmp")]
    return (
        name.startswith(prefix)
        and name.endswith(".tmp")
        and len(middle) == 8
        and set(middle) <= _TEMP_CHARS
    )


def remove_stale_temporaries(target: Path) -> int:
    """Remove the temporary files of writers to ``target`` that died mid-write (none holds
    its file's lock any more); the number removed. A live writer's file is never touched."""
    removed = 0
    try:
        with os.scandir(target.parent) as listing:
            entries = sorted(e.name for e in listing if _is_temp_of(e.name, target.name))
    except OSError:
        return 0
    for name in entries:
        where = target.parent / name
        try:
            fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            held = os.fstat(fd)
            if not stat.S_ISREG(held.st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            now = os.lstat(where)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                os.unlink(where)
                removed += 1
        except OSError:
            continue  # held by a live writer, gone already, or no locks on this file system
        finally:
            os.close(fd)
    return removed


def _locked_temporary(target: Path) -> tuple[int, str]:
    """A new temporary file beside ``target``, open and locked (so no cleaner removes it)."""
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            return fd, tmp  # no locks here: nothing will remove it either
        if os.fstat(fd).st_nlink:
            return fd, tmp
        os.close(fd)  # a cleaner took it between its creation and the lock: take another


def atomic_write_text(path: Path, text: str, *, make_parents: bool = False) -> None:
    """Replace ``path`` (or the file its symlink points to) with ``text`` so readers see the
    old or the new file, never a mix; ``make_parents`` as :func:`output_target`."""
    target = output_target(path, make_parents=make_parents)
    mode = _new_mode(target)
    remove_stale_temporaries(target)
    tmp: str | None = None
    try:
        with _signals_raise():
            try:
                fd, tmp = _locked_temporary(target)
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                    handle.write(text)
                    handle.flush()
                    os.fchmod(handle.fileno(), mode)
                    os.fsync(handle.fileno())
                    # renamed while its lock is held: a cleaner never sees it unlocked
                    os.replace(tmp, target)
                    tmp = None
            finally:
                if tmp is not None:
                    Path(tmp).unlink(missing_ok=True)
    except OSError as error:
        raise _fail(path, error) from None
    except _Terminated as stop:
        raise SystemExit(128 + stop.signum) from None


def special_kind(path: Path | str) -> str:
    """What a path that is neither a regular file nor a folder is ("a FIFO (named pipe)")."""
    try:
        return _kind(os.stat(path).st_mode)
    except OSError:
        return "unreadable"


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path | str) -> BinaryIO:
    """``path`` opened for binary reading, only if it is a regular file.

    The open never blocks (O_NONBLOCK, so a FIFO without a writer cannot hang it); a folder is
    IsADirectoryError, a FIFO, device or socket an OSError (EINVAL) whose strerror names it.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "a folder, not a regular file", str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"{_kind(mode)}, not a regular file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path | str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them: a larger file is an
    OSError (EFBIG) saying the limit, as :func:`open_regular` refuses what is no regular file."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(
            errno.EFBIG, f"larger than {_size(limit)}, the most capplan reads here", str(path)
        )
    return data


def numbered_lines(handle: BinaryIO, limit: int) -> Iterator[tuple[int, bytes | None]]:
    """The lines of ``handle`` with their 1-based numbers, none read past ``limit`` bytes: a
    longer line comes as ``(number, None)``, and the caller refuses it by its number."""
    number = 0
    while True:
        line = handle.readline(limit + 1)
        if not line:
            return
        number += 1
        yield number, (line if len(line) <= limit else None)


def _size(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n // (1024 * 1024)} MiB"
    return f"{n // 1024} KiB" if n >= 1024 else f"{n} bytes"


def read_input_bytes(path: Path, *, hint: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of an input file the user named; exit 4 with ``hint`` when it is missing, or
    with the OS's reason when it cannot be read (not a regular file, larger than ``limit``)."""
    try:
        return read_bounded(path, limit)
    except FileNotFoundError:
        raise InvalidInputError(f"no such file: {path}", hint=hint) from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
