"""``capplan plan`` with CPUs in the fleet (docs/cpu-planning.md): the config keys end to end,
bad values as one line with exit 5, and --gpu keeping the CPU counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capplan.errors import ExitCode

pytest.importorskip("archspec", reason="archspec (the CPU target database) is not installed")

CONFIG = """
[fleet]
gpus = ["A100"]
cpus = ["x86-64-v3", "sapphirerapids"]
[fleet.count]
"sapphirerapids" = 8
"A100" = 2
[packages.torch]
"""


def _error(result: object, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr)  # type: ignore[attr-defined]
    lines = [line for line in result.stderr.splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("capplan: error: "), result.stderr  # type: ignore[attr-defined]
    return lines[0]


def test_plan_json_has_the_cpu_fleet_and_a_cpu_field_per_variant(
    capplan_in: object, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(CONFIG)
    result = capplan_in("plan", "--json")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [(e["cpu"], e["target"], e["count"]) for e in data["cpu_fleet"]] == [
        ("sapphirerapids", "sapphirerapids", 8),  # by name, not in the file's order
        ("x86-64-v3", "x86-64-v3", 1),
    ]
    assert data["variants"] and all(v["cpu"] is None for v in data["variants"])
    torch = [d for d in data["decisions"] if d["package"] == "torch" and d["subject"] == "cpu"]
    assert torch and torch[0]["action"] == "generic"


def test_gpu_flag_keeps_cpu_counts(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(CONFIG)
    result = capplan_in("plan", "--json", "--gpu", "L4")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [g["gpu"] for g in data["fleet"]] == ["L4"]
    assert [(e["cpu"], e["count"]) for e in data["cpu_fleet"]] == [
        ("sapphirerapids", 8),
        ("x86-64-v3", 1),
    ]


@pytest.mark.parametrize(
    ("cpus", "expected"),
    [
        ('["x86-64-v3", "saphirerapids"]', "did you mean 'sapphirerapids'?"),
        ('["x86-64-v5"]', "accepted names: "),
        ('["power9le"]', "ppc64le"),
        ('"x86-64-v3"', "fleet.cpus"),
        ("[3]", "fleet.cpus"),
    ],
)
def test_bad_cpus_are_one_line_exit_5(
    capplan_in: object, tmp_path: Path, cpus: str, expected: str
) -> None:
    (tmp_path / "capplan.toml").write_text(f"[fleet]\ncpus = {cpus}\n[packages.torch]\n")
    before = {p.name for p in tmp_path.iterdir()}
    line = _error(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    assert expected in line
    assert {p.name for p in tmp_path.iterdir()} == before


def test_bad_cpu_policy_is_exit_5(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\ncpu = "native"\n'
    )
    line = _error(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    assert "packages.torch.cpu" in line
