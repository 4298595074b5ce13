"""`capplan build`'s refusals before anything is built: one line each, its documented code."""

from __future__ import annotations

from pathlib import Path

import pytest

from capplan.errors import ExitCode


def _last(result: object) -> str:
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert lines, result
    return str(lines[-1])


def test_retry_failed_needs_a_record(capplan_cli: object) -> None:
    result = capplan_cli("build", "--retry-failed")  # type: ignore[operator]
    assert result.exit_code == ExitCode.USAGE
    assert "--retry-failed goes with --failures FILE" in result.stderr


@pytest.mark.parametrize(
    ("target", "says"),
    [("cachix:lab-cache", "needs cachix, which is not on PATH"),
     ("attic:", "names no cache"),
     ("attic:lab", "needs attic, which is not on PATH")],
)  # fmt: skip
def test_push_targets_whose_program_is_missing_are_refused_up_front(
    capplan_cli: object, tmp_path: Path, target: str, says: str
) -> None:
    result = capplan_cli("build", "--push", target, env={"PATH": str(tmp_path)})  # type: ignore[operator]
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert _last(result).startswith("capplan: error: --push") and says in _last(result)


def test_nix_missing_is_exit_14(capplan_cli: object, tmp_path: Path) -> None:
    result = capplan_cli("build", env={"PATH": str(tmp_path)})  # type: ignore[operator]
    assert result.exit_code == ExitCode.NIX
    assert _last(result) == "capplan: error: nix not found (install nix-bin (Debian) or Nix)"


def test_nix_older_than_2_8_is_exit_14(capplan_cli: object, tmp_path: Path) -> None:
    old = tmp_path / "nix"
    old.write_text("#!/bin/sh\necho 'nix (Nix) 2.3.16'\n")
    old.chmod(0o755)
    result = capplan_cli("build", env={"PATH": str(tmp_path)})  # type: ignore[operator]
    assert result.exit_code == ExitCode.NIX
    assert "capplan build needs 2.8 or newer" in _last(result)
