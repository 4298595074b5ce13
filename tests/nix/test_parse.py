"""`nix-instantiate --parse` accepts every .nix file of the repository (tracked and new)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from nixhelpers import REPO
from nixhelpers import _repo_files as repo_files

pytestmark = pytest.mark.nix


def test_every_nix_file_parses() -> None:
    if shutil.which("nix-instantiate") is None:
        pytest.skip("nix-instantiate not found on PATH (install Debian's nix-bin)")
    files = sorted(str(REPO / p) for p in repo_files() if p.suffix == ".nix")
    assert files, "no .nix files found"
    failures = []
    for path in files:
        proc = subprocess.run(
            ["nix-instantiate", "--parse", path],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            failures.append(f"{path}: {proc.stderr.strip()}")
    assert not failures, "\n".join(failures)
