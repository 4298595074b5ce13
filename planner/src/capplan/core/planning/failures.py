"""The failure record: builds that failed, keyed by derivation path, and the matrix filter.

A derivation path changes whenever any input of the build changes (a nixpkgs bump, a patch,
another capability list), so a recorded failure never outlives the build it describes: the
matrix skips a job only while its derivation is the one that failed. Nix itself remembers
nothing across machines (only ``--keep-failed`` logs on the one that built), and Hydra keeps
its own memory in its database; this record is the same memory as one small JSON file that CI
can carry from run to run.

Pure: the caller reads and writes the file and passes the time in, as UTC text like
``2026-11-24T20:27:42Z`` (core reads no clock; such text sorts and compares in time order).
The record's JSON shape (``record_schema()``) is versioned; a reader refuses any other version
rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from capplan.core.caches.storepath import split_store_path
from capplan.core.model.identifiers import check_identifier
from capplan.errors import DataError, InvalidInputError

__all__ = [
    "FIRST_SECOND",
    "FORMAT",
    "LAST_SECOND",
    "LOG_LINES",
    "LOG_LINE_CHARS",
    "MAX_COUNT",
    "VERSION",
    "Failure",
    "FailureRecord",
    "Imported",
    "KnownFailures",
    "check_drv",
    "check_time",
    "import_failures",
    "known_failures",
    "log_line",
    "log_tail",
    "parse_record",
    "record_schema",
    "utc_text",
]

FORMAT = "capplan-failures"
VERSION = 1
LOG_LINES = 40  # enough for nix's "error: builder for ... failed" and the compiler's complaint
LOG_LINE_CHARS = 400  # a line of a minified CMake command can be megabytes
# The largest count a record holds: the reader refuses more, so adding to it stays there (a
# writer never writes what its reader refuses).
MAX_COUNT = 10**9
_MAX_ATTR = 500
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_SYSTEM = re.compile(r"[a-z0-9_]+-[a-z0-9_]+")
# ANSI escapes (nix -L colours its prefixes) and the other control characters but tab.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def check_time(text: str) -> str:
    """``text`` when it is a real UTC time to the second, ``2026-11-24T20:27:42Z``; else
    ValueError. Records compare these as text, which is time order for this one spelling."""
    if not _TIME.fullmatch(text):
        raise ValueError(f"not a UTC time like 2026-11-24T20:27:42Z: {text[:40]!r}")
    year, month, day = int(text[0:4]), int(text[5:7]), int(text[8:10])
    hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not (
        1 <= month <= 12
        and 1 <= day <= _DAYS[month - 1]
        and (month != 2 or day <= 28 or leap)
        and hour < 24
        and minute < 60
        and second < 60
    ):
        raise ValueError(f"not a UTC time like 2026-11-24T20:27:42Z: {text!r}")
    return text


def check_drv(path: str) -> str:
    """A derivation's store path (``/nix/store/<hash>-<name>.drv``), or InvalidInputError."""
    try:
        name = split_store_path(path)[2]  # the same rule as the narinfo reader's
    except InvalidInputError:
        name = ""
    if not name.endswith(".drv"):
        shown = path if len(path) <= 200 else path[:200] + "..."
        raise InvalidInputError(
            f"not a derivation path: {shown!r}",
            hint="give the drvPath nix-eval-jobs prints: /nix/store/<hash>-<name>.drv",
        )
    return path


def log_line(text: str) -> str:
    """``text`` as one line of a log tail: colours and control characters removed (a newline
    too), cut to ``LOG_LINE_CHARS``, so a record holding it reads back (a longer line is
    refused by :func:`parse_record`)."""
    line = _CONTROL.sub("", _ANSI.sub("", text.replace("\n", " "))).strip()
    return line if len(line) <= LOG_LINE_CHARS else line[:LOG_LINE_CHARS] + "..."


# The first and last second a record's four-digit years can say (check_time).
FIRST_SECOND = 0  # 1970-01-01T00:00:00Z: buildbot-nix's timestamps are time.time()
LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z


def utc_text(seconds: float) -> str | None:
    """Seconds since 1970 as record time (``2026-11-24T20:27:42Z``, the second it falls in);
    None for what is no such time from 1970 to 9999 (NaN, infinities, 1e18, negatives)."""
    if not FIRST_SECOND <= seconds < LAST_SECOND + 1:  # False for NaN too
        return None
    days, second = divmod(int(seconds), 86_400)
    # civil_from_days (Howard Hinnant, "chrono-Compatible Low-Level Date Algorithms"): the
    # proleptic Gregorian date of a day count since 1970-01-01, without a clock module (core/).
    z = days + 719_468
    era, day_of_era = divmod(z, 146_097)
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted = (5 * day_of_year + 2) // 153  # months from March
    day = day_of_year - (153 * shifted + 2) // 5 + 1
    month = shifted + 3 if shifted < 10 else shifted - 9
    year = year_of_era + era * 400 + (month <= 2)
    hour, rest = divmod(second, 3600)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{rest // 60:02d}:{rest % 60:02d}Z"


def log_tail(text: str, lines: int = LOG_LINES) -> tuple[str, ...]:
    """The last ``lines`` non-blank lines of a build log, colours and control characters
    removed, each cut to ``LOG_LINE_CHARS``: what a maintainer reads to see why it failed."""
    kept: list[str] = []
    for raw in reversed(text.splitlines()):
        line = _CONTROL.sub("", _ANSI.sub("", raw)).rstrip()
        if not line.strip():
            continue
        if len(line) > LOG_LINE_CHARS:
            line = line[:LOG_LINE_CHARS] + "..."
        kept.append(line)
        if len(kept) == lines:
            break
    return tuple(reversed(kept))


@dataclass(frozen=True)
class Failure:
    """One derivation that failed to build: where, since when, how often, and how it ended."""

    drv: str
    attr: str  # the job's attribute as the jobs source names it (x86_64-linux.torch-sm120)
    system: str
    since: str  # first failure (format_time)
    last: str  # latest failure
    count: int
    log_tail: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "attr": self.attr,
            "system": self.system,
            "since": self.since,
            "last": self.last,
            "count": self.count,
            "log_tail": list(self.log_tail),
        }

    def merged(self, other: Failure) -> Failure:
        """Both records of the same derivation: counts add, the latest log wins."""
        # Ties (the same second) go to the larger log tail, so merge order never matters.
        newer = max(self, other, key=lambda f: (f.last, f.log_tail, f.attr, f.system))
        return replace(
            newer,
            since=min(self.since, other.since),
            last=max(self.last, other.last),
            count=min(self.count + other.count, MAX_COUNT),
        )


@dataclass(frozen=True)
class FailureRecord:
    """Every recorded failure, keyed by derivation path."""

    failures: Mapping[str, Failure] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.failures)

    def entries(self) -> list[Failure]:
        """By attribute, then derivation: the order ``failures list`` prints."""
        return sorted(self.failures.values(), key=lambda f: (f.attr, f.drv))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "failures": {drv: self.failures[drv].to_json() for drv in sorted(self.failures)},
        }

    def add(
        self, drv: str, attr: str, system: str, when: str, log: Sequence[str] = ()
    ) -> FailureRecord:
        """This record plus one more failure of ``drv`` at ``when`` (UTC text)."""
        check_drv(drv)
        _check_attr(attr)
        _check_system(system)
        check_time(when)
        for text in (drv, attr, *log):
            if not _unicode(text):
                raise InvalidInputError(
                    f"{_quote(text)} is not valid text (bytes that are not UTF-8?)",
                    hint="give the attribute, derivation and log as UTF-8 text",
                )
        new = Failure(drv, attr, system, when, when, 1, tuple(log))
        old = self.failures.get(drv)
        return self._with(new if old is None else old.merged(new))

    def add_all(
        self, failures: Iterable[tuple[str, str, str, str, Sequence[str]]]
    ) -> FailureRecord:
        """This record plus each ``(drv, attr, system, when, log)`` failure, as :meth:`add`
        adds one, in one pass (adding 80,000 one by one copies the mapping each time)."""
        out = dict(self.failures)
        for drv, attr, system, when, log in failures:
            one = FailureRecord({drv: out[drv]} if drv in out else {}).add(
                drv, attr, system, when, log
            )
            out[drv] = one.failures[drv]
        return FailureRecord(out)

    def merge(self, *others: FailureRecord) -> FailureRecord:
        """All records in one: the same derivation's entries add their counts (so merge each
        per-job file once), keep the first ``since``, the latest ``last`` and its log."""
        out = dict(self.failures)
        for other in others:
            for drv, failure in other.failures.items():
                out[drv] = failure if drv not in out else out[drv].merged(failure)
        return FailureRecord(out)

    def forget_attr(self, attr: str) -> tuple[FailureRecord, list[Failure]]:
        """Without the failures of ``attr`` (as recorded, or the same variant in another
        layout: ``torch-sm120`` matches ``x86_64-linux.torch-sm120``)."""
        return self._drop(lambda f: f.attr == attr or _variant(f.attr) == _variant(attr))

    def forget_before(self, cutoff: str) -> tuple[FailureRecord, list[Failure]]:
        """Without the failures whose latest failure is before ``cutoff`` (UTC text): such a
        build is tried again once, and recorded again if it still fails."""
        check_time(cutoff)
        return self._drop(lambda f: f.last < cutoff)

    def _drop(self, gone: Any) -> tuple[FailureRecord, list[Failure]]:
        dropped = [f for f in self.entries() if gone(f)]
        names = {f.drv for f in dropped}
        kept = {d: f for d, f in self.failures.items() if d not in names}
        return FailureRecord(kept), dropped

    def _with(self, failure: Failure) -> FailureRecord:
        return FailureRecord({**self.failures, failure.drv: failure})


@dataclass(frozen=True)
class Imported:
    """What :func:`import_failures` made: the new record, how many failures it added, and each
    derivation left out with why (None: no job of the current evaluation has it)."""

    record: FailureRecord
    added: int
    left_out: tuple[tuple[str, str | None], ...]


def import_failures(
    record: FailureRecord,
    rows: Iterable[tuple[str, float, str]],
    jobs: Mapping[str, tuple[str, str]],
    *,
    source: str,
) -> Imported:
    """``record`` plus another CI's failed builds: ``(drv, seconds since 1970, url)`` rows,
    ``jobs`` giving each derivation of the current evaluation its ``(attr, system)``. A row no
    job has, or whose time is no record time (1970-9999), is left out; one the record holds as
    recent is not counted again; a derivation listed twice counts its latest row. The URL is
    the entry's one log line (``<source>: <url>``), cut as every log line is, so the record is
    one every later command reads."""
    adding: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {}
    left_out: list[tuple[str, str | None]] = []
    for drv, seconds, url in rows:
        job = jobs.get(drv)
        if job is None:
            left_out.append((drv, None))
            continue
        when = utc_text(seconds)
        if when is None:
            left_out.append((drv, f"its timestamp {seconds!r} is no time from 1970 to 9999"))
            continue
        known = record.failures.get(drv)
        if known is not None and known.last >= when:
            continue  # imported before, or recorded since
        if drv in adding and adding[drv][3] >= when:
            continue  # a view may list a derivation twice: its latest failure counts
        log = (log_line(f"{source}: {url}"),) if url else ()
        adding[drv] = (drv, job[0], job[1], when, log)
    return Imported(record.add_all(adding.values()), len(adding), tuple(left_out))


def _unicode(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: no lone surrogate (what Python makes of
    bytes that are not UTF-8 in argv, or a JSON ``"\\ud800"`` escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _variant(attr: str) -> str:
    from capplan.core.model.systems import variant_of_attr

    return variant_of_attr(attr)


def _check_attr(attr: str) -> str:
    return check_identifier(
        attr,
        "job attribute",
        example="x86_64-linux.torch-sm86 (as the jobs file names it)",
        limit=_MAX_ATTR,
    )


def _check_system(system: str) -> str:
    if not _SYSTEM.fullmatch(system) or len(system) > 64:
        raise InvalidInputError(
            f"invalid system {system[:80]!r}", hint="give a Nix system such as x86_64-linux"
        )
    return system


# ---------------------------------------------------------------------------------------------
# reading a decoded record


def parse_record(data: Any, source: str) -> FailureRecord:
    """Validate decoded JSON as a record (DataError naming ``source`` and the bad part)."""

    def bad(why: str) -> DataError:
        return DataError(
            f"{source}: not a capplan failure record: {why}",
            hint="fix or remove the file (it is left as it is; `capplan failures` documents "
            "the format in docs/failures.md)",
        )

    if not isinstance(data, dict):
        raise bad(f"the top level is {_kind(data)}, not an object")
    if data.get("format") != FORMAT:
        raise bad(f"'format' is {_quote(data.get('format'))}, not '{FORMAT}'")
    version = data.get("version")
    if type(version) is not int or version != VERSION:
        raise bad(
            f"version {_quote(version)} is not {VERSION} (written by another capplan? "
            "upgrade capplan, or start a new record)"
        )
    unknown = sorted(set(data) - {"format", "version", "failures"})
    if unknown:
        raise bad(f"unknown key {_quote(unknown[0])}")
    entries = data.get("failures")
    if not isinstance(entries, dict):
        raise bad(f"'failures' is {_kind(entries)}, not an object")
    out: dict[str, Failure] = {}
    for drv, entry in entries.items():
        try:
            check_drv(drv)
        except InvalidInputError:
            raise bad(f"key {_quote(drv)} is not a derivation path") from None
        where = f"failure {drv}"
        if not isinstance(entry, dict):
            raise bad(f"{where} is {_kind(entry)}, not an object")
        keys = {"attr", "system", "since", "last", "count", "log_tail"}
        extra = sorted(set(entry) - keys)
        missing = sorted(keys - set(entry))
        if extra or missing:
            raise bad(f"{where}: " + (f"unknown key {_quote(extra[0])}" if extra else
                                      f"missing key '{missing[0]}'"))  # fmt: skip
        attr, system, count, tail = (
            entry["attr"],
            entry["system"],
            entry["count"],
            entry["log_tail"],
        )
        try:
            _check_attr(attr if isinstance(attr, str) else "")
            _check_system(system if isinstance(system, str) else "")
        except InvalidInputError as exc:
            raise bad(f"{where}: {exc.message}") from None
        times = []
        for key in ("since", "last"):
            value = entry[key]
            try:
                times.append(check_time(value if isinstance(value, str) else ""))
            except ValueError:
                raise bad(f"{where}: '{key}' is {_quote(value)}, not a UTC time") from None
        if times[0] > times[1]:
            raise bad(f"{where}: 'since' {times[0]} is after 'last' {times[1]}")
        if type(count) is not int or not 1 <= count <= MAX_COUNT:
            raise bad(
                f"{where}: 'count' is {_quote(count)}, not a whole number from 1 to {MAX_COUNT:,}"
            )
        if (
            not isinstance(tail, list)
            or len(tail) > LOG_LINES
            or not all(isinstance(line, str) and len(line) <= LOG_LINE_CHARS + 3 for line in tail)
        ):
            raise bad(f"{where}: 'log_tail' is not a list of at most {LOG_LINES} short lines")
        if not all(_unicode(text) for text in (drv, attr, *tail)):
            raise bad(f"{where}: a lone surrogate escape (\\ud800-\\udfff) is not text")
        out[drv] = Failure(drv, attr, system, times[0], times[1], count, tuple(tail))
    return FailureRecord(out)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def record_schema() -> dict[str, Any]:
    """The JSON Schema of the record file (draft 2020-12), for ``capplan failures schema``."""
    failure = {
        "type": "object",
        "additionalProperties": False,
        "required": ["attr", "system", "since", "last", "count", "log_tail"],
        "properties": {
            "attr": {
                "type": "string",
                "minLength": 1,
                "maxLength": _MAX_ATTR,
                "description": "The job's attribute as the jobs source names it.",
            },
            "system": {"type": "string", "pattern": f"^{_SYSTEM.pattern}$"},
            "since": {
                "type": "string",
                "pattern": f"^{_TIME.pattern}$",
                "description": "First recorded failure, UTC.",
            },
            "last": {
                "type": "string",
                "pattern": f"^{_TIME.pattern}$",
                "description": "Latest recorded failure, UTC (forget --older-than reads it).",
            },
            "count": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_COUNT,
                "description": "Failures recorded (stays at the maximum once there).",
            },
            "log_tail": {
                "type": "array",
                "maxItems": LOG_LINES,
                "items": {"type": "string", "maxLength": LOG_LINE_CHARS + 3},
                "description": "The last non-blank lines of the latest failure's build log.",
            },
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "capplan failure record",
        "type": "object",
        "additionalProperties": False,
        "required": ["format", "version", "failures"],
        "properties": {
            "format": {"const": FORMAT},
            "version": {"const": VERSION},
            "failures": {
                "type": "object",
                "description": "Failed builds keyed by derivation path (/nix/store/...drv).",
                "propertyNames": {"pattern": r"^/.+/[0-9a-df-np-sv-z]{32}-.+\.drv$"},
                "additionalProperties": failure,
            },
        },
    }


# ---------------------------------------------------------------------------------------------
# the matrix filter


@dataclass(frozen=True)
class KnownFailures:
    """What ``--failures`` leaves out of a matrix: each recorded job and every job that needs
    one, directly or not (it cannot build either)."""

    failed: Mapping[str, Failure]  # job name -> its recorded failure
    blocked: Mapping[str, tuple[str, ...]]  # job name -> the failed jobs it needs (sorted)
    minutes_saved: float
    retried: tuple[str, ...] = ()  # with --retry-failed: the jobs scheduled anyway

    @property
    def dropped(self) -> frozenset[str]:
        return frozenset(self.failed) | frozenset(self.blocked)

    def to_json(self) -> list[dict[str, Any]]:
        """The ``known_failures`` list of ``matrix --json``: one entry per recorded job."""
        out = []
        for name in sorted(self.failed):
            f = self.failed[name]
            out.append(
                {
                    "job": name,
                    "attribute": f.attr,
                    "derivation": f.drv,
                    "system": f.system,
                    "since": f.since,
                    "last": f.last,
                    "count": f.count,
                    "log_tail": list(f.log_tail),
                    "blocks": sorted(b for b, by in self.blocked.items() if name in by),
                }
            )
        return out


def known_failures(
    needs: Mapping[str, Sequence[str]],
    drvs: Mapping[str, str],
    minutes: Mapping[str, float],
    record: FailureRecord,
    *,
    retry: bool = False,
    exclude: Iterable[str] = (),
) -> KnownFailures:
    """The jobs of a graph (``needs``: job -> the jobs it builds against) to leave out.

    ``drvs`` holds each job's derivation path as evaluated now; a job without one, or whose
    derivation is not recorded (it changed since it failed), is scheduled as normal. Jobs in
    ``exclude`` (already in a binary cache: built, whatever the record says) are never left
    out and never block. ``retry`` leaves nothing out and lists what is retried.
    """
    skip = set(exclude)
    failed = {
        name: record.failures[drv]
        for name, drv in drvs.items()
        if name in needs and name not in skip and drv in record.failures
    }
    if retry:
        return KnownFailures({}, {}, 0.0, tuple(sorted(failed)))
    blockers: dict[str, set[str]] = {}

    def blocked_by(name: str, trail: frozenset[str]) -> set[str]:
        if name in blockers:
            return blockers[name]
        found: set[str] = set()
        for need in needs.get(name, ()):
            if need in skip or need in trail:
                continue
            if need in failed:
                found.add(need)
            found |= blocked_by(need, trail | {name})
        blockers[name] = found
        return found

    blocked = {}
    for name in sorted(needs):
        if name in failed or name in skip:
            continue
        by = blocked_by(name, frozenset())
        if by:
            blocked[name] = tuple(sorted(by))
    saved = sum(minutes.get(n, 0.0) for n in (*failed, *blocked))
    return KnownFailures(failed, blocked, round(saved, 2))
