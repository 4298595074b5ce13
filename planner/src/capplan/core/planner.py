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
   same-major SASS (an exact set cover, :mod:`capplan.core.cover`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

from capplan.core.capability import Capability
from capplan.core.compat import RunLevel, how_runs, sass_runs_on
from capplan.core.config import Config
from capplan.core.cover import min_cover
from capplan.core.cuda import CudaVersion
from capplan.core.gpus import resolve_device
from capplan.core.graph import dependency_closure
from capplan.core.kb import KnowledgeBase, PackageInfo
from capplan.core.plan import Baselines, Decision, FleetGpu, Plan, Serve, Variant
from capplan.errors import CapplanError, InfeasibleError, InvalidInputError, NothingToDo

__all__ = ["NIXPKGS_DEFAULT_CUDA", "make_plan", "resolve_cuda_policy", "resolve_fleet"]

# NIXPKGS.md §3: `cudaPackages = cudaPackages_12_9` in nixos-unstable (mid-2026).
NIXPKGS_DEFAULT_CUDA = CudaVersion(12, 9)


# -- inputs ---------------------------------------------------------------------------------------
def resolve_cuda_policy(kb: KnowledgeBase, wanted: Sequence[str] | None) -> tuple[CudaVersion, ...]:
    """Allowed CUDA versions, preferred first; default: nixpkgs' default, then newest first."""
    available = kb.nixpkgs_cuda()
    if wanted is None:
        rest = sorted((v for v in available if v != NIXPKGS_DEFAULT_CUDA), reverse=True)
        return (NIXPKGS_DEFAULT_CUDA, *rest)
    result: list[CudaVersion] = []
    for text in wanted:
        version = CudaVersion.parse(text)
        release = kb.cuda_release(version)
        if release.nixpkgs_set is None:
            known = ", ".join(str(v) for v in available)
            raise InvalidInputError(
                f"CUDA {version} has no package set in nixpkgs",
                hint=f"policy.cuda may list: {known}",
            )
        if version not in result:
            result.append(version)
    if not result:
        raise InvalidInputError("policy.cuda is empty", hint="list at least one CUDA version")
    return tuple(result)


def resolve_fleet(kb: KnowledgeBase, config: Config) -> tuple[FleetGpu, ...]:
    fleet: list[FleetGpu] = []
    for label in config.fleet.gpus:
        capability, model = resolve_device(label, kb.gpus)
        info = kb.capability(capability)
        if capability.suffix:
            raise InvalidInputError(
                f"fleet entry '{label}' is a build target ({capability}), not a GPU",
                hint=f"list the device capability {capability.base} instead",
            )
        fleet.append(
            FleetGpu(
                label=label,
                capability=capability,
                model=model.name if model else None,
                jetson=info.jetson,
                count=config.fleet.count.get(label, 1),
            )
        )
    unknown = sorted(set(config.fleet.count) - set(config.fleet.gpus))
    if unknown:
        raise InvalidInputError(
            f"fleet.count names '{unknown[0]}', which is not in fleet.gpus",
            hint="add it to fleet.gpus or remove the count",
        )
    return tuple(fleet)


# -- buildability ---------------------------------------------------------------------------------
@dataclass
class _Rules:
    kb: KnowledgeBase
    config: Config
    system: str
    policy_cuda: tuple[CudaVersion, ...]
    _memo: dict[tuple[str, Capability, CudaVersion], str | None] = field(default_factory=dict)
    _cuda_memo: dict[str, tuple[CudaVersion, ...]] = field(default_factory=dict)
    _first_memo: dict[tuple[str, tuple[Capability, ...]], tuple[CudaVersion | None, str]] = field(
        default_factory=dict
    )
    _excluded: dict[str, frozenset[Capability]] = field(default_factory=dict)

    def user_excludes(self, package: str) -> frozenset[Capability]:
        found = self._excluded.get(package)
        if found is None:
            user = self.config.packages.get(package)
            found = frozenset(Capability.parse(c) for c in (user.exclude if user else ()))
            self._excluded[package] = found
        return found

    def package_cuda(self, package: str) -> tuple[CudaVersion, ...]:
        found = self._cuda_memo.get(package)
        if found is None:
            pin = self.config.packages.get(package)
            found = self.policy_cuda
            if pin is not None and pin.cuda is not None:
                version = CudaVersion.parse(pin.cuda)
                self.kb.cuda_release(version)
                found = (version,)
            self._cuda_memo[package] = found
        return found

    def why_not(self, package: str, cap: Capability, cuda: CudaVersion) -> str | None:
        """None when ``package`` builds for ``cap`` under ``cuda``; else the reason it cannot."""
        key = (package, cap, cuda)
        if key not in self._memo:
            self._memo[key] = self._why_not(package, cap, cuda)
        return self._memo[key]

    def _why_not(self, package: str, cap: Capability, cuda: CudaVersion) -> str | None:
        if not self.kb.knows(cap):
            return f"{cap} is not a known capability"
        info = self.kb.capability(cap)
        if not info.nixpkgs:
            # nixpkgs asserts on capabilities outside its table ("Requested unrecognized CUDA
            # capabilities"), so nothing can be built for them however real they are.
            return f"{cap} is not in nixpkgs' capability table"
        if info.jetson and self.system != "aarch64-linux":
            return f"{cap} is a Jetson capability: it evaluates only on aarch64-linux"
        if not info.supported_by(cuda):
            span = f"{info.min_cuda}..{info.max_cuda or 'newest'}"
            return f"CUDA {cuda} does not support {cap} (supported by CUDA {span})"
        pkg = self.kb.package(package)
        reason = self._limits(package, pkg, cap, cuda)
        if reason:
            return reason
        for dep in pkg.depends:
            if self.kb.package(dep).capability_dependent:
                dep_reason = self.why_not(dep, cap, cuda)
                if dep_reason:
                    return f"its dependency {dep} cannot: {dep_reason}"
        return None

    def _limits(
        self, name: str, pkg: PackageInfo, cap: Capability, cuda: CudaVersion
    ) -> str | None:
        limits = pkg.limits
        if cap.suffix not in limits.suffixes:
            kind = {"a": "arch-specific", "f": "family-specific"}.get(cap.suffix, "baseline")
            return f"{name} does not accept {kind} capabilities like {cap}"
        if limits.allow_from:
            base_pkg, _, version = limits.allow_from.partition("@")
            release = self.kb.torch_release(version)
            if cap not in release.supported:
                return f"{cap} is not in {base_pkg} {release.version}'s supported_arches"
        if limits.allow is not None and cap not in limits.allow:
            return f"{cap} is not in {name}'s allowlist"
        if cap in limits.exclude:
            return f"{name} excludes {cap} ({limits.source})"
        if limits.min is not None and cap.base < limits.min.base:
            return f"{name} needs capability >= {limits.min}"
        if limits.max is not None and cap.base > limits.max.base:
            return f"{name} supports capabilities up to {limits.max}"
        if limits.cuda is not None and cuda not in limits.cuda:
            return f"{name} does not build with CUDA {cuda}"
        if cap in self.user_excludes(name):
            return f"capplan.toml excludes {cap} for {name}"
        return None

    def first_cuda(
        self, package: str, caps: Iterable[Capability]
    ) -> tuple[CudaVersion | None, str]:
        """The first allowed CUDA under which every capability builds, or why none does."""
        key = (package, tuple(caps))
        found = self._first_memo.get(key)
        if found is None:
            found = self._first_memo[key] = self._first_cuda(*key)
        return found

    def _first_cuda(
        self, package: str, caps: tuple[Capability, ...]
    ) -> tuple[CudaVersion | None, str]:
        reasons: list[str] = []
        for cuda in self.package_cuda(package):
            failing = [r for c in caps if (r := self.why_not(package, c, cuda))]
            if not failing:
                return cuda, ""
            reasons.append(failing[0])
        return None, "; ".join(dict.fromkeys(reasons))

    def buildable(self, package: str, cap: Capability) -> bool:
        return self.first_cuda(package, (cap,))[0] is not None


# -- serving the fleet ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Choice:
    gpu: FleetGpu
    cap: Capability | None
    level: RunLevel
    reason: str


def _candidates(rules: _Rules, package: str) -> Callable[[], list[Capability]]:
    """Every buildable capability of ``package``, computed only when a rule needs it."""
    return cache(lambda: _buildable(rules, package))


def _buildable(rules: _Rules, package: str) -> list[Capability]:
    caps = [c.capability for c in rules.kb.capabilities]
    return [c for c in caps if rules.buildable(package, c)]


def _serve_gpu(
    rules: _Rules, package: str, gpu: FleetGpu, pool: Callable[[], list[Capability]]
) -> _Choice:
    dev = gpu.capability
    cuda, why = rules.first_cuda(package, (dev,))
    if cuda is not None:
        return _Choice(gpu, dev, RunLevel.NATIVE, f"{dev} is built exactly")
    if gpu.jetson:
        return _Choice(gpu, None, RunLevel.CANNOT_RUN, why)
    sass = [c for c in pool() if c.suffix != "a" and sass_runs_on(c, dev)]
    if sass:
        best = max(sass)
        return _Choice(
            gpu,
            best,
            RunLevel.COMPATIBLE,
            f"{dev} cannot be built ({why}); SASS for {best} runs on it (same major, lower minor)",
        )
    if rules.kb.package(package).ptx == "none":
        return _Choice(gpu, None, RunLevel.CANNOT_RUN, f"{why}; {package} cannot embed PTX")
    ptx = [c for c in pool() if not c.suffix and c <= dev]
    if ptx:
        best = max(ptx)
        return _Choice(
            gpu,
            best,
            RunLevel.PTX_JIT,
            f"{dev} cannot be built ({why}) and no same-major SASS builds; {best}+PTX is "
            "JIT-compiled by the driver (slow first start, no arch-specific features)",
        )
    return _Choice(gpu, None, RunLevel.CANNOT_RUN, f"{why}; nothing older builds to JIT from")


def _share_compatible(
    rules: _Rules, package: str, choices: list[_Choice], pool: Callable[[], list[Capability]]
) -> list[_Choice]:
    """Replace SASS-served choices with a minimum set cover of capabilities."""
    sass_served = [ch for ch in choices if ch.level in (RunLevel.NATIVE, RunLevel.COMPATIBLE)]
    devices = sorted({ch.gpu.capability for ch in sass_served})
    weights = {
        d: sum(ch.gpu.count for ch in sass_served if ch.gpu.capability == d) for d in devices
    }
    options = {
        c: frozenset(d for d in devices if sass_runs_on(c, d)) for c in pool() if c.suffix != "a"
    }
    options = {c: covered for c, covered in options.items() if covered}
    chosen = min_cover(devices, options, weights)
    result: list[_Choice] = []
    for ch in choices:
        if ch not in sass_served:
            result.append(ch)
            continue
        dev = ch.gpu.capability
        best = max(c for c in chosen if dev in options[c])
        if best.base == dev:
            result.append(_Choice(ch.gpu, best, RunLevel.NATIVE, f"{dev} is built exactly"))
        else:
            result.append(
                _Choice(
                    ch.gpu,
                    best,
                    RunLevel.COMPATIBLE,
                    f"share=compatible: SASS for {best} runs on {dev} (same major, lower minor)",
                )
            )
    return result


# -- variants -------------------------------------------------------------------------------------
@dataclass
class _Builder:
    rules: _Rules
    variants: dict[str, Variant]
    decisions: list[Decision]
    serves: dict[str, list[Serve]] = field(default_factory=dict)

    @property
    def kb(self) -> KnowledgeBase:
        return self.rules.kb

    def name(self, package: str, label: str, cuda: CudaVersion) -> str:
        suffix = "" if cuda == self.rules.policy_cuda[0] else f"-{cuda.slug}"
        return f"{package}-{label}{suffix}" if label else f"{package}{suffix}"

    def attr(self, package: str) -> str:
        user = self.rules.config.packages.get(package)
        if user is not None and user.attr:
            return user.attr
        return self.kb.package(package).attr

    def cost(self, pkg: PackageInfo, targets: int) -> tuple[float, float]:
        minutes = pkg.cost.base_minutes + targets * pkg.cost.per_target_minutes
        size = pkg.cost.base_size_mb + targets * pkg.cost.per_target_size_mb
        return round(minutes, 2), round(size, 2)

    def shared(self, package: str, cuda: CudaVersion) -> str:
        """The one job of a capability-independent package (per CUDA version)."""
        name = self.name(package, "", cuda)
        if name not in self.variants:
            pkg = self.kb.package(package)
            needs = tuple(sorted(self.shared(dep, cuda) for dep in pkg.depends))
            minutes, size = self.cost(pkg, 0)
            self.variants[name] = Variant(
                name=name,
                package=package,
                attr=self.attr(package),
                capabilities=(),
                cuda=cuda,
                cuda_set=None if cuda == NIXPKGS_DEFAULT_CUDA else cuda.set_name,
                ptx=(),
                forward_compat=True,
                gpu_targets=(),
                independent=True,
                fat=False,
                needs=needs,
                minutes=minutes,
                size_mb=size,
                big_parallel=pkg.big_parallel,
            )
        return name

    def dependent(
        self,
        package: str,
        label: str,
        caps: tuple[Capability, ...],
        cuda: CudaVersion,
        ptx: bool,
        fat: bool,
    ) -> str:
        name = self.name(package, label, cuda)
        pkg = self.kb.package(package)
        existing = self.variants.get(name)
        if existing is not None:
            if ptx and not existing.ptx:
                self.variants[name] = self._with_ptx(existing, pkg)
            return name
        needs: list[str] = []
        for dep in pkg.depends:
            dep_info = self.kb.package(dep)
            if dep_info.capability_dependent:
                needs.append(self.dependent(dep, label, caps, cuda, ptx, fat))
            else:
                needs.append(self.shared(dep, cuda))
        minutes, size = self.cost(pkg, len(caps))
        variant = Variant(
            name=name,
            package=package,
            attr=self.attr(package),
            capabilities=caps,
            cuda=cuda,
            cuda_set=None if cuda == NIXPKGS_DEFAULT_CUDA else cuda.set_name,
            ptx=(),
            forward_compat=False,
            gpu_targets=(),
            independent=False,
            fat=fat,
            needs=tuple(sorted(set(needs))),
            minutes=minutes,
            size_mb=size,
            big_parallel=pkg.big_parallel,
        )
        self.variants[name] = self._with_ptx(variant, pkg) if ptx else variant
        return name

    def _with_ptx(self, variant: Variant, pkg: PackageInfo) -> Variant:
        """PTX for the highest capability, the way this package lets one ask for it."""
        top = max(variant.capabilities)
        if pkg.ptx == "none":
            self.decisions.append(
                Decision(
                    variant.package, variant.name, "no-ptx", f"{variant.package} cannot embed PTX"
                )
            )
            return variant
        # nixpkgs adds PTX for the LAST element of cudaCapabilities as given (NIXPKGS.md §2);
        # the list is sorted, so the last is the highest.
        targets = (*(str(c) for c in variant.capabilities[:-1]), f"{top}+PTX")
        minutes, size = self.cost(pkg, len(variant.capabilities) + 1)
        return replace(
            variant,
            ptx=(top,),
            forward_compat=pkg.ptx == "forward-compat",
            gpu_targets=targets if pkg.ptx == "gpu-targets" else (),
            minutes=minutes,
            size_mb=size,
        )

    def add_serve(self, name: str, serve: Serve) -> None:
        self.serves.setdefault(name, []).append(serve)

    def finished(self) -> list[Variant]:
        """The variants with their serves attached (``Variant.with_serves``, not the slower
        ``dataclasses.replace``: this runs once per job, tens of thousands of times)."""
        return [v.with_serves(tuple(self.serves.get(n, ()))) for n, v in self.variants.items()]


def _plan_package(builder: _Builder, package: str, fleet: tuple[FleetGpu, ...]) -> list[Decision]:
    rules = builder.rules
    config = rules.config
    pkg = builder.kb.package(package)
    unserved: list[Decision] = []
    want_ptx = config.policy.ptx == "newest"
    if not pkg.capability_dependent:
        cuda = rules.package_cuda(package)[0]
        name = builder.shared(package, cuda)
        builder.decisions.append(
            Decision(
                package, name, "shared", f"{package} is {pkg.kind}: one build serves every GPU"
            )
        )
        for gpu in fleet:
            if gpu.jetson and rules.system != "aarch64-linux":
                reason = (
                    f"{gpu.capability} is a Jetson capability: it evaluates only on aarch64-linux"
                )
                unserved.append(Decision(package, gpu.label, "unserved", reason))
            else:
                builder.add_serve(
                    name, Serve(gpu.label, RunLevel.NATIVE, f"{package} is {pkg.kind}")
                )
        return unserved
    pool = _candidates(rules, package)
    choices = [_serve_gpu(rules, package, gpu, pool) for gpu in fleet]
    if config.policy.share == "compatible":
        choices = _share_compatible(rules, package, choices, pool)
    user = config.packages.get(package)
    extras = [Capability.parse(c) for c in (user.extra if user else ())]
    for cap in extras:
        builder.kb.capability(cap)
    for choice in choices:
        if choice.cap is None:
            unserved.append(Decision(package, choice.gpu.label, "unserved", choice.reason))
            continue
        found, why = rules.first_cuda(package, (choice.cap,))
        assert found is not None, why  # the pool holds only buildable capabilities
        cuda = found
        ptx = want_ptx or choice.level is RunLevel.PTX_JIT
        name = builder.dependent(package, choice.cap.slug, (choice.cap,), cuda, ptx, fat=False)
        action = {RunLevel.NATIVE: "kept", RunLevel.COMPATIBLE: "substituted"}.get(
            choice.level, "ptx"
        )
        builder.decisions.append(
            Decision(package, choice.gpu.label, action, f"{name}: {choice.reason}")
        )
        builder.add_serve(name, Serve(choice.gpu.label, choice.level, choice.reason))
        if cuda != rules.package_cuda(package)[0]:
            builder.decisions.append(
                Decision(
                    package,
                    name,
                    "cuda",
                    f"CUDA {cuda} instead of the preferred {rules.package_cuda(package)[0]}: "
                    f"{rules.why_not(package, choice.cap, rules.package_cuda(package)[0])}",
                )
            )
    for cap in extras:
        found, why = rules.first_cuda(package, (cap,))
        if found is None:
            raise InfeasibleError(
                f"capplan.toml asks for extra capability {cap} of {package}, which cannot be "
                f"built: {why}",
                hint=f"remove {cap} from packages.{package}.extra or allow another CUDA version",
            )
        name = builder.dependent(package, cap.slug, (cap,), cuda, want_ptx, fat=False)
        builder.decisions.append(
            Decision(package, str(cap), "extra", f"{name}: asked for in extra")
        )
    _plan_fat(builder, package, choices, want_ptx)
    return unserved


def _plan_fat(builder: _Builder, package: str, choices: list[_Choice], want_ptx: bool) -> None:
    rules = builder.rules
    fat = rules.config.policy.fat
    if fat == "none":
        return
    groups: dict[str, tuple[Capability, ...]] = {}
    if fat == "fleet":
        groups["fat"] = tuple(sorted({c.cap for c in choices if c.cap is not None}))
    elif isinstance(fat, dict):
        for group, members in sorted(fat.items()):
            members_caps = {resolve_device(m, builder.kb.gpus)[0] for m in members}
            groups[f"fat-{group}"] = tuple(sorted(members_caps))
    for label, caps in groups.items():
        buildable = tuple(c for c in caps if rules.buildable(package, c))
        for cap in sorted(set(caps) - set(buildable)):
            builder.decisions.append(
                Decision(package, f"{label}:{cap}", "dropped", rules.first_cuda(package, (cap,))[1])
            )
        if not buildable:
            continue
        keep = list(buildable)
        cuda, _ = rules.first_cuda(package, keep)
        # One build has one CUDA: drop the capabilities the best common CUDA cannot build.
        while cuda is None and len(keep) > 1:
            dropped = keep.pop(0)
            builder.decisions.append(
                Decision(
                    package,
                    f"{label}:{dropped}",
                    "dropped",
                    "no CUDA version builds it together with the rest of the fat build",
                )
            )
            cuda, _ = rules.first_cuda(package, keep)
        if cuda is None:
            continue
        name = builder.dependent(package, label, tuple(keep), cuda, want_ptx, fat=True)
        builder.decisions.append(
            Decision(package, name, "fat", f"one build of {', '.join(map(str, keep))}")
        )
        for choice in choices:
            if choice.cap is not None:
                verdict = how_runs(
                    choice.gpu.capability,
                    keep,
                    builder.variants[name].ptx,
                    jetson=choice.gpu.jetson,
                )
                if verdict.level is not RunLevel.CANNOT_RUN:
                    builder.add_serve(name, Serve(choice.gpu.label, verdict.level, verdict.reason))


# -- the plan -------------------------------------------------------------------------------------
def make_plan(kb: KnowledgeBase, config: Config) -> Plan:
    """Plan every requested package for the fleet. Raises CapplanError subclasses on bad input."""
    policy_cuda = resolve_cuda_policy(kb, config.policy.cuda)
    fleet = resolve_fleet(kb, config)
    if not config.packages:
        raise NothingToDo(
            "capplan.toml lists no packages: nothing to build",
            hint="add a [packages.<name>] table, e.g. [packages.torch]",
        )
    requested = tuple(sorted(config.packages))
    for name in requested:
        kb.package(name)
        user = config.packages[name]
        for cap in (*user.exclude, *user.extra):
            kb.capability(Capability.parse(cap))
    if not fleet and not any(config.packages[p].extra for p in requested):
        raise NothingToDo(
            "the fleet is empty: nothing to build", hint="list GPUs in [fleet] gpus = [...]"
        )
    for gpu in fleet:
        info = kb.capability(gpu.capability)
        if not any(info.supported_by(cuda) for cuda in policy_cuda):
            allowed = ", ".join(str(c) for c in policy_cuda)
            raise InfeasibleError(
                f"fleet GPU '{gpu.label}' ({gpu.capability}) is supported by no allowed CUDA "
                f"version ({allowed}); CUDA supports it from {info.min_cuda} to "
                f"{info.max_cuda or 'the newest'}",
                hint="add a CUDA version that supports it to policy.cuda, or drop the GPU",
            )
    closure = dependency_closure(kb, requested)  # unknown dependencies and cycles fail here
    rules = _Rules(kb, config, config.policy.system, policy_cuda)
    builder = _Builder(rules, {}, [])
    unserved: list[Decision] = []
    for package in requested:
        unserved.extend(_plan_package(builder, package, fleet))
    planned = {v.package for v in builder.variants.values()}
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
    variants = tuple(sorted(builder.finished(), key=_variant_order))
    baselines = _baselines(kb, closure, fleet, variants, config)
    decisions = tuple(sorted(builder.decisions, key=lambda d: (d.package, d.subject, d.action)))
    return Plan(
        system=config.policy.system,
        cuda_policy=policy_cuda,
        fleet=fleet,
        packages=requested,
        variants=variants,
        decisions=decisions,
        unserved=tuple(sorted(unserved, key=lambda d: (d.package, d.subject))),
        baselines=baselines,
        share=config.policy.share,
    )


def _variant_order(v: Variant) -> tuple[object, ...]:
    """Package, then single variants by capability, then fat builds; CUDA last."""
    return (v.package, v.fat, tuple(c.sort_key for c in v.capabilities), v.cuda, v.name)


def _baselines(
    kb: KnowledgeBase,
    closure: tuple[str, ...],
    fleet: tuple[FleetGpu, ...],
    variants: tuple[Variant, ...],
    config: Config,
) -> Baselines:
    defaults = kb.defaults(NIXPKGS_DEFAULT_CUDA)
    fleet_caps = sorted({g.capability for g in fleet if not g.jetson})
    default_minutes = default_size = naive_minutes = naive_size = 0.0
    naive_jobs = 0
    for name in closure:
        pkg = kb.package(name)
        targets = len(defaults) if pkg.capability_dependent else 0
        default_minutes += pkg.cost.base_minutes + targets * pkg.cost.per_target_minutes
        default_size += pkg.cost.base_size_mb + targets * pkg.cost.per_target_size_mb
        copies = len(fleet_caps) if pkg.capability_dependent else 1
        naive_jobs += copies
        naive_minutes += copies * (
            pkg.cost.base_minutes + (pkg.cost.per_target_minutes if pkg.capability_dependent else 0)
        )
        naive_size += copies * (
            pkg.cost.base_size_mb + (pkg.cost.per_target_size_mb if pkg.capability_dependent else 0)
        )
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
        nixpkgs_default_jobs=len(closure),
        naive_minutes=round(naive_minutes, 2),
        naive_size_mb=round(naive_size, 2),
        naive_jobs=naive_jobs,
        exact_jobs=exact_jobs,
    )
