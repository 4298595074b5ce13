"""The CUDA family's part of the exports (``capplan export``): its variants as Spack specs.

The spec grammar and recipes are core/export/spack.py's (spack-packages' CudaPackage gives
``cuda`` and ``cuda_arch``); the exporter asks the variant's family through the registry
(:func:`capplan.core.families.registry.export_writer`).
"""

from __future__ import annotations

from capplan.core.export.spack import SPACK_PACKAGES, SpackPackage, generic_target
from capplan.core.families.cuda.keys import cuda_spec
from capplan.core.planning.plan import Plan, Variant

__all__ = ["cuda_spack"]


def cuda_spack(
    plan: Plan, v: Variant, recipe: SpackPackage, version: str
) -> tuple[list[str], list[str]]:
    """(specs, notes): one spec, ``+cuda cuda_arch=...`` on the recipe or on the package that
    builds its CUDA code (py-torchvision's through py-torch)."""
    notes = []
    archs = ",".join(c.cmake for c in cuda_spec(v).capabilities)
    target = f"target={generic_target(v.system)}"
    gpu = f"+cuda cuda_arch={archs}"
    if recipe.cuda:
        rocm = " ~rocm" if recipe.rocm else ""
        spec = f"{recipe.name}{version} {gpu}{rocm} {target} ^cuda@{v.cuda}"
    else:
        carrier = SPACK_PACKAGES[recipe.via or ""]
        rocm = " ~rocm" if carrier.rocm else ""
        spec = f"{recipe.name}{version} {target} ^{carrier.name} {gpu}{rocm} ^cuda@{v.cuda}"
        notes.append(
            f"{recipe.name} has no cuda variant: the CUDA targets are {carrier.name}'s, which "
            "it builds its CUDA code with"
        )
    if cuda_spec(v).ptx:
        notes.append(
            "cuda_arch has no PTX choice: Spack's CudaPackage flags decide what PTX "
            f"is embedded, not the plan's compute_{max(cuda_spec(v).ptx).cmake}"
        )
    notes.append(
        f"target={generic_target(v.system)}: the plan's GPU builds carry generic CPU code "
        "(Spack's own ML stack pins x86_64_v3 instead)"
    )
    return [spec], notes
