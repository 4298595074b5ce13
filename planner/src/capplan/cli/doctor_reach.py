"""``capplan doctor``'s driver check: does the loader of each Nix-built program or library that
loads the NVIDIA driver find ``libcuda.so.1`` on this host (issue 48; docs/doctor.md, "Non-NixOS
hosts")? The rule is the CUDA family's (core/families/cuda/reach.py), the lookups
adapters/host_driver.py's; this module shapes the JSON and the lines."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from capplan.cli.output import escape, out_console
from capplan.core.binaries.doctor import Library

__all__ = ["print_reach", "reach_json"]

_SHOWN = 8  # paths named per reason; the rest are counted


def reach_json(libraries: Sequence[Library]) -> dict[str, Any]:
    """``driver_reach`` of ``doctor --json``: how many files were checked, whether all reach
    the driver, and each file's verdict."""
    from capplan.adapters.host_driver import driver_reach

    files = [
        (
            lib.path,
            lib.path,
            lib.static_cudart
            or (lib.has_cuda_code and not any(n.startswith("libcudart.so") for n in lib.needed)),
        )
        for lib in libraries
        if "!" not in lib.path or os.path.exists(lib.path)  # a wheel's member: not Nix-built
    ]
    verdicts, checked = driver_reach(files, os.environ)
    verdicts.sort(key=lambda r: r.path)
    return {
        "checked": checked,
        "ok": all(r.ok for r in verdicts),
        "files": [r.to_json() for r in verdicts],
    }


def print_reach(data: dict[str, Any]) -> None:
    """Nothing when no Nix-built file loads the driver; else one line saying where the loader
    finds it, or one paragraph per reason it does not ("will not run", the fix)."""
    if not data["checked"]:
        return
    console = out_console()
    failing: dict[tuple[str, str | None], list[str]] = {}
    for entry in data["files"]:
        if not entry["ok"]:
            failing.setdefault((entry["reason"], entry["fix"]), []).append(entry["path"])
    for (reason, fix), paths in failing.items():
        shown = ", ".join(paths[:_SHOWN]) + (
            f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
        )
        console.print(
            f"[bold red]will not run[/] (driver not reachable): {escape(shown)}: {escape(reason)}",
            highlight=False,
            soft_wrap=True,
        )
        if fix:
            console.print(f"  fix: {escape(fix)}", highlight=False, soft_wrap=True)
    if not failing:
        places = sorted({f"{e['how']} {e['found']}" for e in data["files"]})
        console.print(
            f"driver reachable: the loader of {data['checked']} Nix-built files that load the "
            f"NVIDIA driver finds libcuda.so.1 ({escape(', '.join(places))}): runs",
            highlight=False,
            soft_wrap=True,
        )
