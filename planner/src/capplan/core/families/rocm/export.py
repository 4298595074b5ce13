"""The ROCm family's part of the exports (``capplan export``): its variants as PEP 825 wheel
variants (the amd provider's properties, core/export/wheel.py), as rattler-build rows keyed on
``__amdgpu_arch`` (core/export/conda.py's sources) and as Spack specs.

The spec grammar and recipes are core/export/spack.py's (spack-packages' ROCmPackage gives
``rocm`` and ``amdgpu_target``); the exporter asks the variant's family through the registry
(:func:`capplan.core.families.registry.export_writer`).
"""

from __future__ import annotations

import re
from typing import Any

from capplan.core.export.spack import (
    AMDGPU_TARGET_ONLY,
    SPACK_PACKAGES,
    SpackPackage,
    generic_target,
)
from capplan.core.export.wheel import Properties, Translation, WheelContext, wheel_label
from capplan.core.families.rocm.fleet import rocm_part
from capplan.core.families.rocm.keys import rocm_spec
from capplan.core.planning.plan import Plan, Variant

__all__ = ["amdgpu_arch", "rocm_conda", "rocm_spack", "rocm_wheel", "rocm_wheel_breadth"]


def rocm_spack(
    plan: Plan, v: Variant, recipe: SpackPackage, version: str
) -> tuple[list[str], list[str]]:
    """(specs, notes): one spec, ``+rocm amdgpu_target=...`` on the recipe or on the package
    that builds its GPU code; nixpkgs' default targets where the variant names none."""
    spec = rocm_spec(v)
    assert spec is not None
    targets = ",".join(str(t) for t in (spec.targets or rocm_part(plan).default_targets))
    target = f"target={generic_target(v.system)}"
    notes = []
    carrier = recipe
    if not recipe.rocm and recipe.via is not None:
        carrier = SPACK_PACKAGES[recipe.via]
        notes.append(
            f"{recipe.name} has no rocm variant: the gfx targets are {carrier.name}'s, which "
            "it builds its GPU code with"
        )
    gpu = []
    if carrier.cuda:
        gpu.append("~cuda")
    if carrier.rocm:
        gpu.append("+rocm")
    if carrier.rocm or carrier.name in AMDGPU_TARGET_ONLY:
        gpu.append(f"amdgpu_target={targets}")
    else:
        notes.append(f"{carrier.name} has no amdgpu_target variant: Spack builds its own targets")
    if carrier is recipe:
        return [" ".join([f"{recipe.name}{version}", *gpu, target])], notes
    return [f"{recipe.name}{version} {target} ^{carrier.name} {' '.join(gpu)}"], notes


def rocm_wheel(plan: Plan, v: Variant, context: WheelContext) -> Translation:
    """``capplan export wheel-variants``' translation of a ROCm build: the amd provider's
    ``gfx_arch`` (nixpkgs' default targets for a shared build) and ``rocm_version``."""
    rocm_version = context.rocm_version
    spec = rocm_spec(v)
    assert spec is not None
    notes: list[str] = []
    targets = spec.targets
    if not targets:
        targets = rocm_part(plan).default_targets
        notes.append("a shared ROCm build: it holds nixpkgs' default gfx targets")
    amd: dict[str, list[str]] = {"gfx_arch": sorted({str(t.base) for t in targets})}
    if any(t != t.base for t in targets):
        notes.append("gfx_arch has no xnack/sramecc feature values: stated without them")
    if rocm_version is not None:
        # The AMD provider offers rocm_version as major.minor (7.2 for ROCm 7.2.3).
        amd["rocm_version"] = [".".join(rocm_version.split(".")[:2])]
    else:
        notes.append(
            "rocm_version is not stated: the plan does not record the ROCm release "
            "(give --rocm-version)"
        )
    properties: Properties = {"amd": amd}
    parts = ["_".join(amd["gfx_arch"])] if spec.targets else ["default"]
    return wheel_label("rocm", parts, properties), properties, notes, ""


def rocm_wheel_breadth(v: Variant) -> int:
    """Two ROCm builds of equal properties run equally widely."""
    return 2


_GFX = re.compile(r"gfx([0-9]+)([0-9a-f])([0-9a-f])")


def amdgpu_arch(gfx: str) -> str | None:
    """A gfx target's ISA version as ``__amdgpu_arch`` states it: the last two hex digits are
    minor and stepping (gfx942 -> 9.4.2, gfx90a -> 9.0.10, gfx1100 -> 11.0.0), whatever its
    xnack/sramecc features; None for a generic target (gfx9-4-generic), which names no one
    ISA."""
    match = _GFX.fullmatch(gfx.split(":", 1)[0])
    if match is None:
        return None
    major, minor, stepping = match.groups()
    return f"{int(major)}.{int(minor, 16)}.{int(stepping, 16)}"


def rocm_conda(plan: Plan, v: Variant, torch_like: bool) -> dict[str, Any]:
    """``capplan export conda``'s row of a ROCm build: its gfx targets and the
    ``__amdgpu_arch`` ISA versions it runs on (``torch_like`` changes nothing here)."""
    spec = rocm_spec(v)
    assert spec is not None
    targets = spec.targets or rocm_part(plan).default_targets
    bases = sorted({t.base for t in targets})
    notes = []
    if not spec.targets:
        notes.append("a shared ROCm build: it holds nixpkgs' default gfx targets")
    if any(t != t.base for t in targets):
        notes.append("__amdgpu_arch has no xnack/sramecc features: the row keys on the ISA")
    isas = [found for t in bases if (found := amdgpu_arch(str(t))) is not None]
    if len(isas) < len(bases):
        notes.append("a generic gfx target names no one ISA: __amdgpu_arch cannot key on it")
    return {
        "variants": [v.name],
        "system": v.system,
        "cuda": None,
        "AMDGPU_TARGETS": ";".join(str(t) for t in targets),
        "requires": "__amdgpu_arch " + ("|".join(f"=={isa}" for isa in isas) or "*"),
        "serves": sorted({s.gpu for s in v.serves}),
        "notes": notes,
        # AMD rows rank below NVIDIA ones: a machine has one or the other virtual package.
        "_key": (-1, *(int(n) for isa in isas for n in isa.split("."))),
    }
