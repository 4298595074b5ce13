"""Which planned variant fits a given GPU and driver (``capplan detect``). Pure.

Three facts decide, each from the knowledge base, never from another GPU's answer:

- the device code: how the variant's SASS/PTX runs on the device
  (:mod:`capplan.core.families.cuda.compat`, the Jetson rule included); a capability-independent
  build runs on every GPU its CUDA version supports, on the plan's platform;
- the platform: a Jetson runs aarch64-linux builds only;
- the driver: a CUDA X.Y build runs when the driver is at least X.Y's toolkit driver, or at
  least the minimum driver of minor-version compatibility for major X (kb/cuda.json).

A variant the driver cannot run is never returned as runnable: its verdict is ``cannot-run``
naming the driver it needs, and a variant on a CUDA the driver runs wins whenever one fits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from capplan.core.families import base
from capplan.core.families.base import Machine, RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import Verdict, how_runs, is_jetson
from capplan.core.families.cuda.drivers import version_key
from capplan.core.families.cuda.fleet import cuda_part
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.keys import cuda_spec, cuda_version
from capplan.core.families.cuda.redist import uses_jetson_redist
from capplan.core.families.cuda.spec import CudaSpec
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.plan import Plan, Variant

__all__ = [
    "DriverSupport",
    "Pick",
    "driver_support",
    "pick_on_machine",
    "pick_variant",
]


@dataclass(frozen=True, slots=True)
class DriverSupport:
    """What one driver version runs. ``driver`` None (or unreadable): unknown, assume it runs."""

    driver: str | None
    key: tuple[int, ...] | None
    needs: dict[CudaVersion, str]  # the lowest driver that runs each CUDA release
    toolkit: dict[CudaVersion, str]  # the driver each toolkit ships with (new PTX)

    @property
    def known(self) -> bool:
        return self.key is not None

    def runs(self, cuda: CudaVersion) -> bool:
        """Whether this driver runs code built with ``cuda`` (True when the driver is unknown)."""
        need = self.needs.get(cuda)
        if self.key is None or need is None:
            return True
        return version_key(need) <= self.key

    def max_cuda(self, *, full: bool = False) -> CudaVersion | None:
        """The newest CUDA release this driver runs (``full``: with new PTX, i.e. at least the
        toolkit's own driver); None when it runs none or the driver is unknown."""
        if self.key is None:
            return None
        table = self.toolkit if full else self.needs
        ok = [cuda for cuda, need in table.items() if version_key(need) <= self.key]
        return max(ok) if ok else None


def driver_support(kb: KnowledgeBase, driver: str | None) -> DriverSupport:
    """The driver table of the knowledge base, applied to ``driver``."""
    needs: dict[CudaVersion, str] = {}
    toolkit: dict[CudaVersion, str] = {}
    for release in nvidia(kb).cuda_releases:
        # Minor-version compatibility: a driver at the major's minimum runs every X.y release
        # (without new-PTX JIT); the toolkit's own driver always runs it.
        needs[release.version] = min(
            (release.min_driver, release.toolkit_driver), key=lambda v: version_key(v)
        )
        toolkit[release.version] = release.toolkit_driver
    key: tuple[int, ...] | None = None
    if driver:
        try:
            key = version_key(driver)
        except ValueError:
            key = None
    return DriverSupport(driver, key, needs, toolkit)


@dataclass(frozen=True, slots=True)
class Pick:
    package: str
    variant: Variant | None  # the variant to use; None when none runs here
    verdict: Verdict
    driver_ok: bool | None  # the driver runs the variant's CUDA; None: driver unknown
    needs_driver: str | None = None  # when the driver is too old: the driver that variant needs
    blocked: Variant | None = None  # the variant that would fit with a newer driver

    @property
    def runnable(self) -> bool:
        return self.variant is not None and self.verdict.level is not RunLevel.CANNOT_RUN


def _device_verdict(
    plan: Plan, kb: KnowledgeBase, variant: Variant, device: Capability, jetson: bool
) -> Verdict:
    """How ``variant``'s code runs on ``device``, ignoring the driver."""
    info = nvidia(kb).capability(device.base) if nvidia(kb).knows(device.base) else None
    cuda = _cuda(variant)
    if info is not None and info.max_cuda is not None and cuda > info.max_cuda:
        return Verdict(
            RunLevel.CANNOT_RUN,
            None,
            f"{variant.name} is built with CUDA {cuda}, which dropped {device.base} "
            f"(supported by CUDA {info.min_cuda}..{info.max_cuda})",
        )
    if variant.independent:
        return Verdict(
            RunLevel.NATIVE,
            None,
            f"{variant.package} is capability-independent: one build for every GPU "
            f"CUDA {cuda} supports",
        )
    return how_runs(device, cuda_spec(variant).capabilities, cuda_spec(variant).ptx, jetson=jetson)


def pick_variant(
    plan: Plan,
    package: str,
    device: Capability,
    kb: KnowledgeBase,
    *,
    driver: DriverSupport | None = None,
) -> Pick:
    """The best variant of ``package`` for ``device`` under ``driver``: a CUDA the driver runs,
    then the best run level, then the smallest build (single before fat), then the newest CUDA.
    """
    jetson = is_jetson(device, kb)
    if jetson and "aarch64-linux" not in plan.systems:
        planned = " and ".join(plan.systems)
        reason = (
            f"{device.base} is a Jetson: it runs aarch64-linux builds only, and this plan is for "
            f'{planned} (add "aarch64-linux" to policy.systems)'
        )
        return Pick(package, None, Verdict(RunLevel.CANNOT_RUN, None, reason), None)
    runs = driver or driver_support(kb, None)
    best: tuple[tuple[object, ...], Variant, Verdict] | None = None
    whys: list[str] = []
    for variant in plan.variants_of(package):
        built = cuda_version(variant)
        if built is None:
            continue  # an AMD variant: pick_amd_variant
        if jetson and variant.system != "aarch64-linux":
            continue  # a Jetson runs aarch64-linux builds only
        verdict = _device_verdict(plan, kb, variant, device, jetson)
        if verdict.level is RunLevel.CANNOT_RUN:
            whys.append(f"{variant.name}: {verdict.reason}")
            continue
        key = (
            not runs.runs(built),
            verdict.level.rank,
            len(cuda_spec(variant).capabilities),
            (-built.major, -built.minor),
            variant.name,
        )
        if best is None or key < best[0]:
            best = (key, variant, verdict)
    if best is None:
        return Pick(package, None, _none_runs(plan, kb, package, device, whys), False)
    _, variant, verdict = best
    if not runs.known:
        return Pick(package, variant, verdict, None)
    cuda = _cuda(variant)
    if runs.runs(cuda):
        return Pick(package, variant, verdict, True)
    need = runs.needs[cuda]
    top = runs.max_cuda()
    reason = (
        f"{variant.name} is built with CUDA {cuda}, which needs driver >= {need}; "
        f"driver {runs.driver} runs {f'any CUDA {top.major}.x' if top else 'no known CUDA'} "
        f"(upgrade the driver, or add a CUDA version it runs to policy.cuda)"
    )
    return Pick(
        package,
        None,
        Verdict(RunLevel.CANNOT_RUN, None, reason),
        False,
        needs_driver=need,
        blocked=variant,
    )


def _cuda(variant: Variant) -> CudaVersion:
    """The CUDA version of an NVIDIA variant (AMD variants never reach the CUDA rules)."""
    cuda = cuda_version(variant)
    if cuda is None:
        raise AssertionError(f"{variant.name} is an AMD variant, not a CUDA one")
    return cuda


def _none_runs(
    plan: Plan, kb: KnowledgeBase, package: str, device: Capability, whys: list[str]
) -> Verdict:
    """Why no variant of ``package`` runs on ``device``: this GPU's own reason, never another's."""
    labels = {g.label for g in cuda_part(plan).fleet if g.capability.base == device.base}
    for decision in plan.unserved:
        if decision.package == package and decision.subject in labels:
            return Verdict(RunLevel.CANNOT_RUN, None, decision.reason)
    shown = whys[:2] + ([f"{len(whys) - 2} more alike"] if len(whys) > 2 else [])
    detail = f" ({'; '.join(shown)})" if shown else ""
    info = nvidia(kb).capability(device.base) if nvidia(kb).knows(device.base) else None
    if package not in plan.packages:
        hint = f"add [packages.{package}] to the config"
    elif labels:
        hint = "widen the package's limits or policy.cuda"
    elif info is not None and not any(info.supported_by(c) for c in cuda_part(plan).policy):
        allowed = ", ".join(map(str, cuda_part(plan).policy))
        hint = (
            f"no CUDA version in policy.cuda ({allowed}) supports {device.base} (CUDA "
            f"{info.min_cuda}..{info.max_cuda or 'newest'}): add one that does and "
            f'"{device.base}" to fleet.gpus'
        )
    else:
        hint = f"add \"{device.base}\" to fleet.gpus and run 'capplan generate'"
    return Verdict(
        RunLevel.CANNOT_RUN,
        None,
        f"no {package} variant in this plan runs on {device.base}{detail}; {hint}",
    )


def _variants_for(plan: Plan, system: str, cap: Capability, jetson: bool) -> Plan:
    """The plan's variants a machine of ``system`` can use: its own system's, and of the
    capability-independent jobs the kind (Jetson or SBSA redistributables) its GPU needs."""

    def usable(v: Variant) -> bool:
        if v.system != system:
            return False
        spec = v.spec
        if not v.independent or not isinstance(spec, CudaSpec) or spec.version is None:
            return True  # no CUDA redistributables to match (AMD and CPU-side builds)
        return spec.jetson == uses_jetson_redist(system, spec.version, [(cap, jetson)])

    return replace(plan, variants=tuple(v for v in plan.variants if usable(v)))


def pick_on_machine(plan: Plan, kb: KnowledgeBase, machine: Machine) -> tuple[base.Pick, ...]:
    """:func:`pick_variant` for every package of ``plan`` on a GPU of capability
    ``machine.device`` (None: unknown, no answers) under ``machine.driver``, among the variants the
    machine's system can use (every variant of the system when ``machine.own_kind_only`` is
    False); ``detail`` carries the driver's verdict."""
    cap = machine.device
    if cap is None:
        return ()
    support = driver_support(kb, machine.driver)
    if machine.own_kind_only:
        mine = _variants_for(plan, machine.system, cap, nvidia(kb).capability(cap.base).jetson)
    else:
        mine = replace(plan, variants=tuple(v for v in plan.variants if v.system == machine.system))
    picks: list[base.Pick] = []
    for package in plan.packages:
        pick = pick_variant(mine, package, cap, kb, driver=support)
        picks.append(
            base.Pick(
                package,
                pick.variant if pick.runnable else None,
                pick.verdict.level,
                pick.verdict.reason,
                named=pick.variant or pick.blocked,
                detail={"driver_ok": pick.driver_ok, "needs_driver": pick.needs_driver},
            )
        )
    return tuple(picks)
