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
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from capplan.core.capability import Capability
from capplan.core.compat import RunLevel, how_runs, sass_runs_on
from capplan.core.config import Config
from capplan.core.cover import min_cover
from capplan.core.cuda import CudaVersion
from capplan.core.gcpause import gc_paused
from capplan.core.gpus import resolve_device
from capplan.core.graph import dependency_closure
from capplan.core.kb import KnowledgeBase, Limits, PackageInfo
from capplan.core.plan import Baselines, Decision, FleetGpu, Plan, Serve, Variant
from capplan.core.systems import AARCH64, X86_64, system_suffix, uses_jetson_redist
from capplan.errors import CapplanError, InfeasibleError, InvalidInputError, NothingToDo, shorten

__all__ = [
    "NIXPKGS_DEFAULT_CUDA",
    "make_plan",
    "nixpkgs_cuda_version",
    "resolve_cuda_policy",
    "resolve_fleet",
]

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
        version = nixpkgs_cuda_version(kb, text, "policy.cuda")
        if version not in result:
            result.append(version)
    if not result:
        raise InvalidInputError("policy.cuda is empty", hint="list at least one CUDA version")
    return tuple(result)


def nixpkgs_cuda_version(kb: KnowledgeBase, text: str, where: str) -> CudaVersion:
    """``text`` as a CUDA version nixpkgs has a package set for (``where`` names the setting);
    exit 4 with the versions that exist otherwise."""
    version = CudaVersion.parse(text)
    found = next((r for r in kb.cuda_releases if r.version == version), None)
    if found is None or found.nixpkgs_set is None:
        known = ", ".join(str(v) for v in kb.nixpkgs_cuda())
        what = "is not a CUDA release" if found is None else "has no package set in nixpkgs"
        raise InvalidInputError(
            f"{where} = '{text.strip()[:40]}': CUDA {version} {what}",
            hint=f"{where} may be one of: {known}",
        )
    return version


def resolve_fleet(kb: KnowledgeBase, config: Config) -> tuple[FleetGpu, ...]:
    fleet: list[FleetGpu] = []
    for label in config.fleet.gpus:
        capability, model = resolve_device(label, kb.gpus)
        info = kb.capability(capability)
        if capability.suffix:
            raise InvalidInputError(
                f"fleet entry '{shorten(label)}' is a build target ({capability}), not a GPU",
                hint=f"list the device capability {capability.base} instead",
            )
        fleet.append(
            FleetGpu(
                label=label,
                capability=capability,
                model=model.name if model else None,
                jetson=info.jetson,
                count=config.fleet.count.get(label, 1),
                system=_gpu_system(label, info.jetson, model.systems if model else None, config),
            )
        )
    unknown = sorted(set(config.fleet.count) - set(config.fleet.gpus))
    if unknown:
        raise InvalidInputError(
            f"fleet.count names '{shorten(unknown[0])}', which is not in fleet.gpus",
            hint="add it to fleet.gpus or remove the count",
        )
    unknown = sorted(set(config.fleet.systems) - set(config.fleet.gpus))
    if unknown:
        raise InvalidInputError(
            f"fleet.systems names '{unknown[0]}', which is not in fleet.gpus",
            hint="add it to fleet.gpus or remove it from fleet.systems",
        )
    return tuple(fleet)


def _gpu_system(
    label: str, jetson: bool, model_systems: Sequence[str] | None, config: Config
) -> str:
    """Where a fleet GPU lives: ``fleet.systems`` when set, else the KB model's default (a bare
    capability: aarch64-linux for a Jetson capability, x86_64-linux otherwise)."""
    bare = (AARCH64,) if jetson else (X86_64,)
    possible = tuple(model_systems) if model_systems else bare
    wanted = config.fleet.systems.get(label)
    if wanted is None:
        return possible[0]
    planned = config.policy.planned_systems
    if wanted not in planned:
        raise InvalidInputError(
            f"fleet.systems puts '{label}' on {wanted}, which is not in policy.systems "
            f"({', '.join(planned)})",
            hint=f"add {wanted} to policy.systems or drop the fleet.systems entry",
        )
    # A discrete card can sit in a server of either system; a Jetson module or a Grace
    # superchip brings its own Arm CPU.
    if (jetson or possible == (AARCH64,)) and wanted not in possible:
        kind = "a Jetson module" if jetson else "an Arm (Grace) superchip"
        raise InvalidInputError(
            f"fleet.systems puts '{label}' on {wanted}, but it is {kind} that runs "
            f"{' or '.join(possible)} only",
            hint=f"remove '{label}' from fleet.systems or set it to {possible[0]}",
        )
    return wanted


# -- buildability ---------------------------------------------------------------------------------
@dataclass
class _Rules:
    """Rule 1, answered two ways: as sets of buildable capabilities per (package, CUDA), which
    is what planning asks tens of thousands of times, and as a reason string, which is only
    needed when the answer is no (:meth:`why_not` walks the checks in their documented order).
    """

    kb: KnowledgeBase
    config: Config
    system: str
    policy_cuda: tuple[CudaVersion, ...]
    _reasons: dict[tuple[str, Capability, CudaVersion], str] = field(default_factory=dict)
    _ok: dict[tuple[str, CudaVersion], frozenset[Capability]] = field(default_factory=dict)
    _platform: dict[CudaVersion, tuple[Capability, ...]] = field(default_factory=dict)
    _allowed: dict[tuple[int, CudaVersion], tuple[Limits, frozenset[Capability]]] = field(
        default_factory=dict
    )
    _cuda_memo: dict[str, tuple[CudaVersion, ...]] = field(default_factory=dict)
    _interned: dict[CudaVersion, CudaVersion] = field(default_factory=dict)
    _excluded: dict[str, frozenset[Capability]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._interned.update((v, v) for v in self.policy_cuda)

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
                version = nixpkgs_cuda_version(self.kb, pin.cuda, f"packages.{package}.cuda")
                # One object per version: later lookups then match by identity.
                found = (self._interned.setdefault(version, version),)
            self._cuda_memo[package] = found
        return found

    def ok(self, package: str, cuda: CudaVersion) -> frozenset[Capability]:
        """Every capability ``package`` builds for under ``cuda`` (rule 1, as a set)."""
        key = (package, cuda)
        found = self._ok.get(key)
        if found is None:
            pkg = self.kb.package(package)
            found = self._limits_allow(package, pkg.limits, cuda)
            excluded = self.user_excludes(package)
            if excluded:
                found = found - excluded
            for dep in pkg.depends:
                if self.kb.package(dep).capability_dependent and dep not in pkg.optional:
                    found = found & self.ok(dep, cuda)
            self._ok[key] = found
        return found

    def _limits_allow(self, name: str, limits: Limits, cuda: CudaVersion) -> frozenset[Capability]:
        """The platform's capabilities under ``cuda`` that ``limits`` allow; many packages share
        one Limits value, so this is computed once per (limits, CUDA)."""
        key = (id(limits), cuda)
        entry = self._allowed.get(key)
        if entry is None or entry[0] is not limits:
            allowed = frozenset(
                c for c in self._platform_caps(cuda) if self._limits(name, limits, c, cuda) is None
            )
            entry = self._allowed[key] = (limits, allowed)
        return entry[1]

    def _platform_caps(self, cuda: CudaVersion) -> tuple[Capability, ...]:
        found = self._platform.get(cuda)
        if found is None:
            found = self._platform[cuda] = tuple(
                c.capability
                for c in self.kb.capabilities
                if self._platform_reason(c.capability, cuda) is None
            )
        return found

    def why_not(self, package: str, cap: Capability, cuda: CudaVersion) -> str | None:
        """None when ``package`` builds for ``cap`` under ``cuda``; else the reason it cannot."""
        if cap in self.ok(package, cuda):
            return None
        key = (package, cap, cuda)
        found = self._reasons.get(key)
        if found is None:
            found = self._reasons[key] = self._why_not(package, cap, cuda)
        return found

    def _why_not(self, package: str, cap: Capability, cuda: CudaVersion) -> str:
        reason = self._platform_reason(cap, cuda)
        if reason:
            return reason
        pkg = self.kb.package(package)
        reason = self._limits(package, pkg.limits, cap, cuda)
        if reason:
            return reason
        if cap in self.user_excludes(package):
            return f"capplan.toml excludes {cap} for {package}"
        for dep in pkg.depends:
            if self.kb.package(dep).capability_dependent and dep not in pkg.optional:
                dep_reason = self.why_not(dep, cap, cuda)
                if dep_reason:
                    return f"its dependency {dep} cannot: {dep_reason}"
        raise AssertionError(f"{package} builds for {cap} under CUDA {cuda}; no reason to give")

    def _platform_reason(self, cap: Capability, cuda: CudaVersion) -> str | None:
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
        return None

    def _limits(self, name: str, limits: Limits, cap: Capability, cuda: CudaVersion) -> str | None:
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
        return None

    def first_cuda(
        self, package: str, caps: Iterable[Capability]
    ) -> tuple[CudaVersion | None, str]:
        """The first allowed CUDA under which every capability builds, or why none does."""
        caps = tuple(caps)
        allowed = self.package_cuda(package)
        for cuda in allowed:
            ok = self.ok(package, cuda)
            if all(c in ok for c in caps):
                return cuda, ""
        reasons = [
            next(r for c in caps if (r := self.why_not(package, c, cuda))) for cuda in allowed
        ]
        return None, "; ".join(dict.fromkeys(reasons))

    def buildable(self, package: str, cap: Capability) -> bool:
        return any(cap in self.ok(package, cuda) for cuda in self.package_cuda(package))


# -- serving the fleet ----------------------------------------------------------------------------
class _Choice(NamedTuple):
    gpu: FleetGpu
    cap: Capability | None
    level: RunLevel
    reason: str
    cuda: CudaVersion | None = None  # the first allowed CUDA that builds ``cap``


_ACTIONS = {RunLevel.NATIVE: "kept", RunLevel.COMPATIBLE: "substituted", RunLevel.PTX_JIT: "ptx"}


def _candidates(rules: _Rules, package: str) -> Callable[[], list[Capability]]:
    """Every buildable capability of ``package``, computed only when a rule needs it."""
    return cache(lambda: _buildable(rules, package))


def _buildable(rules: _Rules, package: str) -> list[Capability]:
    ok = frozenset().union(*(rules.ok(package, cuda) for cuda in rules.package_cuda(package)))
    return [c.capability for c in rules.kb.capabilities if c.capability in ok]


def _serve_gpu(
    rules: _Rules,
    package: str,
    gpu: FleetGpu,
    allowed: list[tuple[CudaVersion, frozenset[Capability]]],
    pool: Callable[[], list[Capability]],
) -> _Choice:
    """Rule 2 for one GPU. ``allowed`` pairs each allowed CUDA, preferred first, with what
    ``package`` builds under it."""
    dev = gpu.capability
    for cuda, ok in allowed:
        if dev in ok:
            return _Choice(gpu, dev, RunLevel.NATIVE, f"{dev} is built exactly", cuda)
    _, why = rules.first_cuda(package, (dev,))
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
    if rules.kb.package(package).ptx in ("none", "inherited"):
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
# An instance's (cudaForwardCompat, torch gpuTargets).
_Instance = tuple[bool, tuple[str, ...]]


class _Spec:
    """A variant while it is being planned: PTX and serves are still added to it. It becomes a
    frozen :class:`Variant` once, in :meth:`_Builder.finished`."""

    __slots__ = ("caps", "ctx", "fat", "independent", "name", "needs", "pkg", "ptx", "serves")

    def __init__(
        self,
        name: str,
        pkg: _Package,
        caps: tuple[Capability, ...],
        ctx: _Cuda,
        needs: tuple[str, ...],
        *,
        independent: bool,
        fat: bool,
        ptx: bool,
    ) -> None:
        self.name = name
        self.pkg = pkg
        self.caps = caps
        self.ctx = ctx
        self.needs = needs
        self.independent = independent
        self.fat = fat
        self.ptx = ptx
        self.serves: list[Serve] = []


@dataclass(frozen=True, slots=True)
class _Package:
    """What the builder needs of one package, looked up once."""

    name: str
    info: PackageInfo
    attr: str
    dependent_deps: tuple[str, ...]  # capability-dependent: one job per variant
    shared_deps: tuple[str, ...]  # capability-independent: one job per CUDA version


class _Cuda:
    """One CUDA version's naming: the ``-cuXY`` suffix and the names handed out so far."""

    __slots__ = ("cuda", "cuda_set", "names", "suffix")

    def __init__(self, cuda: CudaVersion, preferred: CudaVersion, system_suffix: str = "") -> None:
        self.cuda = cuda
        self.cuda_set = None if cuda == NIXPKGS_DEFAULT_CUDA else cuda.set_name
        # The system suffix goes last: torch-sm87-cu126-aarch64.
        self.suffix = ("" if cuda == preferred else f"-{cuda.slug}") + system_suffix
        self.names: dict[tuple[str, str], str] = {}

    def name(self, package: str, label: str) -> str:
        key = (package, label)
        found = self.names.get(key)
        if found is None:
            found = self.names[key] = (
                f"{package}-{label}{self.suffix}" if label else f"{package}{self.suffix}"
            )
        return found


@dataclass
class _Builder:
    rules: _Rules
    specs: dict[str, _Spec] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    _packages: dict[str, _Package] = field(default_factory=dict)
    _cudas: dict[CudaVersion, _Cuda] = field(default_factory=dict)
    system_suffix: str = ""  # "" for the plan's first system, else e.g. "-aarch64"
    _jetson_memo: dict[tuple[CudaVersion, tuple[Capability, ...]], Capability | None] = field(
        default_factory=dict
    )

    @property
    def kb(self) -> KnowledgeBase:
        return self.rules.kb

    def package(self, package: str) -> _Package:
        found = self._packages.get(package)
        if found is None:
            info = self.kb.package(package)
            user = self.rules.config.packages.get(package)
            deps = [(d, self.kb.package(d).capability_dependent) for d in info.depends]
            found = self._packages[package] = _Package(
                name=package,
                info=info,
                attr=user.attr if user is not None and user.attr else info.attr,
                dependent_deps=tuple(d for d, dependent in deps if dependent),
                shared_deps=tuple(d for d, dependent in deps if not dependent),
            )
        return found

    def _cuda(self, cuda: CudaVersion) -> _Cuda:
        found = self._cudas.get(cuda)
        if found is None:
            found = self._cudas[cuda] = _Cuda(cuda, self.rules.policy_cuda[0], self.system_suffix)
        return found

    def shared(self, package: str, cuda: CudaVersion) -> str:
        """The one job of a capability-independent package (per CUDA version)."""
        return self._shared(self._cuda(cuda), package)

    def _shared(self, ctx: _Cuda, package: str, jetson: Capability | None = None) -> str:
        """``jetson``: a pre-SBSA Jetson capability of the dependent build. Such builds take
        other redistributables (linux-aarch64, see core/systems.py), so they get their own
        ``<package>-jetson`` job, evaluated with the lowest such capability of its dependents
        (the capability picks the archive; the store path does not depend on which one)."""
        name = ctx.name(package, "jetson" if jetson is not None else "")
        existing = self.specs.get(name)
        if existing is None:
            pkg = self.package(package)
            needs = tuple(sorted({self._shared(ctx, dep, jetson) for dep in pkg.info.depends}))
            caps = (jetson,) if jetson is not None else ()
            self.specs[name] = _Spec(
                name, pkg, caps, ctx, needs, independent=True, fat=False, ptx=False
            )
        elif jetson is not None and jetson < existing.caps[0]:
            existing.caps = (jetson,)
        return name

    def _jetson_cap(self, ctx: _Cuda, caps: tuple[Capability, ...]) -> Capability | None:
        """The lowest pre-SBSA Jetson capability of ``caps`` when a build of them takes the
        Jetson redistributables (only ever on aarch64-linux), else None. Memoised: planning
        asks once per job."""
        if self.rules.system != AARCH64:
            return None
        key = (ctx.cuda, caps)
        if key in self._jetson_memo:
            return self._jetson_memo[key]
        kb = self.kb
        flagged = [(c, kb.capability(c).jetson) for c in caps]
        found = None
        if uses_jetson_redist(self.rules.system, ctx.cuda, flagged):
            found = min(c for c, jetson in flagged if jetson)
        self._jetson_memo[key] = found
        return found

    def dependent(
        self,
        package: str,
        label: str,
        caps: tuple[Capability, ...],
        cuda: CudaVersion,
        ptx: bool,
        fat: bool,
    ) -> str:
        """The job of ``package`` for ``caps``; its capability-dependent dependencies get the
        same capabilities and CUDA (rule 5), asked for PTX when this build is."""
        return self._dependent(self._cuda(cuda), package, label, caps, ptx, fat)

    def _dependent(
        self,
        ctx: _Cuda,
        package: str,
        label: str,
        caps: tuple[Capability, ...],
        ptx: bool,
        fat: bool,
    ) -> str:
        name = ctx.name(package, label)
        existing = self.specs.get(name)
        if existing is not None:
            existing.ptx = existing.ptx or ptx
            return name
        pkg = self.package(package)
        optional = pkg.info.optional
        needs = {
            self._dependent(ctx, dep, label, caps, ptx, fat)
            for dep in pkg.dependent_deps
            if dep not in optional or all(c in self.rules.ok(dep, ctx.cuda) for c in caps)
        }
        jetson = self._jetson_cap(ctx, caps) if pkg.shared_deps else None
        needs.update(self._shared(ctx, dep, jetson) for dep in pkg.shared_deps)
        self.specs[name] = _Spec(
            name, pkg, caps, ctx, tuple(sorted(needs)), independent=False, fat=fat, ptx=ptx
        )
        return name

    def ptx_of(self, name: str) -> tuple[Capability, ...]:
        """The capabilities that get PTX: nixpkgs adds it for the LAST element of
        cudaCapabilities as given (NIXPKGS.md §2); the list is sorted, so the highest."""
        spec = self.specs[name]
        if not spec.ptx or spec.independent or spec.pkg.info.ptx in ("none", "inherited"):
            return ()
        return (spec.caps[-1],)

    def add_serve(self, name: str, serve: Serve) -> None:
        self.specs[name].serves.append(serve)

    def finished(self) -> list[Variant]:
        """Every variant, frozen, with its costs, PTX and serves."""
        instances = self._instances()
        return [self._variant(spec, instances) for spec in self.specs.values()]

    def _instances(self) -> dict[tuple[CudaVersion, tuple[Capability, ...]], _Instance]:
        """The nixpkgs instance of each (CUDA, capability list): every variant built for the
        same list shares ONE config, so a dependency job is the very derivation its dependents
        link (``torch-sm86``'s nccl is the ``nccl-sm86`` job). PTX asked anywhere in it turns
        ``cudaForwardCompat`` on for the whole instance (torch ignores it: NIXPKGS.md §6);
        torch's ``gpuTargets`` go into the instance's Python package set, so torchvision
        builds against that very torch."""
        found: dict[tuple[CudaVersion, tuple[Capability, ...]], _Instance] = {}
        for spec in self.specs.values():
            if spec.independent:
                continue
            key = (spec.ctx.cuda, spec.caps)
            forward_compat, gpu_targets = found.get(key, (False, ()))
            if spec.ptx:
                forward_compat = True
                if spec.pkg.info.ptx == "gpu-targets":
                    last = spec.caps[-1]
                    gpu_targets = (*(c.text for c in spec.caps[:-1]), f"{last}+PTX")
            found[key] = (forward_compat, gpu_targets)
        return found

    def _variant(
        self, spec: _Spec, instances: dict[tuple[CudaVersion, tuple[Capability, ...]], _Instance]
    ) -> Variant:
        pkg = spec.pkg
        info = pkg.info
        ptx: tuple[Capability, ...] = ()
        forward_compat, gpu_targets = instances.get((spec.ctx.cuda, spec.caps), (True, ()))
        if not spec.independent:
            if (info.ptx == "forward-compat" and forward_compat) or (
                info.ptx == "gpu-targets" and spec.ptx
            ):
                ptx = (spec.caps[-1],)
            if spec.ptx and not ptx:
                why = (
                    f"{pkg.name} builds against the PTX torch of its package set; its own "
                    "kernels follow torch.cudaCapabilities, which never carry PTX"
                    if info.ptx == "inherited"
                    else f"{pkg.name} cannot embed PTX"
                )
                self.decisions.append(Decision(pkg.name, spec.name, "no-ptx", why))
        targets = len(spec.caps) + len(ptx)
        cost = info.cost
        return Variant(
            name=spec.name,
            package=pkg.name,
            attr=pkg.attr,
            capabilities=spec.caps,
            cuda=spec.ctx.cuda,
            cuda_set=spec.ctx.cuda_set,
            ptx=ptx,
            forward_compat=spec.independent or forward_compat,
            gpu_targets=() if spec.independent else gpu_targets,
            independent=spec.independent,
            fat=spec.fat,
            needs=spec.needs,
            minutes=round(cost.base_minutes + targets * cost.per_target_minutes, 2),
            size_mb=round(cost.base_size_mb + targets * cost.per_target_size_mb, 2),
            big_parallel=info.big_parallel,
            serves=tuple(spec.serves),
            system=self.rules.system,
            jetson=self._jetson_cap(spec.ctx, spec.caps) is not None,
        )


def _plan_package(builder: _Builder, package: str, fleet: tuple[FleetGpu, ...]) -> list[Decision]:
    rules = builder.rules
    config = rules.config
    pkg = builder.kb.package(package)
    unserved: list[Decision] = []
    want_ptx = config.policy.ptx == "newest"
    if not pkg.capability_dependent:
        return _plan_shared(builder, package, fleet)
    pool = _candidates(rules, package)
    allowed = [(cuda, rules.ok(package, cuda)) for cuda in rules.package_cuda(package)]
    choices = [_serve_gpu(rules, package, gpu, allowed, pool) for gpu in fleet]
    if config.policy.share == "compatible":
        choices = _share_compatible(rules, package, choices, pool)
    user = config.packages.get(package)
    extras = [Capability.parse(c) for c in (user.extra if user else ())]
    for cap in extras:
        builder.kb.capability(cap)
    # An extra capability is built on one system: a Jetson capability on aarch64-linux, any
    # other on the plan's first system.
    systems = config.policy.planned_systems
    extras = [
        c
        for c in extras
        if rules.system
        == (AARCH64 if builder.kb.capability(c).jetson and AARCH64 in systems else systems[0])
    ]
    preferred = rules.package_cuda(package)[0]
    for choice in choices:
        target = choice.cap
        if target is None:
            unserved.append(Decision(package, choice.gpu.label, "unserved", choice.reason))
            continue
        built = choice.cuda
        if built is None:
            built, why = rules.first_cuda(package, (target,))
            assert built is not None, why  # the pool holds only buildable capabilities
        ptx = want_ptx or choice.level is RunLevel.PTX_JIT
        name = builder.dependent(package, target.slug, (target,), built, ptx, fat=False)
        builder.decisions.append(
            Decision(package, choice.gpu.label, _ACTIONS[choice.level], f"{name}: {choice.reason}")
        )
        builder.add_serve(name, Serve(choice.gpu.label, choice.level, choice.reason))
        if built != preferred:
            builder.decisions.append(
                Decision(
                    package,
                    name,
                    "cuda",
                    f"CUDA {built} instead of the preferred {preferred}: "
                    f"{rules.why_not(package, target, preferred)}",
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
        name = builder.dependent(package, cap.slug, (cap,), found, want_ptx, fat=False)
        builder.decisions.append(
            Decision(package, str(cap), "extra", f"{name}: asked for in extra")
        )
    _plan_fat(builder, package, choices, want_ptx)
    return unserved


def _plan_shared(builder: _Builder, package: str, fleet: tuple[FleetGpu, ...]) -> list[Decision]:
    """A capability-independent package: one job per CUDA version the fleet needs and, on
    aarch64-linux, per redistributable kind. Each GPU gets the first allowed CUDA that supports
    its capability (CUDA 13 dropped Pascal and Volta, so they get a ``-cu129`` build while newer
    GPUs share the preferred one); a pre-SBSA Jetson GPU gets the Jetson build of the
    redistributables (core/systems.py), evaluated with its capability so the package's limits
    apply (cupy links nccl, which refuses pre-Thor Jetson)."""
    rules = builder.rules
    kb = builder.kb
    pkg = kb.package(package)
    allowed = [
        c for c in rules.package_cuda(package) if pkg.limits.cuda is None or c in pkg.limits.cuda
    ] or list(rules.package_cuda(package))
    unserved: list[Decision] = []
    groups: dict[tuple[CudaVersion, Capability | None], list[FleetGpu]] = {}
    for gpu in fleet:
        if gpu.jetson and rules.system != AARCH64:
            reason = f"{gpu.capability} is a Jetson capability: it evaluates only on aarch64-linux"
            unserved.append(Decision(package, gpu.label, "unserved", reason))
            continue
        info = kb.capability(gpu.capability)
        cuda = next((c for c in allowed if info.supported_by(c)), None)
        if cuda is None:
            versions = ", ".join(map(str, allowed))
            reason = (
                f"no CUDA version {package} may use ({versions}) supports {gpu.capability} "
                f"(CUDA {info.min_cuda}..{info.max_cuda or 'newest'})"
            )
            unserved.append(Decision(package, gpu.label, "unserved", reason))
            continue
        jetson = None
        if gpu.jetson:
            jetson = builder._jetson_cap(builder._cuda(cuda), (gpu.capability,))
            why = rules.why_not(package, gpu.capability, cuda) if jetson else None
            if why:
                unserved.append(Decision(package, gpu.label, "unserved", why))
                continue
        groups.setdefault((cuda, jetson), []).append(gpu)
    if not groups:
        groups[(allowed[0], None)] = []
    order = sorted(groups, key=lambda k: (allowed.index(k[0]), k[1] is not None, str(k[1])))
    for cuda, jetson in order:
        name = builder._shared(builder._cuda(cuda), package, jetson)
        served = ", ".join(g.label for g in groups[(cuda, jetson)]) or "no fleet GPU"
        kind = " (the Jetson redistributables)" if jetson else ""
        builder.decisions.append(
            Decision(
                package,
                name,
                "shared",
                f"{package} is {pkg.kind}: one build with CUDA {cuda}{kind} serves {served}",
            )
        )
        for gpu in groups[(cuda, jetson)]:
            builder.add_serve(name, Serve(gpu.label, RunLevel.NATIVE, f"{package} is {pkg.kind}"))
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
            # Per system: a group's build on one system holds the members that live there.
            members_caps = set()
            for member in members:
                cap, model = resolve_device(member, builder.kb.gpus)
                # An unknown capability is exit 4, not a drop.
                jetson = builder.kb.capability(cap).jetson
                where = _gpu_system(member, jetson, model.systems if model else None, rules.config)
                if where == rules.system:
                    members_caps.add(cap)
            if members_caps:
                groups[f"fat-{group}"] = tuple(sorted(members_caps))
    for label, caps in _split_jetson(builder, package, groups).items():
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
                    builder.ptx_of(name),
                    jetson=choice.gpu.jetson,
                )
                if verdict.level is not RunLevel.CANNOT_RUN:
                    builder.add_serve(name, Serve(choice.gpu.label, verdict.level, verdict.reason))


def _split_jetson(
    builder: _Builder, package: str, groups: dict[str, tuple[Capability, ...]]
) -> dict[str, tuple[Capability, ...]]:
    """nixpkgs refuses to mix a pre-SBSA Jetson capability with others (core/systems.py): a fat
    group that would mix them under its CUDA is split into ``<group>`` and ``<group>-jetson``."""
    rules = builder.rules
    kb = builder.kb
    result: dict[str, tuple[Capability, ...]] = {}
    for label, caps in groups.items():
        buildable = [c for c in caps if rules.buildable(package, c)]
        jetson = tuple(c for c in buildable if kb.capability(c).jetson)
        others = tuple(c for c in caps if c not in jetson)
        if jetson and others:
            cuda, _ = rules.first_cuda(package, buildable)
            flagged = [(c, True) for c in jetson]
            if cuda is None or uses_jetson_redist(rules.system, cuda, flagged):
                result[label] = others
                result[f"{label}-jetson"] = jetson
                builder.decisions.append(
                    Decision(
                        package,
                        label,
                        "split",
                        f"pre-SBSA Jetson {', '.join(map(str, jetson))} cannot share a build "
                        f"with {', '.join(map(str, others))}: built as {label}-jetson",
                    )
                )
                continue
        result[label] = caps
    return result


# -- the plan -------------------------------------------------------------------------------------
@gc_paused
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
        if user.cuda is not None:
            nixpkgs_cuda_version(kb, user.cuda, f"packages.{name}.cuda")
    if not fleet and not any(config.packages[p].extra for p in requested):
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
    closure = dependency_closure(kb, requested)  # unknown dependencies and cycles fail here
    systems = config.policy.planned_systems
    unserved: list[Decision] = []
    for gpu in fleet:
        if gpu.system not in systems:
            reason = (
                f"{gpu.label} lives on {gpu.system}, which is not in policy.systems "
                f"({', '.join(systems)})"
            )
            unserved.extend(Decision(p, gpu.label, "unserved", reason) for p in requested)
    # Rules 1-7 run once per system, each with the fleet GPUs that live there; names of the
    # first system carry no suffix, the others end in "-<cpu>" (torch-sm87-aarch64).
    builders: list[_Builder] = []
    for system in systems:
        here = tuple(g for g in fleet if g.system == system)
        has_extra = any(config.packages[p].extra for p in requested) and system in _extra_systems(
            kb, config
        )
        if not here and not has_extra:
            continue
        builder = _Builder(
            _Rules(kb, config, system, policy_cuda),
            system_suffix=system_suffix(system, systems[0]),
        )
        builders.append(builder)
        for package in requested:
            unserved.extend(_plan_package(builder, package, here))
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
    variants = tuple(
        sorted((v for builder in builders for v in builder.finished()), key=_variant_order)
    )
    active = tuple(b.rules.system for b in builders)
    baselines = _baselines(kb, closure, fleet, variants, config, active)
    decisions = tuple(
        sorted(
            (d for builder in builders for d in builder.decisions),
            key=lambda d: (d.package, d.subject, d.action),
        )
    )
    return Plan(
        system=systems[0],
        systems=systems,
        cuda_policy=policy_cuda,
        fleet=fleet,
        packages=requested,
        variants=variants,
        decisions=decisions,
        unserved=tuple(sorted(unserved, key=lambda d: (d.package, d.subject))),
        baselines=baselines,
        share=config.policy.share,
    )


def _extra_systems(kb: KnowledgeBase, config: Config) -> set[str]:
    """The systems that ``packages.*.extra`` capabilities are built on (see _plan_package)."""
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
    return (v.package, v.fat, tuple(c.sort_key for c in v.capabilities), v.cuda, v.name)


def _baselines(
    kb: KnowledgeBase,
    closure: tuple[str, ...],
    fleet: tuple[FleetGpu, ...],
    variants: tuple[Variant, ...],
    config: Config,
    active: tuple[str, ...] = (X86_64,),
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
        nixpkgs_default_jobs=len(closure) * len(active),
        naive_minutes=round(naive_minutes, 2),
        naive_size_mb=round(naive_size, 2),
        naive_jobs=naive_jobs,
        exact_jobs=exact_jobs,
    )
