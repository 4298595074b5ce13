"""The CPU family's planning (:class:`~capplan.core.planning.family.FamilyPlanning`): CPU levels
(x86-64-v3) and microarchitectures (sapphirerapids) of the fleet's machines.
"""

from __future__ import annotations

from typing import Any

from capplan.core.planning.plan import CpuSpec, Variant

__all__ = ["cpu_json", "cpu_nix_keys"]


def cpu_json(spec: CpuSpec | None) -> dict[str, Any] | None:
    """plan.json's ``cpu`` object: null for generic CPU code; the target and how the build
    gets it (the package's own options, ``override``, or compiler flags, ``cflags``); or, for a
    ``<package>-hwcaps`` variant, the variant built for each psABI level."""
    if spec is None:
        return None
    if spec.mechanism == "hwcaps":
        return {"hwcaps": dict(spec.hwcaps)}
    return {
        "target": spec.target,
        "arch": spec.arch,
        "mechanism": spec.mechanism,
        "override": dict(spec.override),
        "cflags": list(spec.cflags),
    }


def cpu_nix_keys(v: Variant) -> dict[str, Any]:
    """plan.json's CPU key, on every variant (pkgs/variant.nix reads ``cpu``)."""
    return {"cpu": cpu_json(v.cpu)}
