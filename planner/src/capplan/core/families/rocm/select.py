"""Which planned AMD variant fits a given AMD GPU (``capplan detect``): the ROCm family's half
of :mod:`capplan.core.families.cuda.select`. Pure.

Exact processor before compatible code (nixpkgs' ISA-compatibility patches, generic targets), a
single-target build before a shared one; when none runs, this GPU's own reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from capplan.core.families import base
from capplan.core.families.base import Machine, RunLevel
from capplan.core.families.rocm.fleet import rocm_part
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.keys import rocm_spec
from capplan.core.families.rocm.target import AmdRunLevel, AmdTarget, AmdVerdict, amd_how_runs
from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.plan import Plan, Variant

__all__ = [
    "AmdPick",
    "amd_plans_by_system",
    "pick_amd_on_machine",
    "pick_amd_variant",
    "pick_on_machine",
]


@dataclass(frozen=True, slots=True)
class AmdPick:
    package: str
    variant: Variant | None  # None when no AMD variant of the package runs on the device
    level: RunLevel
    reason: str


def pick_amd_variant(plan: Plan, package: str, device: AmdTarget) -> AmdPick:
    """The best AMD variant of ``package`` for ``device``: exact processor before compatible
    code (ISA-compatibility patches, generic targets), a single-target build before a shared
    one, then by name. A shared build of nixpkgs' default list holds ``default_targets``."""
    best: tuple[tuple[object, ...], Variant, AmdVerdict] | None = None
    whys: list[str] = []
    for variant in plan.variants_of(package):
        spec = rocm_spec(variant)
        if spec is None:
            continue
        targets = spec.targets or rocm_part(plan).default_targets
        verdict = amd_how_runs(device, targets)
        if verdict.level is AmdRunLevel.CANNOT_RUN:
            whys.append(f"{variant.name}: {verdict.reason}")
            continue
        key = (verdict.level.rank, len(targets), variant.name)
        if best is None or key < best[0]:
            best = (key, variant, verdict)
    if best is not None:
        _, variant, verdict = best
        level = RunLevel.NATIVE if verdict.level is AmdRunLevel.EXACT else RunLevel.COMPATIBLE
        return AmdPick(package, variant, level, verdict.reason)
    labels = {g.label for g in rocm_part(plan).fleet if g.target.processor == device.processor}
    for decision in plan.unserved:
        if decision.package == package and decision.subject in labels:
            return AmdPick(package, None, RunLevel.CANNOT_RUN, decision.reason)
    detail = f" ({'; '.join(whys[:2])})" if whys else ""
    hint = (
        f"add [packages.{package}] to the config"
        if package not in plan.packages
        else f"add \"{device.processor}\" to fleet.gpus and run 'capplan generate'"
    )
    return AmdPick(
        package,
        None,
        RunLevel.CANNOT_RUN,
        f"no {package} variant in this plan runs on {device.processor}{detail}; {hint}",
    )


def amd_plans_by_system(plan: Plan, system: str) -> tuple[Plan, Plan]:
    """The plan's AMD variants for a machine of ``system``, and those of the other systems
    (made once per ``detect`` run, then asked per GPU and package)."""
    amd = tuple(v for v in plan.variants if rocm_spec(v) is not None)
    mine = replace(plan, variants=tuple(v for v in amd if v.system == system))
    elsewhere = replace(plan, variants=tuple(v for v in amd if v.system != system))
    return mine, elsewhere


def pick_amd_on_machine(
    plans: tuple[Plan, Plan],
    package: str,
    device: AmdTarget,
    *,
    system: str,
    rocm_build: bool,
    vendors: Sequence[str] | None,
) -> AmdPick:
    """:func:`pick_amd_variant` among ``plans`` (:func:`amd_plans_by_system`), with this GPU's
    own reason when none runs here: a CUDA-only package (``rocm_build`` False), ``vendors``
    leaving out amd, a variant built for another system, else the plan's own reason."""
    mine, elsewhere = plans
    pick = pick_amd_variant(mine, package, device)
    if pick.variant is not None:
        return pick
    reason = pick.reason
    if not rocm_build:
        reason = f"{package} is CUDA-only: nixpkgs has no ROCm build of it"
    elif vendors is not None and "amd" not in vendors:
        reason = (
            f"packages.{package}.vendors = {list(vendors)} leaves out amd "
            f'(add "amd" to build it for this GPU)'
        )
    else:
        other = pick_amd_variant(elsewhere, package, device)
        if other.variant is not None:
            reason = (
                f"{other.variant.name} is built for {other.variant.system} and this machine "
                f'is {system} (give this GPU "{system}" in [fleet.systems] and run '
                "'capplan generate')"
            )
    return AmdPick(package, None, pick.level, reason)


def pick_on_machine(plan: Plan, kb: KnowledgeBase, machine: Machine) -> tuple[base.Pick, ...]:
    """:func:`pick_amd_on_machine` for every package of ``plan`` on a GPU of target
    ``machine.device`` (an AmdTarget)."""
    plans = amd_plans_by_system(plan, machine.system)
    amd = kb.part(AmdKnowledgeBase)
    builds = amd.builds if amd is not None else {}
    picks: list[base.Pick] = []
    for package in plan.packages:
        pick = pick_amd_on_machine(
            plans,
            package,
            machine.device,
            system=machine.system,
            rocm_build=package in builds,
            vendors=machine.vendors.get(package),
        )
        picks.append(base.Pick(package, pick.variant, pick.level, pick.reason))
    return tuple(picks)
