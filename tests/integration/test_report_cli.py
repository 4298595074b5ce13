"""``capplan report`` on the command line (issue 51): the failure record's jobs and what they
block in the page and the summary, and its errors (one line, a documented exit code)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from tests.integration.test_failures_cli import MAGMA_USERS, add, jobs  # noqa: F401 (a fixture)

from capplan.core.report.escape import md_text
from capplan.errors import ExitCode

KB = Path(__file__).resolve().parents[2] / "planner" / "src" / "capplan" / "kb"
HOSTILE = 'evil<script>console.error("ran")</script>\u202e"\'`|*_[x](y)'


def hostile_folder(folder: Path) -> dict[str, str]:
    """A knowledge base with a GPU model named HOSTILE (an A100 by another name: package names
    are refused where the knowledge base is loaded, GPU names are shown as they are) and a
    capplan.toml planning torch and torchvision for it and an AMD GPU; returns the environment
    that names the KB."""
    kb = folder / "kb"
    kb.mkdir()
    for path in KB.iterdir():
        if path.is_file():
            shutil.copy(path, kb / path.name)
    data = json.loads((KB / "gpus.json").read_text())
    a100 = next(gpu for gpu in data["gpus"] if gpu["name"] == "NVIDIA A100-SXM4-80GB")
    data["gpus"].append({**a100, "name": HOSTILE, "aliases": []})
    (kb / "gpus.json").write_text(json.dumps(data))
    (folder / "capplan.toml").write_text(
        f"[fleet]\ngpus = [{json.dumps(HOSTILE)}, \"MI300X\"]\n"
        "[packages.torch]\n[packages.torchvision]\n"
    )
    return {"CAPPLAN_KB_DIR": str(kb)}


def test_a_hostile_name_is_escaped_in_the_summary_and_the_page(
    capplan_in: Any, tmp_path: Path
) -> None:
    env = hostile_folder(tmp_path)
    out = capplan_in("matrix", "--format", "summary", env=env)
    assert out.exit_code == 0, out.stderr
    assert "<script" not in out.stdout and "\u202e" not in out.stdout
    assert md_text(HOSTILE) in out.stdout  # shown, escaped
    header = next(ln for ln in out.stdout.splitlines() if ln.startswith("| device |"))
    cells = re.split(r"(?<!\\)\|", header)
    assert len(cells) == 2 + 2 + 2  # device, count, the two packages; the name broke nothing
    page = tmp_path / "p.html"
    assert capplan_in("report", "--output", str(page), env=env).exit_code == 0
    text = page.read_text()
    assert "<script" not in text and "\u202e" not in text and "`|*_[x](y)" in text


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
