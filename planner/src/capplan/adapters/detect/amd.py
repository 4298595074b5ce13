"""Find the local AMD GPUs: KFD sysfs topology, then ``rocminfo``.

Sources, best first (the first that lists a GPU answers; ``AmdDetectedGpu.source`` says which):

- KFD sysfs (../shared/ROCM.md "Detection"): ``<root>/class/kfd/kfd/topology/nodes/*/properties``,
  one ``key value`` pair a line, written by the Linux amdkfd driver (kfd_topology.c). A GPU node
  has ``gfx_target_version`` = major*10000 + minor*100 + stepping (stepping decimal: 90010 is
  gfx90a, 110000 gfx1100) and ``vendor_id`` 4098 (0x1002); CPU nodes have
  ``gfx_target_version 0``. ``device_id`` is the PCI device id in decimal. Needs no ROCm user
  space, only the amdgpu kernel driver. The root is ``CAPPLAN_SYSFS_ROOT`` (default ``/sys``),
  as for the NVIDIA sysfs source.
- ``rocminfo`` (ROCm user space): one block per HSA agent; GPU agents have a ``Name: gfxNNNN``
  line and a ``Marketing Name:`` line (CPU agents name the CPU). ``CAPPLAN_ROCMINFO`` names
  another executable (tests use a fake script).

Garbage in a node's properties (empty, binary, not numbers, a target capplan does not know)
skips that node with a note; nothing here raises for what the machine reports.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from capplan.adapters.detect.tools import SYSFS_ENV, find_tool, run_tool
from capplan.adapters.files import open_regular
from capplan.core.families.base import Device, Found
from capplan.core.families.rocm.target import AmdTarget
from capplan.errors import CapplanError

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase

__all__ = [
    "AMD_VENDOR",
    "ROCMINFO_ENV",
    "AmdDetectedGpu",
    "detect_amd_gpus",
    "find_devices",
    "parse_kfd_properties",
    "parse_rocminfo",
    "read_kfd",
    "run_rocminfo",
]

ROCMINFO_ENV = "CAPPLAN_ROCMINFO"
AMD_VENDOR = 4098  # 0x1002, as KFD writes it (decimal)
KFD_NODES = Path("class") / "kfd" / "kfd" / "topology" / "nodes"
_MAX_PROPERTIES = 64 * 1024
_NAME_RE = re.compile(r"^\s*Name:\s*(gfx[0-9a-z:+\-]+)\s*$", re.I)
_MARKETING_RE = re.compile(r"^\s*Marketing Name:\s*(.*?)\s*$")
_AGENT_RE = re.compile(r"^\s*Agent\s+[0-9]+\s*$")


@dataclass(frozen=True, slots=True)
class AmdDetectedGpu:
    """One AMD GPU agent: its gfx target and where the answer came from."""

    name: str
    target: AmdTarget
    source: str = field(default="kfd", compare=False)  # kfd, rocminfo
    pci_id: str | None = field(default=None, compare=False)  # 1002:74a1
    node: str | None = field(default=None, compare=False)  # KFD node number


def parse_kfd_properties(raw: bytes) -> dict[str, int]:
    """``key value`` lines of a KFD ``properties`` file as integers.

    ValueError (one phrase) for a file that is empty, not text, or has a line that is not
    ``name integer``.
    """
    if not raw.strip():
        raise ValueError("empty")
    if not raw.isascii() or b"\0" in raw:
        raise ValueError("not text")
    values: dict[str, int] = {}
    for line in raw.decode("ascii").splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not re.fullmatch(r"[a-z0-9_]+", parts[0]):
            raise ValueError(f"line {line.strip()[:40]!r} is not 'name value'")
        try:
            values[parts[0]] = int(parts[1], 10)
        except ValueError:
            raise ValueError(f"{parts[0]} is not a number ({parts[1][:20]!r})") from None
    return values


def _node_key(path: Path) -> tuple[int, str]:
    return (int(path.name), "") if path.name.isdigit() else (1 << 30, path.name)


def read_kfd(root: Path) -> tuple[list[AmdDetectedGpu], list[str]]:
    """AMD GPU nodes under ``root``/class/kfd/kfd/topology/nodes, in node order, and notes.

    CPU nodes (``gfx_target_version 0``) are skipped silently; a node whose properties cannot be
    read or make no sense is skipped with a note naming it.
    """
    nodes = root / KFD_NODES
    try:
        entries = sorted((p for p in nodes.iterdir() if p.is_dir()), key=_node_key)
    except OSError:
        return [], []  # no amdkfd driver: not a problem, just no AMD GPU here
    found: list[AmdDetectedGpu] = []
    notes: list[str] = []
    for entry in entries:
        where = f"KFD node {entry.name}"
        try:
            with open_regular(entry / "properties") as handle:
                raw = handle.read(_MAX_PROPERTIES + 1)
        except OSError as exc:
            notes.append(f"{where}: cannot read properties ({exc.strerror or exc}); skipped")
            continue
        if len(raw) > _MAX_PROPERTIES:
            notes.append(f"{where}: properties larger than {_MAX_PROPERTIES} bytes; skipped")
            continue
        try:
            props = parse_kfd_properties(raw)
        except ValueError as exc:
            notes.append(f"{where}: properties {exc}; skipped")
            continue
        version = props.get("gfx_target_version")
        if version is None:
            notes.append(f"{where}: properties lack gfx_target_version; skipped")
            continue
        if version == 0:
            continue  # a CPU node
        vendor = props.get("vendor_id")
        if vendor is not None and vendor != AMD_VENDOR:
            notes.append(f"{where}: vendor_id {vendor} is not AMD ({AMD_VENDOR}); skipped")
            continue
        try:
            target = AmdTarget.from_kfd(version)
        except CapplanError as exc:
            notes.append(f"{where}: {exc.message.removeprefix('KFD ')}; skipped")
            continue
        device = props.get("device_id")
        pci_id = f"1002:{device:04x}" if device is not None and 0 < device <= 0xFFFF else None
        found.append(
            AmdDetectedGpu(
                f"AMD GPU {target} (KFD node {entry.name})",
                target,
                source="kfd",
                pci_id=pci_id,
                node=entry.name,
            )
        )
    return found, notes


def parse_rocminfo(text: str) -> list[AmdDetectedGpu]:
    """GPU agents in ``rocminfo`` output: each agent block's ``Name: gfx...`` line.

    The ISA lines (``Name: amdgcn-amd-amdhsa--gfx1100``) do not match; an agent whose gfx name
    capplan does not know is left out.
    """
    gpus: list[AmdDetectedGpu] = []
    target: AmdTarget | None = None
    marketing: str | None = None

    def flush() -> None:
        if target is not None:
            label = marketing or f"AMD GPU {target}"
            gpus.append(AmdDetectedGpu(label, target, source="rocminfo"))

    for line in text.splitlines():
        if _AGENT_RE.match(line):
            flush()
            target, marketing = None, None
            continue
        name = _NAME_RE.match(line)
        if name and target is None:
            try:
                target = AmdTarget.parse(name.group(1))
            except CapplanError:
                target = None
            continue
        market = _MARKETING_RE.match(line)
        if market and marketing is None and market.group(1):
            marketing = market.group(1)
    flush()
    return gpus


def run_rocminfo(executable: str, *, timeout: float = 20.0) -> tuple[list[AmdDetectedGpu], str]:
    """Run rocminfo; the GPU agents it lists and, when none, why (one line)."""
    proc = run_tool([executable], timeout=timeout)
    if isinstance(proc, str):
        return [], proc
    text = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0:
        first = next((s.strip() for s in text.splitlines() if s.strip()), "no output")
        return [], f"rocminfo exited {proc.returncode}: {first[:120]}"
    gpus = parse_rocminfo(text)
    return gpus, "" if gpus else "rocminfo lists no GPU agent"


def detect_amd_gpus(
    *, env: Mapping[str, str] | None = None, timeout: float = 20.0
) -> tuple[list[AmdDetectedGpu], list[str]]:
    """The local AMD GPUs from the best source that lists any, and notes (skipped nodes, why
    none). Never raises for what the machine reports; a bad ``CAPPLAN_ROCMINFO`` is a
    ConfigError."""
    environ = os.environ if env is None else env
    root = Path(environ.get(SYSFS_ENV, "").strip() or "/sys")
    gpus, notes = read_kfd(root)
    if gpus:
        return gpus, notes
    executable = find_tool(environ, ROCMINFO_ENV, "rocminfo")
    if executable is None:
        return [], notes
    found, why = run_rocminfo(executable, timeout=timeout)
    if found:
        return found, notes
    return [], [*notes, why]


def find_devices(kb: KnowledgeBase, *, board: bool = True) -> Found:
    """The ROCm family's detector (core/families/registry.py names it): this machine's AMD
    GPUs by their gfx target, with the notes of what was skipped; when none is found, why (the
    phrase follows the NVIDIA detector's in the "no GPU" error). The knowledge base and
    ``board`` are the detectors' common arguments; an AMD GPU needs neither."""
    found, notes = detect_amd_gpus()
    devices = tuple(Device(g.name, "amd", g.target, g.source, None, g.pci_id) for g in found)
    why = "; ".join(notes[:3]) or "no KFD GPU node and no rocminfo"
    return Found(
        devices, tuple(notes), missing="" if devices else f"no AMD GPU found either ({why})"
    )
