"""File I/O for the failure record: bounded reads, locked atomic updates, jobs and build logs.

A record that cannot be read (not UTF-8, not JSON, another format or version, too large) is a
DataError (exit 6) and is never written over: every update reads the file first, under a lock,
and writes the new one with :func:`atomic_write_text` only after the read succeeded.

Parallel writers to one file (``failures add`` from several jobs on one machine, or a shared
folder) take an exclusive ``flock`` on a lock file beside it, ``.<name>.lock``, for the whole
read-modify-write; the record itself is replaced by a rename, so it cannot be the lock. A
record that is a symlink is updated through it (as every capplan writer does), so the lock is
taken beside the file the link points to: writers through the link and through the file
exclude each other. The lock file is removed when the update ends (refused or not); a writer
that locked a file removed meanwhile locks the new one instead, so removing it loses no
exclusion.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from capplan.adapters.files import (
    INT_DIGITS_MESSAGE,
    link_target,
    numbered_lines,
    open_regular,
    special_kind,
)
from capplan.core.planning.failures import (
    FailureRecord,
    check_drv,
    log_tail,
    parse_record,
)
from capplan.errors import DataError, InvalidInputError, WriteError, json_printable, shorten

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan

__all__ = [
    "MAX_LOG_BYTES",
    "MAX_RECORD_BYTES",
    "BuildbotFailure",
    "JobDerivation",
    "flake_derivations",
    "locked",
    "plan_derivations",
    "read_buildbot_failures",
    "read_job_derivations",
    "read_log_tail",
    "read_record",
    "record_target",
    "record_text",
    "write_record",
]

MAX_RECORD_BYTES = 32 * 1024 * 1024  # ~40,000 failures with full log tails
MAX_LOG_BYTES = 256 * 1024  # the end of the log: where nix says why the builder failed
MAX_JOBS_LINE = 1024 * 1024


def read_record(path: Path, *, missing_ok: bool = False) -> FailureRecord:
    """The record at ``path``; an empty one when it does not exist and ``missing_ok``."""
    try:
        with open_regular(path) as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        if missing_ok:
            return FailureRecord()
        raise InvalidInputError(
            f"no such failure record: {path}",
            hint="check the path (`capplan failures add` creates a record)",
        ) from None
    except IsADirectoryError:
        raise InvalidInputError(
            f"{path} is a folder, not a failure record", hint="give the record's file path"
        ) from None
    except OSError as exc:
        raise DataError(f"cannot read failure record {path}: {exc.strerror}") from None
    if len(data) > MAX_RECORD_BYTES:
        raise DataError(
            f"{path}: the failure record is larger than {MAX_RECORD_BYTES >> 20} MiB",
            hint="forget old failures (capplan failures forget --older-than DAYS) on a copy",
        )
    try:
        decoded = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise DataError(
            f"{path}: the failure record is not UTF-8 text",
            hint="fix or remove the file (it is left as it is)",
        ) from None
    except (ValueError, RecursionError) as exc:
        where = ""  # RecursionError: nested too deeply
        if isinstance(exc, json.JSONDecodeError):
            where = f" (line {exc.lineno}: {exc.msg})"
        elif isinstance(exc, ValueError):  # a number past Python's 4,300 digits
            where = f" ({INT_DIGITS_MESSAGE})"
        raise DataError(
            f"{path}: the failure record is not JSON{where}",
            hint="fix or remove the file (it is left as it is)",
        ) from None
    return parse_record(decoded, str(path))


def record_text(record: FailureRecord) -> str:
    """The file's text: sorted keys, two-space indent, one newline at the end."""
    text = json.dumps(record.to_json(), indent=2, sort_keys=True, ensure_ascii=False)
    return json_printable(text) + "\n"


def write_record(path: Path, record: FailureRecord) -> None:
    from capplan.adapters.files import atomic_write_text

    atomic_write_text(path, record_text(record))


def record_target(path: Path) -> Path:
    """The file an update of the record ``path`` reads and replaces: the end of a symlink
    (existing or not), else ``path`` (a loop stays ``path``: reading it says why)."""
    try:
        return link_target(path)
    except OSError:
        return path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[Path]:
    """Hold an exclusive lock for updating the record at ``path`` (see the module doc); yields
    the file to read and replace (:func:`record_target`)."""
    target = record_target(path)
    lock = target.with_name(f".{target.name}.lock")
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:
            raise WriteError(
                f"cannot write {path}: no folder {target.parent} (create it first)",
                hint="give a record path in an existing, writable folder",
            ) from None
        except OSError as exc:
            raise WriteError(
                f"cannot create the lock file {lock}: {exc.strerror}",
                hint="give a record path in a writable folder",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, now = os.fstat(fd), os.lstat(lock)
        except FileNotFoundError:
            os.close(fd)  # its holder removed it as we waited: lock the new one
            continue
        except BaseException:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
            break
        os.close(fd)
    try:
        yield target
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)  # still ours: removed before the lock is released
        os.close(fd)


def read_log_tail(path: Path) -> tuple[str, ...]:
    """The last lines of a build log, reading at most its last ``MAX_LOG_BYTES``."""
    try:
        with open_regular(path) as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - MAX_LOG_BYTES))
            data = handle.read(MAX_LOG_BYTES)
    except FileNotFoundError:
        raise InvalidInputError(
            f"no such log file: {path}", hint="give the file the build's output went to"
        ) from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read log file {path}: {exc.strerror}") from None
    text = data.decode("utf-8", errors="replace")
    if size > MAX_LOG_BYTES:
        text = text.partition("\n")[2]  # the first line read is likely cut
    return log_tail(text)


@dataclass(frozen=True)
class JobDerivation:
    """One job of a jobs file: its attribute, derivation path and system."""

    attr: str
    drv: str
    system: str


def read_job_derivations(path: Path) -> dict[str, JobDerivation]:
    """``{attr: JobDerivation}`` from JSON lines with ``attr``, ``drvPath`` and ``system``:
    what nix-eval-jobs prints (and what a Hydra or buildbot-nix user converts to, see
    docs/failures.md). A line with ``error`` (the job did not evaluate) has no derivation and
    is left out; other bad lines are a DataError naming the line."""
    out: dict[str, JobDerivation] = {}
    try:
        handle = open_regular(path)
    except FileNotFoundError:
        raise InvalidInputError(
            f"no such jobs file: {path}", hint="give the JSON lines nix-eval-jobs printed"
        ) from None
    except OSError as exc:
        raise DataError(f"cannot read jobs file {path}: {exc.strerror}") from None
    seen = False
    with handle:
        for number, line in numbered_lines(handle, MAX_JOBS_LINE):

            def bad(why: str, number: int = number) -> DataError:
                return DataError(
                    f"{path}:{number}: {why}",
                    hint="give the JSON lines nix-eval-jobs prints (fields attr, drvPath, system)",
                )

            if line is None:
                raise bad(f"a line longer than {MAX_JOBS_LINE >> 20} MiB")
            if not line.strip():
                continue
            seen = True
            try:
                job = json.loads(line)
            except json.JSONDecodeError as exc:
                raise bad(f"not JSON ({exc.msg})") from None
            except (UnicodeDecodeError, RecursionError):
                raise bad("not UTF-8 JSON") from None
            except ValueError:
                raise bad(f"not JSON capplan reads ({INT_DIGITS_MESSAGE})") from None
            if not isinstance(job, dict):
                raise bad("not a JSON object")
            attr = job.get("attr")
            if not isinstance(attr, str) or not attr:
                raise bad("missing or empty 'attr'")
            if "error" in job:
                continue
            drv, system = job.get("drvPath"), job.get("system")
            if not isinstance(drv, str):
                raise bad(f"job {attr} has no 'drvPath'")
            try:
                check_drv(drv)
            except InvalidInputError:
                raise bad(
                    f"job {attr}: 'drvPath' is not a derivation path: {drv[:200]!r}"
                ) from None
            if not isinstance(system, str) or not system:
                raise bad(f"job {attr} has no 'system'")
            if attr in out:
                raise bad(f"duplicate attr {attr!r}")
            out[attr] = JobDerivation(attr, drv, system)
    if not seen:
        # An empty file is a step that went wrong (nix-eval-jobs failed, the wrong path), not
        # a plan without jobs: reading it as one would skip or keep every job without a word.
        raise DataError(
            f"jobs file {path} holds no jobs",
            hint="give the JSON lines nix-eval-jobs printed (fields attr, drvPath, system)",
        )
    return out


@dataclass(frozen=True)
class BuildbotFailure:
    """One row of buildbot-nix's failed-build list."""

    drv: str
    timestamp: float  # seconds since 1970, UTC, as buildbot-nix stored it (any float)
    url: str


# How much of a buildbot database capplan reads. buildbot-nix keeps one row per failed
# derivation (a busy farm: thousands); a `failed_builds` that is a view can be endless (a
# recursive view), so the query is bounded in rows, in time (SQLite's progress handler) and in
# memory (temporary tables kept in memory under a heap limit, never in a file under /var/tmp).
MAX_BUILDBOT_ROWS = 500_000
BUILDBOT_SECONDS = 30.0
_BUILDBOT_HEAP = 256 * 1024 * 1024
_BUILDBOT_VALUE = 64 * 1024  # buildbot-nix's columns are String(512) and String(1024)


def _database_uri(path: Path) -> str:
    """A read-only SQLite URI naming exactly ``path``: every byte but the unreserved ones
    percent-escaped, so ``#``, ``?`` and ``%`` in a name are part of it, not a fragment, a
    query or an escape (https://www.sqlite.org/uri.html: the path is percent-decoded), and a
    name that is not UTF-8 keeps its bytes."""
    from urllib.parse import quote

    return "file:" + quote(os.fsencode(os.path.abspath(path)), safe="/") + "?mode=ro"


def _buildbot_file(path: Path) -> None:
    """Refuse, with one line, a ``--db`` that is no regular file capplan can open."""
    hint = "give buildbot's SQLite database (the master's state.sqlite)"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InvalidInputError(f"no such buildbot database: {path}", hint=hint) from None
    except OSError as exc:
        # ENAMETOOLONG, EACCES on a folder above it, ELOOP, ENOTDIR: the OS's reason says which
        raise InvalidInputError(
            f"cannot open buildbot database {path}: {exc.strerror}", hint=hint
        ) from None
    if stat.S_ISDIR(mode):
        raise InvalidInputError(f"{path} is a folder, not a buildbot database", hint=hint)
    if not stat.S_ISREG(mode):
        raise InvalidInputError(
            f"{path} is {special_kind(path)}, not a buildbot database file", hint=hint
        )


def _heap_limit(limit: int) -> int | None:
    """Set SQLite's hard heap limit (the whole process's: every connection's memory together,
    past which a query fails with SQLITE_NOMEM) and return the one it replaces; None where the
    C function cannot be reached. ``PRAGMA hard_heap_limit`` can only lower the limit, never
    put it back (https://www.sqlite.org/pragma.html#pragma_hard_heap_limit), so the read sets
    and restores it through sqlite3_hard_heap_limit64, which the sqlite3 module links."""
    import ctypes

    try:
        import _sqlite3

        setter = ctypes.CDLL(_sqlite3.__file__).sqlite3_hard_heap_limit64
    except (ImportError, OSError, AttributeError):
        return None
    setter.restype = ctypes.c_int64
    setter.argtypes = [ctypes.c_int64]
    return int(setter(limit))


def read_buildbot_failures(path: Path) -> list[BuildbotFailure]:
    """buildbot-nix's failed-build list: the ``failed_builds`` table (``derivation`` primary
    key, ``timestamp`` float, ``url``; buildbot_nix/db/failed_builds.py, nix-community/
    buildbot-nix commit e446e345) of its buildbot database, a SQLite file, read only; sorted by
    derivation."""
    import sqlite3
    import time

    _buildbot_file(path)

    def bad(why: str) -> DataError:
        return DataError(
            f"{path}: cannot read buildbot-nix's failed builds: {why}",
            hint="give buildbot-nix's master database (it has the table failed_builds)",
        )

    deadline = time.monotonic() + BUILDBOT_SECONDS
    rows: list[tuple[object, object, object]] = []
    heap = _heap_limit(_BUILDBOT_HEAP)
    try:
        with contextlib.closing(sqlite3.connect(_database_uri(path), uri=True)) as db:
            # Text that is not UTF-8 is read with replacement characters (then refused as no
            # .drv, or kept in a URL) instead of failing the whole read.
            db.text_factory = lambda raw: raw.decode("utf-8", "replace")
            db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _BUILDBOT_VALUE)
            db.execute("PRAGMA temp_store = MEMORY")
            db.execute("PRAGMA cache_size = -16384")  # KiB: 16 MiB of page cache
            if heap is None:  # no C entry point: the pragma, which only ever lowers it
                db.execute(f"PRAGMA hard_heap_limit = {int(_BUILDBOT_HEAP)}")
            db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
            # No ORDER BY: sorting in SQLite would read every row before the first (an endless
            # view never returns); the rows are sorted here, after the limit.
            cursor = db.execute("SELECT derivation, timestamp, url FROM failed_builds")
            while len(rows) <= MAX_BUILDBOT_ROWS:
                chunk = cursor.fetchmany(4096)
                if not chunk:
                    break
                rows.extend(chunk)
    except MemoryError:
        raise bad(f"the query needs more than {_BUILDBOT_HEAP >> 20} MiB") from None
    except sqlite3.Error as exc:
        if time.monotonic() > deadline:
            raise bad(f"no answer within {BUILDBOT_SECONDS:g} s (an endless view?)") from None
        raise bad(shorten(str(exc))) from None
    finally:
        if heap is not None:
            _heap_limit(heap)
    if len(rows) > MAX_BUILDBOT_ROWS:
        raise bad(f"more than {MAX_BUILDBOT_ROWS:,} rows (an endless view?)")
    out = []
    for drv, timestamp, url in rows:
        if not isinstance(drv, str) or not isinstance(timestamp, int | float):
            raise DataError(
                f"{path}: a failed_builds row is not (text, number, text): {shorten(repr(drv))}"
            )
        try:
            check_drv(drv)
        except InvalidInputError:
            raise DataError(
                f"{path}: failed_builds holds {shorten(repr(drv))}, not a .drv"
            ) from None
        link = url if isinstance(url, str) else "" if url is None else repr(url)
        out.append(BuildbotFailure(drv, float(timestamp), link))
    return sorted(out, key=lambda row: row.drv)


# Given the flake's legacyPackages, { <attr> = { drv; outputs; } } for the requested attrs (null
# for a missing one). drvPath instantiates the derivation (writes its .drv, builds nothing);
# outputs are the same outPaths capplan.adapters.nix reads, so one evaluation serves both
# --failures and --skip-cached.
_DERIVATIONS_EXPR = """
legacyPackages:
let
  params = builtins.fromJSON (builtins.getEnv "CAPPLAN_NIX_PARAMS");
  pkgs = legacyPackages.${params.system} or { };
  describe = drv: {
    drv = drv.drvPath;
    outputs = map (o: drv.${o}.outPath) (drv.outputs or [ "out" ]);
  };
in
builtins.listToAttrs (map (name: {
  inherit name;
  value = if pkgs ? ${name} then describe pkgs.${name} else null;
}) params.attrs)
"""


def flake_derivations(
    flake: str,
    attrs: Sequence[str],
    override_inputs: Mapping[str, str] | None = None,
    *,
    system: str,
) -> dict[str, tuple[str, list[str]]]:
    """``{attr: (derivation path, output paths)}`` of ``legacyPackages.<system>.<attr>``,
    with one ``nix eval``."""
    from capplan.adapters.nix import PARAMS_ENV, nix_eval_json
    from capplan.core.caches.narinfo import split_store_path
    from capplan.errors import CapplanError, NixError

    names = sorted(set(attrs))
    if not names:
        return {}
    params = json.dumps({"system": system, "attrs": names}, sort_keys=True)
    args = [f"{flake}#legacyPackages", "--impure", "--apply", _DERIVATIONS_EXPR]
    args.append("--no-write-lock-file")
    for name, ref in sorted((override_inputs or {}).items()):
        args += ["--override-input", name, ref]
    result = nix_eval_json(args, env={PARAMS_ENV: params})
    if not isinstance(result, dict):
        raise NixError(
            f"nix eval of {flake}#legacyPackages returned {type(result).__name__}, not an attrset",
            hint="check the flake's legacyPackages output",
        )
    missing = [name for name in names if result.get(name) is None]
    if missing:
        raise NixError(
            f"flake {flake} has no legacyPackages.{system}.{missing[0]}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            hint="list the flake's packages with `nix flake show`",
        )
    out: dict[str, tuple[str, list[str]]] = {}
    for name in names:
        entry = result[name]
        drv = entry.get("drv") if isinstance(entry, dict) else None
        outputs = entry.get("outputs") if isinstance(entry, dict) else None
        try:
            if not isinstance(drv, str) or not isinstance(outputs, list):
                raise NixError("")
            check_drv(drv)
            for path in outputs:
                split_store_path(path if isinstance(path, str) else "")
        except CapplanError:
            raise NixError(
                f"unexpected derivation of {name}: {str(entry)[:200]}", hint="report this bug"
            ) from None
        out[name] = (drv, [str(p) for p in outputs])
    return out


def plan_derivations(
    plan: Plan, flake: str, override_inputs: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each planned variant's derivation and output paths in ``flake``: one nix eval per
    system (:func:`flake_derivations`)."""
    drvs: dict[str, str] = {}
    outputs: dict[str, list[str]] = {}
    for system in plan.systems:
        here = [v.name for v in plan.variants if v.system == system]
        if here:
            for name, (drv, outs) in flake_derivations(
                flake, here, override_inputs, system=system
            ).items():
                drvs[name], outputs[name] = drv, outs
    return drvs, outputs
