"""The machine's Nix system and a Jetson's device tree under a fake root (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from capplan.adapters.detect.nvidia import jetson_from_device_tree
from capplan.adapters.detect.system import host_system
from capplan.core.families.cuda.capability import Capability
from capplan.errors import ConfigError


@pytest.mark.parametrize(
    ("machine", "system"),
    [
        ("x86_64", "x86_64-linux"),
        ("AMD64", "x86_64-linux"),
        ("aarch64", "aarch64-linux"),
        ("arm64", "aarch64-linux"),
        ("riscv64", "riscv64-linux"),
    ],
)
def test_host_system_from_uname(machine: str, system: str) -> None:
    assert host_system({}, machine) == system


def test_capplan_system_wins_and_is_checked() -> None:
    assert host_system({"CAPPLAN_SYSTEM": "aarch64-linux"}, "x86_64") == "aarch64-linux"
    with pytest.raises(ConfigError, match="CAPPLAN_SYSTEM='aarch64'"):
        host_system({"CAPPLAN_SYSTEM": "aarch64"}, "x86_64")


def _tree(root: Path, where: str, **files: bytes) -> Path:
    folder = root / where
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return root


def test_orin_from_compatible_and_model(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        "proc/device-tree",
        model=b"NVIDIA Jetson AGX Orin Developer Kit\0",
        compatible=b"nvidia,p3737-0000+p3701-0005\0nvidia,p3701-0005\0nvidia,tegra234\0",
    )
    gpu = jetson_from_device_tree(root)
    assert gpu is not None
    assert gpu.name == "NVIDIA Jetson AGX Orin Developer Kit"
    assert gpu.capability == Capability.parse("8.7") and gpu.driver is None


def test_xavier_from_compatible_only_under_sys_firmware(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        "sys/firmware/devicetree/base",
        compatible=b"nvidia,jetson-xavier\0nvidia,tegra194\0",
    )
    gpu = jetson_from_device_tree(root)
    assert gpu is not None and gpu.capability == Capability.parse("7.2")


def test_model_only_leaves_the_capability_to_the_kb(tmp_path: Path) -> None:
    gpu = jetson_from_device_tree(_tree(tmp_path, "proc/device-tree", model=b"Jetson Orin Nano\0"))
    assert gpu is not None and gpu.name == "Jetson Orin Nano" and gpu.capability is None


def test_not_a_jetson(tmp_path: Path) -> None:
    assert jetson_from_device_tree(tmp_path) is None
    root = _tree(
        tmp_path, "proc/device-tree", model=b"Raspberry Pi 5\0", compatible=b"brcm,bcm2712\0"
    )
    assert jetson_from_device_tree(root) is None
