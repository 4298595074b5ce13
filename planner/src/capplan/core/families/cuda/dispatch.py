"""Dispatch packages: one closure that runs the planned variant fitting the GPU it finds. Pure.

A ``<package>-dispatch`` output references every planned variant of a package and starts the one
the selector (:mod:`capplan.runtime.selector`, standalone) picks at each start. This module makes
the selector's table from a Plan and the knowledge base, checks the ``[dispatch] fallback``
setting against the plan, and estimates what a dispatch closure costs next to one fat build and
one variant (the plan's cost model: device code grows linearly with targets, CUDA.md).

Dispatch is the CUDA family's: the selector picks by CUDA capability (PCI ids and Jetsons
through the chip table, CUDA's serving rules) and starts CUDA variants only. Commands reach it
as a :class:`capplan.core.families.base.Dispatcher` (:class:`CudaDispatcher`), through
:func:`capplan.core.families.registry.dispatcher`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Any

from capplan.core.families.base import DispatchCost
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.keys import cuda_spec
from capplan.core.families.cuda.spec import CudaSpec
from capplan.core.model.kb import KnowledgeBase
from capplan.core.model.suggest import closest
from capplan.core.planning.plan import Plan, Variant
from capplan.errors import ConfigError

__all__ = [
    "CudaDispatcher",
    "dispatch_cost",
    "dispatch_packages",
    "dispatch_section",
    "dispatch_table",
    "jetson_capabilities",
    "pci_capabilities",
    "resolve_fallback",
]

TABLE_VERSION = 1


def dispatch_packages(plan: Plan, system: str | None = None) -> tuple[str, ...]:
    """Requested packages with capability-dependent variants (on ``system``, when given): the
    ones a dispatcher can serve (dependencies that were not asked for, such as magma under
    torch, get none)."""
    requested = set(plan.packages)
    return tuple(sorted({v.package for v in _variants(plan, None, system)} & requested))


def _variants(plan: Plan, package: str | None, system: str | None = None) -> tuple[Variant, ...]:
    """Capability-dependent CUDA variants of ``package`` (every package: None) on ``system``
    (every system: None). A dispatch output starts only variants of its own package set's
    system; dispatch is NVIDIA-only (AMD variants are chosen with ``capplan detect``)."""
    return tuple(
        v
        for v in (plan.variants if package is None else plan.variants_of(package))
        if not v.independent
        and isinstance(v.spec, CudaSpec)
        and (system is None or v.system == system)
    )


def resolve_fallback(plan: Plan, package: str, fallback: str) -> str:
    """The fallback for ``package``: ``"error"``, or a variant name of it in the plan.

    ``"fat"`` names the package's fat build (``<package>-fat``) when the plan has one, else
    ``"error"``; ``"<package>-sm86"`` (or a name of any planned variant) is checked against the
    plan. A fallback naming a variant of another package applies only to that package.
    """
    if fallback == "error":
        return "error"
    names = {v.name for v in plan.variants if not v.independent}
    if fallback == "fat":
        fats = sorted(v.name for v in _variants(plan, package) if v.fat)
        return fats[0] if fats else "error"
    if fallback not in names:
        raise ConfigError(
            f"dispatch.fallback names '{fallback}', which is not a planned variant",
            hint=closest(fallback, sorted(names | {"error", "fat"}), what="fallback"),
        )
    return fallback if any(v.name == fallback for v in _variants(plan, package)) else "error"


def dispatch_table(
    plan: Plan,
    package: str,
    *,
    fallback: str,
    pci: Mapping[str, Capability],
    jetson: Iterable[Capability],
    system: str | None = None,
) -> dict[str, Any]:
    """The selector's table for ``package`` (variant store paths are added by the Nix side);
    with ``system``, only that system's variants (what a dispatch output there can start)."""
    return {
        "version": TABLE_VERSION,
        "package": package,
        "fallback": resolve_fallback(plan, package, fallback),
        "variants": [
            {
                "name": v.name,
                "sass": [c.text for c in cuda_spec(v).capabilities],
                "ptx": [c.text for c in cuda_spec(v).ptx],
            }
            for v in _variants(plan, package, system)
        ],
        "pci": {device: cap.text for device, cap in sorted(pci.items())},
        "jetson": sorted({c.text for c in jetson}),
    }


def dispatch_section(kb: KnowledgeBase, plan: Plan, *, fallback: str) -> dict[str, Any]:
    """The ``dispatch`` part of overlays/plan.json: per package, what its table holds besides
    the store paths and the shared PCI and Jetson tables, once for all packages. pkgs/dispatch.nix
    assembles each package's table from it (the same shape as :func:`dispatch_table`)."""
    pci = pci_capabilities(kb)
    jetson = jetson_capabilities(kb)
    packages = {}
    for package in dispatch_packages(plan):
        table = dispatch_table(plan, package, fallback=fallback, pci=pci, jetson=jetson)
        packages[package] = {"fallback": table["fallback"], "variants": table["variants"]}
    first = dispatch_table(plan, "", fallback="error", pci=pci, jetson=jetson)
    return {
        "version": TABLE_VERSION,
        "pci": first["pci"],
        "jetson": first["jetson"],
        "packages": packages,
    }


def dispatch_cost(
    kb: KnowledgeBase, plan: Plan, package: str, system: str | None = None
) -> DispatchCost:
    """What a dispatch closure of ``package`` holds against one fat build and one variant.

    Capability-independent dependencies are counted once in every strategy (their store paths
    are shared). A dispatch closure holds each single-capability variant with its per-variant
    dependencies; one fat build holds the package and each per-variant dependency once, with one
    target's device code per capability (the cost model: size = base + targets x per-target).
    """
    singles = [v for v in _variants(plan, package, system) if not v.fat]
    shared: dict[str, float] = {}

    def closure(v: Variant) -> float:
        size = v.size_mb
        for name in v.needs:
            dep = plan.variant(name)
            if dep is None:
                continue
            if dep.independent:
                shared[dep.name] = dep.size_mb
            else:
                size += closure(dep)
        return size

    sizes = [closure(v) for v in singles]
    shared_mb = sum(shared.values())
    caps = len({c for v in singles for c in cuda_spec(v).capabilities})
    fat_mb = sum(
        kb.package(name).cost.base_size_mb + caps * kb.package(name).cost.per_target_size_mb
        for name in _dependent_closure(plan, singles)
    )
    return DispatchCost(
        package=package,
        system=system or plan.system,
        variants=len(singles),
        dispatch_mb=round(sum(sizes) + shared_mb, 2),
        fat_mb=round(fat_mb + shared_mb, 2),
        one_variant_mb=round((max(sizes) if sizes else 0.0) + shared_mb, 2),
    )


def _dependent_closure(plan: Plan, singles: list[Variant]) -> list[str]:
    """The package and its capability-dependent dependencies, by package name."""
    seen: dict[str, None] = {}
    stack = list(singles[:1])
    while stack:
        v = stack.pop()
        if v.package in seen:
            continue
        seen[v.package] = None
        for name in v.needs:
            dep = plan.variant(name)
            if dep is not None and not dep.independent:
                stack.append(dep)
    return sorted(seen)


def pci_capabilities(kb: KnowledgeBase) -> dict[str, Capability]:
    """NVIDIA PCI device id (four lower-case hex digits) -> capability, from the chip table."""
    found: dict[str, Capability] = {}
    for device in nvidia(kb).pci_devices:
        chip = nvidia(kb).chip(device.chip)
        if chip is not None:
            found[device.id.removeprefix("10de:")] = chip.capability
    return found


def jetson_capabilities(kb: KnowledgeBase) -> tuple[Capability, ...]:
    """Capabilities of Jetson devices: no minor-version SASS compatibility there (CUDA.md)."""
    return tuple(c.capability for c in nvidia(kb).capabilities if c.jetson)


class CudaDispatcher:
    """The CUDA family's :class:`capplan.core.families.base.Dispatcher` on one knowledge base:
    the functions above, with the PCI and Jetson tables read from it once, when a table first
    needs them."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self._kb = kb

    @cached_property
    def _pci(self) -> dict[str, Capability]:
        return pci_capabilities(self._kb)

    @cached_property
    def _jetson(self) -> tuple[Capability, ...]:
        return jetson_capabilities(self._kb)

    def packages(self, plan: Plan, system: str | None = None) -> tuple[str, ...]:
        return dispatch_packages(plan, system)

    def resolve_fallback(self, plan: Plan, package: str, fallback: str) -> str:
        return resolve_fallback(plan, package, fallback)

    def table(
        self, plan: Plan, package: str, *, fallback: str, system: str | None = None
    ) -> dict[str, Any]:
        return dispatch_table(
            plan, package, fallback=fallback, pci=self._pci, jetson=self._jetson, system=system
        )

    def section(self, plan: Plan, *, fallback: str) -> dict[str, Any]:
        return dispatch_section(self._kb, plan, fallback=fallback)

    def cost(self, plan: Plan, package: str, system: str | None = None) -> DispatchCost:
        return dispatch_cost(self._kb, plan, package, system)
