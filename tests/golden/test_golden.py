"""Golden CLI output (CliRunner, NO_COLOR, 100 columns). Regenerate: UPDATE_GOLDEN=1 pytest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

EXPECTED = Path(__file__).parent / "expected"

CASES = {
    "caps-cuda-12.9.txt": ["caps", "--cuda", "12.9"],
    "caps-cuda-13.0.json": ["caps", "--cuda", "13.0", "--json"],
    "gpus-h100.json": ["gpus", "NVIDIA H100 80GB HBM3", "--json"],
    "explain-l4.txt": ["explain", "8.0,8.6,9.0+PTX", "--device", "L4"],
    "plan-default.txt": ["plan"],
    "plan-identifiers.txt": ["plan", "--print-identifiers"],
    "matrix-default.json": ["matrix", "--format", "json"],
    "matrix-default.txt": ["matrix"],
    "matrix-github.json": ["matrix", "--format", "github"],
    "matrix-summary.md": ["matrix", "--format", "summary"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str, capplan_cli: object) -> None:
    result = capplan_cli(*CASES[name])  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    path = EXPECTED / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(result.stdout)
    assert result.stdout == path.read_text(), f"regenerate with UPDATE_GOLDEN=1 if intended: {name}"


def test_output_is_byte_identical_across_runs(capplan_cli: object) -> None:
    first = capplan_cli("matrix", "--format", "json").stdout  # type: ignore[operator]
    second = capplan_cli("matrix", "--format", "json").stdout  # type: ignore[operator]
    assert first == second
