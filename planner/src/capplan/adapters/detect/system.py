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

from capplan.adapters.detect.nvidia import DetectedGpu
from capplan.adapters.files import MAX_PROC_BYTES, read_bounded
from capplan.core.families.cuda.capability import Capability
from capplan.core.model.systems import SYSTEMS
from capplan.errors import ConfigError

__all__ = [
    "ROOT_ENV",
    "SYSTEM_ENV",
    "host_system",
    "jetson_from_device_tree",
    "read_device_tree",
]

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


def _read(path: Path) -> bytes | None:
    try:
        return read_bounded(path, MAX_PROC_BYTES)
    except OSError:
        return None


# A device tree's model is a short product string ("NVIDIA Jetson AGX Orin Developer Kit").
_MAX_MODEL = 128


def _model_problem(raw: bytes) -> str | None:
    """Why a ``model`` property is no product name (None: it is one): it must be UTF-8 text,
    one NUL-terminated string of printable characters, at most ``_MAX_MODEL`` of them."""
    text = raw.rstrip(b"\0")
    try:
        name = text.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    if not name.isprintable():
        return "control characters or several strings"
    if len(name) > _MAX_MODEL:
        return f"{len(name)} characters, more than a product name"
    return None


def read_device_tree(root: Path) -> tuple[DetectedGpu | None, str]:
    """The Jetson module the device tree under ``root`` describes (``source`` "device-tree"),
    or None and, when the tree is there but unusable (a model that is binary garbage), why."""
    for tree in _TREES:
        base = root / tree
        compatible = _read(base / "compatible")
        model = _read(base / "model")
        if compatible is None and model is None:
            continue
        if model is not None and (problem := _model_problem(model)) is not None:
            return None, f"{base / 'model'} is no product name ({problem}): device tree unusable"
        entries = [e.strip() for e in (compatible or b"").decode(errors="replace").split("\0")]
        capability = None
        for entry in entries:
            vendor, _, chip = entry.partition(",")
            if vendor == "nvidia" and chip in _TEGRA:
                capability = Capability.parse(_TEGRA[chip])
                break
        name = (model or b"").rstrip(b"\0").decode().strip()
        if capability is None and "jetson" not in name.lower():
            return None, ""
        gpu = DetectedGpu(
            name=name or "NVIDIA Jetson", capability=capability, driver=None, source="device-tree"
        )
        return gpu, ""
    return None, ""


def jetson_from_device_tree(root: Path) -> DetectedGpu | None:
    """The Jetson module the device tree under ``root`` describes, or None when it is not one
    (or is unusable: :func:`read_device_tree` says why)."""
    return read_device_tree(root)[0]
