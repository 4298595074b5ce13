"""docs/getting-started.md's offline tour runs as written (issue 33, item 3).

Every ```sh block preceded by `<!-- offline -->` is run, in order, as one bash script (the
blocks share a folder and variables, as a reader's shell does) from a copy of the repository,
with `capplan` on PATH as the installed command would be. Blocks that call `nix` need Debian's
nix-bin and are left out, with the reason, where it is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "getting-started.md"
BLOCK = re.compile(r"<!-- offline -->\n```sh\n(.*?)```", re.S)


def offline_blocks() -> list[str]:
    return BLOCK.findall(PAGE.read_text())


def _copy_repo(dest: Path) -> None:
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, names):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def test_the_page_marks_its_offline_blocks() -> None:
    blocks = offline_blocks()
    assert len(blocks) >= 2
    script = "".join(blocks)
    for step in ("capplan init", "capplan generate", "build .#torch-sm86", "capplan ci github"):
        assert step in script, step


def _real_nixpkgs_git_lines() -> list[str]:
    section = PAGE.read_text().split("## With real nixpkgs", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line + "\n" for line in block.splitlines() if line.startswith("git ")]


def test_the_real_nixpkgs_git_add_runs_in_the_offline_folder(tmp_path: Path) -> None:
    """Issue 46: "With real nixpkgs" `git add`s in the folder of the offline try, which was no
    git repository; it runs there now (the first offline block and those git lines)."""
    if shutil.which("git") is None:
        pytest.skip("git not found")
    lines = _real_nixpkgs_git_lines()
    assert lines and "git add" in lines[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "capplan"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m capplan "$@"\n')
    shim.chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAPPLAN_", "GIT_"))}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(REPO / "planner" / "src"),
        TMPDIR=str(scratch),
        NO_COLOR="1",
    )
    script = "set -euo pipefail\n" + offline_blocks()[0] + "".join(lines) + "git ls-files\n"
    proc = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {"capplan.toml", "flake.nix", "overlays/plan.json"} <= set(proc.stdout.split())


def test_an_install_from_the_clone_leaves_nothing_git_sees(tmp_path: Path) -> None:
    """`pip install ./planner` leaves planner/build/ behind (setuptools): ignored, so neither
    `git status` nor the docs tests' copy of the repository (git ls-files) takes it."""
    if shutil.which("git") is None:
        pytest.skip("git not found")
    for name in ("planner/build/lib/capplan/__init__.py", "planner/src/capplan.egg-info/PKG-INFO"):
        ignored = subprocess.run(["git", "check-ignore", "-q", name], cwd=REPO, check=False)
        assert ignored.returncode == 0, name


def test_offline_blocks_run_as_written(tmp_path: Path) -> None:
    blocks = offline_blocks()
    have_nix = shutil.which("nix") is not None
    run = [b for b in blocks if have_nix or not re.search(r"^nix |\bnix --", b, re.M)]
    if shutil.which("git") is None:
        pytest.skip("git not found: the repository copy lists its files with git ls-files")
    clone = tmp_path / "capplan"
    _copy_repo(clone)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "capplan"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m capplan "$@"\n')
    shim.chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPPLAN_")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(REPO / "planner" / "src"),
        TMPDIR=str(scratch),
        NO_COLOR="1",
    )
    env.pop("NIXPKGS_ALLOW_UNFREE", None)
    script = "set -euo pipefail\n" + "".join(run) + 'printf "FLEET=%s\\n" "$PWD"\n'
    proc = subprocess.run(
        ["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fleet = Path(proc.stdout.strip().splitlines()[-1].removeprefix("FLEET="))
    assert fleet.parent == scratch
    for name in ("flake.nix", "capplan.toml", "overlays/plan.json"):
        assert (fleet / name).is_file(), name
    assert "build jobs (one per variant)" in proc.stdout  # capplan plan's bottom line
    if have_nix:
        assert (fleet / ".github" / "workflows" / "cuda-cache.yml").is_file()
        assert '"TORCH_CUDA_ARCH_LIST":"8.6"' in proc.stdout
    else:
        pytest.skip("nix not found: the blocks that build were left out (install nix-bin)")
