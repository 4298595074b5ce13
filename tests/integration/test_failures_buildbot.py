"""`capplan failures import-buildbot-nix` (issue 34): buildbot-nix's failed-build list, a table of
its buildbot database keyed by derivation path as capplan's record is, becomes record entries
that `capplan matrix --failures` leaves out.

The database is a real SQLite file with the table as buildbot-nix declares it
(buildbot_nix/db/failed_builds.py, nix-community/buildbot-nix commit e446e345: derivation
String(512) primary key, timestamp Float, url String(1024), all NOT NULL)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Cli, unprivileged
from tests.integration.test_ci_github import one_line_error
from tests.integration.test_failures_cli import (  # noqa: F401 (jobs: a fixture)
    MAGMA_USERS,
    jobs,
    matrix_json,
    names,
)

from capplan.errors import ExitCode

TABLE = (
    "CREATE TABLE failed_builds (derivation VARCHAR(512) NOT NULL, timestamp FLOAT NOT NULL, "
    "url VARCHAR(1024) NOT NULL, PRIMARY KEY (derivation))"
)


def drv_of(jobs_path: Path, name: str) -> str:
    for line in jobs_path.read_text().splitlines():
        job = json.loads(line)
        if job["name"] == name:
            return str(job["drvPath"])
    raise AssertionError(name)


def database(path: Path, rows: list[tuple[str, float, str]]) -> Path:
    with sqlite3.connect(path) as db:
        db.execute(TABLE)
        db.executemany("INSERT INTO failed_builds VALUES (?, ?, ?)", rows)
    return path


def test_buildbot_failures_are_imported_and_left_out_of_the_matrix(
    capplan_in: Any,
    jobs: Path,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    magma = drv_of(jobs, "magma-sm86")
    other = "/nix/store/00000000000000000000000000000000-gone.drv"  # another evaluation's
    database(tmp_path / "state.sqlite", [
        (magma, 1764000000.5, "https://buildbot.example.org/#/builders/3/builds/41"),
        (other, 1764000100.0, ""),
    ])  # fmt: skip
    args = ("failures", "import-buildbot-nix", "rec.json", "--db", "state.sqlite",
            "--jobs", "jobs.jsonl")  # fmt: skip
    result = capplan_in(*args)
    assert result.exit_code == 0, result.stderr
    assert f"left out {other}: no job of jobs.jsonl has it" in result.stderr
    assert "imported 1 of 2 failed build(s)" in result.stderr
    entry = json.loads((tmp_path / "rec.json").read_text())["failures"][magma]
    assert entry["attr"] == "x86_64-linux.magma-sm86" and entry["system"] == "x86_64-linux"
    assert entry["since"] == "2025-11-24T16:00:00Z" and entry["count"] == 1
    assert entry["log_tail"] == [
        "buildbot-nix: https://buildbot.example.org/#/builders/3/builds/41"
    ]
    # Importing the same list again counts nothing twice.
    again = capplan_in(*args)
    assert "imported 0 of 2" in again.stderr
    assert json.loads((tmp_path / "rec.json").read_text())["failures"][magma]["count"] == 1
    # The matrix leaves the failure out, and what needs it.
    full, _ = matrix_json(capplan_in)
    skipped, stderr = matrix_json(capplan_in, "--failures", "rec.json")
    assert names(full) - names(skipped) == {"magma-sm86"} | MAGMA_USERS
    assert f"skipped magma-sm86: known failure of {magma}" in stderr


def test_a_file_that_is_not_buildbot_nix_s_database(
    capplan_in: Any,
    jobs: Path,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    (tmp_path / "garbage.sqlite").write_bytes(b"not a database at all" * 100)
    with sqlite3.connect(tmp_path / "other.sqlite") as db:
        db.execute("CREATE TABLE builds (id INTEGER)")
    database(tmp_path / "bad.sqlite", [("/nix/store/not-a-drv", 1.0, "")])
    for name, fragment in [
        ("garbage.sqlite", "cannot read buildbot-nix's failed builds"),
        ("other.sqlite", "no such table: failed_builds"),
        ("bad.sqlite", "not a .drv"),
    ]:
        result = capplan_in("failures", "import-buildbot-nix", "rec.json", "--db", name,
                            "--jobs", "jobs.jsonl")  # fmt: skip
        assert fragment in one_line_error(result, ExitCode.DATA)
    missing = capplan_in("failures", "import-buildbot-nix", "rec.json", "--db", "none.sqlite",
                         "--jobs", "jobs.jsonl")  # fmt: skip
    assert "no such buildbot database: none.sqlite" in one_line_error(
        missing, ExitCode.INVALID_INPUT
    )
    assert not (tmp_path / "rec.json").exists()


# ---------------------------------------------------------------------------------------------
# issue 41: the --db path, the rows and the query are input like any other


def _import(capplan_in: Any, db: str, record: str = "rec.json") -> Any:
    return capplan_in("failures", "import-buildbot-nix", record, "--db", db,
                      "--jobs", "jobs.jsonl")  # fmt: skip


@pytest.mark.parametrize(
    ("name", "decoy"),
    [("a#b.sqlite", True), ("c#d", False), ("a?mode=rwc", True), ("a%23b", True), ("x%2", False)],
)
def test_a_db_name_with_uri_characters_opens_that_file(
    capplan_in: Any,
    jobs: Path,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    name: str,
    decoy: bool,
) -> None:
    # SQLite reads a "file:" URI: '#' ends the path, '?' starts options, '%XX' is an escape.
    # Each name must open exactly the file it names, read only, and create nothing.
    magma = drv_of(jobs, "magma-sm86")
    database(tmp_path / name, [(magma, 1764000000.0, "")])
    if decoy:  # what a URI-parsed name would read instead
        database(tmp_path / name.split("#")[0].split("?")[0].replace("%23", "#"), [])
    before = sorted(p.name for p in tmp_path.iterdir())
    result = _import(capplan_in, name)
    assert result.exit_code == 0, result.stderr
    assert "imported 1 of 1 failed build(s)" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "rec.json"])


def test_a_missing_db_with_uri_characters_creates_nothing(
    capplan_in: Any,
    jobs: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    result = _import(capplan_in, "a#b")
    assert "no such buildbot database: a#b" in one_line_error(result, ExitCode.INVALID_INPUT)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a buildbot database file"),
        (lambda p: p.symlink_to("/dev/null"), "is a character device, not a buildbot database"),
        (lambda p: p.symlink_to(p.name), "Too many levels of symbolic links"),
        (lambda p: None, "File name too long"),
    ],
    ids=["fifo", "device", "loop", "name_max"],
)
def test_a_db_that_is_no_database_file_is_named_as_what_it_is(
    capplan_in: Any,
    jobs: Path,  # noqa: F811
    tmp_path: Path,
    make: Any,
    says: str,
) -> None:
    name = "x" * 300 if says == "File name too long" else "state.sqlite"
    make(tmp_path / name) if len(name) < 255 else None
    result = _import(capplan_in, name)
    assert says in one_line_error(result, ExitCode.INVALID_INPUT)
    assert not (tmp_path / "rec.json").exists()


def test_a_db_in_a_folder_nobody_may_search(
    open_tmp: Path,
    jobs: Path,  # noqa: F811
) -> None:
    shutil.copy(jobs, open_tmp / "jobs.jsonl")
    closed = open_tmp / "closed"
    closed.mkdir()
    database(closed / "state.sqlite", [])
    closed.chmod(0o600)
    run = Cli(open_tmp)
    assert _import(run, "state.sqlite").exit_code == ExitCode.INVALID_INPUT  # imports lazily
    code, stderr = unprivileged(lambda: _outcome(_import(run, "closed/state.sqlite")))
    assert code == ExitCode.INVALID_INPUT, stderr
    assert "closed/state.sqlite: Permission denied" in stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr


def _outcome(result: Any) -> tuple[int, str]:
    return result.exit_code, result.stderr


def test_long_urls_odd_timestamps_and_odd_rows_give_a_record_every_command_reads(
    capplan_in: Any,
    jobs: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    names = ["magma-sm86", "torch-sm86", "nccl-sm86", "torch-sm89", "magma-sm89", "nccl-sm89"]
    drvs = [drv_of(jobs, n) for n in names]
    long_url = "https://buildbot.example.org/#/builders/3/builds/" + "9" * 2000
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        db.execute("CREATE TABLE failed_builds (derivation, timestamp, url)")  # any types
        db.executemany("INSERT INTO failed_builds VALUES (?, ?, ?)", [
            (drvs[0], 1764000000.0, long_url),
            (drvs[1], float("inf"), "u"),
            (drvs[2], 1e18, "u"),
            (drvs[3], -1.0, "u"),
            (drvs[4], 253402300800.0, "u"),  # 10000-01-01
            (drvs[5], 1764000000, "line\n::error::x\x1b[31m"),
        ])  # fmt: skip
    result = _import(capplan_in, "state.sqlite")
    assert result.exit_code == 0, result.stderr
    assert "imported 2 of 6" in result.stderr
    assert result.stderr.count("is no time from 1970 to 9999") == 4
    record = json.loads((tmp_path / "rec.json").read_text())["failures"]
    (line,) = record[drvs[0]]["log_tail"]
    assert line.startswith("buildbot-nix: https://") and len(line) <= 403
    assert record[drvs[5]]["log_tail"] == ["buildbot-nix: line ::error::x"]
    for command in (("failures", "list", "rec.json"), ("failures", "merge", "m.json", "rec.json")):
        assert capplan_in(*command).exit_code == 0
    assert matrix_json(capplan_in, "--failures", "rec.json")[0]


@pytest.mark.parametrize(
    "view",
    [
        # rows without end, streamed
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
        "SELECT '/nix/store/00000000000000000000000000000000-x' || n || '.drv' AS derivation, "
        "1.0 AS timestamp, '' AS url FROM r",
        # rows without end, sorted first: SQLite would fill a temporary file before one row
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
        "SELECT zeroblob(1000) || n AS derivation, 1.0 AS timestamp, '' AS url FROM r "
        "ORDER BY derivation DESC",
    ],
    ids=["streamed", "sorted"],
)
def test_an_endless_view_ends(
    capplan_in: Any,
    jobs: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    view: str,
) -> None:
    from capplan.adapters import failures as adapter

    monkeypatch.setattr(adapter, "MAX_BUILDBOT_ROWS", 20_000)
    monkeypatch.setattr(adapter, "BUILDBOT_SECONDS", 3.0)
    monkeypatch.setenv("SQLITE_TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        db.execute(f"CREATE VIEW failed_builds AS {view}")
    result = _import(capplan_in, "state.sqlite")
    err = one_line_error(result, ExitCode.DATA)
    assert "more than 20,000 rows" in err or "no answer within 3 s" in err or "MiB" in err
    assert list((tmp_path / "tmp").iterdir()) == []  # no temporary file was written
    assert not (tmp_path / "rec.json").exists()
    # SQLite's heap limit (the process's) is back as it was.
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        assert db.execute("PRAGMA hard_heap_limit").fetchone() == (0,)
