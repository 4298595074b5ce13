"""Jobs: variants while they are planned (names, CUDA suffixes, shared and dependent jobs, fat
builds, Jetson splits), frozen into :class:`~capplan.core.planning.plan.Variant` at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import how_runs
from capplan.core.families.cuda.fleet import FleetGpu
from capplan.core.families.cuda.gpus import resolve_device
from capplan.core.families.cuda.inputs import (
    NIXPKGS_DEFAULT_CUDA,
)
from capplan.core.families.cuda.kb import cuda_package, nvidia
from capplan.core.families.cuda.redist import uses_jetson_redist
from capplan.core.families.cuda.rules import Rules
from capplan.core.families.cuda.serve import (
    ACTIONS,
    Choice,
    candidates,
    serve_gpu,
    share_compatible,
)
from capplan.core.families.cuda.spec import CudaSpec
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.kb import KnowledgeBase, PackageInfo
from capplan.core.model.systems import AARCH64
from capplan.core.planning.config import gpu_system
from capplan.core.planning.plan import Decision, Serve, Variant
from capplan.errors import InfeasibleError

__all__ = ["Builder", "plan_package"]

# -- variants -------------------------------------------------------------------------------------
# An instance's (cudaForwardCompat, torch gpuTargets).
_Instance = tuple[bool, tuple[str, ...]]


class _Spec:
    """A variant while it is being planned: PTX and serves are still added to it. It becomes a
    frozen :class:`Variant` once, in :meth:`Builder.finished`."""

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
class Builder:
    rules: Rules
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
        other redistributables (linux-aarch64, see core/model/systems.py), so they get their own
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
        flagged = [(c, nvidia(kb).capability(c).jetson) for c in caps]
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
            independent=spec.independent,
            fat=spec.fat,
            needs=spec.needs,
            minutes=round(cost.base_minutes + targets * cost.per_target_minutes, 2),
            size_mb=round(cost.base_size_mb + targets * cost.per_target_size_mb, 2),
            big_parallel=info.big_parallel,
            serves=tuple(spec.serves),
            system=self.rules.system,
            spec=CudaSpec(
                capabilities=spec.caps,
                ptx=ptx,
                forward_compat=spec.independent or forward_compat,
                gpu_targets=() if spec.independent else gpu_targets,
                version=spec.ctx.cuda,
                cuda_set=spec.ctx.cuda_set,
                jetson=self._jetson_cap(spec.ctx, spec.caps) is not None,
            ),
        )


def plan_package(builder: Builder, package: str, fleet: tuple[FleetGpu, ...]) -> list[Decision]:
    rules = builder.rules
    config = rules.config
    pkg = builder.kb.package(package)
    unserved: list[Decision] = []
    want_ptx = config.policy.ptx == "newest"
    if not pkg.capability_dependent:
        return _plan_shared(builder, package, fleet)
    pool = candidates(rules, package)
    allowed = [(cuda, rules.ok(package, cuda)) for cuda in rules.package_cuda(package)]
    choices = [serve_gpu(rules, package, gpu, allowed, pool) for gpu in fleet]
    if config.policy.share == "compatible":
        choices = share_compatible(rules, package, choices, pool)
    user = config.packages.get(package)
    extras = [Capability.parse(c) for c in (user.extra if user else ())]
    for cap in extras:
        nvidia(builder.kb).capability(cap)
    # An extra capability is built on one system: a Jetson capability on aarch64-linux, any
    # other on the plan's first system.
    systems = config.policy.planned_systems
    extras = [
        c
        for c in extras
        if rules.system
        == (
            AARCH64
            if nvidia(builder.kb).capability(c).jetson and AARCH64 in systems
            else systems[0]
        )
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
            Decision(package, choice.gpu.label, ACTIONS[choice.level], f"{name}: {choice.reason}")
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


def _plan_shared(builder: Builder, package: str, fleet: tuple[FleetGpu, ...]) -> list[Decision]:
    """A capability-independent package: one job per CUDA version the fleet needs and, on
    aarch64-linux, per redistributable kind. Each GPU gets the first allowed CUDA that supports
    its capability (CUDA 13 dropped Pascal and Volta, so they get a ``-cu129`` build while newer
    GPUs share the preferred one); a pre-SBSA Jetson GPU gets the Jetson build of the
    redistributables (core/model/systems.py), evaluated with its capability so the package's limits
    apply (cupy links nccl, which refuses pre-Thor Jetson)."""
    rules = builder.rules
    kb = builder.kb
    pkg = cuda_package(kb, package)
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
        info = nvidia(kb).capability(gpu.capability)
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


def _plan_fat(builder: Builder, package: str, choices: list[Choice], want_ptx: bool) -> None:
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
                cap, model = resolve_device(member, nvidia(builder.kb).gpus)
                # An unknown capability is exit 4, not a drop.
                jetson = nvidia(builder.kb).capability(cap).jetson
                where = gpu_system(member, jetson, model.systems if model else None, rules.config)
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
    builder: Builder, package: str, groups: dict[str, tuple[Capability, ...]]
) -> dict[str, tuple[Capability, ...]]:
    """nixpkgs refuses to mix a pre-SBSA Jetson capability with others (core/model/systems.py): a
    fat group that would mix them under its CUDA is split into ``<group>`` and
    ``<group>-jetson``."""
    rules = builder.rules
    kb = builder.kb
    result: dict[str, tuple[Capability, ...]] = {}
    for label, caps in groups.items():
        buildable = [c for c in caps if rules.buildable(package, c)]
        jetson = tuple(c for c in buildable if nvidia(kb).capability(c).jetson)
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
