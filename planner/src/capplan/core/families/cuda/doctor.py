"""The CUDA family's part of ``capplan doctor``: how a library runs on an NVIDIA GPU. Pure.

:mod:`capplan.core.binaries.doctor` holds the facts and the report and asks each GPU
(:class:`NvidiaGpu` here, built through :func:`capplan.core.families.registry.doctor_gpu` and
``detected_gpu``) for its verdicts; the rules are ../shared/CUDA.md's, in this order: the host's
CPU, a driver that knows the GPU, the runtime's major against the driver, device code
(:func:`~capplan.core.families.cuda.compat.how_runs`, the coverage vote of a library's
containers, a CUDA major that dropped the architecture), then PTX against the driver that JITs
it. The NVIDIA driver's facts (``--driver``) and what a variant wheel's ``nvidia :: sm_arch``
covers are this family's too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from capplan.core.binaries.doctor import (
    PTX_ISA_CUDA,
    Cell,
    Driver,
    Library,
    Properties,
    Ptx,
    isa_cuda,
    isa_major,
)
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import how_runs, is_jetson
from capplan.core.families.cuda.drivers import version_key
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.runs import RunLevel

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase

__all__ = [
    "NvidiaGpu",
    "detected_gpu",
    "device_gpu",
    "driver_facts",
    "is_driver_version",
    "nvidia_driver",
    "nvidia_gpu",
]


@dataclass(frozen=True, slots=True)
class NvidiaGpu:
    """An NVIDIA GPU to judge against: its ``capability`` and the knowledge base's facts of it.

    ``min_cuda``/``max_cuda``: the CUDA releases that support the capability (knowledge base);
    ``max_cuda`` None: still supported by the newest.
    """

    label: str
    capability: Capability
    jetson: bool = False
    arch: str = ""
    min_cuda: CudaVersion | None = None
    max_cuda: CudaVersion | None = None
    # The oldest driver that knows this GPU, and where the knowledge base has it from.
    min_driver: str | None = None
    min_driver_source: str | None = None
    # The CPU architectures of the hosts this GPU sits in (aarch64 for Jetson, GH200, GB10);
    # () when any (a discrete card may sit in an x86_64 or an aarch64 server).
    machines: tuple[str, ...] = ()

    @property
    def vendor(self) -> str:
        return "nvidia"

    @property
    def device(self) -> Capability:
        return self.capability

    def cell(self, lib: Library, driver: Driver) -> Cell:
        return _nvidia_cell(lib, self, driver)

    def judge_variant(self, properties: Properties) -> tuple[bool, str] | None:
        stated = properties.get("nvidia", {}).get("sm_arch")
        if not stated:
            return None
        sass, ptx, unknown = _sm_arch(stated)
        verdict = how_runs(self.capability, sass, ptx, jetson=self.jetson)
        covered = verdict.level is not RunLevel.CANNOT_RUN
        how = verdict.level.value if covered else "not covered"
        reason = f"sm_arch {', '.join(stated)}: {how} on {self.capability}"
        if unknown:
            reason += f" (values capplan does not know: {', '.join(unknown)})"
        return covered, reason

    def to_json(self) -> dict[str, object]:
        return {
            "label": self.label,
            "vendor": self.vendor,
            "capability": str(self.capability),
            "target": None,
            "arch": self.arch or None,
            "jetson": self.jetson,
            "cuda": f"{self.min_cuda}..{self.max_cuda or ''}" if self.min_cuda else None,
        }


# PEP 825's nvidia provider: ``86_real`` is SASS for 8.6, ``90_virtual`` PTX for 9.0.
_SM = re.compile(r"([0-9]{1,4})([af]?)_(real|virtual)")  # 4 digits: int() never sees 5,000


def _sm_arch(values: Sequence[str]) -> tuple[list[Capability], list[Capability], list[str]]:
    sass: list[Capability] = []
    ptx: list[Capability] = []
    unknown: list[str] = []
    for value in values:
        match = _SM.fullmatch(value)
        if match is None:
            unknown.append(value)
            continue
        capability = Capability.from_sm(int(match[1]), match[2])
        (sass if match[3] == "real" else ptx).append(capability)
    return sass, ptx, unknown


# The reader (adapters/fatbin.py) gives SASS and PTX targets as this family's Capability; the
# shared record types them by what shared code asks of them (binaries/doctor.py's Target).
def _sass(lib: Library) -> tuple[Capability, ...]:
    return cast("tuple[Capability, ...]", lib.sass)


def _cap(ptx: Ptx) -> Capability:
    return cast(Capability, ptx.capability)


def nvidia_driver(
    version: str | None,
    major_minimum: Mapping[int, str],
    toolkit_driver: Mapping[str, str],
    runs_cuda: str | None = None,
) -> Driver:
    """The NVIDIA driver ``version`` (None: unknown) with a driver table: its ``key`` is the
    version as NVIDIA's are ordered (None when it does not read as one)."""
    key: tuple[int, ...] | None = None
    if version is not None:
        try:
            key = version_key(version)
        except ValueError:
            key = None
    return Driver(version, major_minimum, toolkit_driver, runs_cuda, key)


# An NVIDIA driver version as nvidia-smi prints it (535.104.05), as a user may type it.
_DRIVER = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,5}){0,3}")


def is_driver_version(value: str) -> bool:
    """Whether ``value`` (stripped) spells an NVIDIA driver version: digits and dots, not 0."""
    return bool(_DRIVER.fullmatch(value)) and version_key(value)[0] != 0


def nvidia_gpu(
    name: str | None, cap: Capability, kb: KnowledgeBase, systems: Sequence[str] = ()
) -> NvidiaGpu:
    """An NVIDIA GPU of capability ``cap`` (``name``: its model, if known; ``systems``: the Nix
    systems of its host, from the model) with the knowledge base's facts of it: the Jetson flag,
    the architecture, the CUDA releases that support it, the oldest driver that knows it, and
    the CPU architecture of its host where that is fixed (Jetson, Grace superchips, GB10)."""
    info = nvidia(kb).capability(cap.base) if nvidia(kb).knows(cap.base) else None
    label = f"{name} ({cap})" if name else str(cap)
    jetson = is_jetson(cap, kb)
    min_driver, source = (info.min_driver, info.min_driver_source) if info else (None, None)
    if info is not None and min_driver is None:
        # The first toolkit that supports a GPU ships with the first driver that knows it.
        first = next((r for r in nvidia(kb).cuda_releases if r.version == info.min_cuda), None)
        if first is not None:
            min_driver = first.toolkit_driver
            source = (
                f"the driver of CUDA {info.min_cuda}, the first toolkit supporting {cap.base} "
                "(CUDA release notes, Table 3)"
            )
    # A discrete card's default host (x86_64) is no rule: fleet.systems may put it in an aarch64
    # server. Only a host that is aarch64 and nothing else is (Jetson, GH200, GB10).
    machines = tuple(sorted({s.split("-")[0] for s in systems}))
    if machines == ("x86_64",):
        machines = ()
    if jetson and not machines:
        machines = ("aarch64",)
    return NvidiaGpu(
        label,
        cap,
        jetson=jetson,
        arch=info.arch if info else "",
        min_cuda=info.min_cuda if info else None,
        max_cuda=info.max_cuda if info else None,
        min_driver=min_driver,
        min_driver_source=source,
        machines=machines,
    )


def driver_facts(kb: KnowledgeBase, version: str | None) -> Driver:
    """The driver ``version`` (None: unknown) with the knowledge base's driver table: each CUDA
    major's lowest driver, each release's toolkit driver, and the newest release it runs."""
    minimum: dict[int, str] = {}
    toolkit: dict[str, str] = {}
    runs: Any = None
    have = version_key(version) if version else None
    for release in nvidia(kb).cuda_releases:
        need = min((release.min_driver, release.toolkit_driver), key=version_key)
        major = release.version.major
        if major not in minimum or version_key(need) < version_key(minimum[major]):
            minimum[major] = need
        toolkit[str(release.version)] = release.toolkit_driver
        if (
            have is not None
            and version_key(need) <= have
            and (runs is None or release.version > runs)
        ):
            runs = release.version
    # Minor-version compatibility has no maximum within a major (CUDA Compatibility guide,
    # Table 2 of the release notes): a 580 driver runs every CUDA 13.x, 13.5 included.
    # (A driver between a toolkit's own and the major's minimum runs that release only: 450.51.05
    # runs 11.0 but not 11.1, whose minimum is 450.80.02.)
    compat = {r.version.major: r.min_driver for r in nvidia(kb).cuda_releases}
    whole = runs is not None and have is not None and version_key(compat[runs.major]) <= have
    shown = f"{runs.major}.x" if whole else (str(runs) if runs else None)
    return nvidia_driver(version, minimum, toolkit, shown)


def _nvidia_cell(lib: Library, gpu: NvidiaGpu, driver: Driver) -> Cell:
    device = gpu.capability
    # What no code can change comes first: the host's CPU, then a driver that knows the GPU.
    machine = _wrong_machine(lib, gpu)
    if machine is not None:
        return machine
    too_new = _gpu_newer_than_driver(lib, gpu, driver)
    if too_new is not None:
        return too_new
    if not lib.has_cuda_code:
        if lib.amd:
            return Cell("other-vendor", None, "AMD code objects only; no CUDA device code")
        what = "no device code; links the CUDA runtime only"
        if lib.static_cudart:
            what = "no device code; links the CUDA runtime statically"
        if lib.stubs:
            what = (
                f"no GPU code of its own ({lib.stubs} device-code entries with nothing to "
                "launch: a cubin without a kernel, or PTX whose entries are empty)"
            )
        return _driver_runtime(lib, gpu, driver) or Cell("runs", None, what)
    verdict = how_runs(device, _sass(lib), [_cap(p) for p in lib.ptx], jetson=gpu.jetson)
    minority = _coverage(lib, gpu) if verdict.level is not RunLevel.CANNOT_RUN else None
    majors = lib.cuda_majors
    if verdict.level is RunLevel.CANNOT_RUN or minority is not None:
        reason = minority or _short_why(lib, device) or verdict.reason
        dropped = [m for m in majors if gpu.max_cuda is not None and m > gpu.max_cuda.major] or (
            [] if majors or gpu.max_cuda is None else _majors_from_ptx(lib, gpu.max_cuda)
        )
        if dropped:
            assert gpu.max_cuda is not None
            return Cell(
                "cannot-run",
                None,
                f"{reason}. CUDA {dropped[0]} dropped {gpu.arch or 'this architecture'}"
                f" ({device}): CUDA {gpu.min_cuda}..{gpu.max_cuda} support it",
                f"a CUDA {gpu.max_cuda.major} build (CUDA {gpu.max_cuda} is the newest that "
                f"supports {device})",
                "dropped-arch",
            )
        return Cell("cannot-run", None, reason, f"a build with SASS for {device}", "device-code")
    blocked = _driver_runtime(lib, gpu, driver)
    if blocked is not None:
        return blocked
    via = verdict.via
    if verdict.level is RunLevel.PTX_JIT and via is not None:
        # Each module (container) with only PTX for this GPU is JIT-compiled when it loads, so
        # the driver must know the newest ISA among the PTX of that target, not only the
        # biggest entry's (one library may hold compute_75 at ISA 9.0 and at 9.3). The runtime's
        # own check comes first: cudart (static by nvcc's default) refuses an old driver at its
        # first call, before any module loads.
        entries = [p for p in lib.ptx if _cap(p) == via]
        newest = max(entries, key=lambda p: (p.isa or (0, 0), p.size))
        size = _size(sum(p.size for p in entries))
        ptx_cell = _driver_ptx(newest, driver)
        if ptx_cell is not None:
            return ptx_cell
        return Cell(
            "ptx-jit",
            via.compute,
            f"no SASS runs on {device}; the driver JIT-compiles {size} of {via.compute} PTX "
            "(PTX ISA " + (".".join(map(str, newest.isa)) if newest.isa else "unknown") + ") at "
            "first start (minutes for hundreds of MB; cached afterwards), without arch-specific "
            "features",
            f"a build with SASS for {device}",
            None,
        )
    level = verdict.level.value
    return Cell(level, str(via) if via else None, verdict.reason)


def _wrong_machine(lib: Library, gpu: NvidiaGpu) -> Cell | None:
    """x86_64 code on a Jetson, a GH200 or a DGX Spark (aarch64 hosts): the loader refuses it
    ('wrong ELF class' / 'cannot open shared object file') before any kernel is asked for."""
    if lib.machine is None or not gpu.machines or lib.machine in gpu.machines:
        return None
    host = " or ".join(gpu.machines)
    return Cell(
        "cannot-run",
        None,
        f"built for {lib.machine} (its ELF header's e_machine), and this GPU's host is {host}: "
        "the loader refuses it whatever GPU code it holds",
        f"a build of the package for {host} (its {host} wheel or Nix system)",
        "machine",
    )


def _gpu_newer_than_driver(lib: Library, gpu: NvidiaGpu, driver: Driver) -> Cell | None:
    """A driver older than the GPU does not know it (no device is found): nothing runs, and no
    build helps (no R535 or R550 driver runs a B200 or an RTX 5090)."""
    have = driver.key
    if have is None or gpu.min_driver is None or version_key(gpu.min_driver) <= have:
        return None
    need = gpu.min_driver
    runtime = [driver.major_minimum[m] for m in lib.cuda_majors if m in driver.major_minimum]
    need = max([need, *runtime], key=version_key)
    source = f" ({gpu.min_driver_source})" if gpu.min_driver_source else ""
    return Cell(
        "cannot-run",
        None,
        f"driver {driver.version} predates this GPU: the oldest driver that knows "
        f"{gpu.arch or 'it'} {gpu.capability} is {gpu.min_driver}{source}; CUDA finds no device",
        f"NVIDIA driver >= {need}",
        "driver-gpu",
    )


def _coverage(lib: Library, gpu: NvidiaGpu) -> str | None:
    """Why the library as a whole has no code for the GPU although some of it has, or None.

    A library is built for a list of targets, and each of its containers built from that list
    holds code for several of them. The containers that speak for a GPU of capability X.Y are
    those holding portable SASS (no ``a``/``f``) of major X: they were built for GPUs like it.
    When no more than half of them hold code this GPU runs, most of the library has none
    (nvidia-cusparse 12.9.4.2, a CUDA 13 build: 34 containers from CUDA 12.8 keep sm_70, the
    121 others that hold sm_75 lack it, so a V100 misses most kernels). A container with one
    target is a per-arch kernel set (cuDNN's engines, NCCL's sm_100-only kernels), and one with
    only ``a``/``f`` SASS or SASS of other majors (cuBLASLt's sm_90a + sm_120f kernels, its
    sm_100 + sm_120 ones for an A100) is for other GPUs: neither votes. Where none speaks, the
    union of the library's code decides, as for any library."""
    device = gpu.capability
    groups = cast("tuple[tuple[tuple[Capability, ...], tuple[Capability, ...]], ...]", lib.groups)
    speak = [
        (sass, ptx)
        for sass, ptx in groups
        if any(t.major == device.major and not t.suffix for t in sass)
    ]
    if not speak:
        return None
    runs = sum(
        1
        for sass, ptx in speak
        if how_runs(device, sass, ptx, jetson=gpu.jetson).level is not RunLevel.CANNOT_RUN
    )
    if runs * 2 > len(speak):
        return None
    return (
        f"only {runs} of the {len(speak)} containers built for {device.major}.x GPUs hold code "
        f"for {device}; the other {len(speak) - runs} (most of the library) have none"
    )


def _short_why(lib: Library, device: Capability) -> str | None:
    """One short reason when no SASS is for the device's major and no PTX is at or below it (the
    common case of a build that dropped or never had an architecture); None otherwise."""
    if any(s.major == device.major for s in _sass(lib)):
        return None
    if any(_cap(p).major <= device.major for p in lib.ptx):
        return None
    sass = ", ".join(s.sm for s in lib.sass) or "none"
    if lib.ptx:
        low = min(_cap(p) for p in lib.ptx)
        ptx = f"its PTX JITs only to devices >= {low.base} (lowest {low.compute})"
    else:
        ptx = "it holds no PTX to JIT from"
    return f"nothing runs on {device}: no SASS for major {device.major} (SASS: {sass}) and {ptx}"


def _majors_from_ptx(lib: Library, max_cuda: CudaVersion) -> list[int]:
    """CUDA majors newer than ``max_cuda`` that emitted the library's PTX (no runtime linked)."""
    majors = set()
    for ptx in lib.ptx:
        cuda = isa_cuda(ptx.isa) if ptx.isa else None
        if cuda is not None and int(cuda.split(".")[0]) > max_cuda.major:
            majors.add(int(cuda.split(".")[0]))
    return sorted(majors)


def _driver_runtime(lib: Library, gpu: NvidiaGpu, driver: Driver) -> Cell | None:
    have = driver.key
    if have is None:
        return None
    for major in lib.cuda_majors:
        need = driver.major_minimum.get(major)
        if need is None or version_key(need) <= have:
            continue
        runs = f" (it runs CUDA {driver.runs_cuda})" if driver.runs_cuda else ""
        return Cell(
            "cannot-run",
            None,
            f"driver {driver.version}{runs} is too old for {_major_evidence(lib, major)}: CUDA "
            f"{major}.x needs driver >= {need} (minor-version compatibility); CUDA reports "
            "'driver version is insufficient for CUDA runtime version'",
            f"NVIDIA driver >= {need}, or a CUDA {_older_major(driver)} build"
            if _older_major(driver)
            else f"NVIDIA driver >= {need}",
            "driver-runtime",
        )
    return None


def _major_evidence(lib: Library, major: int) -> str:
    """What says the library needs CUDA ``major``: the strongest signal it carries."""
    if major in lib.linked_majors:
        return f"libcudart.so.{major}"
    if lib.toolkit and lib.toolkit.startswith(f"{major}."):
        return f"a CUDA {lib.toolkit} build (its cubins' toolkit note)"
    isas = sorted({p.isa for p in lib.ptx if p.isa and isa_major(p.isa) == major})
    if isas:
        return f"a CUDA {major} build (PTX ISA {isas[-1][0]}.{isas[-1][1]})"
    if lib.static_cudart:
        return f"cudart {major} linked statically (its package name says CUDA {major})"
    return f"CUDA {major} (its RPATH, folder or package name says cu{major})"


def _older_major(driver: Driver) -> int | None:
    return int(driver.runs_cuda.split(".")[0]) if driver.runs_cuda else None


def _driver_ptx(ptx: Ptx, driver: Driver) -> Cell | None:
    have = driver.key
    if have is None or ptx.isa is None:
        return None
    isa = f"{ptx.isa[0]}.{ptx.isa[1]}"
    cuda = isa_cuda(ptx.isa)
    if cuda is None or cuda not in driver.toolkit_driver:
        # An ISA newer than every toolkit whose driver the knowledge base has (9.5: CUDA 13.5):
        # it needs a driver newer than the newest known toolkit driver.
        known = max(k for k, v in PTX_ISA_CUDA.items() if v in driver.toolkit_driver)
        newest = driver.toolkit_driver.get(PTX_ISA_CUDA[known])
        # By branch: 615 is the R615 branch floor (kb/cuda.json), and no 615.x driver knows an
        # ISA newer than 13.4's; a driver of a later branch may (no claim).
        if newest is None or ptx.isa <= known or have[0] > version_key(newest)[0]:
            return None  # between known ISAs, or a driver newer than capplan knows: no claim
        return Cell(
            "cannot-run",
            None,
            f"only {ptx.capability.compute} PTX could run here, and its ISA {isa}"
            + (f" (CUDA {cuda})" if cuda else "")
            + f" is newer than PTX ISA {known[0]}.{known[1]}, which already needs driver >= "
            f"{newest}; driver {driver.version} fails with CUDA error 222 'unsupported PTX "
            "version'",
            f"a newer NVIDIA driver (> {newest}), or a build with SASS for this GPU",
            "driver-ptx",
        )
    need = driver.toolkit_driver.get(cuda)
    if need is None or version_key(need) <= have:
        return None
    return Cell(
        "cannot-run",
        None,
        f"only {ptx.capability.compute} PTX could run here, and its ISA {isa} (CUDA {cuda}) needs "
        f"driver >= {need} to JIT; driver {driver.version} fails with CUDA error 222 "
        "'unsupported PTX version'",
        f"NVIDIA driver >= {need}, or a build with SASS for this GPU",
        "driver-ptx",
    )


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def device_gpu(kb: KnowledgeBase, text: str) -> NvidiaGpu:
    """The GPU ``--device`` names (a name or a capability; the fallback family: a name no family
    knows is an InvalidInputError with "did you mean"), with the facts of its one model."""
    from capplan.core.families.cuda.gpus import resolve_known_device

    cap, model = resolve_known_device(text, kb)
    return nvidia_gpu(model.name if model else None, cap, kb, model.systems if model else ())


def detected_gpu(name: str, cap: Capability, kb: KnowledgeBase) -> NvidiaGpu:
    """A GPU the NVIDIA detector found, named ``name``."""
    from capplan.core.families.cuda.gpus import unique_model

    # The host's systems from the name's one model, when the GPU name rule gives one.
    named = unique_model(name, nvidia(kb).gpus)
    return nvidia_gpu(name, cap, kb, named.systems if named else ())
