"""``capplan gpus`` for AMD models (kb/amd_gpus.json): a name no NVIDIA model matches."""

from __future__ import annotations

import json
from typing import Any

import pytest

from capplan.errors import ExitCode


@pytest.mark.parametrize(
    ("query", "target", "name"),
    [
        ("mi300x", "gfx942", "AMD Instinct MI300X"),
        ("Radeon RX 7900 XTX", "gfx1100", "AMD Radeon RX 7900 XTX"),
        ("strix halo", "gfx1151", "AMD Radeon 8060S"),
        ("Radeon 780M", "gfx1103", "AMD Radeon 780M"),
    ],
)
def test_amd_json(capplan_cli: Any, query: str, target: str, name: str) -> None:
    result = capplan_cli("gpus", query, "--json")
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["vendor"], row["target"], row["name"]) == ("amd", target, name)
    assert row["gfx_target_version"] > 0


def test_amd_table(capplan_cli: Any) -> None:
    result = capplan_cli("gpus", "mi250x")
    assert result.exit_code == 0, result.stderr
    assert "gfx90a" in result.stdout and "CDNA2" in result.stdout


def test_nvidia_name_still_wins(capplan_cli: Any) -> None:
    # GTX 780M is an NVIDIA model: the NVIDIA table answers, unchanged.
    result = capplan_cli("gpus", "780m", "--json")
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert rows and all("vendor" not in r and "capability" in r for r in rows)


def test_typo_suggests_both_vendors(capplan_cli: Any) -> None:
    result = capplan_cli("gpus", "mi300xx")
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "AMD Instinct MI300X" in result.stderr
    assert result.stderr.count("\n") == 1
