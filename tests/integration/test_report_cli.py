"""``capplan report`` on the command line (issue 51): the failure record's jobs and what they
block in the page and the summary, and its errors (one line, a documented exit code)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.integration.test_failures_cli import MAGMA_USERS, add, jobs  # noqa: F401 (a fixture)

from capplan.errors import ExitCode


def test_failures_show_in_the_page_and_the_summary(
    capplan_in: Any,
    jobs: Path,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    assert add(capplan_in, "rec.json", "magma-sm86").exit_code == 0
    page = tmp_path / "r.html"
    flags = ("--failures", "rec.json", "--jobs", "jobs.jsonl")
    result = capplan_in("report", *flags, "--output", str(page))
    assert result.exit_code == 0, result.stderr
    assert re.search(r"\nwrote .*r\.html: [0-9,]+ bytes\n\Z", result.stderr)
    text = page.read_text()
    assert "<td>magma-sm86</td><td>recorded failure</td>" in text
    for name in MAGMA_USERS:
        assert f"<td>{name}</td><td>blocked</td><td>magma-sm86</td>" in text
        assert f"<title>{name}: stage" not in text  # not in the schedule: it cannot build
    summary = capplan_in("matrix", "--format", "summary", *flags)
    assert summary.exit_code == 0, summary.stderr
    assert f"1 recorded failed, {len(MAGMA_USERS)} blocked by them" in summary.stdout


def test_errors_are_one_line(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text('[fleet]\ngpus = ["A100"]\n[packages.torch]\n')
    cases = [
        (["report", "--output", str(tmp_path / "no" / "r.html")], ExitCode.WRITE),
        (["report", "--skip-cached", "--output", "r.html"], ExitCode.INVALID_INPUT),
        (["report"], ExitCode.USAGE),
        (["matrix", "--format", "summary", "--stage", "0"], ExitCode.INVALID_INPUT),
    ]
    for argv, code in cases:
        result = capplan_in(*argv)
        assert result.exit_code == code, (argv, result.stderr)
        assert result.stderr.startswith("capplan: error: ") and result.stderr.count("\n") == 1
    assert not (tmp_path / "r.html").exists()
