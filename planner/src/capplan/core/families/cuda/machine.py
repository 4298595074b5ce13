"""The CUDA family's part of plan.json's ``machine`` section (pkgs/machine.nix reads it): per
system, for every GPU capability the knowledge base knows, each package's variants that run
there, best first, by the rule ``capplan detect`` picks with (:mod:`.select`, the driver
left out: a machine's configuration does not know its driver). The NixOS and home-manager
modules and ``lib.overlayFor`` choose from these lists, so a machine gets what ``capplan
detect`` names. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import is_jetson
from capplan.core.families.cuda.gpus import _CHIP_QUALIFIER, _words_with_noise, normalise
from capplan.core.families.cuda.kb import GpuModel, nvidia
from capplan.core.families.cuda.keys import cuda_spec, cuda_version
from capplan.core.families.cuda.select import _device_verdict, _variants_for
from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.plan import Plan

__all__ = ["machine_models", "machine_names", "machine_pci", "machine_targets"]


def _runs(plan: Plan, kb: KnowledgeBase, system: str, cap: Capability) -> dict[str, list[str]]:
    jetson = is_jetson(cap, kb)
    if jetson and system != "aarch64-linux":
        return {}
    mine = _variants_for(plan, system, cap, nvidia(kb).capability(cap).jetson)
    found: dict[str, list[str]] = {}
    for package in plan.packages:
        ranked: list[tuple[tuple[object, ...], str]] = []
        for variant in mine.variants_of(package):
            built = cuda_version(variant)
            if built is None:
                continue
            verdict = _device_verdict(mine, kb, variant, cap, jetson)
            if verdict.level is RunLevel.CANNOT_RUN:
                continue
            key = (
                verdict.level.rank,
                len(cuda_spec(variant).capabilities),
                (-built.major, -built.minor),
                variant.name,
            )
            ranked.append((key, variant.name))
        if ranked:
            found[package] = [name for _, name in sorted(ranked)]
    return found


def machine_targets(plan: Plan, kb: KnowledgeBase, cpu: object = None) -> dict[str, Any]:
    """``{"packages": {system: [package]}, "targets": {system: {capability: {package:
    [variant, ...]}}}}``: the packages with a CUDA variant on each system, and for each GPU
    capability the variants of each that run there, best first."""
    packages: dict[str, list[str]] = {}
    targets: dict[str, dict[str, dict[str, list[str]]]] = {}
    for system in plan.systems:
        # The plan's packages (its dependency jobs, cublas and the like, are not swapped).
        owned = sorted(
            {
                v.package
                for v in plan.variants
                if v.system == system and cuda_version(v) and v.package in plan.packages
            }
        )
        if not owned:
            continue
        packages[system] = owned
        table = {}
        for info in nvidia(kb).capabilities:
            cap = info.capability
            if cap.suffix:
                continue  # a GPU is a base capability; 9.0a names code, not a device
            runs = _runs(plan, kb, system, cap)
            if runs:
                table[cap.text] = runs
        targets[system] = table
    return {"packages": packages, "targets": targets}


def machine_names(kb: KnowledgeBase, key: Callable[[str], str]) -> dict[str, dict[str, str]]:
    """Every spelling of an NVIDIA GPU this family knows exactly, by its exact key
    (``key``: :func:`.gpus.exact_key`, which pkgs/machine.nix computes the same way): each device
    capability's usual spellings (``8.6``, ``86``, ``sm_86``, ``sm86``, ``compute_86``) and its
    models' names and aliases, answered as :func:`.gpus.resolve_device` answers them: the
    models a key matches exactly must agree on the capability, else it is ambiguous (tests/kb
    checks every entry against the CLI's own answer)."""
    found: dict[str, dict[str, str]] = {}
    by_key: dict[str, list[GpuModel]] = {}
    for model in nvidia(kb).gpus:
        for label in {key(x) for x in (model.name, *model.aliases)}:
            by_key.setdefault(label, []).append(model)
    for spelled, models in sorted(by_key.items()):
        caps = sorted({m.capability for m in models}, key=lambda c: c.sort_key)
        if len(caps) == 1:
            first = min(models, key=lambda m: m.name)
            found[spelled] = {"vendor": "nvidia", "target": caps[0].text, "name": first.name}
        else:
            listed = ", ".join(
                f"{min((m for m in models if m.capability == c), key=lambda m: m.name).name} ({c})"
                for c in caps
            )
            found[spelled] = {"error": f"GPU name '{spelled}' is ambiguous: it matches {listed}"}
    for info in nvidia(kb).capabilities:
        cap = info.capability
        if cap.suffix:
            continue
        digits = f"{cap.major}{cap.minor}"
        for spelling in (cap.text, digits, f"sm_{digits}", f"sm{digits}", f"compute_{digits}"):
            # A capability is parsed before any name is looked up (resolve_device).
            found[key(spelling)] = {"vendor": "nvidia", "target": cap.text, "name": cap.text}
    return found


def machine_models(kb: KnowledgeBase) -> list[dict[str, Any]]:
    """NVIDIA's GPU models as pkgs/families/cuda.nix matches a loose name against them, by the
    rule of :func:`.gpus.find_gpus` and ``_pick``: per model its capability (``rank``: its place
    in the capability order), whether pci.ids named it (``generated``), its chips, and per
    name or alias its words as :func:`.gpus.normalise` gives them, its words with the vendor and
    line words kept, and whether a chip in parentheses qualifies it; the query's words are
    Nix's (tests compare the two on the same names)."""
    caps = sorted({m.capability for m in nvidia(kb).gpus}, key=lambda c: c.sort_key)
    rank = {cap: i for i, cap in enumerate(caps)}
    return [
        {
            "name": m.name,
            "target": m.capability.text,
            "rank": rank[m.capability],
            "generated": bool(m.pci_ids),
            "chips": [c.lower() for c in m.chips],
            "labels": [
                {
                    "words": list(normalise(label)),
                    "noise": sorted(_words_with_noise(label)),
                    "qualified": _CHIP_QUALIFIER.search(label) is not None,
                }
                for label in (m.name, *m.aliases)
            ],
        }
        for m in nvidia(kb).gpus
    ]


def machine_pci(kb: KnowledgeBase) -> dict[str, Any]:
    """``{"vendor": "10de", "devices": {device id: capability}}``: NVIDIA's PCI ids, how a
    nixos-facter report names a GPU (vendor and device, kb/pci.json)."""
    devices = {}
    for device in nvidia(kb).pci_devices:
        chip = nvidia(kb).chip(device.chip)
        if chip is not None:
            devices[device.id.split(":")[1]] = chip.capability.text
    return {"vendor": "10de", "devices": dict(sorted(devices.items()))}
