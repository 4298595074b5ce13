"""The ROCm family's part of plan.json's ``machine`` section (pkgs/machine.nix reads it): per
system, for every AMD processor the knowledge base knows, each package's AMD variants that run
there, best first, by the rule ``capplan detect`` picks with (:func:`.select.pick_amd_variant`:
exact processor before compatible code, a single-target build before a shared one). Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capplan.core.families.rocm.fleet import rocm_part
from capplan.core.families.rocm.kb import AmdGpuModel, AmdKnowledgeBase, normalise_amd_name
from capplan.core.families.rocm.keys import rocm_spec
from capplan.core.families.rocm.target import AmdRunLevel, AmdTarget, amd_how_runs
from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.plan import Plan

__all__ = ["machine_models", "machine_names", "machine_pci", "machine_targets"]


def _runs(plan: Plan, system: str, device: AmdTarget) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    defaults = rocm_part(plan).default_targets
    for package in plan.packages:
        ranked: list[tuple[tuple[object, ...], str]] = []
        for variant in plan.variants_of(package):
            spec = rocm_spec(variant)
            if spec is None or variant.system != system:
                continue
            built = spec.targets or defaults
            verdict = amd_how_runs(device, built)
            if verdict.level is AmdRunLevel.CANNOT_RUN:
                continue
            ranked.append(((verdict.level.rank, len(built), variant.name), variant.name))
        if ranked:
            found[package] = [name for _, name in sorted(ranked)]
    return found


def machine_targets(plan: Plan, kb: KnowledgeBase, cpu: object = None) -> dict[str, Any]:
    """The same shape as the CUDA family's: packages per system, and per gfx processor the
    AMD variants of each package that run there, best first."""
    amd = kb.part(AmdKnowledgeBase)
    packages: dict[str, list[str]] = {}
    targets: dict[str, dict[str, dict[str, list[str]]]] = {}
    for system in plan.systems:
        owned = sorted(
            {
                v.package
                for v in plan.variants
                if v.system == system and rocm_spec(v) and v.package in plan.packages
            }
        )
        if not owned or amd is None:
            continue
        packages[system] = owned
        table = {}
        for info in amd.targets:
            device = info.target
            if device.is_generic:
                continue
            runs = _runs(plan, system, device)
            if runs:
                table[device.processor] = runs
        targets[system] = table
    return {"packages": packages, "targets": targets}


def machine_names(kb: KnowledgeBase, key: Callable[[str], str]) -> dict[str, dict[str, str]]:
    """Every spelling of an AMD GPU this family knows exactly, by ``key`` (the exact key
    pkgs/machine.nix computes, which the registry passes): each processor (``gfx942``) and its
    models' names and aliases, answered as :meth:`.kb.AmdKnowledgeBase.lookup_gpu` answers an
    exact name."""
    amd = kb.part(AmdKnowledgeBase)
    if amd is None:
        return {}
    from capplan.core.families.registry import gpu_families

    found: dict[str, dict[str, str]] = {}
    labels = {label for m in amd.gpus for label in (m.name, *m.aliases)}
    # The CLI's rule (claim.amd_entry): a spelling another GPU family knows is that family's.
    others = [f for f in gpu_families(kb) if f.name != "rocm"]
    by_name: dict[str, AmdGpuModel] = {}
    for model in amd.gpus:
        for label in (model.name, *model.aliases):
            by_name.setdefault(normalise_amd_name(label), model)
    for spelling in machine_spellings(amd):
        # A shortened spelling ("760M") another family may know loosely: only AMD's are added.
        if spelling not in labels and any(f.knows_device(spelling) for f in others):
            continue
        # lookup_gpu's exact branch (every spelling normalises as its model's label does),
        # with the labels normalised once.
        hit = by_name.get(normalise_amd_name(spelling))
        if hit is None:
            (hit,) = amd.lookup_gpu(spelling)
        found.setdefault(
            key(spelling), {"vendor": "amd", "target": hit.target.base.processor, "name": hit.name}
        )
    for info in amd.targets:
        if not info.target.is_generic:
            processor = info.target.processor
            found[processor] = {"vendor": "amd", "target": processor, "name": processor}
    return found


def machine_spellings(amd: AmdKnowledgeBase) -> list[str]:
    """Each AMD model's name and aliases, also without their leading vendor and line words
    ("AMD Radeon RX 7900 XTX", "Radeon RX 7900 XTX", "RX 7900 XTX"), which
    :func:`.kb.normalise_amd_name` drops: the spellings users write in a fleet."""
    found: list[str] = []
    for model in amd.gpus:
        for label in (model.name, *model.aliases):
            found.append(label)
            words = label.split()
            while len(words) > 1 and words[0].lower() in ("amd", "radeon", "instinct"):
                words = words[1:]
                found.append(" ".join(words))
    return found


def machine_models(kb: KnowledgeBase) -> list[dict[str, Any]]:
    """AMD's GPU models as pkgs/families/rocm.nix matches a loose name against them, by the
    rule of :meth:`.kb.AmdKnowledgeBase.lookup_gpu`: each model's names and aliases and its name
    normalised (:func:`.kb.normalise_amd_name`; an exact one wins, else every model whose name
    holds the name given), in the knowledge base's order."""
    amd = kb.part(AmdKnowledgeBase)
    if amd is None:
        return []
    return [
        {
            "name": m.name,
            "target": m.target.base.processor,
            "shown": str(m.target),
            "name_key": normalise_amd_name(m.name),
            "keys": [normalise_amd_name(label) for label in (m.name, *m.aliases)],
        }
        for m in amd.gpus
    ]


def machine_pci(kb: KnowledgeBase) -> dict[str, Any]:
    """AMD's PCI vendor; the knowledge base has no AMD device ids yet (a facter report's AMD
    GPU is then named by its gfx target in ``capplan.gpus``)."""
    return {"vendor": "1002", "devices": {}}
