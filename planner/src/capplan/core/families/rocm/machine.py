"""The ROCm family's part of plan.json's ``machine`` section (pkgs/machine.nix reads it): per
system, for every AMD processor the knowledge base knows, each package's AMD variants that run
there, best first, by the rule ``capplan detect`` picks with (:func:`.select.pick_amd_variant`:
exact processor before compatible code, a single-target build before a shared one). Pure.
"""

from __future__ import annotations

from typing import Any

from capplan.core.families.rocm.fleet import rocm_part
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.keys import rocm_spec
from capplan.core.families.rocm.target import AmdRunLevel, AmdTarget, amd_how_runs
from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.plan import Plan

__all__ = ["machine_names", "machine_pci", "machine_targets"]


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


def machine_names(kb: KnowledgeBase) -> dict[str, dict[str, str]]:
    """Every spelling of an AMD GPU this family knows exactly, by the exact key
    pkgs/machine.nix computes (:func:`capplan.core.families.cuda.gpus.exact_key`): each
    processor (``gfx942``) and its models' names and aliases, answered as
    :meth:`.kb.AmdKnowledgeBase.lookup_gpu` answers an exact name."""
    amd = kb.part(AmdKnowledgeBase)
    if amd is None:
        return {}
    from capplan.core.families.cuda.gpus import exact_key

    found: dict[str, dict[str, str]] = {}
    for label in machine_spellings(amd):
        (hit,) = amd.lookup_gpu(label)
        found.setdefault(
            exact_key(label),
            {"vendor": "amd", "target": hit.target.base.processor, "name": hit.name},
        )
    for info in amd.targets:
        if not info.target.is_generic:
            processor = info.target.processor
            found[processor] = {"vendor": "amd", "target": processor, "name": processor}
    return found


def machine_spellings(amd: AmdKnowledgeBase) -> list[str]:
    """Each AMD model's name and aliases, also without their leading vendor and line words
    ("AMD Radeon RX 7900 XTX", "Radeon RX 7900 XTX", "RX 7900 XTX"; never one word), which
    :func:`.kb.normalise_amd_name` drops: the spellings users write in a fleet."""
    found: list[str] = []
    for model in amd.gpus:
        for label in (model.name, *model.aliases):
            found.append(label)
            words = label.split()
            # A bare model number left alone ("760M") is an NVIDIA name too: the CLI asks
            # NVIDIA's names first, so only spellings of two words or more are added.
            while len(words) > 2 and words[0].lower() in ("amd", "radeon", "instinct"):
                words = words[1:]
                found.append(" ".join(words))
    return found


def machine_pci(kb: KnowledgeBase) -> dict[str, Any]:
    """AMD's PCI vendor; the knowledge base has no AMD device ids yet (a facter report's AMD
    GPU is then named by its gfx target in ``capplan.gpus``)."""
    return {"vendor": "1002", "devices": {}}
