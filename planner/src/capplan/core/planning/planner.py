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
   same-major SASS (an exact set cover, :mod:`capplan.core.planning.cover`).

The rules live in their own modules: :mod:`~capplan.core.planning.inputs` (CUDA choice and the
fleet), :mod:`~capplan.core.planning.rules` (buildability), :mod:`~capplan.core.planning.serve`
(serving a GPU) and :mod:`~capplan.core.planning.jobs` (jobs); this module puts them together.
"""

from __future__ import annotations

from capplan.core.model.amd import AmdTarget
from capplan.core.model.capability import Capability
from capplan.core.model.kb import KnowledgeBase
from capplan.core.model.systems import AARCH64, X86_64, system_suffix
from capplan.core.model.vendors import looks_like_gfx
from capplan.core.planning.config import Config
from capplan.core.planning.gcpause import gc_paused
from capplan.core.planning.graph import dependency_closure
from capplan.core.planning.inputs import (
    NIXPKGS_DEFAULT_CUDA,
    nixpkgs_cuda_version,
    resolve_amd_fleet,
    resolve_cuda_policy,
    resolve_fleet,
)
from capplan.core.planning.jobs import Builder, plan_package
from capplan.core.planning.plan import AmdFleetGpu, Baselines, Decision, FleetGpu, Plan, Variant
from capplan.core.planning.rocm import RocmPlan, plan_rocm, rocm_baselines
from capplan.core.planning.rules import Rules
from capplan.errors import CapplanError, InfeasibleError, InvalidInputError, NothingToDo, shorten

__all__ = [
    "NIXPKGS_DEFAULT_CUDA",
    "make_plan",
    "nixpkgs_cuda_version",
    "resolve_cuda_policy",
    "resolve_fleet",
]


# -- the plan -------------------------------------------------------------------------------------
@gc_paused
def make_plan(kb: KnowledgeBase, config: Config) -> Plan:
    """Plan every requested package for the fleet. Raises CapplanError subclasses on bad input."""
    policy_cuda = resolve_cuda_policy(kb, config.policy.cuda)
    amd_fleet = resolve_amd_fleet(kb, config)
    fleet = resolve_fleet(kb, config, {g.label for g in amd_fleet})
    if not config.packages:
        raise NothingToDo(
            "capplan.toml lists no packages: nothing to build",
            hint="add a [packages.<name>] table, e.g. [packages.torch]",
        )
    all_requested = tuple(sorted(config.packages))
    for name in all_requested:
        _check_package(kb, config, name)
    # The CUDA rules see only what is theirs: packages built for NVIDIA, capabilities in
    # extra/exclude (gfx targets go to the AMD rules, core/planning/rocm.py).
    amd_config = config
    config = _cuda_view(config)
    requested = tuple(sorted(config.packages))
    if not fleet and not amd_fleet and not any(p.extra for p in amd_config.packages.values()):
        raise NothingToDo(
            "the fleet is empty: nothing to build", hint="list GPUs in [fleet] gpus = [...]"
        )
    for gpu in fleet:
        info = kb.capability(gpu.capability)
        if not any(info.supported_by(cuda) for cuda in policy_cuda):
            allowed = ", ".join(str(c) for c in policy_cuda)
            raise InfeasibleError(
                f"fleet GPU '{shorten(gpu.label)}' ({gpu.capability}) is supported by no allowed "
                f"CUDA version ({allowed}); CUDA supports it from {info.min_cuda} to "
                f"{info.max_cuda or 'the newest'}",
                hint="add a CUDA version that supports it to policy.cuda, or drop the GPU",
            )
    closure = (
        dependency_closure(kb, requested) if requested else ()
    )  # unknown dependencies and cycles fail here
    systems = config.policy.planned_systems
    unserved: list[Decision] = []
    for gpu in fleet:
        if gpu.system not in systems:
            reason = (
                f"{gpu.label} lives on {gpu.system}, which is not in policy.systems "
                f"({', '.join(systems)})"
            )
            unserved.extend(Decision(p, gpu.label, "unserved", reason) for p in requested)
    for amd_gpu in amd_fleet:
        if amd_gpu.system not in systems:
            reason = (
                f"{amd_gpu.label} lives on {amd_gpu.system} (ROCm jobs run on x86_64-linux unless "
                f"fleet.systems says otherwise), which is not in policy.systems "
                f"({', '.join(systems)})"
            )
            unserved.extend(Decision(p, amd_gpu.label, "unserved", reason) for p in all_requested)
    # Rules 1-7 run once per system, each with the fleet GPUs that live there; names of the
    # first system carry no suffix, the others end in "-<cpu>" (torch-sm87-aarch64).
    builders: list[Builder] = []
    for system in systems:
        here = tuple(g for g in fleet if g.system == system)
        has_extra = any(config.packages[p].extra for p in requested) and system in _extra_systems(
            kb, config
        )
        if not here and not has_extra:
            continue
        builder = Builder(
            Rules(kb, config, system, policy_cuda),
            system_suffix=system_suffix(system, systems[0]),
        )
        builders.append(builder)
        for package in requested:
            unserved.extend(plan_package(builder, package, here))
    planned = {spec.pkg.name for builder in builders for spec in builder.specs.values()}
    for package in requested:
        if fleet and kb.package(package).capability_dependent and package not in planned:
            reasons = "; ".join(
                f"{d.subject}: {d.reason}" for d in unserved if d.package == package
            )
            raise InfeasibleError(
                f"{package}'s limits exclude every fleet capability, so no GPU is served "
                f"({reasons})",
                hint=f"widen packages.{package} (exclude/cuda) or policy.cuda, or drop {package}",
            )
    rocm = RocmPlan()
    if kb.amd is not None:
        rocm = plan_rocm(kb.amd, amd_config, amd_fleet, all_requested, systems)
        unserved.extend(rocm.unserved)
    variants = tuple(
        sorted(
            (*(v for builder in builders for v in builder.finished()), *rocm.variants),
            key=_variant_order,
        )
    )
    active = tuple(b.rules.system for b in builders)
    baselines = _baselines(kb, closure, fleet, variants, amd_config, active, amd_fleet)
    decisions = tuple(
        sorted(
            (*(d for builder in builders for d in builder.decisions), *rocm.decisions),
            key=lambda d: (d.package, d.subject, d.action),
        )
    )
    return Plan(
        system=systems[0],
        systems=systems,
        cuda_policy=policy_cuda,
        fleet=fleet,
        packages=all_requested,
        variants=variants,
        decisions=decisions,
        unserved=tuple(sorted(unserved, key=lambda d: (d.package, d.subject))),
        baselines=baselines,
        share=config.policy.share,
        amd_fleet=amd_fleet,
        rocm_scope=config.policy.rocm_scope,
        amd_default_targets=kb.amd.nixpkgs_default_targets if kb.amd is not None else (),
    )


def _check_package(kb: KnowledgeBase, config: Config, name: str) -> None:
    """One requested package's settings, each bad value exit 4 with how to fix it."""
    kb.package(name)
    user = config.packages[name]
    rocm = kb.amd.builds.get(name) if kb.amd is not None else None
    if user.vendors is not None and not user.vendors:
        raise InvalidInputError(
            f"packages.{name}.vendors is empty", hint='list "nvidia", "amd" or both, or drop it'
        )
    if user.vendors is not None and "amd" in user.vendors and rocm is None:
        raise InvalidInputError(
            f"packages.{name}.vendors = {list(user.vendors)}: {name} is CUDA-only (nixpkgs has no "
            "ROCm build of it)",
            hint=f'set packages.{name}.vendors = ["nvidia"] or drop it',
        )
    amd_ok = rocm is not None and (user.vendors is None or "amd" in user.vendors)
    nvidia_ok = user.vendors is None or "nvidia" in user.vendors
    for key, values in (("exclude", user.exclude), ("extra", user.extra)):
        for text in values:
            if looks_like_gfx(text):
                AmdTarget.parse(text)  # a bad target is exit 4 of its own
                if not amd_ok:
                    why = (
                        f"{name} is CUDA-only (nixpkgs has no ROCm build of it)"
                        if rocm is None
                        else f"packages.{name}.vendors leaves out amd"
                    )
                    raise InvalidInputError(
                        f"packages.{name}.{key} = '{shorten(text.strip())}': a ROCm gfx target, "
                        f"but {why}",
                        hint="gfx targets go to packages with a ROCm build ("
                        + ", ".join(sorted(kb.amd.builds if kb.amd else ()))
                        + f"); remove it from packages.{name}.{key}",
                    )
            else:
                kb.capability(Capability.parse(text))
                if not nvidia_ok:
                    raise InvalidInputError(
                        f"packages.{name}.{key} = '{shorten(text.strip())}': a CUDA capability, "
                        f"but packages.{name}.vendors leaves out nvidia",
                        hint=f"remove it from packages.{name}.{key} or add nvidia to vendors",
                    )
    if user.cuda is not None:
        nixpkgs_cuda_version(kb, user.cuda, f"packages.{name}.cuda")


def _cuda_view(config: Config) -> Config:
    """``config`` as the CUDA rules see it: packages built for NVIDIA, without gfx targets."""
    packages = {
        name: user.model_copy(
            update={
                "extra": tuple(t for t in user.extra if not looks_like_gfx(t)),
                "exclude": tuple(t for t in user.exclude if not looks_like_gfx(t)),
            }
        )
        for name, user in config.packages.items()
        if user.vendors is None or "nvidia" in user.vendors
    }
    return config.model_copy(update={"packages": packages})


def _extra_systems(kb: KnowledgeBase, config: Config) -> set[str]:
    """The systems that ``packages.*.extra`` capabilities are built on (see plan_package)."""
    systems = config.policy.planned_systems
    found: set[str] = set()
    for user in config.packages.values():
        for text in user.extra:
            jetson = kb.capability(Capability.parse(text)).jetson
            found.add(AARCH64 if jetson and AARCH64 in systems else systems[0])
    return found


def _variant_order(v: Variant) -> tuple[object, ...]:
    """Package, then single variants by capability, then fat builds; CUDA, then name last
    (so a capability's x86_64 and aarch64 variants sit together)."""
    amd = v.rocm.targets if v.rocm is not None else ()
    return (
        v.package,
        v.fat,
        v.rocm is not None,
        tuple(c.sort_key for c in v.capabilities),
        amd,
        v.cuda is None,
        v.cuda or NIXPKGS_DEFAULT_CUDA,
        v.name,
    )


def _baselines(
    kb: KnowledgeBase,
    closure: tuple[str, ...],
    fleet: tuple[FleetGpu, ...],
    variants: tuple[Variant, ...],
    config: Config,
    active: tuple[str, ...] = (X86_64,),
    amd_fleet: tuple[AmdFleetGpu, ...] = (),
) -> Baselines:
    """Both references are per planned system with GPUs (each system builds its own copies):
    nixpkgs' default is one fat build of every package there; naive one variant per fleet
    capability living there (Jetson capabilities only on aarch64-linux)."""
    defaults = kb.defaults(NIXPKGS_DEFAULT_CUDA)
    default_minutes = default_size = naive_minutes = naive_size = 0.0
    naive_jobs = 0
    for system in active:
        fleet_caps = sorted(
            {
                g.capability
                for g in fleet
                if g.system == system and (not g.jetson or system == AARCH64)
            }
        )
        for name in closure:
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
    if kb.amd is not None and amd_fleet:
        d_min, d_size, d_jobs, n_min, n_size, n_jobs = rocm_baselines(
            kb.amd, config, amd_fleet, tuple(config.packages)
        )
        default_minutes += d_min
        default_size += d_size
        naive_minutes += n_min
        naive_size += n_size
        naive_jobs += n_jobs
    else:
        d_jobs = 0
    if config.policy.share == "compatible":
        exact_config = config.model_copy(
            update={"policy": config.policy.model_copy(update={"share": "exact", "fat": "none"})}
        )
        try:
            exact_jobs = len(make_plan(kb, exact_config).variants)
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
        nixpkgs_default_jobs=len(closure) * len(active) + d_jobs,
        naive_minutes=round(naive_minutes, 2),
        naive_size_mb=round(naive_size, 2),
        naive_jobs=naive_jobs,
        exact_jobs=exact_jobs,
    )
