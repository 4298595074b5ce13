"""Find the local NVIDIA GPUs: NVML, nvidia-smi, sysfs, then /proc/driver/nvidia.

Sources, best first (the first that lists a GPU answers; ``DetectedGpu.source`` says which):

- NVML through NVIDIA's ``nvidia-ml-py`` binding (``import pynvml``; optional: ``pip install
  'capplan[nvml]'``): names, capabilities, driver and PCI ids straight from the driver.
- ``nvidia-smi`` (below).
- sysfs: ``/sys/bus/pci/devices/*/{vendor,device,class}``, vendor 0x10de with a VGA (0x0300xx)
  or 3D (0x0302xx) controller class, mapped through the PCI table (kb/pci.json, kb/chips.json).
  Needs no driver at all: the case of a new machine before the driver is set up. The root is
  ``CAPPLAN_SYSFS_ROOT`` (default ``/sys``).
- ``/proc/driver/nvidia`` (below): names and driver, no capability.
- last (:func:`find_devices`, for ``capplan detect``): a Jetson's device tree (below).

``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`` prints one line
per physical GPU (MIG instances are not listed by --query-gpu), fields separated by ", ", and
``[N/A]`` / ``[Not Supported]`` where a value is unknown (Jetson boards report little). Drivers
older than 510 do not know the ``compute_cap`` field and exit non-zero; we then ask again for
name and driver only, leaving the capability to the knowledge base's model table.

When nvidia-smi is missing or cannot talk to the driver, the kernel module's files still name
the GPUs: ``/proc/driver/nvidia/version`` holds the driver version and
``/proc/driver/nvidia/gpus/<pci>/information`` a ``Model:`` line per GPU (no capability there).

Pre-Thor Jetson boards have no nvidia-smi, and Orin/Thor report through it only on recent
JetPack, so when nvidia-smi finds nothing, the device tree names the module: ``model`` holds the
product string ("NVIDIA Jetson AGX Orin Developer Kit") and ``compatible`` a NUL-separated list
whose ``nvidia,tegraNNN`` entry names the SoC (L4T kernel device trees; the SoC numbers are
NVIDIA's: tegra210 = X1, tegra186 = X2 (Parker), tegra194 = Xavier, tegra234 = Orin,
tegra264 = Thor). Both are read under a root folder, ``CAPPLAN_ROOT`` (default ``/``), so tests
use a fake tree.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from capplan.adapters.detect.tools import (
    ROOT_ENV,
    SYSFS_ENV,
    find_tool,
    run_tool,
)
from capplan.adapters.files import MAX_PROC_BYTES, read_bounded
from capplan.core.families.base import Device, Found
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.gpus import REPORT_HINT, lookup_pci, unique_model
from capplan.core.families.cuda.kb import nvidia
from capplan.core.model.kb import KnowledgeBase
from capplan.errors import CapplanError, DataError, InvalidInputError, NoGpuError
from capplan.runtime.selector import read_pci_gpus

__all__ = [
    "NVIDIA_SMI_ENV",
    "NVML_ENV",
    "PROC_ROOT",
    "DetectedGpu",
    "SysfsGpu",
    "detect_gpus",
    "find_devices",
    "jetson_from_device_tree",
    "parse_nvidia_smi_csv",
    "read_device_tree",
    "read_nvml",
    "read_proc_driver",
    "read_sysfs",
    "run_nvidia_smi",
]

NVIDIA_SMI_ENV = "CAPPLAN_NVIDIA_SMI"
NVML_ENV = "CAPPLAN_NVML"  # "0": skip NVML
PROC_ROOT = Path("/proc/driver/nvidia")

_FULL_QUERY = ("name", "compute_cap", "driver_version")
_OLD_DRIVER_QUERY = ("name", "driver_version")
_UNKNOWN = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]"}
_DRIVER_RE = re.compile(r"[0-9]+(?:\.[0-9]+){1,3}")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." and the open
# module's "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build".
_NVRM_RE = re.compile(r"^NVRM version:.*?Kernel Module.*?\s([0-9]+(?:\.[0-9]+){1,3})\s", re.M)

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


@dataclass(frozen=True, slots=True)
class DetectedGpu:
    """One physical GPU. ``capability`` / ``driver`` are None when the source did not say.

    ``source`` (nvml, nvidia-smi, sysfs, proc) and ``pci_id`` (``10de:2330``) say where the
    answer came from; they do not take part in equality.
    """

    name: str
    capability: Capability | None
    driver: str | None
    # No default: every reader names itself (a default once labelled the Jetson device tree's
    # and /proc/driver/nvidia's answers "nvidia-smi").
    source: str = field(compare=False)
    pci_id: str | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)  # e.g. why the capability is unknown


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _UNKNOWN else text


def _capability(text: str | None) -> Capability | None:
    if text is None:
        return None
    try:
        return Capability.parse(text)
    except CapplanError:
        return None


def _driver(text: str | None) -> str | None:
    return text if text is not None and _DRIVER_RE.fullmatch(text) else None


def parse_nvidia_smi_csv(text: str, fields: tuple[str, ...] = _FULL_QUERY) -> list[DetectedGpu]:
    """Parse ``--format=csv,noheader`` output for the query ``fields`` (name first).

    Lines that are not GPU records (blank lines, MIG device lines, warnings such as "WARNING:
    infoROM is corrupted" that nvidia-smi prints on stdout) are skipped rather than fatal.
    """
    gpus: list[DetectedGpu] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.upper().startswith(
            ("MIG ", "WARNING", "NVIDIA-SMI HAS FAILED")
        ):
            continue
        parts = stripped.split(",")
        if len(parts) < len(fields):
            continue
        # A model name could hold a comma; the other fields never do, so split from the right.
        tail = parts[len(parts) - len(fields) + 1 :]
        record = dict(
            zip(fields, [",".join(parts[: len(parts) - len(fields) + 1]), *tail], strict=True)
        )
        name = _value(record["name"])
        if name is None:
            continue
        gpus.append(
            DetectedGpu(
                name=name,
                capability=_capability(_value(record.get("compute_cap", ""))),
                driver=_driver(_value(record.get("driver_version", ""))),
                source="nvidia-smi",
            )
        )
    return gpus


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def run_nvidia_smi(executable: str, *, timeout: float = 20.0) -> tuple[list[DetectedGpu], str]:
    """Run nvidia-smi; return the GPUs it lists and, when none, why (one line)."""
    reason = ""
    for fields in (_FULL_QUERY, _OLD_DRIVER_QUERY):
        # A wedged driver makes nvidia-smi hang; /proc may still answer.
        proc = run_tool(
            [executable, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            timeout=timeout,
        )
        if isinstance(proc, str):
            return [], proc
        # Strict: output that is not UTF-8 text is a UnicodeDecodeError the CLI reports.
        stdout = proc.stdout.decode()
        output = stdout + "\n" + proc.stderr.decode(errors="replace")
        if proc.returncode == 0:
            gpus = parse_nvidia_smi_csv(stdout, fields)
            return (
                gpus,
                ""
                if gpus
                else f"nvidia-smi listed no GPU ({_first_line(output) or 'empty output'})",
            )
        reason = f"nvidia-smi exited {proc.returncode}: {_first_line(output) or 'no output'}"
        if "compute_cap" not in output:
            break
    return [], reason


def read_proc_driver(root: Path = PROC_ROOT) -> list[DetectedGpu]:
    """GPUs named by the kernel module under ``root`` (normally /proc/driver/nvidia)."""
    driver: str | None = None
    try:
        version = read_bounded(root / "version", MAX_PROC_BYTES).decode(errors="replace")
        match = _NVRM_RE.search(version)
        driver = match.group(1) if match else None
    except OSError:
        pass
    gpus: list[DetectedGpu] = []
    gpus_dir = root / "gpus"
    try:
        entries = sorted(gpus_dir.iterdir(), key=lambda p: p.name)  # PCI bus order, like nvidia-smi
    except OSError:
        return []
    for entry in entries:
        try:
            info = read_bounded(entry / "information", MAX_PROC_BYTES).decode(errors="replace")
        except OSError:
            continue
        name = None
        for line in info.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "Model":
                name = _value(value)
                break
        gpus.append(
            DetectedGpu(
                name=name or f"NVIDIA GPU {entry.name}",
                capability=None,
                driver=driver,
                source="proc",
            )
        )
    return gpus


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def read_nvml(module: Any = None) -> tuple[list[DetectedGpu], str]:
    """GPUs as NVML reports them, and, when none, why (one line).

    ``module`` stands in for ``pynvml`` (tests inject a fake; no GPU on the build machines).
    """
    if module is None:
        try:
            module = importlib.import_module("pynvml")
        except ImportError:
            return [], "NVML: nvidia-ml-py is not installed (pip install 'capplan[nvml]')"
    try:
        module.nvmlInit()
    except Exception as exc:  # pynvml raises NVMLError_* (driver not loaded, library not found)
        return [], f"NVML: {_text(exc) or type(exc).__name__}"
    gpus: list[DetectedGpu] = []
    try:
        driver = _driver(_value(_text(module.nvmlSystemGetDriverVersion())))
        for index in range(int(module.nvmlDeviceGetCount())):
            handle = module.nvmlDeviceGetHandleByIndex(index)
            name = _value(_text(module.nvmlDeviceGetName(handle))) or f"NVIDIA GPU {index}"
            major, minor = module.nvmlDeviceGetCudaComputeCapability(handle)
            # pciDeviceId packs device << 16 | vendor: 0x233010DE is 10de:2330 (H100 SXM5).
            packed = int(module.nvmlDeviceGetPciInfo(handle).pciDeviceId)
            pci_id = f"{packed & 0xFFFF:04x}:{packed >> 16:04x}"
            gpus.append(
                DetectedGpu(
                    name,
                    _capability(f"{int(major)}.{int(minor)}"),
                    driver,
                    source="nvml",
                    pci_id=pci_id,
                )
            )
    except Exception as exc:
        return [], f"NVML: {_text(exc) or type(exc).__name__}"
    finally:
        with contextlib.suppress(Exception):  # NVML already gone: nothing left to release
            module.nvmlShutdown()
    return gpus, "" if gpus else "NVML lists no GPU"


@dataclass(frozen=True, slots=True)
class SysfsGpu:
    """An NVIDIA display or 3D controller function in sysfs."""

    bus: str  # 0000:00:06.0
    pci_id: str  # 10de:2330


def read_sysfs(root: Path) -> tuple[list[SysfsGpu], list[str]]:
    """NVIDIA GPU functions under ``root``/bus/pci/devices, in bus order, and the problems met.

    The dispatch selector's reader (:func:`capplan.runtime.selector.read_pci_gpus`), so
    ``capplan detect`` and every dispatch wrapper read the same tree the same way: only regular
    files, opened without blocking, each value exactly as the kernel writes it.
    """
    found, problems = read_pci_gpus(str(root))
    return [SysfsGpu(bus, f"10de:{device:04x}") for bus, device in found], problems


def _from_sysfs(found: list[SysfsGpu], kb: KnowledgeBase) -> list[DetectedGpu]:
    gpus: list[DetectedGpu] = []
    for item in found:
        try:
            answer = lookup_pci(item.pci_id, kb)
        except InvalidInputError:
            gpus.append(
                DetectedGpu(
                    f"NVIDIA GPU {item.pci_id} at {item.bus}",
                    None,
                    None,
                    source="sysfs",
                    pci_id=item.pci_id,
                    note=f"unknown NVIDIA device id {item.pci_id}: {REPORT_HINT}",
                )
            )
            continue
        gpus.append(
            DetectedGpu(answer.name, answer.capability, None, source="sysfs", pci_id=item.pci_id)
        )
    return gpus


def detect_gpus(
    *,
    proc_root: Path = PROC_ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 20.0,
    sysfs_root: Path | None = None,
    nvml: Any = None,
    use_nvml: bool | None = None,
    kb: KnowledgeBase | None = None,
) -> list[DetectedGpu]:
    """The local GPUs, in PCI bus order, from the best source that lists any.

    Raises NoGpuError when no source lists one. ``nvml`` stands in for the ``pynvml`` module;
    ``use_nvml`` defaults to True only with the real process environment (``env`` None) or an
    injected module, so tests that pass a fake ``env`` never reach a real driver; ``CAPPLAN_NVML=0``
    turns it off.
    """
    environ = os.environ if env is None else env
    if kb is None:
        from capplan.adapters.kb import load_kb

        kb = load_kb()
    reasons: list[str] = []
    if use_nvml is None:
        use_nvml = (env is None or nvml is not None) and environ.get(NVML_ENV, "").strip() != "0"
    gpus: list[DetectedGpu] = []
    if use_nvml:
        gpus, why = read_nvml(nvml)
        if gpus:
            return gpus
        reasons.append(why)
    root = sysfs_root or Path(environ.get(SYSFS_ENV, "").strip() or "/sys")
    sysfs_found, problems = read_sysfs(root)
    executable = find_tool(environ, NVIDIA_SMI_ENV, "nvidia-smi")
    reason = "nvidia-smi not found on PATH"
    if executable is not None:
        gpus, reason = run_nvidia_smi(executable, timeout=timeout)
    proc_gpus = read_proc_driver(proc_root)
    proc_driver = proc_gpus[0].driver if proc_gpus else None
    if gpus:
        # nvidia-smi may print [N/A] for the driver (seen on some containers); the module knows.
        gpus = [g if g.driver else replace(g, driver=proc_driver) for g in gpus]
        if len(sysfs_found) == len(gpus):  # both in PCI bus order
            gpus = [replace(g, pci_id=s.pci_id) for g, s in zip(gpus, sysfs_found, strict=True)]
        return gpus
    reasons.append(reason)
    if sysfs_found:
        # No working nvidia-smi: the PCI ids still give each GPU's chip and capability.
        return [replace(g, driver=proc_driver) for g in _from_sysfs(sysfs_found, kb)]
    reasons.append(
        f"{root / 'bus/pci/devices'} lists no NVIDIA GPU"
        + (f" ({'; '.join(problems[:3])})" if problems else "")
    )
    if proc_gpus:
        return [replace(g, source="proc") for g in proc_gpus]
    raise NoGpuError(
        f"no NVIDIA GPU found: {'; '.join(r for r in reasons if r)}; {proc_root / 'gpus'} lists"
        " none",
        hint=f"run on a machine with an NVIDIA GPU, or set {NVIDIA_SMI_ENV} or {SYSFS_ENV}",
    )


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


def find_devices(kb: KnowledgeBase, *, board: bool = True) -> Found:
    """The CUDA family's detector (core/families/registry.py names it): this machine's NVIDIA
    GPUs, each with its capability (from the source, else the name's one model under the GPU
    name rule; None when the knowledge base does not know it) and driver. With ``board``, a
    Jetson without (a working) nvidia-smi is found by its device tree (``CAPPLAN_ROOT``)."""
    try:
        found = detect_gpus(kb=kb)
    except NoGpuError as error:
        if not board:
            return Found((), missing=error.message, hint=error.hint or "")
        module, unusable = read_device_tree(Path(os.environ.get(ROOT_ENV) or "/"))
        if module is None:
            tree = f"; {unusable}" if unusable else ""
            return Found((), missing=f"{error.message}{tree}", hint=error.hint or "")
        found = [module]
    except (UnicodeError, ValueError, RecursionError) as error:
        raise DataError(
            f"nvidia-smi printed output that is not text: {error}",
            hint="check the driver installation, or point CAPPLAN_NVIDIA_SMI at a working one",
        ) from None
    devices: list[Device] = []
    for gpu in found:
        cap = gpu.capability
        if cap is None:
            # The name's one model under the GPU name rule; an ambiguous name is no answer.
            model = unique_model(gpu.name, nvidia(kb).gpus)
            cap = model.capability if model else None
        if cap is not None and not nvidia(kb).knows(cap.base):
            cap = None  # a capability the knowledge base does not know: no answer is right
        devices.append(
            Device(gpu.name, "nvidia", cap, gpu.source, gpu.driver, gpu.pci_id, gpu.note)
        )
    return Found(tuple(devices))
