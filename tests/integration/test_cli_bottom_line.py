"""Output a person reads at a glance (issue 33, item 4): `capplan plan` and `matrix` start with
the bottom line (build jobs, build hours on the stated builder, whom they serve, the warnings
that matter), routine "kept" decisions wait for --verbose, colour marks each decision where
the terminal has it, and no table is wider than COLUMNS unless a whole name needs it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from capplan.cli.bottomline import BUILDER

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A foreground colour (NO_COLOR leaves bold and italic alone, as its definition says).
COLOUR = re.compile(r"\x1b\[(?:\d+;)*(?:3[0-8]|9[0-7])(?:;\d+)*m")
MIXED = (
    '[fleet]\ngpus = ["A100", "MI300X"]\n[fleet.count]\n"A100" = 64\n"MI300X" = 16\n'
    "[packages.cupy]\n[packages.torch]\n"
)


def _first_table_line(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if "┃" in line)


def test_plan_starts_with_jobs_hours_and_warnings(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(MIXED)
    data = json.loads(capplan_in("plan", "--json").stdout)  # type: ignore[operator]
    jobs, minutes = data["costs"]["plan"]["jobs"], data["costs"]["plan"]["minutes"]
    result = capplan_in("plan")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    head = " ".join(" ".join(lines[: _first_table_line(lines)]).split())
    # Issue 40: first the minutes on the runners the jobs are scheduled on (plan --json's
    # runners), then the knowledge base's on its reference builder.
    on_runners = round(sum(r["minutes"] for r in data["runners"]), 2)
    assert on_runners > minutes  # GitHub's 4-core runner against the 16-core reference
    assert head.startswith(
        f"{jobs} build jobs (one per variant), {on_runners:g} build minutes on the runners they "
        f"are scheduled on ({minutes:g}, about {minutes / 60:.1f} h, on {BUILDER}"
    )
    # [fleet.count] weighs the bottom line: 80 GPUs of two models, 16 of them without cupy.
    assert "for 80 GPUs of 2 models ([fleet.count])" in head
    assert "unserved: cupy has no build for MI300X (x16): 16 GPUs go without" in head
    # ... and the serves column.
    assert "A100 x64 (native)" in result.stdout


def test_no_warning_is_said_as_much(capplan_in: object, tmp_path: Path) -> None:
    # torch-sm80 has a big-parallel runner to finish on (issue 40: else a runner warning).
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\n'
        '[policy.runners_os]\n"big-parallel" = ["self-hosted", "big-parallel"]\n'
    )
    lines = capplan_in("plan").stdout.splitlines()  # type: ignore[operator]
    head = lines[: _first_table_line(lines)]
    assert "no warnings" in head
    assert not any(" x1" in line for line in lines)  # no count given: none shown


def test_kept_decisions_wait_for_verbose(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(MIXED)
    data = json.loads(capplan_in("plan", "--json").stdout)  # type: ignore[operator]
    kept = [d for d in data["decisions"] if d["action"] == "kept"]
    assert kept
    quiet = capplan_in("plan").stdout  # type: ignore[operator]
    assert "kept: " not in quiet
    assert f"({len(kept)} builds kept as planned" in quiet
    verbose = capplan_in("plan", "--verbose").stdout  # type: ignore[operator]
    assert verbose.count("  kept: ") == len(kept)
    assert "--verbose lists them" not in verbose


def test_colour_marks_decisions_only_where_allowed(
    capplan_in: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "capplan.toml").write_text(MIXED)
    monkeypatch.delenv("NO_COLOR")
    coloured = capplan_in("plan", "--verbose", env={"FORCE_COLOR": "1"}).stdout  # type: ignore[operator]
    plain = ANSI.sub("", coloured)
    assert coloured != plain
    assert re.search(r"\x1b\[[0-9;]*m(kept|unserved)\x1b\[0m", coloured)
    monkeypatch.setenv("NO_COLOR", "1")
    plain_run = capplan_in("plan", "--verbose", env={"FORCE_COLOR": "1"})  # type: ignore[operator]
    assert COLOUR.search(coloured) and not COLOUR.search(plain_run.stdout)


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("command", [("plan",), ("matrix",), ("matrix", "--needs")])
def test_default_plan_tables_fit_and_keep_names_whole(
    capplan_cli: object, columns: int, command: tuple[str, ...]
) -> None:
    names = capplan_cli("plan", "--print-identifiers").stdout.split()  # type: ignore[operator]
    result = capplan_cli(*command, env={"COLUMNS": str(columns)})  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    cells = {cell.strip() for line in lines for cell in line.split("│")}
    if command[0] == "matrix":
        assert set(names) <= cells  # every job name whole in its cell
    else:
        variants = {n for n in names if "-" in n}
        words = {word.strip(",") for cell in cells for word in cell.split()}
        assert variants <= words
        # rich alone split the dispatch table's system at 80 columns: "x86_64-linu" + "x".
        assert "x86_64-linux" in words and not re.search(r"x86_64-linu(?!x)", result.stdout)
    assert "…" not in result.stdout


def test_matrix_needs_lists_whole_names_in_its_own_table(capplan_cli: object) -> None:
    data = json.loads(capplan_cli("matrix", "--json").stdout)  # type: ignore[operator]
    result = capplan_cli("matrix", "--needs", env={"COLUMNS": "120"})  # type: ignore[operator]
    text = result.stdout
    words = {w.strip(",") for line in text.splitlines() for w in line.split()}
    for job in data["jobs"]:
        assert set(job["needs"]) <= words, job["name"]


def test_matrix_starts_with_its_bottom_line(capplan_cli: object) -> None:
    data = json.loads(capplan_cli("matrix", "--json").stdout)  # type: ignore[operator]
    s = data["summary"]
    lines = capplan_cli("matrix").stdout.splitlines()  # type: ignore[operator]
    head = " ".join(" ".join(lines[: _first_table_line(lines)]).split())
    assert head.startswith(f"{s['jobs']} build jobs (one per variant)")
    assert f"on {s['runners']} runners the schedule takes {s['makespan_minutes']:g} min" in head
    assert "warnings" in head


def test_a_library_without_the_gpus_code_is_a_warning_up_front(
    capplan_in: object, tmp_path: Path
) -> None:
    """torch-gfx942 links a magma-hip whose own target list has no gfx942 (issue 30): what
    breaks is said in the bottom line, not only in the section on what the libraries hold."""
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["MI300X"]\n[packages.torch]\n[policy]\nrocm_scope = "stack"\n'
    )
    data = json.loads(capplan_in("plan", "--json").stdout)  # type: ignore[operator]
    gaps = [d for d in data["decisions"] if d["action"] == "gap"]
    assert [d["subject"] for d in gaps] == ["torch-gfx942: magma-hip"]
    lines = capplan_in("plan").stdout.splitlines()  # type: ignore[operator]
    head = " ".join(" ".join(lines[: _first_table_line(lines)]).split())
    assert (
        "missing: torch-gfx942: magma-hip: no gfx942 code, so magma-backed GPU linear algebra"
        in head
    )
    assert "does not run on MI300X with torch-gfx942" in head
    # The same fact is not said twice: the routine exclusion of magma-hip's gfx942 for torch
    # stays among the decisions, not among the warnings.
    excluded = [d for d in data["decisions"] if d["action"] == "excluded"]
    assert any(d["subject"] == "magma-hip:gfx942" and d["package"] == "torch" for d in excluded)
    assert "excluded: torch: magma-hip:gfx942" not in head


def test_a_job_its_runner_cannot_finish_is_a_warning(capplan_in: object, tmp_path: Path) -> None:
    # Issue 40: torch-sm80 takes 90 min on the knowledge base's 16-core builder, 360 on the
    # default 4-core runner, past GitHub's 6 hours with the timeout's margin.
    (tmp_path / "capplan.toml").write_text('[fleet]\ngpus = ["A100"]\n[packages.torch]\n')
    lines = capplan_in("plan").stdout.splitlines()  # type: ignore[operator]
    head = " ".join(" ".join(lines[: _first_table_line(lines)]).split())
    assert "1 warning (the reasons follow below):" in head
    assert (
        "runner: torch-sm80 cannot finish: about 360 min on ubuntu-latest (4 cores), 570 with "
        "the timeout's margin, past its 360-min limit; it needs a big-parallel runner "
        '([policy.runners_os] "big-parallel")'
    ) in head
    # Where the minutes come from: a table of each package's basis and reference machine.
    text = capplan_in("plan").stdout  # type: ignore[operator]
    assert "Build minutes: basis" in text
    row = next(line for line in text.splitlines() if line.startswith("torch "))
    assert "estimate" in row and "16 cores" in row
