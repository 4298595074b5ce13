"""The CLI's part of the machine side (docs/machines.md): ``generate`` writes plan.json's
``machine`` section and carries capplan.toml's ``[cache]`` (an empty table keeps the bytes),
``ci github`` takes its cache from ``[cache] cachix`` unless ``--cache`` says otherwise, and
``detect --nix`` prints the module lines for this machine's GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.cli.machine_lines import nix_lines, nix_string
from capplan.errors import ExitCode

FLEET = '[fleet]\ngpus = ["RTX 3090"]\n[packages.torch]\n[policy]\nsystem = "x86_64-linux"\n'
CACHE = (
    '[cache]\nsubstituters = ["https://lab.cachix.org"]\n'
    'public_keys = ["lab.cachix.org-1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]\n'
    'cachix = "lab"\n'
)


def _plan(capplan_in: Any, tmp_path: Path, text: str) -> tuple[bytes, dict[str, Any]]:
    (tmp_path / "capplan.toml").write_text(text)
    result = capplan_in("generate")
    assert result.exit_code == 0, result.stderr
    raw = (tmp_path / "overlays" / "plan.json").read_bytes()
    return raw, json.loads(raw)


def test_generate_carries_the_cache_table_and_the_machine_section(
    capplan_in: Any, tmp_path: Path
) -> None:
    raw_without, without = _plan(capplan_in, tmp_path, FLEET)
    assert "cache" not in without
    assert without["version"] == 1
    machine = without["machine"]
    assert machine["version"] == 1
    assert machine["families"]["cuda"]["targets"]["x86_64-linux"]["8.6"]["torch"] == ["torch-sm86"]
    assert machine["families"]["cuda"]["pci"]["devices"]["2204"] == "8.6"
    assert machine["names"]["rtx3090"]["target"] == "8.6"
    # An empty [cache] table changes no byte; a filled one adds one key, the version stays 1.
    raw_empty, _ = _plan(capplan_in, tmp_path, FLEET + "[cache]\n")
    assert raw_empty == raw_without
    _, with_cache = _plan(capplan_in, tmp_path, FLEET + CACHE)
    assert with_cache["version"] == 1
    assert with_cache["cache"] == {
        "cachix": "lab",
        "public_keys": ["lab.cachix.org-1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="],
        "substituters": ["https://lab.cachix.org"],
    }
    assert {k: v for k, v in with_cache.items() if k != "cache"} == without


def test_ci_github_takes_the_cache_from_the_table_and_the_flag_wins(
    capplan_in: Any, tmp_path: Path
) -> None:
    # nccl builds on a GitHub-hosted runner (torch needs a big-parallel one).
    fleet = FLEET.replace("[packages.torch]", "[packages.nccl]")
    (tmp_path / "capplan.toml").write_text(fleet + CACHE)
    from_table = capplan_in("ci", "github")
    assert from_table.exit_code == 0, from_table.stderr
    assert "--cache lab" in from_table.stdout.splitlines()[0]
    assert "name: lab\n" in from_table.stdout, from_table.stdout
    flag = capplan_in("ci", "github", "--cache", "other")
    assert flag.exit_code == 0, flag.stderr
    assert "--cache other" in flag.stdout.splitlines()[0]
    assert "name: other\n" in flag.stdout and "name: lab\n" not in flag.stdout
    (tmp_path / "capplan.toml").write_text(fleet)
    missing = capplan_in("ci", "github")
    assert missing.exit_code == int(ExitCode.INVALID_INPUT)
    assert "[cache] cachix" in missing.stderr


FAKE_SMI = """#!/bin/sh
cat <<'CSV'
NVIDIA GeForce RTX 3090, 8.6, 580.65.06
NVIDIA H100 80GB HBM3, 9.0, 580.65.06
CSV
"""


def test_detect_nix_prints_the_module_lines(capplan_cli: Any, tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    result = capplan_cli("detect", "--nix", env=env)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "capplan.enable = true;" in lines
    start = lines.index("capplan.gpus = [")
    assert lines[start + 1 : start + 4] == [
        '  "8.6" # NVIDIA GeForce RTX 3090',
        '  "9.0" # NVIDIA H100 80GB HBM3',
        "];",
    ]
    both = capplan_cli("detect", "--nix", "--json", env=env)
    assert both.exit_code == int(ExitCode.INVALID_INPUT)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_detected_names_never_break_out_of_the_nix_lines(name: str) -> None:
    text = nix_lines([{"name": name, "capability": "8.6", "pci_id": None}], None)
    body = text.splitlines()
    # One GPU line: the value, then a comment that ends with the line (no newline inside).
    assert body[-2].startswith('  "8.6" # ')
    assert len(body) == 6
    quoted = nix_string(name)
    assert "${" not in quoted.replace("\\${", "")
    assert json.loads(quoted.replace("\\${", "${")) == name
