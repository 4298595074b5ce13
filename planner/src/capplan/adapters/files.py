"""Atomic file writes, and bounded reads of the files a user names.

Writes (:func:`atomic_write_text`, the one writer of every file capplan writes: ``generate``,
``ci github --output``, ``limits read --update-kb --write``, failure records): a temporary file
in the same folder, fsync, then a rename. What may be replaced is decided once, by
:func:`output_target`:

- a regular file, or a new name in a folder that exists (a missing folder is an error: a typo
  in ``--output`` must not create a tree somewhere; only a default path such as generate's
  ``overlays/plan.json`` creates its folder, and a path inside a git repository, such as
  ``.github/workflows/cuda-cache.yml``, its missing folders there: :func:`repository_folders`);
- a symlink is written *through*: the file it points to (followed to the end) is replaced, or
  created in its existing folder, and the link stays a link, as ``sed -i --follow-symlinks``,
  editors and the shell's ``>`` do; a symlink loop is refused;
- anything else (a folder, a FIFO, a character or block device, a socket) is refused: a rename
  would put a regular file in its place, and whatever read the FIFO or device gets nothing;
- a name for capplan's own open streams (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``,
  ``/proc/self/fd/N``, or a symlink to one) is written *to the stream*, never renamed over:
  ``matrix --rows /dev/stdout >> "$GITHUB_OUTPUT"`` appends as the shell's ``>>`` asked, where
  a rename would replace the file the shell redirected into (and wipe what earlier steps
  wrote to it).

The new file gets the mode a normal file would get (0666 minus the umask, so 0644 under umask
022), or keeps the mode of the file it replaces. Any failure (a folder that is a file, /proc, a
read-only or full file system) is a :class:`WriteError` naming the path and the OS's reason, and
the old file is left as it was. SIGTERM and SIGHUP during the write remove the temporary file
before the process ends, as an exception does. A writer killed outright (``kill -9``, a lost
runner) cannot remove its temporary file, so each writer holds an ``flock`` on its own
temporary file, and the next write to the same file removes the ones no live writer holds.
Temporary names are unmistakable (``.<name>.capplan-tmp-XXXXXXXX``, :func:`temporary_name`):
a user's ``.flake.nix.backup01.tmp`` is never taken for one, and only a regular file of this
user, with one link, that no writer locks is removed.

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
import re
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import BinaryIO

from capplan.errors import InvalidInputError, WriteError, shorten

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
    "path_kind",
    "read_bounded",
    "read_input_bytes",
    "remove_stale_temporaries",
    "repository_folders",
    "special_kind",
    "stream_fd",
    "temporary_name",
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


def _reason(error: OSError) -> str:
    if error.errno == errno.ENAMETOOLONG:
        return "a name longer than the file system allows (NAME_MAX, 255 bytes a name)"
    if error.errno == errno.ELOOP:
        return "a symlink loop"
    return error.strerror or str(error)


def _fail(path: Path | str, error: OSError | str) -> WriteError:
    reason = error if isinstance(error, str) else _reason(error)
    return WriteError(
        f"cannot write {shorten(os.fsdecode(path))}: {reason}",
        hint="choose a writable path: a regular file, or a new name in an existing folder "
        "(the old file, if any, is unchanged)",
    )


# /dev/stdout, /dev/stderr and /dev/stdin are links to these (Linux); /proc/self is a link
# to /proc/<pid>, which the folder's realpath gives.
_FD_PATH = re.compile(
    r"/(?:dev/fd|proc/(?:self|thread-self|[0-9]+(?:/task/[0-9]+)?)/fd)/([0-9]{1,9})"
)
_STD_STREAMS = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def _fd_of(where: str) -> int | None:
    known = _STD_STREAMS.get(where)
    if known is not None:
        return known
    match = _FD_PATH.fullmatch(where)
    if match is None:
        return None
    pid = re.match(r"/proc/([0-9]+)/", where)
    return None if pid is not None and int(pid.group(1)) != os.getpid() else int(match.group(1))


def stream_fd(path: Path | str) -> int | None:
    """The file descriptor ``path`` names when it is one of this process's open streams
    (``/dev/stdout``, ``/dev/fd/3``, ``/proc/self/fd/1``, or a symlink to one); None for any
    other path. Followed link by link, as the kernel would, never through the stream's own
    link in /proc (which names the file or pipe behind it)."""
    try:
        where = os.path.abspath(os.fsdecode(path))
        for _ in range(40):  # Linux follows at most 40 links in one lookup (ELOOP past it)
            fd = _fd_of(where)
            if fd is not None:
                return fd
            where = os.path.join(os.path.realpath(os.path.dirname(where)), os.path.basename(where))
            fd = _fd_of(where)
            if fd is not None:
                return fd
            if not os.path.islink(where):
                return None
            where = os.path.normpath(os.path.join(os.path.dirname(where), os.readlink(where)))
    except (OSError, ValueError):
        return None
    return None


def path_kind(path: Path | str) -> str:
    """What ``path`` is, for a message: "a FIFO (named pipe)", "a dangling symlink (to 'x')",
    "a symlink loop", "capplan's standard output", "a folder", "a regular file", "missing"."""
    fd = stream_fd(path)
    if fd is not None:
        return {0: "capplan's standard input", 1: "capplan's standard output"}.get(
            fd, "capplan's standard error" if fd == 2 else f"capplan's open file descriptor {fd}"
        )
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as error:
        return f"unreadable ({_reason(error)})"
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            try:
                to = os.readlink(path)
            except OSError:
                to = "?"
            return f"a dangling symlink (to '{shorten(os.fsdecode(to), 100)}')"
        except OSError as error:
            return _reason(error) if error.errno == errno.ELOOP else f"a symlink ({_reason(error)})"
        return f"a symlink to {_what(mode)}"
    return _what(mode)


def _what(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a regular file" if stat.S_ISREG(mode) else _kind(mode)


def output_target(path: Path, *, make_parents: bool = False) -> Path:
    """The file a write to ``path`` replaces (see the module doc): ``path`` itself, or the end
    of the symlink ``path`` is; a WriteError for anything that may not be replaced.

    ``make_parents`` creates a missing folder: only for a default path, never for one a user
    typed.
    """
    if not path.name or path.name in (".", ".."):
        raise WriteError(
            f"cannot write '{shorten(os.fsdecode(path))}': not a file name",
            hint="give a file path with --output",
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
            raise _fail(path, error) from None
    if stat.S_ISDIR(mode):
        raise _fail(path, "a folder, not a regular file")
    if not stat.S_ISREG(mode):
        raise _fail(path, f"{_kind(mode)}, not a regular file (it is left as it is)")
    return target


def output_folder(
    given: Path | str, *, make_parents: bool = False, option: str = "--output"
) -> Path:
    """``path`` as a folder to write files into (``export --output DIR``): kept when it is one,
    made when it is missing and its parent is a folder (as ``mkdir DIR`` would), never with
    missing parents, the rule of a typed ``--output`` (``make_parents``: as ``mkdir -p``, for
    ``init DIRECTORY``); a WriteError otherwise, saying what the path is (a FIFO, a device, a
    dangling symlink, a loop, capplan's own stdout)."""
    hint = f"give {option} a folder (it is made when missing)"
    if not os.fsdecode(given):  # Path("") is ".": an empty argument must not mean here
        raise WriteError(f"{option} is empty, which names no folder", hint=hint)
    path = Path(given)
    shown = shorten(os.fsdecode(path))
    if stream_fd(path) is not None:
        raise WriteError(
            f"cannot write into {shown}: it is {path_kind(path)}, not a folder", hint=hint
        )
    try:
        mode: int | None = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None  # missing, or below a file: mkdir says which
    except OSError as error:
        raise WriteError(f"cannot write into {shown}: {_reason(error)}", hint=hint) from None
    if mode is not None:
        if stat.S_ISDIR(mode):
            return path
        raise WriteError(
            f"cannot write into {shown}: it is {path_kind(path)}, not a folder", hint=hint
        )
    if os.path.islink(path):
        raise WriteError(f"cannot write into {shown}: it is {path_kind(path)}", hint=hint)
    if not make_parents:
        parent = path.parent
        try:
            parent_mode: int | None = os.stat(parent).st_mode
        except FileNotFoundError:
            parent_mode = None
        except OSError as error:
            raise WriteError(f"cannot write into {shown}: {_reason(error)}", hint=hint) from None
        if parent_mode is None or not stat.S_ISDIR(parent_mode):
            where = shorten(os.fsdecode(parent))
            what = (
                f"no folder {where}"
                if parent_mode is None
                else f"{where} is {path_kind(parent)}, not a folder"
            )
            raise WriteError(
                f"cannot write into {shown}: {what} (create it first)",
                hint=f"give {option} a folder whose parent exists",
            )
    try:
        path.mkdir(parents=make_parents)
    except OSError as error:
        raise WriteError(f"cannot create {shown}: {_reason(error)}", hint=hint) from None
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


def repository_folders(folder: Path) -> list[Path]:
    """The folders to create so that ``folder`` exists, when they all lie inside a git
    repository (the nearest folder above, symlinks resolved, that holds ``.git``): ``ci github
    --output .github/workflows/cuda-cache.yml`` in a fresh repository (issue 46). Empty when
    ``folder`` exists, when a missing part is ``.`` or ``..``, when what exists is no folder,
    or when no repository holds it: a typed path outside a repository still names an existing
    folder, so a typo never creates a tree somewhere."""
    missing: list[Path] = []
    base = folder
    while not os.path.lexists(base):
        if base.name in ("", ".", ".."):
            return []
        missing.append(base)
        if base.parent == base:
            return []
        base = base.parent
    try:
        if not missing or not stat.S_ISDIR(os.stat(base).st_mode):
            return []
        real = Path(os.path.realpath(base))
    except (OSError, ValueError):
        return []
    if not any(os.path.lexists(above / ".git") for above in (real, *real.parents)):
        return []
    return missing[::-1]


def _new_file(path: Path, make_parents: bool) -> Path:
    parent = path.parent
    try:
        if make_parents:
            parent.mkdir(parents=True, exist_ok=True)
        else:
            for folder in repository_folders(parent):
                with contextlib.suppress(FileExistsError):
                    folder.mkdir()
        is_dir = stat.S_ISDIR(os.stat(parent).st_mode)
    except FileNotFoundError:
        raise _fail(path, f"no folder {shorten(os.fsdecode(parent))} (create it first)") from None
    except OSError as error:
        raise _fail(path, error) from None
    if not is_dir:
        raise _fail(path, f"{shorten(os.fsdecode(parent))} is {path_kind(parent)}, not a folder")
    return path


# A temporary file's name: the target's name (cut so the whole stays under NAME_MAX, 255
# bytes), this tag, tempfile.mkstemp's 8 random characters and ".tmp". The tag makes it
# unmistakable: a user's ".flake.nix.backup01.tmp" has the shape of mkstemp's old names.
_TEMP_TAG = ".capplan-tmp-"
_TEMP_SUFFIX = ".tmp"
_TEMP_NAME_BYTES = 200
_TEMP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _temp_prefix(target: str) -> str:
    cut = os.fsencode(target)[:_TEMP_NAME_BYTES]
    return "." + os.fsdecode(cut) + _TEMP_TAG


def temporary_name(target: str) -> str:
    """The pattern of a temporary file of a write to the file named ``target``: what
    :func:`remove_stale_temporaries` looks for (``XXXXXXXX`` stands for the random part)."""
    return _temp_prefix(target) + "XXXXXXXX" + _TEMP_SUFFIX


def _is_temp_of(name: str, target: str) -> bool:
    prefix = _temp_prefix(target)
    middle = name[len(prefix) : -len(_TEMP_SUFFIX)]
    return (
        name.startswith(prefix)
        and name.endswith(_TEMP_SUFFIX)
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
            # Only what a writer of this user leaves: a regular file with one name, its own.
            if not stat.S_ISREG(held.st_mode) or held.st_nlink != 1 or held.st_uid != os.geteuid():
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
        fd, tmp = tempfile.mkstemp(
            prefix=_temp_prefix(target.name), suffix=_TEMP_SUFFIX, dir=target.parent
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            return fd, tmp  # no locks here: nothing will remove it either
        if os.fstat(fd).st_nlink:
            return fd, tmp
        os.close(fd)  # a cleaner took it between its creation and the lock: take another


def atomic_write_text(path: Path, text: str, *, make_parents: bool = False) -> None:
    """Replace ``path`` (or the file its symlink points to) with ``text`` so readers see the
    old or the new file, never a mix; ``make_parents`` as :func:`output_target`. A name for
    one of capplan's open streams (/dev/stdout) is written to that stream instead."""
    fd = stream_fd(path)
    if fd is not None:
        _write_stream(path, fd, text)
        return
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


def _write_stream(path: Path, fd: int, text: str) -> None:
    """``text`` written to the open stream ``fd``, after what capplan printed there already:
    appended where the shell opened it with ``>>``, never replacing the file behind it."""
    import sys

    data = memoryview(text.encode("utf-8"))
    try:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:
        if fd == 1:
            raise  # the reader of stdout went away: capplan ends quietly, as for its output
        raise _fail(path, "the stream's reader has gone (a closed pipe)") from None
    except OSError as error:
        raise _fail(path, error) from None


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
