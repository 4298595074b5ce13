"""The ROCm family's part of the exports (``capplan export``): its variants as PEP 825 wheel
variants (the amd provider's properties, core/export/wheel.py) and as Spack specs.

The spec grammar and recipes are core/export/spack.py's (spack-packages' ROCmPackage gives
``rocm`` and ``amdgpu_target``); the exporter asks the variant's family through the registry
(:func:`capplan.core.families.registry.export_writer`).
"""

from __future__ import annotations

from capplan.core.export.spack import (
    AMDGPU_TARGET_ONLY,
    SPACK_PACKAGES,
    SpackPackage,
    generic_target,
)
from capplan.core.export.wheel import Properties, Translation, WheelContext, wheel_label
from capplan.core.families.rocm.keys import rocm_spec
from capplan.core.planning.plan import Plan, Variant

__all__ = ["rocm_spack", "rocm_wheel", "rocm_wheel_breadth"]


def rocm_spack(
    plan: Plan, v: Variant, recipe: SpackPackage, version: str
) -> tuple[list[str], list[str]]:
    """(specs, notes): one spec, ``+rocm amdgpu_target=...`` on the recipe or on the package
    that builds its GPU code; nixpkgs' default targets where the variant names none."""
    spec = rocm_spec(v)
    assert spec is not None
    targets = ",".join(str(t) for t in (spec.targets or plan.amd_default_targets))
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
        targets = plan.amd_default_targets
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
