"""The CUDA family's planning (:class:`~capplan.core.families.base.FamilyPlanning`): NVIDIA
fleet GPUs served by capability variants (``torch-sm86``), with the rules of
:mod:`~capplan.core.planning.planner`'s docstring carried out by
:mod:`~capplan.core.families.cuda.rules`, :mod:`~capplan.core.families.cuda.serve` and
:mod:`~capplan.core.families.cuda.jobs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capplan.core.families.base import CostPart, FamilyResult, GpuFamily
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.family import CudaFamily
from capplan.core.families.cuda.fleet import CudaPart, FleetGpu
from capplan.core.families.cuda.inputs import (
    NIXPKGS_DEFAULT_CUDA,
    nixpkgs_cuda_version,
    resolve_cuda_policy,
    resolve_fleet,
)
from capplan.core.families.cuda.jobs import Builder, plan_package
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.rules import Rules
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.kb import KnowledgeBase
from capplan.core.model.systems import AARCH64, system_suffix
from capplan.core.planning.config import Config
from capplan.core.planning.graph import dependency_closure
from capplan.core.planning.plan import Decision
from capplan.errors import InfeasibleError, InvalidInputError, shorten

__all__ = ["CudaPlanning"]


class CudaPlanning:
    """NVIDIA GPUs and CUDA capabilities; the fallback family (it takes every fleet entry and
    ``extra``/``exclude`` spelling no other family claims)."""

    fallback = True

    def __init__(
        self, kb: KnowledgeBase, config: Config, others: Sequence[GpuFamily[Any]] = ()
    ) -> None:
        self.kb = kb
        self.config = config
        self.family = CudaFamily(kb)
        # The CUDA rules see only what is theirs: packages built for NVIDIA, capabilities in
        # extra/exclude (``others``, the families claiming before this one, take the rest).
        self.others = tuple(others)
        self.view = _cuda_view(kb, config, others)
        self.policy_cuda: tuple[CudaVersion, ...] = ()
        self.fleet: tuple[FleetGpu, ...] = ()
        self.closure: tuple[str, ...] = ()

    def prepare(self) -> None:
        self.policy_cuda = resolve_cuda_policy(self.kb, self.config.policy.cuda)

    def claims_gpu(self, label: str) -> bool:
        # The fallback takes every entry the others left, and refuses here (in fleet order, as
        # when ROCm's claim refused it) a name no family knows: the others' owns_device says
        # so, with every family's "did you mean" (ROCm's, core/families/rocm/claim.py).
        for other in self.others:
            other.owns_device(label)
        return True

    def resolve_fleet(self, labels: Sequence[str]) -> None:
        others = set(self.config.fleet.gpus) - set(labels)
        self.fleet = resolve_fleet(self.kb, self.config, others)

    def fleet_labels(self) -> tuple[str, ...]:
        return tuple(g.label for g in self.fleet)

    def knows(self, package: str) -> bool:
        return package in self.kb.packages

    def check_target(self, package: str, key: str, text: str) -> None:
        nvidia(self.kb).capability(self.family.parse(text))
        vendors = self.config.packages[package].vendors
        if vendors is not None and "nvidia" not in vendors:
            raise InvalidInputError(
                f"packages.{package}.{key} = '{shorten(text.strip())}': a CUDA capability, "
                f"but packages.{package}.vendors leaves out nvidia",
                hint=f"remove it from packages.{package}.{key} or add nvidia to vendors",
            )

    def check_package(self, package: str) -> None:
        pin = self.config.packages[package].cuda
        if pin is not None:
            nixpkgs_cuda_version(self.kb, pin, f"packages.{package}.cuda")

    def _requested(self, requested: Sequence[str]) -> tuple[str, ...]:
        return tuple(p for p in requested if p in self.view.packages)

    def validate(self, requested: Sequence[str]) -> None:
        for gpu in self.fleet:
            info = nvidia(self.kb).capability(gpu.capability)
            if not any(info.supported_by(cuda) for cuda in self.policy_cuda):
                allowed = ", ".join(str(c) for c in self.policy_cuda)
                raise InfeasibleError(
                    f"fleet GPU '{shorten(gpu.label)}' ({gpu.capability}) is supported by no "
                    f"allowed CUDA version ({allowed}); CUDA supports it from {info.min_cuda} to "
                    f"{info.max_cuda or 'the newest'}",
                    hint="add a CUDA version that supports it to policy.cuda, or drop the GPU",
                )
        mine = self._requested(requested)
        # Unknown dependencies and cycles fail here.
        self.closure = dependency_closure(self.kb, mine) if mine else ()

    def unplanned(self, requested: Sequence[str]) -> list[Decision]:
        systems = self.config.policy.planned_systems
        mine = self._requested(requested)
        found: list[Decision] = []
        for gpu in self.fleet:
            if gpu.system not in systems:
                reason = (
                    f"{gpu.label} lives on {gpu.system}, which is not in policy.systems "
                    f"({', '.join(systems)})"
                )
                found.extend(Decision(p, gpu.label, "unserved", reason) for p in mine)
        return found

    def plan(self, requested: Sequence[str], earlier: FamilyResult) -> FamilyResult:
        """Rules 1-7 once per system, each with the fleet GPUs that live there; names of the
        first system carry no suffix, the others end in "-<cpu>" (torch-sm87-aarch64).
        ``earlier.unserved``: what the plan left unserved so far (an infeasible package names
        it)."""
        kb, config, fleet = self.kb, self.view, self.fleet
        mine = self._requested(requested)
        systems = config.policy.planned_systems
        result = FamilyResult()
        builders: list[Builder] = []
        for system in systems:
            here = tuple(g for g in fleet if g.system == system)
            has_extra = any(config.packages[p].extra for p in mine) and system in _extra_systems(
                kb, config
            )
            if not here and not has_extra:
                continue
            builder = Builder(
                Rules(kb, config, system, self.policy_cuda),
                system_suffix=system_suffix(system, systems[0]),
            )
            builders.append(builder)
            for package in mine:
                result.unserved.extend(plan_package(builder, package, here))
        planned = {spec.pkg.name for builder in builders for spec in builder.specs.values()}
        for package in mine:
            if fleet and kb.package(package).capability_dependent and package not in planned:
                reasons = "; ".join(
                    f"{d.subject}: {d.reason}"
                    for d in (*earlier.unserved, *result.unserved)
                    if d.package == package
                )
                raise InfeasibleError(
                    f"{package}'s limits exclude every fleet capability, so no GPU is served "
                    f"({reasons})",
                    hint=f"widen packages.{package} (exclude/cuda) or policy.cuda, or drop "
                    f"{package}",
                )
        result.variants = [v for builder in builders for v in builder.finished()]
        result.decisions = [d for builder in builders for d in builder.decisions]
        result.active_systems = tuple(b.rules.system for b in builders)
        return result

    def costs(self, requested: Sequence[str], result: FamilyResult) -> CostPart:
        """Per planned system with GPUs (each system builds its own copies): nixpkgs' default is
        one fat build of every package there; naive one variant per fleet capability living
        there (Jetson capabilities only on aarch64-linux)."""
        kb = self.kb
        defaults = nvidia(kb).defaults(NIXPKGS_DEFAULT_CUDA)
        default_minutes = default_size = naive_minutes = naive_size = 0.0
        naive_jobs = 0
        for system in result.active_systems:
            fleet_caps = sorted(
                {
                    g.capability
                    for g in self.fleet
                    if g.system == system and (not g.jetson or system == AARCH64)
                }
            )
            for name in self.closure:
                pkg = kb.package(name)
                targets = len(defaults) if pkg.capability_dependent else 0
                default_minutes += pkg.cost.base_minutes + targets * pkg.cost.per_target_minutes
                default_size += pkg.cost.base_size_mb + targets * pkg.cost.per_target_size_mb
                dependent = pkg.capability_dependent
                copies = len(fleet_caps) if dependent else 1
                naive_jobs += copies
                naive_minutes += copies * (
                    pkg.cost.base_minutes + (pkg.cost.per_target_minutes if dependent else 0)
                )
                naive_size += copies * (
                    pkg.cost.base_size_mb + (pkg.cost.per_target_size_mb if dependent else 0)
                )
        return CostPart(
            default_minutes=default_minutes,
            default_size_mb=default_size,
            default_jobs=len(self.closure) * len(result.active_systems),
            naive_minutes=naive_minutes,
            naive_size_mb=naive_size,
            naive_jobs=naive_jobs,
        )

    def plan_part(self) -> CudaPart:
        return CudaPart(policy=self.policy_cuda, fleet=self.fleet)


def _cuda_view(kb: KnowledgeBase, config: Config, others: Sequence[GpuFamily[Any]]) -> Config:
    """``config`` as the CUDA rules see it: packages of kb/packages.json built for NVIDIA, with
    only the ``extra``/``exclude`` values no other family claims."""

    def mine(text: str) -> bool:
        return not any(f.claims(text) for f in others)

    packages = {
        name: user.model_copy(
            update={
                "extra": tuple(t for t in user.extra if mine(t)),
                "exclude": tuple(t for t in user.exclude if mine(t)),
            }
        )
        for name, user in config.packages.items()
        if (user.vendors is None or "nvidia" in user.vendors) and name in kb.packages
    }
    return config.model_copy(update={"packages": packages})


def _extra_systems(kb: KnowledgeBase, config: Config) -> set[str]:
    """The systems that ``packages.*.extra`` capabilities are built on (see plan_package)."""
    systems = config.policy.planned_systems
    found: set[str] = set()
    for user in config.packages.values():
        for text in user.extra:
            jetson = nvidia(kb).capability(Capability.parse(text)).jetson
            found.add(AARCH64 if jetson and AARCH64 in systems else systems[0])
    return found
