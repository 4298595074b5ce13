"""``capplan detect`` on a Jetson's device tree (issue 31): the GPU it names is reported as coming
from the device tree (it said "from nvidia-smi"), and a ``model`` that is binary garbage, control
sequences or several strings makes the tree an unusable source instead of a GPU name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.adapters.detect.nvidia import read_device_tree
from capplan.errors import ExitCode

ORIN = b"nvidia,p3701-0005\0nvidia,tegra234\0"


def _root(tmp_path: Path, model: bytes, compatible: bytes = ORIN) -> Path:
    tree = tmp_path / "root" / "proc" / "device-tree"
    tree.mkdir(parents=True, exist_ok=True)
    (tree / "model").write_bytes(model)
    (tree / "compatible").write_bytes(compatible)
    return tmp_path / "root"


def _env(tmp_path: Path, root: Path) -> dict[str, str]:
    return {
        "PATH": str(tmp_path / "empty-bin"),
        "CAPPLAN_SYSTEM": "aarch64-linux",
        "CAPPLAN_ROOT": str(root),
        "CAPPLAN_SYSFS_ROOT": str(tmp_path / "no-sys"),
        "CAPPLAN_NVML": "0",
    }


def test_the_device_tree_is_the_source(capplan_cli: Any, tmp_path: Path) -> None:
    root = _root(tmp_path, b"NVIDIA Jetson AGX Orin Developer Kit\0")
    env = _env(tmp_path, root)
    result = capplan_cli("detect", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    assert (gpu["source"], gpu["capability"]) == ("device-tree", "8.7")
    text = capplan_cli("detect", env=env)
    assert "from device-tree" in text.stdout and "nvidia-smi" not in text.stdout


@pytest.mark.parametrize(
    "model",
    [
        b"\xff\xfe\x00\x01binary\x80\x81\0",  # not UTF-8
        b"NVIDIA Jetson \x1b[31mred\x1b[0m\0",  # a colour sequence
        b"NVIDIA Jetson \x1b]0;title\x07\0",  # OSC: sets the terminal's title
        b"NVIDIA Jetson\0Orin\0",  # two strings
        b"NVIDIA Jetson " + b"x" * 5000 + b"\0",
    ],
    ids=["binary", "csi", "osc", "two-strings", "long"],
)
def test_garbage_model_is_an_unusable_source(
    capplan_cli: Any, tmp_path: Path, model: bytes
) -> None:
    root = _root(tmp_path, model)
    gpu, why = read_device_tree(root)
    assert gpu is None and "no product name" in why
    result = capplan_cli("detect", "--json", env=_env(tmp_path, root))
    assert result.exit_code == int(ExitCode.NO_GPU), result.stdout
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "device-tree/model is no product name" in line and "\x1b" not in line


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(model=st.binary(max_size=64), compatible=st.sampled_from([ORIN, b"", b"\xff\0garbage"]))
def test_generated_device_trees_give_a_name_or_a_reason(
    tmp_path_factory: pytest.TempPathFactory, model: bytes, compatible: bytes
) -> None:
    root = _root(tmp_path_factory.mktemp("dt"), model, compatible)
    gpu, why = read_device_tree(root)
    if gpu is not None:
        assert why == "" and gpu.source == "device-tree"
        assert gpu.name.isprintable() and gpu.name
    else:
        assert why == "" or "no product name" in why
