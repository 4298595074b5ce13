"""The README starts short and links into docs/, a MkDocs site that builds with --strict
(issue "what a new user meets", item 5). scripts/test builds the real site; these tests check
that the build really fails on what it must catch, and what the README promises."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from capplan.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"


def _mkdocs(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(root / "site")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def site_copy(tmp_path: Path) -> Path:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    return tmp_path


def test_the_site_builds_strictly(site_copy: Path) -> None:
    proc = _mkdocs(site_copy)
    assert proc.returncode == 0, proc.stderr
    assert (site_copy / "site" / "configuration" / "index.html").is_file()


@pytest.mark.parametrize(
    ("page", "addition"),
    [
        ("configuration.md", "\nSee [the missing page](no-such-page.md).\n"),
        ("configuration.md", "\nSee [the missing section](exit-codes.md#no-such-section).\n"),
    ],
    ids=["broken link", "broken anchor"],
)
def test_a_broken_link_fails_the_build(site_copy: Path, page: str, addition: str) -> None:
    with (site_copy / "docs" / page).open("a") as handle:
        handle.write(addition)
    proc = _mkdocs(site_copy)
    assert proc.returncode != 0 and "no-such" in proc.stderr, proc.stderr


def test_a_page_left_out_of_the_nav_fails_the_build(site_copy: Path) -> None:
    (site_copy / "docs" / "orphan.md").write_text("# Orphan\n")
    proc = _mkdocs(site_copy)
    assert proc.returncode != 0 and "orphan.md" in proc.stderr, proc.stderr


def test_every_page_is_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    for page in sorted(p.name for p in DOCS.glob("*.md")):
        assert f": {page}" in nav, page


def test_the_readme_starts_short_and_links_into_docs() -> None:
    lines = README.splitlines()
    assert len(lines) <= 120, len(lines)
    # The first screen: what capplan is and the two commands.
    first = "\n".join(lines[:40])
    assert "bash scripts/setup && python3 -m capplan matrix" in first
    assert "bash scripts/setup --dev && bash scripts/test" in first
    for target in re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README):
        assert (REPO / target).is_file(), target
    linked = set(re.findall(r"\]\(docs/([^)#]+)", README))
    assert {"configuration.md", "nix.md", "amd.md", "cpu-planning.md", "exit-codes.md"} <= linked


def test_the_readme_commands_match_getting_started() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)[:2]
    started = re.findall(r"```sh\n(.*?)```", (DOCS / "getting-started.md").read_text(), re.S)[:2]
    assert blocks == started and len(blocks) == 2


def test_every_exit_code_is_documented() -> None:
    table = (DOCS / "exit-codes.md").read_text()
    for code in ExitCode:
        assert re.search(rf"^\| {int(code)} \| ", table, re.M), code
