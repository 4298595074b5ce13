"""The planner: (knowledge base, config) -> Plan. A pure function: no I/O, clock or environment.

Rules (issue "Planner", restated):

1. A package builds for a capability under a CUDA version when the KB says that CUDA supports
   the capability, the package's limits (allowlists, ``exclude``, suffixes, CUDA range) allow it,
   and so do its capability-dependent dependencies.
2. Each fleet GPU is served by one variant: its exact capability; else the newest buildable
   capability whose SASS runs on it (same major, lower minor); else the newest buildable
   capability below it plus PTX (JIT caveat); else it is unserved, with the reason.
3. The CUDA version of a variant is the preferred one when it works, else the first allowed one.
4. ``share = "compatible"`` builds the fewest variants that still give every GPU native or
   same-major SASS (an exact set cover, :mod:`capplan.core.families.cuda.cover`).

The rules live in their own modules: :mod:`~capplan.core.families.cuda.inputs` (CUDA choice and
the fleet), :mod:`~capplan.core.families.cuda.rules` (buildability),
:mod:`~capplan.core.families.cuda.serve` (serving a GPU) and
:mod:`~capplan.core.families.cuda.jobs` (jobs); this module runs every family's planning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from capplan.core.families.base import (
    ChecksPackage,
    ChecksTargets,
    ChecksVendors,
    ClaimsFleet,
    CostPart,
    FamilyPlanning,
    FamilyResult,
    KnowsPackages,
    PreparesPolicy,
    PricesCpuBuilds,
    ReportsUnplanned,
    ValidatesFleet,
)
from capplan.core.families.registry import planning_families
from capplan.core.model.kb import KnowledgeBase
from capplan.core.model.spec import spec_order
from capplan.core.planning.config import Config
from capplan.core.planning.gcpause import gc_paused
from capplan.core.planning.plan import Baselines, Decision, Plan, Variant
from capplan.errors import CapplanError, InvalidInputError, NothingToDo

if TYPE_CHECKING:
    # The CPU family's target model, as the registry names it for annotations.
    from capplan.core.families.registry import CpuModel

__all__ = ["make_plan"]


# -- the plan -------------------------------------------------------------------------------------
@gc_paused
def make_plan(kb: KnowledgeBase, config: Config, *, cpu: CpuModel | None = None) -> Plan:
    """Plan every requested package for the fleet. Raises CapplanError subclasses on bad input.

    One loop over the target families (:mod:`capplan.core.families.base` lists the phases);
    ``cpu``: the CPU target model and knowledge base (the CPU family plans nothing without)."""
    families = planning_families(kb, config, cpu)
    for preparing in [f for f in families if isinstance(f, PreparesPolicy)]:
        preparing.prepare()
    _claim_fleet(config, families)
    if not config.packages:
        raise NothingToDo(
            "capplan.toml lists no packages: nothing to build",
            hint="add a [packages.<name>] table, e.g. [packages.torch]",
        )
    requested = tuple(sorted(config.packages))
    checks = _PackageChecks.of(families)
    for name in requested:
        _check_package(kb, config, checks, name)
    if not any(f.fleet_labels() for f in families) and not any(
        p.extra for p in config.packages.values()
    ):
        raise NothingToDo(
            "the fleet is empty: nothing to build", hint="list GPUs in [fleet] gpus = [...]"
        )
    for validating in [f for f in families if isinstance(f, ValidatesFleet)]:
        validating.validate(requested)
    unserved: list[Decision] = []
    for reporting in [f for f in families if isinstance(f, ReportsUnplanned)]:
        unserved.extend(reporting.unplanned(requested))
    results = []
    earlier = FamilyResult(unserved=unserved)
    for family in families:
        result = family.plan(requested, earlier)
        unserved.extend(result.unserved)
        earlier.variants.extend(result.variants)
        earlier.decisions.extend(result.decisions)
        results.append(result)
    variants = tuple(sorted((v for r in results for v in r.variants), key=_variant_order))
    parts = [f.costs(requested, r) for f, r in zip(families, results, strict=True)]
    decisions = tuple(
        sorted(
            (d for r in results for d in r.decisions),
            key=lambda d: (d.package, d.subject, d.action),
        )
    )
    plan_parts = tuple(p for p in (f.plan_part() for f in families) if p is not None)
    cpu_costs = next((f.cpu_costs for f in families if isinstance(f, PricesCpuBuilds)), None)
    systems = config.policy.planned_systems
    return Plan(
        system=systems[0],
        systems=systems,
        packages=requested,
        variants=variants,
        decisions=decisions,
        unserved=tuple(sorted(unserved, key=lambda d: (d.package, d.subject))),
        baselines=_baselines(kb, config, variants, parts, cpu),
        share=config.policy.share,
        parts=plan_parts,
        cpu_costs=cpu_costs,
    )


def _claim_fleet(config: Config, families: Sequence[FamilyPlanning]) -> None:
    """Each ``fleet.gpus`` entry to the first family that claims it (the fallback last)."""
    order = sorted([f for f in families if isinstance(f, ClaimsFleet)], key=lambda f: f.fallback)
    labels: dict[int, list[str]] = {id(f): [] for f in order}
    for label in config.fleet.gpus:
        owner = next(f for f in order if f.claims_gpu(label))
        labels[id(owner)].append(label)
    for family in order:
        family.resolve_fleet(labels[id(family)])


class _PackageChecks(NamedTuple):
    """The families that have each per-package phase, in planning order (found once a plan:
    an isinstance check against a protocol is slow next to a loop over 20,000 packages)."""

    knowing: list[KnowsPackages]
    vendors: list[ChecksVendors]
    claiming: list[ChecksTargets]  # the fallback last
    checking: list[ChecksPackage]

    @classmethod
    def of(cls, families: Sequence[FamilyPlanning]) -> _PackageChecks:
        return cls(
            [f for f in families if isinstance(f, KnowsPackages)],
            [f for f in families if isinstance(f, ChecksVendors)],
            sorted([f for f in families if isinstance(f, ChecksTargets)], key=lambda f: f.fallback),
            [f for f in families if isinstance(f, ChecksPackage)],
        )


def _check_package(kb: KnowledgeBase, config: Config, checks: _PackageChecks, name: str) -> None:
    """One requested package's settings, each bad value exit 4 with how to fix it."""
    if not any(f.knows(name) for f in checks.knowing):
        kb.package(name)  # unknown to every family: exit 4 with the closest names
    user = config.packages[name]
    if user.vendors is not None and not user.vendors:
        raise InvalidInputError(
            f"packages.{name}.vendors is empty", hint='list "nvidia", "amd" or both, or drop it'
        )
    for family in checks.vendors:
        family.check_vendors(name)
    for key, values in (("exclude", user.exclude), ("extra", user.extra)):
        for text in values:
            owner = next(f for f in checks.claiming if f.fallback or f.family.claims(text))
            owner.check_target(name, key, text)
    for checking in checks.checking:
        checking.check_package(name)


def _variant_order(v: Variant) -> tuple[object, ...]:
    """Package, then single variants before fat builds, each by its family's order (CUDA's by
    capability list and CUDA release, then ROCm's by gfx target list), then name last (so a
    capability's x86_64 and aarch64 variants sit together)."""
    return (v.package, v.fat, spec_order(v.spec), v.name)


def _baselines(
    kb: KnowledgeBase,
    config: Config,
    variants: tuple[Variant, ...],
    parts: Sequence[CostPart],
    cpu: CpuModel | None,
) -> Baselines:
    """The plan against both references, each family's part summed (:meth:`FamilyPlanning.costs`):
    nixpkgs' default builds and the naive one-variant-per-fleet-target plan."""
    default_minutes = default_size = naive_minutes = naive_size = 0.0
    default_jobs = naive_jobs = 0
    for part in parts:
        default_minutes += part.default_minutes
        default_size += part.default_size_mb
        default_jobs += part.default_jobs
        naive_minutes += part.naive_minutes
        naive_size += part.naive_size_mb
        naive_jobs += part.naive_jobs
    if config.policy.share == "compatible":
        exact_config = config.model_copy(
            update={"policy": config.policy.model_copy(update={"share": "exact", "fat": "none"})}
        )
        try:
            exact_jobs = len(make_plan(kb, exact_config, cpu=cpu).variants)
        except CapplanError:
            exact_jobs = 0
    else:
        exact_jobs = sum(1 for v in variants if not v.fat)
    return Baselines(
        plan_minutes=round(sum(v.minutes for v in variants), 2),
        plan_size_mb=round(sum(v.size_mb for v in variants), 2),
        plan_jobs=len(variants),
        nixpkgs_default_minutes=round(default_minutes, 2),
        nixpkgs_default_size_mb=round(default_size, 2),
        nixpkgs_default_jobs=default_jobs,
        naive_minutes=round(naive_minutes, 2),
        naive_size_mb=round(naive_size, 2),
        naive_jobs=naive_jobs,
        exact_jobs=exact_jobs,
    )
