"""The CPU family's part of the exports (``capplan export``): its builds as Spack specs.

archspec's target names are Spack's (core/export/spack.py); the exporter asks the variant's
family through the registry (:func:`capplan.core.families.registry.export_writer`), and a
generic CPU build (no spec) is the CPU family's too.
"""

from __future__ import annotations

from capplan.core.export.spack import SpackPackage, generic_target, level_target
from capplan.core.families.cpu.keys import cpu_spec
from capplan.core.planning.plan import Plan, Variant

__all__ = ["cpu_spack"]


def cpu_spack(
    plan: Plan, v: Variant, recipe: SpackPackage, version: str
) -> tuple[list[str], list[str]]:
    """(specs, notes): the recipe with its GPU variants off and the build's CPU target (one
    spec per level of a glibc-hwcaps layout)."""
    off = " ~cuda" if recipe.cuda else ""
    off += " ~rocm" if recipe.rocm else ""
    head = f"{recipe.name}{version}{off}"
    spec = cpu_spec(v)
    if spec is None:
        return [f"{head} target={generic_target(v.system)}"], []
    if spec.target is None:
        return [f"{head} target={level_target(level)}" for level, _ in spec.hwcaps], [
            "a glibc-hwcaps layout has no Spack spelling: one spec per level it holds"
        ]
    return [f"{head} target={level_target(spec.target)}"], []
