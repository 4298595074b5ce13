"""What every export format shares: the package's variants, the fleet's GPUs, the result type."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import how_runs
from capplan.core.families.cuda.keys import cuda_spec
from capplan.core.families.registry import is_cpu_level, is_cpu_side
from capplan.core.families.rocm.target import AmdTarget
from capplan.core.planning.plan import Plan, Variant
from capplan.errors import InvalidInputError

__all__ = [
    "Export",
    "ExportFile",
    "export_variants",
    "fleet_amd",
    "fleet_nvidia",
    "mixed_machine_misses",
    "yaml_string",
]


@dataclass(frozen=True, slots=True)
class ExportFile:
    """One file to write: its path relative to the output folder ('/'-separated) and text."""

    path: str
    text: str


@dataclass(frozen=True, slots=True)
class Export:
    """What an export writes, and per emitted entry (a wheel label, a conda row, a Spack spec)
    the plan variants it comes from and what the format cannot say about it."""

    format: str
    package: str
    version: str
    files: tuple[ExportFile, ...]
    entries: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "package": self.package,
            "version": self.version,
            "files": [f.path for f in self.files],
            "entries": list(self.entries),
        }


def export_variants(plan: Plan, package: str) -> tuple[Variant, ...]:
    """The package's per-target builds (capability-independent dependency jobs excluded), or
    one clear error naming the package when the plan has none."""
    if package not in plan.packages:
        from capplan.core.model.suggest import closest

        hint = closest(package, list(plan.packages), what="package")
        raise InvalidInputError(
            f"package '{package}' is not in the plan (it plans {', '.join(plan.packages)})",
            hint=hint or f"add [packages.{package}] to capplan.toml, or name a planned package",
        )
    # GPU families' per-target builds, and a CPU-side package's builds (per level, hwcaps, or
    # the generic one beside them); not the capability-independent jobs GPU builds need.
    variants = tuple(v for v in plan.variants_of(package) if not v.independent or is_cpu_side(v))
    if all(v.independent and not is_cpu_level(v) for v in variants):
        raise InvalidInputError(
            f"package '{package}' has no per-target builds in the plan",
            hint="one build serves the whole fleet (no per-GPU or per-CPU build): nothing to split",
        )
    return variants


def fleet_nvidia(plan: Plan) -> dict[str, tuple[Capability, bool, str]]:
    """Fleet label -> (capability, Jetson, system)."""
    return {g.label: (g.capability, g.jetson, g.system) for g in plan.fleet}


def fleet_amd(plan: Plan) -> dict[str, tuple[AmdTarget, str]]:
    return {g.label: (g.target, g.system) for g in plan.amd_fleet}


def _runs(plan: Plan, v: Variant, label: str) -> bool:
    nvidia = fleet_nvidia(plan)
    if label in nvidia:
        capability, jetson, _ = nvidia[label]
        spec = cuda_spec(v)
        verdict = how_runs(capability, spec.capabilities, spec.ptx, jetson=jetson)
        return verdict.level is not RunLevel.CANNOT_RUN
    return False


def mixed_machine_misses(plan: Plan, v: Variant, *, keyed_on: str) -> tuple[str, ...]:
    """The fleet's NVIDIA GPUs (of the variant's system) that this build cannot run, yet that
    share a machine with a GPU it is chosen for: an installer that keys on one GPU (the highest
    for the PEP 825 nvidia provider, ``keyed_on="highest"``; the lowest for CEP 46's
    ``__cuda_arch``, ``keyed_on="lowest"``) can give such a machine this build."""
    nvidia = fleet_nvidia(plan)
    served = [nvidia[s.gpu][0] for s in v.serves if s.gpu in nvidia]
    if not served:
        return ()
    misses = []
    for label, (capability, _, system) in nvidia.items():
        if system != v.system or _runs(plan, v, label):
            continue
        below = capability < max(served) if keyed_on == "highest" else capability > min(served)
        if below:
            misses.append(f"{label} ({capability})")
    where = f" on {v.system}" if len(plan.systems) > 1 else ""
    return tuple(f"{m}{where}" for m in sorted(set(misses)))


def yaml_string(text: str) -> str:
    """A double-quoted YAML scalar (JSON's string syntax is YAML's double-quoted style)."""
    return json.dumps(text, ensure_ascii=False)
