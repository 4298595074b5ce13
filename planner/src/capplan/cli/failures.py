"""``capplan failures``: the record of failed builds that ``matrix --failures`` skips.

Also the matrix's hook (:func:`matrix_known_failures`): the derivation of each planned job,
from a jobs file or one ``nix eval`` per system, matched against the record.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from capplan.cli.helpformat import Group
from capplan.cli.output import (
    AsciiIntRange,
    emit_json,
    err_console,
    escape,
    make_table,
    out_console,
    print_table,
)
from capplan.core.planning.failures import FailureRecord, KnownFailures
from capplan.errors import InvalidInputError, printable

__all__ = [
    "MatrixFailures",
    "failures",
    "known_failures_json",
    "known_failures_table",
    "now",
    "prepare_matrix_failures",
    "read_failures",
    "report_known_failures",
]

_RECORD = click.Path(dir_okay=False, path_type=Path)
# 9999-12-31T23:59:59Z: the last second a record's four-digit years can say.
_LAST_SECOND = 253_402_300_799


def now() -> datetime:
    """The time a failure is recorded at: SOURCE_DATE_EPOCH when set (reproducible records
    and tests, as reproducible-builds.org specifies it), else the clock."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None:
        return datetime.fromtimestamp(time.time(), UTC)
    if not raw.isascii() or not raw.isdigit() or len(raw) > 12 or int(raw) > _LAST_SECOND:
        raise InvalidInputError(
            f"SOURCE_DATE_EPOCH is {raw[:40]!r}, not whole seconds since 1970 up to the year "
            f"9999 ({_LAST_SECOND})",
            hint="unset it, or give an integer like 1764000000",
        )
    return datetime.fromtimestamp(int(raw), UTC)


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _say(text: str) -> None:
    # One line whatever a job's name or a record holds: a newline from a record restored from
    # another branch's cache must not start a line ("::error::" is a GitHub workflow command).
    err_console().print(printable(text), markup=False, highlight=False, soft_wrap=True)


@click.group(cls=Group)
def failures() -> None:
    """Remember failed builds, so the matrix stops rebuilding them every run.

    The record is a JSON file keyed by derivation path: a build is skipped only while its
    derivation is the one that failed (any input change gives a new one). See
    docs/failures.md.
    """


@failures.command("add")
@click.argument("record", type=_RECORD)
@click.option("--attr", "attr", required=True, metavar="NAME", help="The job that failed.")
@click.option(
    "--jobs",
    "jobs_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="nix-eval-jobs JSON lines holding the job's drvPath and system.",
)
@click.option(
    "--drv", default=None, metavar="PATH", help="The derivation path (instead of --jobs)."
)
@click.option("--system", default=None, metavar="SYSTEM", help="With --drv: the job's system.")
@click.option(
    "--log",
    "log_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The build log; its last lines are kept.",
)
def add(
    record: Path,
    attr: str,
    jobs_file: Path | None,
    drv: str | None,
    system: str | None,
    log_file: Path | None,
) -> None:
    """Record that job NAME failed to build, in RECORD (created when missing).

    The derivation comes from --jobs (the nix-eval-jobs line whose attr is NAME, or whose
    variant is NAME), or from --drv and --system. Parallel adds to one file wait for each
    other (a lock beside it); none is lost.
    """
    from capplan.adapters.failures import locked, read_log_tail, read_record, write_record

    if (jobs_file is None) == (drv is None):
        raise click.UsageError("give the derivation with either --jobs JOBS or --drv PATH")
    if drv is not None and system is None:
        raise click.UsageError("--drv needs --system (e.g. --system x86_64-linux)")
    if jobs_file is not None and system is not None:
        raise click.UsageError("--system goes with --drv; --jobs has each job's system")
    if jobs_file is not None:
        attr, drv, system = _find_job(jobs_file, attr)
    assert drv is not None and system is not None
    log = read_log_tail(log_file) if log_file is not None else ()
    when = _utc(now())
    with locked(record) as target:
        old = read_record(target, missing_ok=True)
        new = old.add(drv, attr, system, when, log)
        write_record(target, new)
    entry = new.failures[drv]
    _say(f"recorded {attr} ({drv}): failed {entry.count} time(s) since {entry.since}")


def _find_job(jobs_file: Path, name: str) -> tuple[str, str, str]:
    from capplan.adapters.failures import read_job_derivations
    from capplan.core.model.systems import variant_of_attr

    jobs = read_job_derivations(jobs_file)
    job = jobs.get(name)
    if job is None:
        found = [j for a, j in jobs.items() if variant_of_attr(a) == variant_of_attr(name)]
        if len(found) > 1:
            raise InvalidInputError(
                f"{name} matches several jobs in {jobs_file}: {found[0].attr}, {found[1].attr}",
                hint="give the whole attr as the jobs file names it",
            )
        job = found[0] if found else None
    if job is None:
        raise InvalidInputError(
            f"no job {name!r} with a derivation in {jobs_file}",
            hint="give an attr the jobs file holds (a job that failed to evaluate has none)",
        )
    return job.attr, job.drv, job.system


@failures.command("list")
@click.argument("record", type=_RECORD)
@click.option("--json", "as_json", is_flag=True, help="The record as JSON.")
def list_(record: Path, as_json: bool) -> None:
    """List the failures in RECORD: job, system, since, count, last log line."""
    from capplan.adapters.failures import read_record

    data = read_record(record)
    if as_json:
        emit_json(data.to_json())
        return
    table = make_table(
        "job", "system", "since", "last", "count", "last log line", whole=("job", "since", "last")
    )
    for f in data.entries():
        last_line = (f.log_tail or ("",))[-1]
        table.add_row(escape(f.attr), f.system, f.since, f.last, str(f.count), escape(last_line))
    print_table(out_console(), table)
    out_console().print(f"{len(data)} recorded failure(s)", markup=False, highlight=False)


@failures.command("forget")
@click.argument("record", type=_RECORD)
@click.option("--attr", default=None, metavar="NAME", help="Forget this job's failures.")
@click.option(
    "--older-than",
    "days",
    type=AsciiIntRange(0, 100_000),
    default=None,
    metavar="DAYS",
    help="Forget failures whose latest failure is more than DAYS old.",
)
def forget(record: Path, attr: str | None, days: int | None) -> None:
    """Forget failures, so the next matrix schedules those builds again."""
    from capplan.adapters.failures import locked, read_record, write_record

    if (attr is None) == (days is None):
        raise click.UsageError("give either --attr NAME or --older-than DAYS")
    moment = now()
    with locked(record) as target:
        old = read_record(target)
        if attr is not None:
            new, gone = old.forget_attr(attr)
            if not gone:
                known = sorted({f.attr for f in old.entries()})
                raise InvalidInputError(
                    f"no failure of {attr!r} in {record}",
                    hint="recorded: "
                    + (", ".join(known[:5]) or "none")
                    + (f" and {len(known) - 5} more" if len(known) > 5 else ""),
                )
        else:
            assert days is not None
            new, gone = old.forget_before(_utc(moment - timedelta(days=days)))
        if gone:
            write_record(target, new)
    for f in gone:
        _say(f"forgot {f.attr} ({f.drv}), last failed {f.last}")
    _say(f"{len(gone)} forgotten, {len(new)} left in {record}")


@failures.command("merge")
@click.argument("out", type=_RECORD)
@click.argument("inputs", nargs=-1, type=click.Path(path_type=Path))
def merge(out: Path, inputs: tuple[Path, ...]) -> None:
    """Merge records INPUTS (files, or folders of *.json) into OUT (created when missing).

    CI's way to lose no failure: each build job writes its own file, one final step merges
    them. A derivation in several inputs adds its counts, so merge each file once.
    """
    from capplan.adapters.failures import locked, read_record, write_record

    files: list[Path] = []
    for path in inputs:
        if path.is_dir():
            files += sorted(p for p in path.glob("*.json") if p.is_file())
        else:
            files.append(path)
    # realpath, not Path.resolve: a symlink loop stays a path that reading refuses (exit 6)
    same = os.path.realpath(out)
    files = [p for p in dict.fromkeys(files) if os.path.realpath(p) != same]
    records = [read_record(p) for p in files]
    with locked(out) as target:
        old = read_record(target, missing_ok=True)
        new = old.merge(*records)
        write_record(target, new)
    _say(f"merged {len(files)} record(s) into {out}: {len(new)} failure(s), {len(old)} before")


@failures.command("import-buildbot-nix")
@click.argument("record", type=_RECORD)
@click.option(
    "--db",
    "db_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="buildbot-nix's database (SQLite), which holds its failed-build list.",
)
@click.option(
    "--jobs",
    "jobs_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="nix-eval-jobs JSON lines of the current evaluation: each job's drvPath and system.",
)
def import_buildbot_nix(record: Path, db_path: Path, jobs_file: Path) -> None:
    """Add buildbot-nix's failed builds to RECORD (created when missing).

    buildbot-nix keys its list by derivation path, as the record does; --jobs gives each
    derivation its job and system. A derivation no job has (another evaluation) is left out
    and named; one the record already holds as recent is not counted again.
    """
    from capplan.adapters.failures import (
        locked,
        read_buildbot_failures,
        read_job_derivations,
        read_record,
        write_record,
    )
    from capplan.core.planning.failures import import_failures

    rows = read_buildbot_failures(db_path)
    jobs = {job.drv: (job.attr, job.system) for job in read_job_derivations(jobs_file).values()}
    with locked(record):
        old = read_record(record, missing_ok=True)
        imported = import_failures(
            old, [(row.drv, row.timestamp, row.url) for row in rows], jobs, source="buildbot-nix"
        )
        for drv, why in imported.left_out:
            _say(f"left out {drv}: {why or f'no job of {jobs_file} has it (another evaluation)'}")
        if imported.added:
            write_record(record, imported.record)
    _say(f"imported {imported.added} of {len(rows)} failed build(s) from {db_path} into {record}")


@failures.command("schema")
def schema() -> None:
    """Print the JSON Schema of the record file."""
    from capplan.core.planning.failures import record_schema

    emit_json(record_schema())


# ---------------------------------------------------------------------------------------------
# the matrix hook


def read_failures(path: Path, jobs_file: Path | None, offline: bool) -> FailureRecord:
    """``matrix --failures FILE``'s record: empty (with a note) while FILE does not exist,
    which is how a CI cache starts."""
    from capplan.adapters.failures import read_record

    record = read_record(path, missing_ok=True)
    if not path.exists():
        _say(f"note: no failure record at {path} yet: no build is known to fail")
    elif record and offline and jobs_file is None:
        _say(
            "warning: --offline evaluates no derivations, so known failures cannot be matched "
            "(give the derivations with --jobs JOBS)"
        )
    return record


@dataclass
class MatrixFailures:
    """``matrix --failures``: the record, each job's derivation, and the outputs the same
    evaluation gave (``--skip-cached`` reuses them instead of evaluating again)."""

    record: FailureRecord
    drvs: dict[str, str]  # job name -> derivation path
    outputs: dict[str, list[str]] | None
    retry: bool

    def apply(
        self,
        variants: Iterable[Any],
        cached: Iterable[str],
        on_runners: Mapping[str, float] | None = None,
    ) -> KnownFailures:
        """The jobs to leave out (said on stderr); ``cached`` jobs are built already.
        ``on_runners``: each job's minutes on the runner it is scheduled on (what the matrix
        states, issue 40); without, the knowledge base's reference minutes."""
        from capplan.core.planning.failures import known_failures

        variants = list(variants)
        needs = {v.name: tuple(v.needs) for v in variants}
        minutes = {v.name: float(v.minutes) for v in variants}
        minutes.update(on_runners or {})
        known = known_failures(
            needs, self.drvs, minutes, self.record, retry=self.retry, exclude=cached
        )
        report_known_failures(known)
        return known


def prepare_matrix_failures(
    plan: Any,
    path: Path,
    *,
    jobs_file: Path | None,
    offline: bool,
    retry: bool,
    github: bool,
    flake: str,
    overrides: Mapping[str, str],
) -> MatrixFailures:
    """Read the record and find each planned job's derivation: from ``jobs_file``, else one
    ``nix eval`` per system, skipped when nothing needs it (an empty record outside the GitHub
    formats, whose rows carry the derivation a failing build job records) or ``offline``."""
    from capplan.adapters.failures import read_job_derivations
    from capplan.core.model.systems import variant_of_attr

    record = read_failures(path, jobs_file, offline)
    drvs: dict[str, str] = {}
    outputs = None
    if jobs_file is not None:
        for attr, job in read_job_derivations(jobs_file).items():
            drvs.setdefault(variant_of_attr(attr), job.drv)
    elif not offline and (bool(record) or (github and not retry)):
        from capplan.adapters.failures import plan_derivations

        drvs, outputs = plan_derivations(plan, flake, overrides)
    return MatrixFailures(record, drvs, outputs, retry)


def report_known_failures(known: KnownFailures) -> None:
    """Say on stderr what is skipped (or retried) and why."""
    for name, f in sorted(known.failed.items()):
        blocks = sorted(b for b, by in known.blocked.items() if name in by)
        last = f.log_tail[-1] if f.log_tail else "no log recorded"
        _say(
            f"skipped {name}: known failure of {f.drv} ({f.count} time(s) since {f.since}; "
            f"{last})" + (f"; it blocks {', '.join(blocks)}" if blocks else "")
        )
    for name, by in sorted(known.blocked.items()):
        _say(f"skipped {name}: needs {', '.join(by)}, a known failure")
    if known.failed:
        _say(
            f"known failures save {known.minutes_saved:g} build minutes "
            "(--retry-failed builds them anyway)"
        )
    for name in known.retried:
        _say(f"retrying {name}: a known failure (--retry-failed)")


def known_failures_table(known: KnownFailures) -> None:
    """The table view's section: each skipped job, why, and the minutes saved."""
    if not known.failed and not known.retried:
        return
    console = out_console()
    if known.failed:
        table = make_table(
            "skipped", "job", "since", "count", "last log line", whole=("job",),
        )  # fmt: skip
        for name, f in sorted(known.failed.items()):
            last_line = escape(f.log_tail[-1]) if f.log_tail else "-"
            table.add_row("failed", escape(name), f.since, str(f.count), last_line)
        for name, by in sorted(known.blocked.items()):
            table.add_row("blocked", escape(name), "-", "-", escape("needs " + ", ".join(by)))
        print_table(console, table)
        console.print(
            f"known failures: {len(known.failed)} skipped, {len(known.blocked)} blocked behind "
            f"them, {known.minutes_saved:g} build minutes saved (--retry-failed builds them)",
            markup=False,
            highlight=False,
        )
    if known.retried:
        retried = printable(", ".join(known.retried))
        console.print(
            f"retrying {len(known.retried)} known failure(s): {retried}",
            markup=False,
            highlight=False,
        )


def known_failures_json(data: dict[str, Any], known: KnownFailures) -> None:
    """``matrix --json``: the ``known_failures`` list and the summary's counts and savings."""
    data["known_failures"] = known.to_json()
    data["summary"]["skipped_known_failures"] = sorted(known.failed)
    data["summary"]["skipped_blocked"] = sorted(known.blocked)
    data["summary"]["known_failures_minutes_saved"] = known.minutes_saved
    data["summary"]["retried_known_failures"] = list(known.retried)
