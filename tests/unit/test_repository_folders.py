"""The writer creates the missing folders of an output path only inside a git repository
(issue 46: the tutorial's `ci github --output .github/workflows/cuda-cache.yml` in a fresh
repository), and nothing outside one."""

from __future__ import annotations

from pathlib import Path

import pytest

from capplan.adapters.files import atomic_write_text
from capplan.errors import WriteError


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_inside_a_repository_the_missing_folders_are_made(tmp_path: Path) -> None:
    repo = tmp_path / "lab"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    atomic_write_text(repo / "sub" / ".github" / "workflows" / "ci.yml", "x\n")
    assert (repo / "sub" / ".github" / "workflows" / "ci.yml").read_text() == "x\n"
    # A worktree's .git is a file: the same.
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: elsewhere\n")
    atomic_write_text(worktree / "a" / "b.json", "{}\n")
    assert (worktree / "a" / "b.json").is_file()


@pytest.mark.parametrize(
    "target",
    [
        "outside/new/x.yml",  # no repository above
        "lab/link/new/x.yml",  # a symlink out of the repository
        "lab/../outside/new/x.yml",
        "lab/missing/../x.yml",  # '..' through a folder that does not exist
    ],
)
def test_nothing_is_made_outside_a_repository(tmp_path: Path, target: str) -> None:
    (tmp_path / "lab" / ".git").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "lab" / "link").symlink_to(tmp_path / "outside")
    before = _tree(tmp_path)
    with pytest.raises(WriteError, match="no folder"):
        atomic_write_text(tmp_path / target, "x\n")
    assert _tree(tmp_path) == before
