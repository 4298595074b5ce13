"""AMD planning: each AMD fleet GPU served by a ROCm variant (``torch-gfx942``), beside CUDA.

Rules (issue 16, restated from ../shared/ROCM.md):

1. A package builds for AMD when the knowledge base has a ROCm build for it
   (``builds`` in kb/amd_packages.json) and ``packages.<name>.vendors`` does not leave AMD out.
   A CUDA-only package leaves each AMD GPU unserved, with that reason.
2. Each AMD GPU is served by a variant for its own processor (features dropped: nixpkgs never
   sets them). A package whose own target list excludes the processor (magma-hip on gfx942)
   uses a listed processor whose code loads on it through nixpkgs' ISA-compatibility patches
   (gfx1030 code on gfx1031), else leaves the GPU unserved with the package's reason.
   ``share = "compatible"`` builds one generic target (``gfx11-generic``) for two or more
   processors of its family when the package takes any target.
3. ``rocm_scope = "package"``: the variant is the package with ``gpuTargets = [ target ]`` in a
   ROCm package set; the ROCm libraries come from nixpkgs' default scope (the cache).
   ``"stack"``: the package in ``rocmPackages.<target>`` (a per-target scope nixpkgs has for
   each default target), so every target-dependent library it links rebuilds for that target:
   each is a job of its own, and composable_kernel without a gfx9 target is refused as nixpkgs
   does (``meta.broken``); the scope's MIOpen is then built with ``withComposableKernel =
   false`` (ROCm 7.x MIOpen links CK by default, so the scope would not evaluate otherwise). A
   target without such a scope falls back to "package", with the reason.
4. A package that reads only ``clr.gpuTargets`` cannot narrow its targets: one shared build in
   nixpkgs' default ROCm set serves every GPU whose code it holds. One that reads the scope's
   list and has no argument of its own (onnxruntime: ``clr.localGpuTargets or clr.gpuTargets``)
   is built per target in a stack scope, else shared the same way.
5. ROCm jobs run on x86_64-linux (where Hydra builds ROCm) unless ``fleet.systems`` puts the
   GPU elsewhere; names of the plan's first system carry no suffix, as for CUDA.
6. The plan says what each AMD library really holds (``holds``) and, in plain words, where a
   variant's copy of a library lacks its target (``gap``: magma-hip has no gfx942 code, so
   magma-backed linear algebra does not run on an MI300X with torch-gfx942).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from capplan.core.families.base import CostPart, FamilyResult, RunLevel
from capplan.core.families.rocm.claim import amd_entry, looks_like_gfx
from capplan.core.families.rocm.family import RocmFamily
from capplan.core.families.rocm.fleet import AmdFleetGpu, RocmPart
from capplan.core.families.rocm.kb import (
    AmdKnowledgeBase,
    AmdPackageCheck,
    AmdPackageTargets,
    RocmBuild,
    RocmCost,
)
from capplan.core.families.rocm.spec import RocmSpec
from capplan.core.families.rocm.target import AmdRunLevel, AmdTarget, amd_how_runs
from capplan.core.model.kb import KnowledgeBase
from capplan.core.model.systems import X86_64, system_suffix
from capplan.core.planning.config import Config, gpu_system
from capplan.core.planning.plan import Decision, Serve, Variant
from capplan.errors import InvalidInputError, shorten

__all__ = ["RocmPlan", "RocmPlanning", "plan_rocm", "rocm_baselines"]

_LEVEL = {AmdRunLevel.EXACT: RunLevel.NATIVE, AmdRunLevel.COMPATIBLE: RunLevel.COMPATIBLE}


@dataclass
class RocmPlan:
    variants: list[Variant] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    unserved: list[Decision] = field(default_factory=list)


@dataclass
class _Job:
    name: str
    package: str
    attr: str
    target: AmdTarget | None  # None: a shared build of the default list
    cost: RocmCost
    cost_targets: int
    big_parallel: bool
    system: str
    independent: bool = False
    needs: list[str] = field(default_factory=list)
    serves: list[Serve] = field(default_factory=list)
    scope: str = "package"
    scope_attr: str | None = None


@dataclass
class _Planner:
    amd: AmdKnowledgeBase
    config: Config
    system: str
    suffix: str
    out: RocmPlan
    jobs: dict[str, _Job] = field(default_factory=dict)
    # Per build target: the override keys of the packages planned for it.
    overrides: dict[AmdTarget, set[str]] = field(default_factory=dict)
    spellings: dict[str, RocmBuild] = field(default_factory=dict)  # override key -> its build
    scope_of: dict[AmdTarget, tuple[str, str | None]] = field(default_factory=dict)
    _checks: dict[tuple[str, AmdTarget], AmdPackageCheck | None] = field(default_factory=dict)
    _cached: dict[str, tuple[AmdTarget, ...]] = field(default_factory=dict)
    _covers: dict[tuple[str, AmdTarget], bool] = field(default_factory=dict)
    _by_attr: dict[str, list[str]] | None = None  # attribute -> the builds of it
    # Per stack target: libraries changed inside its scope (miopen: withComposableKernel false).
    scope_overrides: dict[AmdTarget, dict[str, dict[str, bool]]] = field(default_factory=dict)
    # (job, library, device, what the job's copy of the library holds): said as "gap" lines.
    gaps: list[tuple[_Job, str, AmdTarget, str]] = field(default_factory=list)
    held: dict[tuple[str, AmdTarget, AmdTarget], bool] = field(default_factory=dict)
    from_cache: set[str] = field(default_factory=set)  # libraries linked from the default scope

    def _own(self, lib_name: str) -> AmdPackageTargets | None:
        library = self.amd.stack_libraries[lib_name]
        return self.amd.packages.get(library.targets) if library.targets else None

    def check(self, lib_name: str, target: AmdTarget) -> AmdPackageCheck | None:
        """What a linked library's own list does with ``target`` (None: it takes any)."""
        key = (lib_name, target)
        if key not in self._checks:
            own = self._own(lib_name)
            self._checks[key] = own.check(lib_name, [target]) if own is not None else None
        return self._checks[key]

    def cached_targets(self, lib_name: str) -> tuple[AmdTarget, ...]:
        """What the default scope's build of a library (the cache's) holds: nixpkgs' default
        list as the library's own list leaves it (magma-hip: clr.gpuTargets ∩ VALID_GFXS), or
        the library's own default where it has one (composable_kernel: gfx9 and generic
        targets, composable_kernel/base.nix)."""
        found = self._cached.get(lib_name)
        if found is None:
            own = self._own(lib_name)
            defaults = self.amd.nixpkgs_default_targets
            if own is not None and own.default_targets is not None:
                defaults = own.default_targets
            found = defaults if own is None else own.check(lib_name, defaults).kept
            self._cached[lib_name] = found
        return found

    def cached_covers(self, lib_name: str, device: AmdTarget) -> bool:
        """Whether the cache's build of a library runs on ``device``."""
        key = (lib_name, device)
        found = self._covers.get(key)
        if found is None:
            verdict = amd_how_runs(device, self.cached_targets(lib_name))
            found = self._covers[key] = verdict.level is not AmdRunLevel.CANNOT_RUN
        return found

    def planned_build(self, attr: str, target: AmdTarget) -> str | None:
        """The planned job of a requested package built from ``attr`` for ``target`` (magma's
        ``magma-hip``), which a linking package then uses instead of its own copy."""
        if self._by_attr is None:
            self._by_attr = {}
            for name, build in self.amd.builds.items():
                self._by_attr.setdefault(build.attr, []).append(name)
        for name in self._by_attr.get(attr, ()):
            if self.name(name, target.processor) in self.jobs:
                return self.name(name, target.processor)
        return None

    def decide(self, package: str, subject: str, action: str, reason: str) -> None:
        self.out.decisions.append(Decision(package, subject, action, reason))

    def name(self, package: str, label: str) -> str:
        return f"{package}-{label}{self.suffix}"

    def scope(self, target: AmdTarget, package: str) -> tuple[str, str | None]:
        """The (scope, scope_attr) of a build target's instance, decided once per target."""
        found = self.scope_of.get(target)
        if found is not None:
            return found
        wanted = self.config.policy.rocm_scope
        found = ("package", None)
        if wanted == "stack":
            if target in self.amd.nixpkgs_default_targets:
                found = ("stack", target.processor)
            else:
                self.decide(
                    package,
                    str(target),
                    "scope",
                    f"rocm_scope = stack needs rocmPackages.{target.processor}, which nixpkgs "
                    "has only for its default targets: built with rocm_scope = package "
                    "(gpuTargets; the ROCm libraries come from the default scope)",
                )
        self.scope_of[target] = found
        return found


def _cost(cost: RocmCost, targets: int) -> tuple[float, float]:
    return (
        round(cost.base_minutes + targets * cost.per_target_minutes, 2),
        round(cost.base_size_mb + targets * cost.per_target_size_mb, 2),
    )


def _build_target(
    amd: AmdKnowledgeBase, package: str, build: RocmBuild, device: AmdTarget
) -> tuple[AmdTarget | None, AmdRunLevel, str]:
    """Rule 2 for one device: the processor to build, how the device runs it, and why."""
    own = amd.packages.get(build.targets) if build.targets else None
    if own is None or own.accepts is None:
        return device, AmdRunLevel.EXACT, f"{device} is built exactly"
    check = own.check(build.targets or package, [device])
    if check.outcome == "ok":
        return device, AmdRunLevel.EXACT, f"{device} is built exactly"
    for candidate in sorted(own.accepts):
        verdict = amd_how_runs(device, [candidate])
        if verdict.level is AmdRunLevel.COMPATIBLE:
            return (
                candidate.base,
                AmdRunLevel.COMPATIBLE,
                f"{check.reason}; {verdict.reason}",
            )
    return None, AmdRunLevel.CANNOT_RUN, check.reason


def plan_rocm(
    amd: AmdKnowledgeBase,
    config: Config,
    fleet: Sequence[AmdFleetGpu],
    requested: Sequence[str],
    systems: Sequence[str],
) -> RocmPlan:
    """Every AMD variant of the plan (rules 1-5), with decisions and unserved GPUs."""
    out = RocmPlan()
    extras = _extras(config, requested)
    for system in systems:
        here = [g for g in fleet if g.system == system]
        extra_here = extras if system == _extra_system(systems) else {}
        if not here and not any(extra_here.values()):
            continue
        planner = _Planner(amd, config, system, system_suffix(system, systems[0]), out)
        for package in _linked_first(amd, requested):
            _plan_package(planner, package, here, extra_here.get(package, ()))
        _finish(planner)
    return out


def _linked_first(amd: AmdKnowledgeBase, requested: Sequence[str]) -> list[str]:
    """The packages in planning order: those another build links (magma, as magma-hip) first,
    so a linking package (torch) finds their jobs (:meth:`_Planner.planned_build`)."""
    linked = {amd.stack_libraries[lib].attr for b in amd.builds.values() for lib in b.links}
    builds = amd.builds
    return sorted(requested, key=lambda p: (p not in builds or builds[p].attr not in linked, p))


def _extra_system(systems: Sequence[str]) -> str:
    return X86_64 if X86_64 in systems else systems[0]


def _extras(config: Config, requested: Sequence[str]) -> dict[str, tuple[AmdTarget, ...]]:
    return {
        p: tuple(
            sorted({AmdTarget.parse(t).base for t in config.packages[p].extra if looks_like_gfx(t)})
        )
        for p in requested
    }


def _vendors_allow_amd(config: Config, package: str) -> bool:
    vendors = config.packages[package].vendors
    return vendors is None or "amd" in vendors


def _plan_package(
    planner: _Planner, package: str, gpus: list[AmdFleetGpu], extra: tuple[AmdTarget, ...]
) -> None:
    amd = planner.amd
    if not _vendors_allow_amd(planner.config, package):
        if gpus:
            planner.decide(package, "amd", "skipped", f"packages.{package}.vendors leaves out amd")
        return
    build = amd.builds.get(package)
    if build is None:
        for gpu in gpus:
            planner.out.unserved.append(
                Decision(
                    package,
                    gpu.label,
                    "unserved",
                    f"{package} is CUDA-only: nixpkgs has no ROCm build of it",
                )
            )
        return
    # An inherited build (torchvision) builds its parent for the same target: the parent's
    # exclusions hold for it too.
    owners = (package, *(build.depends if build.how == "inherited" else ()))
    excluded = {
        AmdTarget.parse(t).base
        for owner in owners
        if owner in planner.config.packages
        for t in planner.config.packages[owner].exclude
        if looks_like_gfx(t)
    }
    if build.how == "default-targets" or (
        build.how == "scope-targets" and planner.config.policy.rocm_scope != "stack"
    ):
        _plan_default_targets(planner, package, build, gpus)
        return
    if build.how == "scope-targets":
        # Per target only where nixpkgs has the target's scope; the rest share the default build.
        defaults = planner.amd.nixpkgs_default_targets
        elsewhere = [g for g in gpus if g.target not in defaults]
        if elsewhere:
            for gpu in elsewhere:
                planner.scope(gpu.target, package)
            _plan_default_targets(planner, package, build, elsewhere)
        gpus = [g for g in gpus if g.target in defaults]
        extra = tuple(t for t in extra if t in defaults)
    # Rule 2: a build target per device, then share=compatible's generic targets.
    served: dict[AmdTarget, list[tuple[AmdFleetGpu, AmdRunLevel, str]]] = {}
    for gpu in gpus:
        if gpu.target in excluded:
            owner = next(
                o
                for o in owners
                if o in planner.config.packages
                and any(
                    looks_like_gfx(t) and AmdTarget.parse(t).base == gpu.target
                    for t in planner.config.packages[o].exclude
                )
            )
            planner.out.unserved.append(
                Decision(
                    package,
                    gpu.label,
                    "unserved",
                    f"capplan.toml excludes {gpu.target} for {owner}",
                )
            )
            continue
        target, level, reason = _build_target(amd, package, _own_list(amd, build), gpu.target)
        if target is None:
            planner.out.unserved.append(Decision(package, gpu.label, "unserved", reason))
            planner.decide(package, f"{package}:{gpu.target}", "excluded", reason)
            continue
        served.setdefault(target, []).append((gpu, level, reason))
    for target in extra:
        if target not in excluded:
            served.setdefault(target, [])
    if planner.config.policy.share == "compatible" and build.how != "scope-targets":
        served = _share_generic(planner, package, build, served)
    for target in sorted(served):
        devices = tuple(sorted({gpu.target for gpu, _, _ in served[target]})) or (target,)
        job = _job(planner, package, build, target, devices)
        for gpu, level, reason in served[target]:
            if level is not AmdRunLevel.EXACT:
                planner.decide(package, gpu.label, "substituted", reason)
            job.serves.append(Serve(gpu.label, _LEVEL[level], reason))
        if not served[target]:
            planner.decide(package, job.name, "extra", f"{job.name}: asked for in extra")


def _own_list(amd: AmdKnowledgeBase, build: RocmBuild) -> RocmBuild:
    """An inherited build (torchvision) follows the target list of the package it inherits."""
    if build.how == "inherited":
        return amd.builds[build.depends[0]]
    return build


def _share_generic(
    planner: _Planner,
    package: str,
    build: RocmBuild,
    served: dict[AmdTarget, list[tuple[AmdFleetGpu, AmdRunLevel, str]]],
) -> dict[AmdTarget, list[tuple[AmdFleetGpu, AmdRunLevel, str]]]:
    own = planner.amd.packages.get(_own_list(planner.amd, build).targets or "")
    if own is not None and own.accepts is not None:
        return served  # a fixed list takes no generic target
    families: dict[AmdTarget, list[AmdTarget]] = {}
    for target in served:
        generic = target.generic
        if generic is not None:
            families.setdefault(generic, []).append(target)
    result = dict(served)
    for generic, members in sorted(families.items()):
        if len(members) < 2:
            continue
        merged: list[tuple[AmdFleetGpu, AmdRunLevel, str]] = []
        for member in members:
            for gpu, _, _ in result.pop(member):
                verdict = amd_how_runs(gpu.target, [generic])
                merged.append((gpu, verdict.level, f"share=compatible: {verdict.reason}"))
        result[generic] = merged
        planner.decide(
            package,
            str(generic),
            "shared",
            f"share=compatible: one {generic} build serves {', '.join(map(str, sorted(members)))}",
        )
    return result


def _job(
    planner: _Planner,
    package: str,
    build: RocmBuild,
    target: AmdTarget,
    devices: tuple[AmdTarget, ...] = (),
) -> _Job:
    """The variant of ``package`` for ``target`` (with its dependency jobs), made once;
    ``devices``: the processors it serves (a generic target's members)."""
    name = planner.name(package, target.processor)
    job = planner.jobs.get(name)
    if job is not None:
        return job
    scope, scope_attr = planner.scope(target, package)
    job = planner.jobs[name] = _Job(
        name=name,
        package=package,
        attr=build.attr,
        target=target,
        cost=build.cost,
        cost_targets=1,
        big_parallel=build.big_parallel,
        system=planner.system,
        scope=scope,
        scope_attr=scope_attr,
    )
    if build.override is not None:
        planner.overrides.setdefault(target, set()).add(build.override)
        planner.spellings[build.override] = build
    for dep in build.depends:
        dep_job = _job(planner, dep, planner.amd.builds[dep], target, devices)
        job.needs.append(dep_job.name)
        if dep not in planner.config.packages:
            planner.decide(
                dep, dep_job.name, "dependency", f"{name} builds against it in its package set"
            )
    _links(planner, package, build, target, devices or (target,), job)
    return job


def _links(
    planner: _Planner,
    package: str,
    build: RocmBuild,
    target: AmdTarget,
    devices: tuple[AmdTarget, ...],
    job: _Job,
) -> None:
    """The target-dependent ROCm libraries ``package`` links: from the cache ("package"), or
    rebuilt in the target's scope ("stack"); what each library's own list does with it."""
    amd = planner.amd
    for lib_name in build.links:
        library = amd.stack_libraries[lib_name]
        planned = planner.planned_build(library.attr, target)
        if planned is not None:
            job.needs.append(planned)
            continue
        if job.scope == "package":
            planner.from_cache.add(lib_name)
            for device in devices:
                if planner.cached_covers(lib_name, device):
                    continue
                cached = planner.cached_targets(lib_name)
                planner.decide(
                    package,
                    f"{lib_name}:{device}",
                    "excluded",
                    f"{lib_name}'s own target list lacks {device}: {job.name} links "
                    f"nixpkgs' default {lib_name} (from the cache), built for "
                    f"{', '.join(map(str, cached))}, so its GPU code does not cover {device}",
                )
                planner.gaps.append(
                    (
                        job,
                        lib_name,
                        device,
                        f"nixpkgs' default {lib_name} (from the cache) holds "
                        f"{', '.join(map(str, cached))}",
                    )
                )
            continue
        check = planner.check(lib_name, target)
        if check is not None and check.outcome == "broken":
            why = f"{check.reason}: rocmPackages.{job.scope_attr} does not build it, so no job"
            fallback = library.fallback_library
            if fallback is not None and library.fallback_argument is not None:
                changed = planner.scope_overrides.setdefault(target, {})
                changed.setdefault(fallback, {})[library.fallback_argument] = False
                why += (
                    f"; its {fallback} is built with {library.fallback_argument} = false "
                    f"({library.fallback_why})"
                )
            planner.decide(package, f"{lib_name}:{target}", "refused", why)
            continue
        if library.linked_for is not None and target.processor not in library.linked_for:
            planner.decide(
                package,
                f"{lib_name}:{target}",
                "not linked",
                f"{library.linked_why}: {target} is not among them, so "
                f"rocmPackages.{job.scope_attr} has no {lib_name} to rebuild for {job.name}",
            )
            continue
        lib_job_name = planner.name(lib_name, target.processor)
        lib_job = planner.jobs.get(lib_job_name)
        if lib_job is None:
            n_targets = 1 if library.reads_scope else len(planner.cached_targets(lib_name))
            lib_job = planner.jobs[lib_job_name] = _Job(
                name=lib_job_name,
                package=lib_name,
                attr=library.attr,
                target=target,
                cost=library.cost,
                cost_targets=n_targets,
                big_parallel=False,
                system=planner.system,
                scope=job.scope,
                scope_attr=job.scope_attr,
            )
            why = f"rocm_scope = stack: rebuilt in rocmPackages.{job.scope_attr}"
            if not library.reads_scope:
                why += (
                    f"; {lib_name} reads clr.gpuTargets, not the scope's list, so it keeps "
                    f"{', '.join(map(str, planner.cached_targets(lib_name)))}"
                )
            if check is not None and check.outcome != "ok":
                why += f"; {check.reason}"
            planner.decide(lib_name, lib_job_name, "stack", why)
        if check is not None and check.outcome != "ok":
            planner.decide(package, f"{lib_name}:{target}", "excluded", check.reason)
        for device in devices:
            if not _holds(planner, lib_name, target, device):
                planner.gaps.append((job, lib_name, device, _holds_text(planner, lib_job)))
        job.needs.append(lib_job.name)


def _plan_default_targets(
    planner: _Planner, package: str, build: RocmBuild, gpus: list[AmdFleetGpu]
) -> None:
    """Rule 4: one build in nixpkgs' default ROCm set, shared by every GPU it can serve."""
    defaults = planner.amd.nixpkgs_default_targets
    reads = (
        "reads clr.gpuTargets only"
        if build.how == "default-targets"
        else "has no target argument (it reads clr.localGpuTargets or clr.gpuTargets) and "
        "is built in nixpkgs' default ROCm set here"
    )
    serves: list[Serve] = []
    for gpu in gpus:
        verdict = amd_how_runs(gpu.target, defaults)
        if verdict.level is AmdRunLevel.CANNOT_RUN:
            reason = f"{package} {reads}; {verdict.reason}"
            planner.out.unserved.append(Decision(package, gpu.label, "unserved", reason))
            continue
        serves.append(Serve(gpu.label, _LEVEL[verdict.level], verdict.reason))
    if not serves:
        return
    name = planner.name(package, "rocm")
    planner.jobs[name] = _Job(
        name=name,
        package=package,
        attr=build.attr,
        target=None,
        cost=build.cost,
        cost_targets=len(defaults),
        big_parallel=build.big_parallel,
        system=planner.system,
        independent=True,
        serves=serves,
    )
    why = (
        f"{package} reads clr.gpuTargets (no per-build target list)"
        if build.how == "default-targets"
        else f"{package} reads the scope's list (clr.localGpuTargets or clr.gpuTargets) and has "
        "no target argument: with rocm_scope = package (or no per-target scope) it is not narrowed"
    )
    planner.decide(
        package,
        name,
        "shared",
        f"{why}: one build in nixpkgs' default ROCm set serves {', '.join(s.gpu for s in serves)}",
    )
    planner.decide(
        package,
        name,
        "holds",
        f"{name} holds nixpkgs' default ROCm targets ({', '.join(map(str, defaults))}); its "
        "ROCm libraries are the cache's",
    )


def _holds(planner: _Planner, lib_name: str, target: AmdTarget, device: AmdTarget) -> bool:
    """Whether a stack scope's copy of a library (built for ``target``) runs on ``device``
    (asked once per library, target and device: every package linking it asks again)."""
    key = (lib_name, target, device)
    found = planner.held.get(key)
    if found is None:
        library = planner.amd.stack_libraries[lib_name]
        check = planner.check(lib_name, target)
        if not library.reads_scope:
            found = planner.cached_covers(lib_name, device)
        elif check is not None and check.outcome != "ok":
            found = False
        else:
            kept = (target,) if check is None else check.kept
            found = amd_how_runs(device, kept).level is not AmdRunLevel.CANNOT_RUN
        planner.held[key] = found
    return found


def _holds_text(planner: _Planner, job: _Job) -> str:
    """What a stack library job really holds, in one clause."""
    library = planner.amd.stack_libraries[job.package]
    assert job.target is not None
    if not library.reads_scope:
        kept = planner.cached_targets(job.package)
        return (
            f"{job.name} holds {', '.join(map(str, kept))} (it reads clr.gpuTargets, not the "
            "scope's list, and its own list keeps only these)"
        )
    check = planner.check(job.package, job.target)
    if check is None or check.outcome == "ok":
        kept = (job.target,) if check is None else check.kept
        return f"{job.name} holds {', '.join(map(str, kept))}"
    if check.outcome == "shim":
        return f"{job.name} is a device-less shim ({check.reason})"
    return f"{job.name} holds no GPU code ({check.reason})"


def _say_holds(planner: _Planner) -> None:
    """Rule 6: the ``holds`` line of every stack library job and of every ROCm build without
    device code, and the ``gap`` lines of variants whose copy of a library lacks their target."""
    amd = planner.amd
    for job in planner.jobs.values():
        if job.target is None:
            continue
        if job.package in amd.stack_libraries:
            text = _holds_text(planner, job)
            for lib_name, library in sorted(amd.stack_libraries.items()):
                if library.fallback_library != job.package:
                    continue
                lib_job = planner.name(lib_name, job.target.processor)
                if lib_job in planner.jobs:
                    text += f"; links {lib_job}"
                elif job.package in planner.scope_overrides.get(job.target, {}):
                    text += (
                        f"; built with {library.fallback_argument} = false, so "
                        f"{library.provides or lib_name} are absent "
                        f"({lib_name} cannot build without a gfx9 target)"
                    )
            planner.decide(job.package, job.name, "holds", text)
        elif job.package in amd.builds and not amd.builds[job.package].device_code:
            linked = ", ".join(n for n in job.needs if n in planner.jobs)
            planner.decide(
                job.package,
                job.name,
                "holds",
                f"{job.name} holds no HIP code (its ROCm build compiles none: "
                f"{amd.builds[job.package].source.split(':')[0]}); it is built to link "
                f"{linked or 'the torch of its set'}, costs nothing per target, and verify "
                "expects no gfx code in it",
            )
    for lib_name in sorted(planner.from_cache):
        planner.decide(
            lib_name,
            f"{lib_name} (cache)",
            "holds",
            f"nixpkgs' default {lib_name} (from the cache, linked by the rocm_scope = package "
            f"variants) holds {', '.join(map(str, planner.cached_targets(lib_name)))}",
        )
    for job, lib_name, device, holds in planner.gaps:
        library = amd.stack_libraries[lib_name]
        where = ", ".join(s.gpu for s in job.serves) or str(device)
        planner.decide(
            job.package,
            f"{job.name}: {lib_name}",
            "gap",
            f"{holds}: no {device} code, so {library.provides or lib_name} does not run "
            f"on {where} with {job.name}",
        )


def _finish(planner: _Planner) -> None:
    """Freeze the jobs: every job of one build target shares one RocmSpec (one instance)."""
    _say_holds(planner)
    specs: dict[tuple[AmdTarget | None, str, str | None], RocmSpec] = {}
    for job in planner.jobs.values():
        key = (job.target, job.scope, job.scope_attr)
        spec = specs.get(key)
        if spec is None and job.target is None:
            spec = specs[key] = RocmSpec("package", None, (), ())
        elif spec is None and job.target is not None:
            keys = sorted(planner.overrides.get(job.target, ()))
            overrides = tuple((k, (planner.spellings[k].spell(job.target),)) for k in keys)
            arguments = tuple(
                (k, planner.spellings[k].argument)
                for k in keys
                if planner.spellings[k].argument != "gpuTargets"
            )
            changed = planner.scope_overrides.get(job.target, {}) if job.scope == "stack" else {}
            scope_overrides = tuple(
                (lib, tuple(sorted(args.items()))) for lib, args in sorted(changed.items())
            )
            spec = specs[key] = RocmSpec(
                job.scope, job.scope_attr, (job.target,), overrides, arguments, scope_overrides
            )
        assert spec is not None
        minutes, size = _cost(job.cost, job.cost_targets)
        planner.out.variants.append(
            Variant(
                name=job.name,
                package=job.package,
                attr=job.attr,
                independent=job.independent,
                fat=False,
                needs=tuple(sorted(set(job.needs))),
                minutes=minutes,
                size_mb=size,
                big_parallel=job.big_parallel,
                serves=tuple(job.serves),
                system=job.system,
                vendor="amd",
                spec=spec,
            )
        )


def rocm_baselines(
    amd: AmdKnowledgeBase, config: Config, fleet: Sequence[AmdFleetGpu], requested: Sequence[str]
) -> tuple[float, float, int, float, float, int]:
    """The AMD part of the reference strategies: nixpkgs' default (each ROCm package once,
    for the whole default list) and naive (one build per fleet processor), per system with AMD
    GPUs. Returns (default minutes, size, jobs, naive minutes, size, jobs)."""
    d_min = d_size = n_min = n_size = 0.0
    d_jobs = n_jobs = 0
    systems = sorted({g.system for g in fleet})
    for system in systems:
        targets = {g.target for g in fleet if g.system == system}
        for package in requested:
            build = amd.builds.get(package)
            if build is None or not _vendors_allow_amd(config, package):
                continue
            n_default = len(amd.nixpkgs_default_targets)
            minutes, size = _cost(build.cost, n_default)
            d_min += minutes
            d_size += size
            d_jobs += 1
            shared = build.how == "default-targets" or (
                build.how == "scope-targets" and config.policy.rocm_scope != "stack"
            )
            copies = 1 if shared else len(targets)
            per = n_default if shared else 1
            minutes, size = _cost(build.cost, per)
            n_min += copies * minutes
            n_size += copies * size
            n_jobs += copies
    return d_min, d_size, d_jobs, n_min, n_size, n_jobs


class RocmPlanning:
    """The ROCm family's planning (:class:`~capplan.core.families.base.FamilyPlanning`):
    AMD fleet GPUs (claimed by :func:`~capplan.core.families.rocm.claim.amd_entry`) served by gfx
    variants, rules 1-5 above. It has no policy inputs, no per-package settings and no fleet
    check of its own, and no package list apart from CUDA's (every ROCm build is also in
    kb/packages.json), so those phases are not among its protocols."""

    fallback = False

    def __init__(self, kb: KnowledgeBase, config: Config) -> None:
        self.kb = kb
        self.config = config
        self.family = RocmFamily(kb)
        self.amd = kb.part(AmdKnowledgeBase)
        self.fleet: tuple[AmdFleetGpu, ...] = ()
        self._claimed: dict[str, tuple[AmdTarget, str | None] | None] = {}

    def claims_gpu(self, label: str) -> bool:
        # A bad gfx target or an ambiguous AMD name is exit 4 here; a name no GPU family knows
        # (claim.py's amd_entry) is not claimed (a family after this one may know it; the
        # fallback refuses it with every family's "did you mean").
        found = self._claimed[label] = amd_entry(self.kb, label, unknown=False)
        return found is not None

    def resolve_fleet(self, labels: Sequence[str]) -> None:
        fleet: list[AmdFleetGpu] = []
        for label in labels:
            found = self._claimed.get(label) or amd_entry(self.kb, label)
            assert found is not None
            target, model = found
            fleet.append(
                AmdFleetGpu(
                    label=label,
                    target=target,
                    model=model,
                    count=self.config.fleet.count.get(label, 1),
                    # A card in a server of either system; ROCm jobs default to x86_64-linux.
                    system=gpu_system(label, False, (X86_64,), self.config),
                )
            )
        self.fleet = tuple(fleet)

    def fleet_labels(self) -> tuple[str, ...]:
        return tuple(g.label for g in self.fleet)

    def _build(self, package: str) -> RocmBuild | None:
        return self.amd.builds.get(package) if self.amd is not None else None

    def check_vendors(self, package: str) -> None:
        vendors = self.config.packages[package].vendors
        if vendors is not None and "amd" in vendors and self._build(package) is None:
            raise InvalidInputError(
                f"packages.{package}.vendors = {list(vendors)}: {package} is CUDA-only (nixpkgs "
                "has no ROCm build of it)",
                hint=f'set packages.{package}.vendors = ["nvidia"] or drop it',
            )

    def check_target(self, package: str, key: str, text: str) -> None:
        self.family.parse(text)  # a bad target is exit 4 of its own
        vendors = self.config.packages[package].vendors
        build = self._build(package)
        if build is not None and (vendors is None or "amd" in vendors):
            return
        why = (
            f"{package} is CUDA-only (nixpkgs has no ROCm build of it)"
            if build is None
            else f"packages.{package}.vendors leaves out amd"
        )
        amd = self.amd
        raise InvalidInputError(
            f"packages.{package}.{key} = '{shorten(text.strip())}': a ROCm gfx target, but {why}",
            hint="gfx targets go to packages with a ROCm build ("
            + ", ".join(sorted(amd.builds if amd else ()))
            + f"); remove it from packages.{package}.{key}",
        )

    def unplanned(self, requested: Sequence[str]) -> list[Decision]:
        systems = self.config.policy.planned_systems
        found: list[Decision] = []
        for gpu in self.fleet:
            if gpu.system not in systems:
                reason = (
                    f"{gpu.label} lives on {gpu.system} (ROCm jobs run on x86_64-linux unless "
                    f"fleet.systems says otherwise), which is not in policy.systems "
                    f"({', '.join(systems)})"
                )
                found.extend(
                    Decision(p, gpu.label, "unserved", reason) for p in self._gpu(requested)
                )
        return found

    def _gpu(self, requested: Sequence[str]) -> tuple[str, ...]:
        """The requested GPU packages: a CPU-side package (core/families/cpu/planning.py) is no
        ROCm family's business."""
        amd = self.amd
        return tuple(
            p for p in requested if p in self.kb.packages or (amd is not None and p in amd.builds)
        )

    def plan(self, requested: Sequence[str], earlier: FamilyResult) -> FamilyResult:
        result = FamilyResult()
        if self.amd is None:
            return result
        systems = self.config.policy.planned_systems
        rocm = plan_rocm(self.amd, self.config, self.fleet, self._gpu(requested), systems)
        result.variants = rocm.variants
        result.decisions = rocm.decisions
        result.unserved = rocm.unserved
        result.active_systems = tuple(sorted({v.system for v in rocm.variants}))
        return result

    def costs(self, requested: Sequence[str], result: FamilyResult) -> CostPart:
        if self.amd is None or not self.fleet:
            return CostPart()
        d_min, d_size, d_jobs, n_min, n_size, n_jobs = rocm_baselines(
            self.amd, self.config, self.fleet, tuple(self.config.packages)
        )
        return CostPart(d_min, d_size, d_jobs, n_min, n_size, n_jobs)

    def plan_part(self) -> RocmPart:
        amd = self.amd
        return RocmPart(
            fleet=self.fleet,
            scope=self.config.policy.rocm_scope,
            default_targets=amd.nixpkgs_default_targets if amd is not None else (),
        )
