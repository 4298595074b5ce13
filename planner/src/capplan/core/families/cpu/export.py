"""The CPU family's part of the exports (``capplan export``): its builds as PEP 825 wheel
variants (the x86_64 and aarch64 providers' properties, core/export/wheel.py) and as Spack
specs.

archspec's target names are Spack's (core/export/spack.py); the exporter asks the variant's
family through the registry (:func:`capplan.core.families.registry.export_writer`), and a
generic CPU build (no spec) is the CPU family's too.
"""

from __future__ import annotations

from capplan.core.export.spack import SpackPackage, generic_target, level_target
from capplan.core.export.wheel import (
    AARCH64_FEATURES,
    NULL_LABEL,
    X86_64_FEATURES,
    Properties,
    Translation,
    WheelContext,
    wheel_label,
)
from capplan.core.families.cpu.keys import cpu_spec
from capplan.core.planning.plan import Plan, Variant

__all__ = ["cpu_spack", "cpu_wheel", "cpu_wheel_breadth"]


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


def _arm_version(generic: str) -> str:
    """archspec's generic Arm target as the aarch64 provider's ``version``: aarch64 -> 8a,
    armv8.2a -> 8.2a (provider-variant-aarch64's _archspec_to_plugin)."""
    return "8a" if generic == "aarch64" else generic.removeprefix("armv")


def cpu_wheel(plan: Plan, v: Variant, context: WheelContext) -> Translation:
    """``capplan export wheel-variants``' translation of a CPU-side build: the x86_64 or
    aarch64 provider's level or version and the features beyond it; the null variant for
    generic code and a glibc-hwcaps layout."""
    generic_of = context.cpu_generic
    notes: list[str] = []
    spec = cpu_spec(v)
    # Generic code, and a glibc-hwcaps layout (every level in one wheel, the loader choosing),
    # run on every CPU: the null variant, which installers take when nothing better fits.
    if spec is None or spec.target is None:
        return NULL_LABEL, {}, notes, ""
    found = generic_of(spec.target)
    if found is None:
        notes.append(f"built for {spec.target}: the CPU providers cannot name it")
        return NULL_LABEL, {}, notes, ""
    generic, generic_features = found
    extra = sorted(set(spec.features) - set(generic_features))
    if spec.arch == "x86_64":
        namespace, known = "x86_64", X86_64_FEATURES
        base = {"level": [generic.rsplit("-", 1)[-1]]} if generic.startswith("x86-64-v") else {}
    else:
        namespace, known = "aarch64", AARCH64_FEATURES
        base = {"version": [_arm_version(generic)]}
    stated = [f for f in extra if f in known]
    unknown = [f for f in extra if f not in known]
    properties: Properties = {namespace: {**base, **{f: ["on"] for f in stated}}}
    if not properties[namespace]:
        return NULL_LABEL, {}, notes, ""
    if unknown:
        notes.append(
            f"{', '.join(unknown)} of {spec.target} "
            f"{'has' if len(unknown) == 1 else 'have'} no {namespace} provider property: not "
            "stated, so CPUs that lack it but have the stated ones are offered this wheel too"
        )
    if stated:
        notes.append(
            f"built for {spec.target}: stated as its generic level {generic} and the features "
            f"it has beyond it; uv 0.13.9's vendored {namespace} provider offers only "
            f"{next(iter(base), 'no')} values, so uv installs it nowhere and takes the level's "
            "wheel instead"
        )
    stem = spec.target.replace("-", "_")
    return wheel_label(stem, [], properties), properties, notes, ""


def cpu_wheel_breadth(v: Variant) -> int:
    """A microarchitecture build runs on fewer CPUs than its level's (two builds of equal
    properties)."""
    spec = cpu_spec(v)
    return 0 if spec is not None and spec.target is not None and "-v" not in spec.target else 2
