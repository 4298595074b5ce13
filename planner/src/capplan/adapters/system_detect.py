"""Which Nix system this machine is, and what a Jetson's device tree says (issue 12).

``capplan detect`` recommends the variants of the machine's own system. The system comes from
``CAPPLAN_SYSTEM`` when set (tests, or planning for another machine), else from the CPU that
``uname -m`` reports (:func:`platform.machine`).

Pre-Thor Jetson boards have no nvidia-smi, and Orin/Thor report through it only on recent
JetPack, so when nvidia-smi finds nothing, the device tree names the module: ``model`` holds the
product string ("NVIDIA Jetson AGX Orin Developer Kit") and ``compatible`` a NUL-separated list
whose ``nvidia,tegraNNN`` entry names the SoC (L4T kernel device trees; the SoC numbers are
NVIDIA's: tegra210 = X1, tegra186 = X2 (Parker), tegra194 = Xavier, tegra234 = Orin,
tegra264 = Thor). Both are read under a root folder, ``CAPPLAN_ROOT`` (default ``/``), so tests
use a fake tree.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from pathlib import Path

from capplan.adapters.files import MAX_PROC_BYTES, read_bounded
from capplan.adapters.gpu_detect import DetectedGpu
from capplan.core.model.capability import Capability
from capplan.core.model.systems import SYSTEMS
from capplan.errors import ConfigError

__all__ = ["ROOT_ENV", "SYSTEM_ENV", "host_system", "jetson_from_device_tree"]

SYSTEM_ENV = "CAPPLAN_SYSTEM"
ROOT_ENV = "CAPPLAN_ROOT"

_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

# SoC -> device capability (NVIDIA CUDA GPU Compute Capability table, Jetson products). Thor is
# 11.0 from CUDA 13 (CUDA 12.x called it 10.1).
_TEGRA = {
    "tegra210": "5.3",
    "tegra186": "6.2",
    "tegra194": "7.2",
    "tegra234": "8.7",
    "tegra264": "11.0",
}
_TREES = ("proc/device-tree", "sys/firmware/devicetree/base")


def host_system(environ: Mapping[str, str], machine: str | None = None) -> str:
    """The Nix system of this machine: ``CAPPLAN_SYSTEM``, else ``uname -m`` plus ``-linux``."""
    forced = environ.get(SYSTEM_ENV, "").strip()
    if forced:
        if forced not in SYSTEMS:
            raise ConfigError(
                f"{SYSTEM_ENV}={forced!r} is not a system capplan plans for",
                hint=f"set it to one of {', '.join(SYSTEMS)} or unset it",
            )
        return forced
    cpu = (machine if machine is not None else platform.machine()).lower()
    return f"{_MACHINES.get(cpu, cpu)}-linux"


def _read(path: Path) -> str | None:
    try:
        return read_bounded(path, MAX_PROC_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


def jetson_from_device_tree(root: Path) -> DetectedGpu | None:
    """The Jetson module the device tree under ``root`` describes, or None when it is not one."""
    for tree in _TREES:
        base = root / tree
        compatible = _read(base / "compatible")
        model = _read(base / "model")
        if compatible is None and model is None:
            continue
        entries = [e.strip() for e in (compatible or "").split("\0") if e.strip()]
        capability = None
        for entry in entries:
            vendor, _, chip = entry.partition(",")
            if vendor == "nvidia" and chip in _TEGRA:
                capability = Capability.parse(_TEGRA[chip])
                break
        name = (model or "").replace("\0", "").strip()
        if capability is None and "jetson" not in name.lower():
            return None
        return DetectedGpu(name=name or "NVIDIA Jetson", capability=capability, driver=None)
    return None
