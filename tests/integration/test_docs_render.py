"""The docs render as written (issue 33, item 5): no escaped pipe shown to the reader, no
pointer to a section or file a reader cannot find."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
CODE = re.compile(r"`[^`]*`")


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_no_escaped_pipe_inside_code(page: Path) -> None:
    """Python-Markdown prints `\\|` inside a code span as both characters, in a table or not."""
    for number, line in enumerate(page.read_text().splitlines(), 1):
        for span in CODE.findall(line):
            assert "\\|" not in span, f"{page.name}:{number}: {span}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_no_file_a_reader_cannot_open(page: Path) -> None:
    """The team's notes (../shared) are not published: the docs cite public sources."""
    text = page.read_text()
    for private in ("../shared", "shared/CUDA.md", "NIXPKGS.md", "ROCM.md", "DESIGN.md"):
        assert private not in text, (page.name, private)


@pytest.mark.parametrize(
    "config", ["capplan.toml", "planner/src/capplan/templates/fleet/capplan.toml"]
)
def test_the_configs_comment_points_at_what_exists(config: str) -> None:
    comment = "".join(
        line for line in (REPO / config).read_text().splitlines() if line.startswith("#")
    )
    assert "docs/configuration.md" in comment
    assert 'README.md ("Configuration")' not in comment
    assert (REPO / "docs" / "configuration.md").is_file()
