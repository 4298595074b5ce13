"""What a new user met (issue 46): each step a first reader takes answers as the docs say."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Cli

from capplan.errors import ExitCode


def test_gpus_lists_the_models_a_partial_query_matches(capplan_in: Cli) -> None:
    """`gpus` is the search command: 'rtx 30' lists the RTX 30 series (exit 0), not an error."""
    result = capplan_in("gpus", "rtx 30", "--json")
    assert result.exit_code == 0, result.output
    names = [row["name"] for row in json.loads(result.stdout)]
    assert any("RTX 3090" in name for name in names)
    assert any("RTX 3050" in name for name in names)
    assert not any("RTX 40" in name or "RTX 20" in name for name in names)


def test_a_partial_name_never_chooses_a_device(capplan_in: Cli) -> None:
    """Where one GPU must be chosen, a partial name stays an error (exit 4)."""
    result = capplan_in("explain", "8.6", "--device", "rtx 30")
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert capplan_in("gpus", "rtx 309x").exit_code == ExitCode.INVALID_INPUT


def test_dispatch_explain_names_device_as_the_source(capplan_in: Cli, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text('[fleet]\ngpus = ["RTX 3090"]\n[packages.torch]\n')
    result = capplan_in("dispatch", "explain", "--device", "RTX 3090")
    assert result.exit_code == 0, result.output
    assert "GPUs: 8.6 (from --device)" in result.stdout
    assert "CAPPLAN_CAPABILITY" not in result.stdout
    from_env = capplan_in("dispatch", "explain", env={"CAPPLAN_CAPABILITY": "8.6"})
    assert "GPUs: 8.6 (from CAPPLAN_CAPABILITY)" in from_env.stdout
