"""`capplan ci hydra` and `capplan ci buildbot-nix` (issue 34), checked against what each tool
reads: Hydra's declarative jobset validation and buildbot-nix's per-repository config loader,
restated here from their sources (not from capplan's own constants)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_ci_github import one_line_error, write

from capplan.errors import ExitCode

# NixOS/hydra src/lib/Hydra/Helper/AddBuilds.pm (commit 2fc50363), validateDeclarativeJobset's
# @allowed_keys; updateDeclarativeJobset takes "inputs" and dies on any other key left.
HYDRA_ALLOWED = {
    "enabled", "hidden", "type", "flake", "description", "nixexprinput", "nixexprpath",
    "checkinterval", "schedulingshares", "enableemail", "enable_dynamic_run_command",
    "emailoverride", "keepnr",
}  # fmt: skip
# nix-community/buildbot-nix buildbot_nix/buildbot_nix/engine/repo_config.py (commit 5a7d4ed6),
# BranchConfig's fields and types; a file that fails them is replaced by the defaults.
BUILDBOT_FIELDS = {
    "flake_dir": str, "lock_file": str, "attribute": str,
    "effects_on_pull_requests": bool, "effects_branches": list,
}  # fmt: skip


def hydra_accepts(spec: dict[str, Any]) -> None:
    """Hydra's handling of a static spec.json, restated: a dictionary of dictionaries (else it
    is read as a generated spec), each jobset's keys allowed, a flake jobset with its URI."""
    assert spec and all(isinstance(v, dict) for v in spec.values())
    for body in spec.values():
        left = {k: v for k, v in body.items() if k not in HYDRA_ALLOWED or v is None}
        assert set(left) <= {"inputs"}, left  # "invalid keys ... in declarative specification"
        assert isinstance(body.get("inputs", {}), dict)
        assert body["type"] == 1 and isinstance(body["flake"], str) and body["flake"]
        assert "nixexprinput" not in body and "nixexprpath" not in body


def test_hydra_spec_is_a_static_declarative_project_with_one_flake_jobset(
    capplan_cli: Any,
) -> None:
    result = capplan_cli("ci", "hydra", "--flake", "github:my-org/cuda", "--jobset", "gpus")
    assert result.exit_code == 0, result.stderr
    spec = json.loads(result.stdout)
    hydra_accepts(spec)
    assert list(spec) == ["gpus"] and spec["gpus"]["flake"] == "github:my-org/cuda"
    assert spec["gpus"]["checkinterval"] == 3600 and spec["gpus"]["enabled"] == 1
    # torch requires big-parallel: the note names it for every system the plan builds on.
    assert "note: builders must declare these system features" in result.stderr
    assert "  x86_64-linux: big-parallel" in result.stderr
    assert "  aarch64-linux: big-parallel" in result.stderr


def test_engine_files_are_written_atomically_and_checked(capplan_in: Any, tmp_path: Path) -> None:
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n')
    hydra = ["ci", "hydra", "--flake", "git+https://git.example.org/cuda.git?ref=main",
             "--output", ".hydra/spec.json"]  # fmt: skip
    assert "create it first" in one_line_error(capplan_in(*hydra), ExitCode.WRITE)  # a typed path
    (tmp_path / ".hydra").mkdir()
    assert capplan_in(*hydra).exit_code == 0
    hydra_accepts(json.loads((tmp_path / ".hydra/spec.json").read_text()))
    assert capplan_in(*hydra, "--check").exit_code == 0
    other = capplan_in(*hydra[:3], "github:x/y", *hydra[4:], "--check")
    one_line_error(other, ExitCode.STALE)
    assert '-    "flake": "git+https' in other.stdout

    bb = ["ci", "buildbot-nix", "--output", "buildbot-nix.toml"]
    assert capplan_in(*bb).exit_code == 0
    data = tomllib.loads((tmp_path / "buildbot-nix.toml").read_text())
    assert data == {"attribute": "hydraJobs"}
    for key, value in data.items():
        assert isinstance(value, BUILDBOT_FIELDS[key])  # else buildbot-nix falls back to checks
    assert capplan_in(*bb, "--check").exit_code == 0
    assert not list(tmp_path.glob(".*.tmp*")) and not list(tmp_path.glob(".hydra/.*"))


def test_cpu_levels_need_their_gccarch_feature_on_the_builders(
    capplan_in: Any, tmp_path: Path
) -> None:
    pytest.importorskip("archspec.cpu", reason="archspec (CPU targets) is not installed")
    write(tmp_path, '[fleet]\ncpus = ["x86-64-v3", "sapphirerapids"]\n[packages.gromacs]\n')
    result = capplan_in("ci", "buildbot-nix")
    assert result.exit_code == 0, result.stderr
    assert "system-features in each worker's nix.conf" in result.stderr
    assert "  x86_64-linux: gccarch-sapphirerapids, gccarch-x86-64-v3" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--flake", "my flake"], "invalid flake reference 'my flake'"),
        (["--flake", 'github:a/b"; rm'], "invalid flake reference"),
        (["--flake", "github:a/b", "--jobset", ".jobsets"], "invalid Hydra jobset name"),
        (["--flake", "github:a/b", "--check"], "--check needs the committed file"),
    ],
)
def test_bad_input_is_one_line_and_exit_4(capplan_cli: Any, args: list[str], fragment: str) -> None:
    err = one_line_error(capplan_cli("ci", "hydra", *args), ExitCode.INVALID_INPUT)
    assert fragment in err


def test_a_huge_or_hostile_flake_reference_is_echoed_cut_and_escaped(capplan_cli: Any) -> None:
    # The one echo rule of issue 31 holds here too: cut to about 200 characters, escaped.
    err = one_line_error(
        capplan_cli("ci", "hydra", "--flake", "x \x1b[2J" + "y" * 100_000), ExitCode.INVALID_INPUT
    )
    assert len(err) < 1_200 and "\x1b" not in err and "\\x1b" in err
