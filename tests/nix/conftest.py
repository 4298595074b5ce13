"""Fixtures for tests/nix: copies of the repository, each with its own overlays/plan.json.

See nixhelpers.py for how Nix is run (offline, stand-in nixpkgs, no lock file writes).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from nixhelpers import PLANS, NixRunner, copy_tree


def _require_nix() -> None:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")


def _runner_with_plan(base: Path, plan: Path | None) -> NixRunner:
    copy_tree(base)
    if plan is not None:
        shutil.copyfile(plan, base / "overlays" / "plan.json")
    return NixRunner(base)


@pytest.fixture(scope="session")
def nix_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    """A copy of the repository with the committed overlays/plan.json."""
    _require_nix()
    yield _runner_with_plan(tmp_path_factory.mktemp("repo-committed"), None)


@pytest.fixture(scope="session")
def nix_example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    """A copy whose overlays/plan.json is tests/data/plans/example.json (the schema's example)."""
    _require_nix()
    yield _runner_with_plan(tmp_path_factory.mktemp("repo-example"), PLANS / "example.json")


@pytest.fixture(scope="session")
def nix_more(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    """A copy whose plan covers magma, nccl, onnxruntime and other CUDA versions."""
    _require_nix()
    yield _runner_with_plan(tmp_path_factory.mktemp("repo-more"), PLANS / "more.json")


@pytest.fixture(scope="session")
def nix_rocm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    """A copy whose plan holds AMD ROCm variants beside CUDA ones (tests/data/plans/rocm.json)."""
    _require_nix()
    yield _runner_with_plan(tmp_path_factory.mktemp("repo-rocm"), PLANS / "rocm.json")
