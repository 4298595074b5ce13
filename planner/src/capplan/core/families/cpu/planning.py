"""The CPU family's planning (:class:`~capplan.core.families.base.FamilyPlanning`): the fleet's
CPU levels (``x86-64-v3``) and microarchitectures (``sapphirerapids``), and which packages pay
for a build per level.

Rules (issue 23, items 3 and 8; docs/cpu-planning.md):

1. ``[fleet] cpus`` lists the CPUs of the fleet's machines, names or levels, weighted by
   ``fleet.count`` as GPUs are. An x86-64 target lives on x86_64-linux, an Arm one on
   aarch64-linux; a target on a system the plan leaves out is unserved, with the reason.
2. A package that picks its CPU code at run time (``runtime-dispatch`` in the CPU knowledge
   base: numpy, OpenBLAS with DYNAMIC_ARCH, torch's ATen kernels) gets one generic build, with
   that reason: a build per level would only repeat it.
3. A package that compiles for one level (``compile-time``: GROMACS' SIMD level) gets a build
   per fleet target where the fleet has more than one target on a system, each fleet machine
   served by its own target's build. Where the fleet has one target there, one build for that
   target (the fleet's baseline ISA: the generic build). ``packages.<name>.cpu = "generic"``
   opts out: one generic build.
4. CPU levels are planned for CPU-side packages only (packages no GPU family plans variants
   for). A GPU package's variants keep nixpkgs' generic CPU code, with the reason: a product
   of both axes (``gromacs-sm86-x86-64-v3``) would multiply every GPU build by the fleet's CPU
   levels.
5. A shared library with per-level builds of x86-64 psABI levels also gets ``<package>-hwcaps``:
   glibc (2.33+) loads ``lib/glibc-hwcaps/x86-64-v{2,3,4}/`` before ``lib/``, so one closure
   runs the best build on every machine. Executables and static code cannot use it (the
   decision says so).
6. Costs: each CPU build costs its package's minutes and size; the plan shows the CPU-side
   builds against one generic build per package and against every package built for every
   fleet target (:class:`~capplan.core.planning.plan.CpuCosts`).

The CPU target model and the CPU knowledge base reach this module through :class:`CpuModel`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from capplan.core.families.base import (
    CostPart,
    FamilyResult,
    Machine,
    Pick,
    RunLevel,
    RunsOn,
)
from capplan.core.families.cpu.fleet import CpuFleetEntry, CpuPart
from capplan.core.families.cpu.keys import cpu_spec
from capplan.core.families.cpu.spec import CpuSpec
from capplan.core.model.kb import KnowledgeBase
from capplan.core.model.systems import AARCH64, X86_64, system_suffix
from capplan.core.planning.config import Config
from capplan.core.planning.plan import (
    CpuCosts,
    Decision,
    Plan,
    Serve,
    Variant,
)
from capplan.errors import CapplanError, ConfigError, shorten

__all__ = [
    "CpuFamily",
    "CpuModel",
    "CpuPackagePolicy",
    "CpuPick",
    "CpuPlanning",
    "is_cpu_side",
    "pick_cpu_variants",
]

# Where a CPU architecture's builds run (archspec's family names).
_SYSTEM_OF_ARCH = {"x86_64": X86_64, "aarch64": AARCH64}
# The cost of laying out per-level builds in one output (a copy of store paths).
_HWCAPS_MINUTES = 1.0


@dataclass(frozen=True, slots=True)
class CpuPackagePolicy:
    """What the CPU knowledge base says about one package."""

    package: str
    attr: str
    dispatch: Literal["runtime-dispatch", "compile-time"]
    mechanism: Literal["override", "cflags"]  # how a per-level build gets its target
    reason: str  # how the package uses CPU features
    source: str  # the file that shows it (package source or nixpkgs recipe)
    hwcaps: bool  # its CPU code is in shared libraries (glibc-hwcaps can apply)
    minutes: float  # one build
    size_mb: float  # one build's output


class CpuModel(Protocol):
    """What the planner asks of the CPU target model and the CPU knowledge base. Targets are
    their canonical names (``x86-64-v3``, ``sapphirerapids``)."""

    def parse(self, text: str) -> str:
        """The canonical target of a user's spelling; a CapplanError naming the accepted
        names (and the closest ones) otherwise."""
        ...

    def arch(self, target: str) -> str:
        """``x86_64`` or ``aarch64``."""
        ...

    def is_generic(self, target: str) -> bool:
        """Whether the target is its architecture's baseline (``x86-64``): nixpkgs' default."""
        ...

    def rank(self, target: str) -> tuple[object, ...]:
        """A total order that extends the partial order (a target after those it runs)."""
        ...

    def why_not(self, device: str, built: str) -> str | None:
        """None when a ``device`` machine runs code built for ``built``; else why not (the
        missing features named)."""
        ...

    def label(self, target: str) -> str:
        """The target's part of a variant name: ``x86-64-v3``, ``sapphirerapids``."""
        ...

    def cflags(self, target: str) -> tuple[str, ...]:
        """The compiler flags of a build for the target (``-march=x86-64-v3``)."""
        ...

    def gcc_arch(self, target: str) -> str:
        """GCC's name of the target (``-march``/``-mcpu``): nixpkgs' ``gcc.arch``, which names
        the ``gccarch-<arch>`` system feature."""
        ...

    def features(self, target: str) -> tuple[str, ...]:
        """The instruction-set features (/proc/cpuinfo names) the target's code may use."""
        ...

    def psabi_level(self, target: str) -> str | None:
        """The glibc-hwcaps directory name when the target is an x86-64 psABI level
        (``x86-64-v3``); None for a microarchitecture or the baseline."""
        ...

    def generic(self, target: str) -> str:
        """The most specific generic target ``target``'s code also is (archspec's
        ``generic``: ``x86-64-v4`` for zen4, ``armv9.0a`` for neoverse_v2)."""
        ...

    def gcc_names(self) -> dict[str, str]:
        """Each target capplan plans for (its label, ``zen4``), to GCC's name (``znver4``)."""
        ...

    def gcc_arches(self) -> dict[str, frozenset[str]]:
        """Every GCC name of a target capplan plans for, to the Nix systems whose CPUs run it
        (the ``gccarch-<arch>`` keys ``policy.runners_os`` may name)."""
        ...

    def x86_levels(self, device: str) -> dict[str, str | None]:
        """For each x86-64 level, lowest first: None when ``device`` runs code built for it,
        else why not (``capplan doctor`` judges a library's recorded level with it)."""
        ...

    def package(self, name: str) -> CpuPackagePolicy | None: ...

    def override(self, package: str, target: str) -> tuple[tuple[str, object], ...]:
        """The package arguments a build for ``target`` sets (``mechanism = "override"``)."""
        ...


class CpuFamily:
    """CPU targets as a :class:`~capplan.core.families.base.TargetFamily`; its targets are
    named in ``fleet.cpus`` only, so it claims no ``extra``/``exclude`` spelling."""

    name = "cpu"
    vendor: str | None = None

    def __init__(self, model: CpuModel | None) -> None:
        self.model = model

    def _model(self) -> CpuModel:
        if self.model is None:
            raise ConfigError(
                "CPU targets need the CPU knowledge base, which this capplan has not loaded",
                hint="remove fleet.cpus, or install capplan with its CPU knowledge base",
            )
        return self.model

    def parse(self, text: str) -> str:
        return self._model().parse(text)

    def sort_key(self, target: str) -> tuple[object, ...]:
        return self._model().rank(target)

    def label(self, target: str) -> str:
        return self._model().label(target)

    def runs_on(self, device: str, built: Sequence[str]) -> RunsOn:
        model = self._model()
        whys: list[str] = []
        best: tuple[tuple[object, ...], str] | None = None
        for target in built:
            why = model.why_not(device, target)
            if why is not None:
                whys.append(why)
            elif best is None or model.rank(target) > best[0]:
                best = (model.rank(target), target)
        if best is None:
            return RunsOn(RunLevel.CANNOT_RUN, "; ".join(whys) or "the build holds no CPU code")
        if best[1] == device:
            return RunsOn(RunLevel.NATIVE, f"built for {device}")
        return RunsOn(RunLevel.COMPATIBLE, f"{device} runs {best[1]} code")

    def pick(self, plan: Plan, machine: Machine) -> tuple[Pick, ...]:
        """:func:`pick_cpu_variants` on a machine whose CPU is ``machine.device``: the packages
        with per-level builds on its system, each at ``native`` (built for this CPU),
        ``compatible`` (a lower level) or ``cannot-run``."""
        picks: list[Pick] = []
        cpu = machine.device
        for p in pick_cpu_variants(plan.variants, machine.system, cpu, self._model()):
            if p.variant is None:
                level = RunLevel.CANNOT_RUN
            elif _target(p.variant) == cpu:
                level = RunLevel.NATIVE
            else:
                level = RunLevel.COMPATIBLE
            picks.append(Pick(p.package, p.variant, level, p.reason))
        return tuple(picks)


class CpuPlanning:
    """The CPU family's planning (rules in the module docstring): its fleet comes from
    ``fleet.cpus`` (:meth:`prepare`), never from ``fleet.gpus``, and its levels are named
    nowhere else, so it has none of the GPU families' claim and check phases."""

    def __init__(self, kb: KnowledgeBase, config: Config, model: CpuModel | None) -> None:
        self.kb = kb
        self.config = config
        self.model = model
        self.family = CpuFamily(model)
        self.fleet: tuple[CpuFleetEntry, ...] = ()
        self.cpu_costs: CpuCosts | None = None

    # -- inputs -----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Rule 1: ``fleet.cpus`` resolved, each bad entry a config error (exit 5) with the
        accepted names."""
        entries: list[CpuFleetEntry] = []
        for label in self.config.fleet.cpus:
            model = self.family._model()
            try:
                target = model.parse(label)
            except CapplanError as error:
                raise ConfigError(
                    f"fleet.cpus = '{shorten(label.strip())}': {error.message}",
                    hint=error.hint,
                ) from None
            arch = model.arch(target)
            system = _SYSTEM_OF_ARCH.get(arch)
            if system is None:
                raise ConfigError(
                    f"fleet.cpus = '{shorten(label.strip())}': {target} is a {arch} CPU; "
                    "capplan plans x86_64-linux and aarch64-linux",
                    hint="list x86-64 or Arm (aarch64) CPUs",
                )
            entries.append(
                CpuFleetEntry(
                    label=label,
                    target=target,
                    arch=arch,
                    count=self.config.fleet.count.get(label, 1),
                    system=system,
                )
            )
        self.fleet = tuple(entries)

    def fleet_labels(self) -> tuple[str, ...]:
        return tuple(e.label for e in self.fleet)

    def knows(self, package: str) -> bool:
        return self.model is not None and self.model.package(package) is not None

    def _cpu_side(self, requested: Sequence[str], earlier: FamilyResult) -> tuple[str, ...]:
        """The requested packages the CPU knowledge base has and no GPU family built (rule 4)."""
        gpu_built = {v.package for v in earlier.variants}
        return tuple(p for p in requested if p not in gpu_built and self.knows(p))

    # -- planning ---------------------------------------------------------------------------
    def plan(self, requested: Sequence[str], earlier: FamilyResult) -> FamilyResult:
        result = FamilyResult()
        if self.model is None:
            return result
        cpu_side = self._cpu_side(requested, earlier)
        systems = self.config.policy.planned_systems
        for entry in self.fleet:
            if entry.system not in systems:
                reason = (
                    f"{entry.label} is a {entry.arch} CPU ({entry.system}), which is not in "
                    f"policy.systems ({', '.join(systems)})"
                )
                result.unserved.extend(
                    Decision(p, entry.label, "unserved", reason) for p in cpu_side
                )
        if self.fleet:
            for package in requested:
                if package not in cpu_side:
                    self._gpu_package(package, result)
        active: list[str] = []
        plan_jobs = generic_jobs = every_jobs = 0
        plan_min = plan_size = generic_min = generic_size = every_min = every_size = 0.0
        for system in systems:
            here = [e for e in self.fleet if e.system == system]
            if not here and (self.fleet or system != systems[0]):
                continue  # no fleet CPUs: the CPU-side packages build once, on the first system
            active.append(system)
            targets = sorted({e.target for e in here}, key=self.model.rank)
            for package in cpu_side:
                policy = self.model.package(package)
                assert policy is not None
                built = self._plan_package(package, policy, system, here, targets, result)
                plan_jobs += len(built)
                plan_min += sum(v.minutes for v in built)
                plan_size += sum(v.size_mb for v in built)
                generic_jobs += 1
                generic_min += policy.minutes
                generic_size += policy.size_mb
                copies = max(len(targets), 1)
                every_jobs += copies
                every_min += copies * policy.minutes
                every_size += copies * policy.size_mb
        result.active_systems = tuple(active)
        if cpu_side:
            self.cpu_costs = CpuCosts(
                plan_jobs=plan_jobs,
                plan_minutes=round(plan_min, 2),
                plan_size_mb=round(plan_size, 2),
                generic_jobs=generic_jobs,
                generic_minutes=round(generic_min, 2),
                generic_size_mb=round(generic_size, 2),
                every_level_jobs=every_jobs,
                every_level_minutes=round(every_min, 2),
                every_level_size_mb=round(every_size, 2),
            )
        return result

    def _gpu_package(self, package: str, result: FamilyResult) -> None:
        """Rule 4: a GPU package's variants keep generic CPU code; say why."""
        assert self.model is not None
        policy = self.model.package(package)
        if policy is None:
            reason = (
                f"{package} has no entry in the CPU knowledge base: its variants keep "
                "nixpkgs' generic CPU code"
            )
        elif policy.dispatch == "runtime-dispatch":
            reason = (
                f"{package} picks its CPU code at run time ({policy.reason}; {policy.source}): "
                "its variants keep generic CPU code, which runs the best code on every machine"
            )
        else:
            reason = (
                f"{package} compiles for one CPU level ({policy.reason}; {policy.source}), but "
                "its builds are GPU variants: capplan plans CPU levels for CPU-side packages "
                "only (a build per CPU level of every GPU variant would multiply the GPU "
                "builds), so they keep nixpkgs' generic CPU code"
            )
        result.decisions.append(Decision(package, "cpu", "generic", reason))

    def _plan_package(
        self,
        package: str,
        policy: CpuPackagePolicy,
        system: str,
        here: list[CpuFleetEntry],
        targets: list[str],
        result: FamilyResult,
    ) -> list[Variant]:
        """Rules 2, 3 and 5 for one CPU-side package on one system."""
        model = self.model
        assert model is not None
        suffix = system_suffix(system, self.config.policy.planned_systems[0])
        user = self.config.packages[package]
        attr = user.attr or policy.attr
        why: str
        if user.cpu == "generic":
            why = f'packages.{package}.cpu = "generic": one generic build'
            per_target: list[str] = []
        elif policy.dispatch == "runtime-dispatch":
            why = (
                f"{package} picks its CPU code at run time ({policy.reason}; {policy.source}): "
                "one generic build serves every CPU"
            )
            per_target = []
        elif not targets:
            why = "fleet.cpus lists no CPUs: one generic build"
            per_target = []
        elif len(targets) == 1:
            only = targets[0]
            if model.is_generic(only):
                why = f"every fleet CPU on {system} is the {only} baseline: one generic build"
                per_target = []
            else:
                why = (
                    f"{package} compiles for one CPU level ({policy.reason}; {policy.source}) "
                    f"and every fleet CPU on {system} is {only}: one build for it"
                )
                per_target = [only]
        else:
            why = (
                f"{package} compiles for one CPU level ({policy.reason}; {policy.source}) and "
                f"the fleet has {len(targets)} CPU targets on {system} "
                f"({', '.join(targets)}): a build for each"
            )
            per_target = [t for t in targets if not model.is_generic(t)]
        built: list[Variant] = []
        generic_serves = [e for e in here if not per_target or model.is_generic(e.target)]
        if not per_target or generic_serves:
            level = (
                RunLevel.NATIVE if policy.dispatch == "runtime-dispatch" else (RunLevel.COMPATIBLE)
            )
            name = f"{package}{suffix}"
            serves = tuple(
                Serve(
                    e.label,
                    RunLevel.NATIVE if model.is_generic(e.target) else level,
                    "generic CPU code"
                    + (", dispatching at run time" if level is RunLevel.NATIVE else ""),
                )
                for e in generic_serves
            )
            built.append(self._variant(name, package, attr, system, None, policy, serves))
            result.decisions.append(Decision(package, name, "generic", why))
        for target in per_target:
            name = f"{package}-{model.label(target)}{suffix}"
            serves = tuple(
                Serve(e.label, RunLevel.NATIVE, f"built for {target}")
                for e in here
                if e.target == target
            )
            spec = CpuSpec(
                target=target,
                arch=model.arch(target),
                mechanism=policy.mechanism,
                override=model.override(package, target) if policy.mechanism == "override" else (),
                cflags=model.cflags(target) if policy.mechanism == "cflags" else (),
                gccarch=model.gcc_arch(target),
                features=model.features(target),
            )
            built.append(self._variant(name, package, attr, system, spec, policy, serves))
            result.decisions.append(Decision(package, name, "cpu-level", why))
        if len(targets) > 1 and per_target:
            built.extend(self._hwcaps(package, policy, attr, system, suffix, built, here, result))
        result.variants.extend(built)
        return built

    def _hwcaps(
        self,
        package: str,
        policy: CpuPackagePolicy,
        attr: str,
        system: str,
        suffix: str,
        built: list[Variant],
        here: list[CpuFleetEntry],
        result: FamilyResult,
    ) -> list[Variant]:
        """Rule 5: ``<package>-hwcaps`` over the per-level builds of psABI levels."""
        model = self.model
        assert model is not None
        name = f"{package}-hwcaps{suffix}"
        levels = tuple(
            (level, v.name)
            for v in built
            if (target := _target(v)) is not None
            and (level := model.psabi_level(target)) is not None
        )
        if not policy.hwcaps:
            result.decisions.append(
                Decision(
                    package,
                    name,
                    "no-hwcaps",
                    f"{package}'s CPU code is in its executables, not shared libraries: "
                    "glibc-hwcaps cannot choose a build for it (use the per-level variants)",
                )
            )
            return []
        if not levels:
            result.decisions.append(
                Decision(
                    package,
                    name,
                    "no-hwcaps",
                    "glibc-hwcaps has directories for the x86-64 psABI levels only "
                    "(x86-64-v2, -v3, -v4); the fleet's targets are microarchitectures",
                )
            )
            return []
        members = [v for v in built if any(v.name == n for _, n in levels)]
        spec = CpuSpec(target=None, arch="x86_64", mechanism="hwcaps", hwcaps=levels)
        serves = tuple(self._hwcaps_serve(e, levels) for e in here)
        variant = Variant(
            name=name,
            package=package,
            attr=attr,
            independent=True,
            fat=False,
            needs=tuple(sorted(v.name for v in members)),
            minutes=_HWCAPS_MINUTES,
            size_mb=round(policy.size_mb + sum(v.size_mb for v in members), 2),
            big_parallel=False,
            serves=serves,
            system=system,
            vendor=None,
            spec=spec,
        )
        result.decisions.append(
            Decision(
                package,
                name,
                "hwcaps",
                f"one closure with {', '.join(n for n, _ in levels)} in lib/glibc-hwcaps and "
                "the generic build in lib/: glibc 2.33+ loads the best one on each machine",
            )
        )
        return [variant]

    def _hwcaps_serve(self, entry: CpuFleetEntry, levels: tuple[tuple[str, str], ...]) -> Serve:
        """What glibc loads on ``entry``'s machine: the highest level directory it runs, else
        the generic build in lib/."""
        model = self.model
        assert model is not None
        runs = [level for level, _ in levels if model.why_not(entry.target, level) is None]
        if not runs:
            return Serve(entry.label, RunLevel.COMPATIBLE, "glibc loads the generic build in lib/")
        best = max(runs, key=model.rank)
        level = RunLevel.NATIVE if best == entry.target else RunLevel.COMPATIBLE
        return Serve(entry.label, level, f"glibc loads lib/glibc-hwcaps/{best}")

    def _variant(
        self,
        name: str,
        package: str,
        attr: str,
        system: str,
        spec: CpuSpec | None,
        policy: CpuPackagePolicy,
        serves: tuple[Serve, ...],
    ) -> Variant:
        return Variant(
            name=name,
            package=package,
            attr=attr,
            independent=True,
            fat=False,
            needs=(),
            minutes=round(policy.minutes, 2),
            size_mb=round(policy.size_mb, 2),
            big_parallel=False,
            serves=serves,
            system=system,
            vendor=None,
            spec=spec,
        )

    # -- costs ------------------------------------------------------------------------------
    def costs(self, requested: Sequence[str], result: FamilyResult) -> CostPart:
        """The CPU-side packages in the reference strategies: nixpkgs' default is one generic
        build each; naive a build for every fleet target."""
        found = self.cpu_costs
        if found is None:
            return CostPart()
        return CostPart(
            default_minutes=found.generic_minutes,
            default_size_mb=found.generic_size_mb,
            default_jobs=found.generic_jobs,
            naive_minutes=found.every_level_minutes,
            naive_size_mb=found.every_level_size_mb,
            naive_jobs=found.every_level_jobs,
        )

    def plan_part(self) -> CpuPart:
        return CpuPart(fleet=self.fleet)


def is_cpu_side(v: Variant) -> bool:
    """Whether ``v`` is a CPU-side package's build (no GPU vendor: generic, per level or
    hwcaps) rather than a GPU family's variant."""
    return v.vendor is None


@dataclass(frozen=True, slots=True)
class CpuPick:
    """For one package with per-level builds on this system: the build to use on a CPU (None
    when none of them runs there) and why."""

    package: str
    variant: Variant | None
    reason: str


def _target(v: Variant) -> str | None:
    """The CPU target ``v`` is built for; None: generic code, a hwcaps output, or a GPU
    family's variant."""
    spec = cpu_spec(v)
    return spec.target if spec is not None else None


def _rank(model: CpuModel, target: str | None) -> tuple[object, ...]:
    return model.rank(target) if target else ()


def pick_cpu_variants(
    variants: Sequence[Variant], system: str, cpu: str, model: CpuModel
) -> tuple[CpuPick, ...]:
    """The best per-level build of each CPU-side package for a machine whose CPU is ``cpu``
    (an archspec name or a level): among the package's variants for one CPU target on
    ``system``, those the CPU runs, highest target first (a ``-hwcaps`` output is named in the
    reason: it picks by itself at load time)."""
    levels: dict[str, list[Variant]] = {}
    hwcaps: dict[str, Variant] = {}
    for v in variants:
        spec = cpu_spec(v)
        if v.system != system or spec is None:
            continue
        if spec.mechanism == "hwcaps":
            hwcaps[v.package] = v
        elif spec.target is not None:
            levels.setdefault(v.package, []).append(v)
    picks: list[CpuPick] = []
    for package in sorted(levels):
        runnable = [
            v
            for v in levels[package]
            if (target := _target(v)) is not None and model.why_not(cpu, target) is None
        ]
        also = f"; {hwcaps[package].name} picks by itself at load time" if package in hwcaps else ""
        if not runnable:
            whys = sorted(
                f"{v.name}: {model.why_not(cpu, target)}"
                for v in levels[package]
                if (target := _target(v)) is not None
            )
            reason = f"no per-level build runs here ({'; '.join(whys)})"
            picks.append(
                CpuPick(package, None, f"{reason}: use a generic build, or add it to fleet.cpus")
            )
            continue
        best = max(runnable, key=lambda v: _rank(model, _target(v)))
        target = _target(best)
        how = "built for it" if target == cpu else f"{cpu} runs {target} code"
        picks.append(CpuPick(package, best, f"{how}{also}"))
    return tuple(picks)
