"""This machine's CPU as archspec names it, read from ``/proc/cpuinfo`` under ``CAPPLAN_ROOT``
(default ``/``), so tests give a fake tree.

archspec's own ``host()`` reads the fixed path /proc/cpuinfo and asks ``platform.machine()``
which architecture it runs; here the file's text decides both (``flags``: x86_64; ``Features``
with a ``CPU implementer``: aarch64), then the best matching microarchitecture is chosen as
``archspec.cpu.detect.host`` chooses it: the deepest target whose vendor and features the CPU
has, descending from the best generic level it runs. The x86-64 psABI level it runs is the
deepest ``x86_64_vN`` among that target and its ancestors.

The file is refused unless regular (adapters/files.py) and only its first 64 KiB are read (the
first processor's block; the whole file grows with the core count); a missing or unreadable one
is "no CPU detected" with the reason, never an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capplan.adapters.cpu_archspec import X86_64_LEVELS
from capplan.adapters.files import open_regular

__all__ = ["CPUINFO", "DetectedCpu", "detect_cpu", "parse_cpuinfo"]

CPUINFO = Path("proc") / "cpuinfo"
# The start of /proc/cpuinfo read: one processor's block is a few KB (a 192-core machine's
# whole file is several hundred).
_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class DetectedCpu:
    """The CPU: its archspec microarchitecture (``sapphirerapids``), architecture, the psABI
    level it runs (x86-64 only) and its model name as the kernel prints it."""

    microarchitecture: str
    arch: str  # x86_64, aarch64
    level: str | None
    model: str | None
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "microarchitecture": self.microarchitecture,
            "arch": self.arch,
            "level": self.level,
            "model": self.model,
            "source": self.source,
        }


def _first_block(text: str) -> dict[str, str]:
    """The fields of the first processor in /proc/cpuinfo (they repeat per CPU)."""
    data: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if separator != ":":
            if data:
                break
            continue
        data.setdefault(key.strip(), value.strip())
    return data


def parse_cpuinfo(text: str, source: str = "/proc/cpuinfo") -> DetectedCpu | None:
    """The CPU a /proc/cpuinfo text describes; None when it is neither x86_64 nor aarch64."""
    import archspec.cpu  # type: ignore[import-untyped]
    from archspec.cpu import detect

    data = _first_block(text)
    if "flags" in data:
        arch = "x86_64"
        info = detect.partial_uarch(
            vendor=data.get("vendor_id", "generic"), features=set(data["flags"].split())
        )
        model = data.get("model name")
    elif "Features" in data and "CPU implementer" in data:
        arch = "aarch64"
        info = detect.partial_uarch(
            vendor=detect._canonicalize_aarch64_vendor(data),
            features=set(data["Features"].split()),
            cpu_part=data.get("CPU part", ""),
        )
        model = data.get("model name") or data.get("CPU part")
    else:
        return None
    targets = archspec.cpu.TARGETS
    tester = detect.COMPATIBILITY_CHECKS[arch]
    candidates = [t for t in targets.values() if tester(info, t)] or [targets[arch]]

    def depth(item: Any) -> tuple[int, int]:
        return len(item.ancestors), len(item.features)

    best_generic = max((c for c in candidates if c.vendor == "generic"), key=depth)
    if info.cpu_part and any(c.cpu_part == info.cpu_part for c in candidates):
        candidates = [c for c in candidates if c.cpu_part == info.cpu_part]
    specific = [c for c in candidates if c > best_generic]
    chosen = max(specific, key=depth) if specific else best_generic
    level = None
    if arch == "x86_64":
        lineage = {chosen.name, *(a.name for a in chosen.ancestors)}
        level = next(n for n in reversed(X86_64_LEVELS) if n.replace("-", "_") in lineage)
    name = chosen.name.replace("_", "-") if chosen.name.startswith("x86_64") else chosen.name
    return DetectedCpu(name, arch, level, model, source)


def detect_cpu(root: Path | None = None) -> tuple[DetectedCpu | None, str]:
    """This machine's CPU from ``<root>/proc/cpuinfo`` (root: ``CAPPLAN_ROOT``, default /), and
    when none, why (one line)."""
    base = root if root is not None else Path(os.environ.get("CAPPLAN_ROOT") or "/")
    path = base / CPUINFO
    try:
        # Only the first processor's block is needed: a many-core machine's cpuinfo runs past
        # any small limit, so read its start rather than refuse it.
        with open_regular(path) as handle:
            text = handle.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError as error:
        return None, f"cannot read {path}: {error.strerror or error}"
    found = parse_cpuinfo(text, str(path))
    if found is None:
        return None, f"{path} describes neither an x86_64 nor an aarch64 CPU"
    return found, ""
