"""`capplan failures import-buildbot-nix` (issue 34): buildbot-nix's failed-build list, a table of
its buildbot database keyed by derivation path as capplan's record is, becomes record entries
that `capplan matrix --failures` leaves out.

The database is a real SQLite file with the table as buildbot-nix declares it
(buildbot_nix/db/failed_builds.py, nix-community/buildbot-nix commit e446e345: derivation
String(512) primary key, timestamp Float, url String(1024), all NOT NULL)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

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
