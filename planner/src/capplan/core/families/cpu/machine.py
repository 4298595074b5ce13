"""The CPU family's part of plan.json's ``machine`` section (pkgs/machine.nix reads it): per
system, for every CPU target the plan builds for (and, on x86_64, each psABI level), each
CPU-side package's builds that run there, best first: the per-level builds the CPU runs,
highest first (:func:`.planning.pick_cpu_variants`' rule), then a ``-hwcaps`` output (it picks
at load time), then the generic build. Pure; the CPU model (archspec's) comes from the caller.
"""

from __future__ import annotations

from typing import Any

from capplan.core.families.cpu.keys import cpu_spec
from capplan.core.families.cpu.planning import CpuModel
from capplan.core.planning.plan import Plan, Variant

__all__ = ["machine_targets"]

# The x86-64 psABI levels a machine may be named by even where the plan names none of them.
_X86_LEVELS = ("x86-64-v2", "x86-64-v3", "x86-64-v4")


def _order(model: CpuModel, cpu: str, variants: list[Variant]) -> list[str]:
    levels = []
    hwcaps = []
    generic = []
    for v in variants:
        spec = cpu_spec(v)
        if spec is None:
            generic.append(v.name)
        elif spec.mechanism == "hwcaps":
            hwcaps.append(v.name)
        elif spec.target is not None and model.why_not(cpu, spec.target) is None:
            levels.append((model.rank(spec.target), v.name))
    # Highest level first; equal ranks by name, so the order is the same on every machine.
    ranked = [name for _, name in sorted(levels, key=lambda x: (x[0], x[1]), reverse=True)]
    return ranked + sorted(hwcaps) + sorted(generic)


def machine_targets(plan: Plan, kb: object, model: CpuModel | None) -> dict[str, Any]:
    """The same shape as the GPU families': the CPU-side packages with per-level builds on
    each system, and per CPU target the builds of each that run there, best first."""
    packages: dict[str, list[str]] = {}
    targets: dict[str, dict[str, dict[str, list[str]]]] = {}
    for system in plan.systems:
        mine = [v for v in plan.variants if v.system == system and v.vendor is None]
        leveled = sorted(
            {v.package for v in mine if (s := cpu_spec(v)) is not None and s.target is not None}
        )
        if not leveled or model is None:
            continue
        packages[system] = leveled
        names = {s.target for v in mine if (s := cpu_spec(v)) is not None and s.target}
        if system == "x86_64-linux":
            names |= set(_X86_LEVELS)
        table: dict[str, dict[str, list[str]]] = {}
        for cpu in sorted(names):
            runs = {}
            for package in leveled:
                order = _order(model, cpu, [v for v in mine if v.package == package])
                if order:
                    runs[package] = order
            table[cpu] = runs
        targets[system] = table
    return {"packages": packages, "targets": targets}
