"""``capplan detect --nix``: the lines a machine's NixOS or home-manager configuration needs
to get its GPUs' cached builds from the fleet's module (docs/machines.md): each GPU as the
module's ``capplan.gpus`` takes it (its capability or gfx target, which the plan's exported
table always knows), with its name and PCI id as a comment, and the CPU's level where the plan
builds per level. Pure: it formats what ``detect`` found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capplan.errors import printable

__all__ = ["nix_lines", "nix_string"]


def nix_string(text: str) -> str:
    """A Nix string literal of ``text``: JSON's escapes are Nix's, and ``${`` is escaped so a
    detected name never starts an interpolation."""
    import json

    return json.dumps(text).replace("${", "\\${")


def _comment(text: str) -> str:
    # A comment ends at the line's end: no control character (printable) and no newline.
    return " ".join(printable(text).split())


def nix_lines(report: Sequence[Mapping[str, Any]], cpu: Mapping[str, Any] | None) -> str:
    """The module lines for the GPUs ``detect`` found (``report``) and, when the plan has
    per-level builds, the CPU (``cpu``, detect's CPU entry)."""
    entries: list[tuple[str, str]] = []
    for gpu in report:
        target = gpu.get("capability") or gpu.get("target")
        if not target:
            continue  # a GPU whose target the detector could not tell: nothing to name
        where = f", PCI {gpu['pci_id']}" if gpu.get("pci_id") else ""
        entries.append((str(target), f"{gpu['name']}{where}"))
    if cpu is not None and cpu.get("level"):
        entries.append((str(cpu["level"]), f"CPU {cpu.get('microarchitecture') or ''}"))
    seen: dict[str, str] = {}
    for value, comment in entries:
        seen.setdefault(value, comment)
    lines = [
        "# capplan detect --nix: this machine's lines for the fleet's NixOS or home-manager",
        "# module (imports = [ fleet.nixosModules.default ]; see docs/machines.md)",
        "capplan.enable = true;",
        "capplan.gpus = [",
        *(f"  {nix_string(v)} # {_comment(c)}" for v, c in seen.items()),
        "];",
    ]
    return "\n".join(lines) + "\n"
