"""``capplan dispatch explain`` and the dispatch table, against the standalone selector script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import Cli

from capplan.adapters.kb import load_kb
from capplan.core.families.registry import dispatcher
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.planner import make_plan
from capplan.errors import ConfigError, ExitCode
from capplan.runtime import selector

FLEET = """
[fleet]
gpus = ["A100", "RTX 3090", "H100"]
[packages.torch]
[packages.cupy]
[policy]
fat = "fleet"
ptx = "newest"
[dispatch]
fallback = "{fallback}"
"""


def _write(tmp_path: Path, fallback: str = "error") -> None:
    (tmp_path / "capplan.toml").write_text(FLEET.format(fallback=fallback))


@pytest.mark.parametrize(
    ("device", "want", "level"),
    [
        ("RTX 3090", "torch-sm86", "native"),
        ("A100", "torch-sm80", "native"),
        ("L4", "torch-sm86", "compatible"),
        ("RTX 5090", "torch-sm90", "ptx-jit"),
    ],
)
def test_explain_by_device(
    capplan_in: Cli, tmp_path: Path, device: str, want: str, level: str
) -> None:
    _write(tmp_path)
    result = capplan_in("dispatch", "explain", "--package", "torch", "--device", device, "--json")
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["dispatch"]
    assert (entry["variant"], entry["level"]) == (want, level)
    assert entry["source"] == "--device"  # not the variable it travels in (issue 46)


@pytest.mark.parametrize("device", ["RTX 3090", "A100", "L4", "H100", "8.6,9.0", "7.5", "8.7"])
def test_explain_agrees_with_the_standalone_script(
    capplan_in: Cli, tmp_path: Path, device: str
) -> None:
    """The embedded script, copied alone and run with the same table, starts what explain says."""
    _write(tmp_path, fallback="error")
    devices = [arg for d in device.split(",") for arg in ("--device", d)]
    result = capplan_in("dispatch", "explain", "--package", "torch", "--json", *devices)
    (entry,) = json.loads(result.stdout)["dispatch"]
    kb = load_kb()
    config = config_from_mapping(
        {
            "fleet": {"gpus": ["A100", "RTX 3090", "H100"]},
            "packages": {"torch": {}, "cupy": {}},
            "policy": {"fat": "fleet", "ptx": "newest"},
        },
        origin="test",
    )
    plan = make_plan(kb, config)
    table = dispatcher(kb).table(plan, "torch", fallback="error")
    for variant in table["variants"]:
        env_dir = tmp_path / "envs" / variant["name"] / "bin"
        env_dir.mkdir(parents=True)
        (env_dir / "python3").write_text('#!/bin/sh\necho "$CAPPLAN_DISPATCH_VARIANT"\n')
        (env_dir / "python3").chmod(0o755)
        variant["path"] = str(env_dir.parent)
    (tmp_path / "table.json").write_text(json.dumps(table))
    alone = tmp_path / "alone.py"
    shutil.copy(selector.__file__, alone)
    caps = json.loads(result.stdout)["dispatch"][0]["gpus"]
    done = subprocess.run(
        [sys.executable, "-I", str(alone), str(tmp_path / "table.json"), "python3"],
        env={"CAPPLAN_CAPABILITY": ",".join(caps)},
        capture_output=True,
        text=True,
        check=False,
    )
    if entry["variant"] is None:
        assert done.returncode == entry["exit_code"] == result.exit_code != 0
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == entry["variant"]


def test_no_gpu_here_exits_10_with_the_fix(capplan_in: Cli, tmp_path: Path) -> None:
    _write(tmp_path)
    env = {
        "CAPPLAN_SYSFS_ROOT": str(tmp_path / "nosys"),
        "CAPPLAN_NVIDIA_SMI": "/nonexistent",
        "CAPPLAN_NVML": "0",
    }
    result = capplan_in("dispatch", "explain", "--package", "torch", env=env)
    assert result.exit_code == ExitCode.NO_GPU
    assert "CAPPLAN_CAPABILITY" in result.stdout


def test_fallback_to_a_variant(capplan_in: Cli, tmp_path: Path) -> None:
    _write(tmp_path, fallback="torch-sm86")
    result = capplan_in("dispatch", "explain", "--package", "torch", "--device", "7.5", "--json")
    assert result.exit_code == 0
    (entry,) = json.loads(result.stdout)["dispatch"]
    assert (entry["variant"], entry["level"]) == ("torch-sm86", "fallback")


def test_fallback_naming_no_variant_is_exit_5_with_did_you_mean(
    capplan_in: Cli, tmp_path: Path
) -> None:
    _write(tmp_path, fallback="torch-sm68")
    result = capplan_in("dispatch", "explain", "--device", "8.6")
    assert result.exit_code == ExitCode.CONFIG
    assert "torch-sm68" in result.stderr and "torch-sm86" in result.stderr


def test_package_without_variants_has_no_dispatch(capplan_in: Cli, tmp_path: Path) -> None:
    _write(tmp_path)
    result = capplan_in("dispatch", "explain", "--package", "cupy")
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert "capability-independent" in result.stderr
    unknown = capplan_in("dispatch", "explain", "--package", "torhc")
    assert unknown.exit_code == ExitCode.INVALID_INPUT and "torch" in unknown.stderr


@pytest.mark.parametrize("device", ["99.9", "garbage", "", "x" * 5000])
def test_bad_device_is_exit_4(capplan_in: Cli, tmp_path: Path, device: str) -> None:
    _write(tmp_path)
    result = capplan_in("dispatch", "explain", "--device", device)
    assert result.exit_code == ExitCode.INVALID_INPUT, result.output


def test_resolve_fallback_is_checked_without_the_cli() -> None:
    kb = load_kb()
    config = config_from_mapping(
        {"fleet": {"gpus": ["A100"]}, "packages": {"torch": {}}}, origin="test"
    )
    plan = make_plan(kb, config)
    dispatch = dispatcher(kb)
    with pytest.raises(ConfigError):
        dispatch.table(plan, "torch", fallback="nope")
    with pytest.raises(ConfigError):
        dispatch.resolve_fallback(plan, "", "nope")
    assert dispatch.table(plan, "torch", fallback="fat")["fallback"] == "error"


def test_dispatch_cost_against_fat_and_one_variant() -> None:
    kb = load_kb()
    config = config_from_mapping(
        {"fleet": {"gpus": ["A100", "RTX 3090", "L4", "H100"]}, "packages": {"torch": {}}},
        origin="test",
    )
    plan = make_plan(kb, config)
    cost = dispatcher(kb).cost(plan, "torch")
    assert cost.variants == 4
    # Four whole closures of the per-variant part against one closure with four targets in it.
    assert cost.one_variant_mb < cost.fat_mb < cost.dispatch_mb
    single = dispatcher(kb).cost(
        make_plan(
            kb,
            config.model_copy(
                update={"fleet": config.fleet.model_copy(update={"gpus": ("A100",)})}
            ),
        ),
        "torch",
    )
    assert single.dispatch_mb == single.one_variant_mb == single.fat_mb
