"""Which Nix system this machine is (issue 12); what a Jetson's device tree says is read by the
NVIDIA detector (:mod:`capplan.adapters.detect.nvidia`), its last source.

``capplan detect`` recommends the variants of the machine's own system. The system comes from
``CAPPLAN_SYSTEM`` when set (tests, or planning for another machine), else from the CPU that
``uname -m`` reports (:func:`platform.machine`).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping

from capplan.adapters.detect.tools import ROOT_ENV
from capplan.core.model.systems import SYSTEMS
from capplan.errors import ConfigError

__all__ = [
    "ROOT_ENV",
    "SYSTEM_ENV",
    "host_system",
]

SYSTEM_ENV = "CAPPLAN_SYSTEM"

_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


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
