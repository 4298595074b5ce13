"""``capplan doctor``'s verdicts: will each library of an environment run on each GPU? Pure.

The facts come from adapters (what a library holds and links, which GPUs and driver are there);
this module only judges them, with the rules of ../shared/CUDA.md:

- device code: :func:`capplan.core.families.cuda.compat.how_runs` (exact SASS > compatible SASS
  > family > PTX JIT > cannot run, the Jetson rule) and, for AMD code objects, ``amd_how_runs``;
- the CUDA runtime a library links (``libcudart.so.13`` in its ``DT_NEEDED``, or the
  ``nvidia-*-cu13`` distribution it comes from) needs the major's minimum driver (11.x >=
  450.80.02, 12.x >= 525.60.13, 13.x >= 580: minor-version compatibility);
- PTX is JIT-compiled only by a driver that knows its ISA version (the driver of the toolkit that
  emitted it), else CUDA error 222 "unsupported PTX version";
- a CUDA major that dropped the GPU's architecture (CUDA 13 dropped Maxwell, Pascal and Volta)
  holds no code for it: the fix is a build from a major that still supports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import how_runs, is_jetson
from capplan.core.families.cuda.drivers import version_key
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.families.rocm.target import AmdRunLevel, AmdTarget, amd_how_runs

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase

__all__ = [
    "PTX_ISA_CUDA",
    "Cell",
    "CpuFacts",
    "DoctorReport",
    "Driver",
    "Gpu",
    "Group",
    "Library",
    "Package",
    "Ptx",
    "Target",
    "cuda_major_of_name",
    "cuda_majors_linked",
    "diagnose",
    "driver_facts",
    "is_driver_version",
    "isa_cuda",
    "nvidia_gpu",
]

# PTX ISA version -> the first CUDA release that emits it (NVIDIA, PTX ISA "Release Notes" table:
# 7.0 CUDA 11.0 ... 7.8 CUDA 11.8, 8.0 CUDA 12.0 ... 8.5 CUDA 12.5 (12.6 also emits 8.5), 8.6
# CUDA 12.7 (never released publicly: 12.8 is the first toolkit that shipped it), 8.7 CUDA 12.8,
# 8.8 CUDA 12.9, 9.0 CUDA 13.0, 9.1 CUDA 13.1, 9.2 CUDA 13.2, 9.3 CUDA 13.3, 9.4 CUDA 13.4, 9.5
# CUDA 13.5; PTX ISA 9.5 release history, restated in ../shared/CUDA.md). The driver that
# JIT-compiles it must be at least that toolkit's own driver (kb/cuda.json ``toolkit_driver``,
# from the CUDA release notes' Table 3); 13.5's is not in the knowledge base, so ISA 9.5 needs a
# driver newer than 13.4's (R615).
PTX_ISA_CUDA: Mapping[tuple[int, int], str] = {
    **{(7, m): f"11.{m}" for m in range(9)},
    **{(8, m): f"12.{m}" for m in range(6)},
    (8, 6): "12.8",
    (8, 7): "12.8",
    (8, 8): "12.9",
    **{(9, m): f"13.{m}" for m in range(6)},
}

# Level names of the report, best first. ``other-vendor``: CUDA code on an AMD GPU or AMD code on
# an NVIDIA one. It is not a failure by itself (a machine may hold both kinds of GPU).
# ``runs``: a library without device code (it links the CUDA runtime only) on a driver that runs it.
# ``partly``: a package verdict only, where some of its libraries with device code run and
# another cannot (torch on a T4: libtorch_cuda_linalg.so's MAGMA kernels start at sm_80).
LEVELS = ("runs", "native", "compatible", "ptx-jit", "other-vendor", "partly", "cannot-run")

_CUDART = re.compile(r"^libcudart\.so\.([0-9]+)(?:\.|$)")
# cuNN in a path or distribution name (nvidia/cu13/lib, nvidia-cudnn-cu13), and the cudaNNx of
# CuPy's distributions (cupy-cuda13x, cupy-cuda12x: PyPI project names).
_CU_NAME = re.compile(r"(?:^|[-_/])cu(?:da)?([0-9]{2})x?(?:$|[-_./])")


def cuda_majors_linked(needed: Iterable[str], soname: str | None = None) -> tuple[int, ...]:
    """The CUDA runtime majors a library needs: ``libcudart.so.N`` in its DT_NEEDED, or its own
    SONAME when it is the runtime itself."""
    majors = set()
    for name in [*needed, *([soname] if soname else [])]:
        match = _CUDART.match(name)
        if match:
            majors.add(int(match.group(1)))
    return tuple(sorted(majors))


def cuda_major_of_name(name: str) -> int | None:
    """The CUDA major a name or path promises: ``nvidia-cudnn-cu13`` -> 13, ``torch`` -> None."""
    match = _CU_NAME.search(name.lower())
    return int(match.group(1)) if match else None


def isa_cuda(isa: tuple[int, int]) -> str | None:
    return PTX_ISA_CUDA.get(isa)


def isa_major(isa: tuple[int, int]) -> int | None:
    """The CUDA major whose toolkits emit PTX ISA ``isa`` (9.x: 13, 8.x: 12, 7.x: 11)."""
    cuda = isa_cuda(isa)
    if cuda is not None:
        return int(cuda.split(".")[0])
    return {7: 11, 8: 12, 9: 13}.get(isa[0])


# Who uses a library that can fail alone while the rest of its package runs (rule 6 of issue 38):
# what a user loses when only that library has no code for the GPU. libtorch_cuda_linalg.so is
# PyTorch's CUDA linear algebra, built apart with MAGMA and loaded at the first linalg call
# (PyTorch aten/src/ATen/native/cuda/LinearAlgebraStubs.cpp, BUILD_LAZY_CUDA_LINALG: cholesky,
# lu_factor, lu_solve, triangular_solve, geqrf/orgqr/ormqr, eig, eigh, svd, lstsq); its own
# kernels are MAGMA's.
USED_BY: Mapping[str, str] = {
    "libtorch_cuda_linalg.so": "torch.linalg on CUDA tensors (PyTorch loads it at the first "
    "cholesky, LU, QR, eig/eigh, svd or lstsq call; its MAGMA kernels are what lacks the GPU)",
}


# A device-code target as doctor's readers give it (sm_90a / compute_90), and one container's
# targets as (SASS, PTX): names for the adapters, which import no family module.
Target = Capability
Group = tuple[tuple[Capability, ...], tuple[Capability, ...]]


@dataclass(frozen=True, slots=True)
class Ptx:
    """One PTX entry: its target, its ISA version (None: unread) and its size in bytes."""

    capability: Capability
    isa: tuple[int, int] | None
    size: int


@dataclass(frozen=True, slots=True)
class Library:
    """What one library file holds and links (from inspect's reader and its dynamic section)."""

    path: str
    package: str
    sass: tuple[Capability, ...] = ()
    ptx: tuple[Ptx, ...] = ()
    amd: tuple[AmdTarget, ...] = ()
    needed: tuple[str, ...] = ()
    soname: str | None = None
    size: int = 0
    problems: tuple[str, ...] = ()
    major_hint: int | None = None  # a cuNN directory or distribution name (nvidia/cu13/lib)
    # The x86-64 level its ELF note records as needed (GNU_PROPERTY_X86_ISA_1_NEEDED:
    # "x86-64-v3"); None: it records none, so its level is unknown (most binaries).
    cpu_level: str | None = None
    # Why the dynamic loader cannot load it ("truncated: ..."); None: it can, as far as its ELF
    # headers say. Such a library cannot run anywhere, whatever device code it holds.
    unloadable: str | None = None
    # The ELF machine (x86_64, aarch64; None: not ELF or another machine): code for one CPU
    # architecture runs on no host of another, whatever GPU code it holds.
    machine: str | None = None
    # Device-code entries with nothing to launch (a cubin with no kernel, PTX whose entries are
    # empty), left out of ``sass`` and ``ptx``: they neither make it runnable nor unrunnable.
    stubs: int = 0
    # The CUDA release the cubins' toolkit note names ("Cuda compilation tools, release 13.0").
    toolkit: str | None = None
    # The device code of each container holding code for more than one target, as (SASS, PTX):
    # the coverage vote of :func:`_coverage` (a per-arch kernel set is one target a container).
    groups: tuple[Group, ...] = ()
    # cudart linked statically (``libcudart_static_*`` symbols): it needs its CUDA major's
    # driver though no DT_NEEDED says which; its package name (cupy-cuda13x) may.
    static_cudart: bool = False

    @property
    def has_cuda_code(self) -> bool:
        return bool(self.sass or self.ptx)

    @property
    def linked_majors(self) -> tuple[int, ...]:
        return cuda_majors_linked(self.needed, self.soname)

    @property
    def built_majors(self) -> tuple[int, ...]:
        """The CUDA majors whose toolkits built its device code: the cubins' toolkit note and the
        PTX ISA versions (a CUDA 13 build links CUDA 13's runtime, statically by nvcc default)."""
        # The newest signal names the toolkit: a CUDA 13 library may embed older PTX (ISA 7.x).
        majors = {int(self.toolkit.split(".")[0])} if self.toolkit else set()
        majors.update(m for p in self.ptx if p.isa for m in [isa_major(p.isa)] if m)
        return (max(majors),) if majors else ()

    @property
    def cuda_majors(self) -> tuple[int, ...]:
        """The CUDA runtime majors it needs: linked (DT_NEEDED, SONAME); else the toolkit its
        device code was built with (cudart linked statically, nvcc's default); else the cuNN
        its RPATH, path or package names (a runtime it dlopens)."""
        linked = self.linked_majors or self.built_majors
        uses = self.has_cuda_code or self.soname or self.static_cudart
        if linked or self.major_hint is None or not uses:
            return linked
        return (self.major_hint,)


@dataclass(frozen=True, slots=True)
class Package:
    """What a user installed: a pip distribution, a conda package, a Nix store path, a file."""

    name: str
    version: str | None
    kind: str  # pip, conda, nix, wheel, file, unowned


@dataclass(frozen=True, slots=True)
class Gpu:
    """A GPU to judge against. NVIDIA: ``capability``; AMD: ``target``.

    ``min_cuda``/``max_cuda``: the CUDA releases that support the capability (knowledge base);
    ``max_cuda`` None: still supported by the newest.
    """

    label: str
    vendor: str  # nvidia, amd
    capability: Capability | None = None
    target: AmdTarget | None = None
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


@dataclass(frozen=True, slots=True)
class Driver:
    """The NVIDIA driver (``version`` None: unknown) and the knowledge base's driver table."""

    version: str | None
    major_minimum: Mapping[int, str]  # CUDA major -> lowest driver (minor-version compatibility)
    toolkit_driver: Mapping[str, str]  # CUDA release ("13.0") -> its toolkit's driver
    runs_cuda: str | None = None  # the newest CUDA release this driver runs, for messages

    @property
    def key(self) -> tuple[int, ...] | None:
        if self.version is None:
            return None
        try:
            return version_key(self.version)
        except ValueError:
            return None


# An NVIDIA driver version as nvidia-smi prints it (535.104.05), as a user may type it.
_DRIVER = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,5}){0,3}")


def is_driver_version(value: str) -> bool:
    """Whether ``value`` (stripped) spells an NVIDIA driver version: digits and dots, not 0."""
    return bool(_DRIVER.fullmatch(value)) and version_key(value)[0] != 0


def nvidia_gpu(
    name: str | None, cap: Capability, kb: KnowledgeBase, systems: Sequence[str] = ()
) -> Gpu:
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
    return Gpu(
        label,
        "nvidia",
        capability=cap,
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
    return Driver(version, minimum, toolkit, shown)


@dataclass(frozen=True, slots=True)
class Cell:
    """One library on one GPU: a level of :data:`LEVELS`, why, and what fixes it."""

    level: str
    via: str | None
    reason: str
    fix: str | None = None
    cause: str | None = (
        None  # for cannot-run: device-code, dropped-arch, driver-runtime, driver-ptx, unloadable
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "via": self.via,
            "reason": self.reason,
            "cause": self.cause,
            "fix": self.fix,
        }


def _nvidia_cell(lib: Library, gpu: Gpu, driver: Driver) -> Cell:
    assert gpu.capability is not None
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
    verdict = how_runs(device, lib.sass, [p.capability for p in lib.ptx], jetson=gpu.jetson)
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
        entries = [p for p in lib.ptx if p.capability == via]
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


def _wrong_machine(lib: Library, gpu: Gpu) -> Cell | None:
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


def _gpu_newer_than_driver(lib: Library, gpu: Gpu, driver: Driver) -> Cell | None:
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


def _coverage(lib: Library, gpu: Gpu) -> str | None:
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
    assert gpu.capability is not None
    device = gpu.capability
    speak = [
        (sass, ptx)
        for sass, ptx in lib.groups
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
    if any(s.major == device.major for s in lib.sass):
        return None
    if any(p.capability.major <= device.major for p in lib.ptx):
        return None
    sass = ", ".join(s.sm for s in lib.sass) or "none"
    if lib.ptx:
        low = min(p.capability for p in lib.ptx)
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


def _driver_runtime(lib: Library, gpu: Gpu, driver: Driver) -> Cell | None:
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


def _amd_cell(lib: Library, gpu: Gpu, driver: Driver | None = None) -> Cell:
    assert gpu.target is not None
    if not lib.amd:
        if lib.has_cuda_code or lib.cuda_majors:
            return Cell("other-vendor", None, "CUDA code only; an AMD GPU needs a ROCm build")
        return Cell("other-vendor", None, "no AMD code objects")
    answer = amd_how_runs(gpu.target, lib.amd)
    if answer.level is AmdRunLevel.CANNOT_RUN:
        return Cell(
            "cannot-run",
            None,
            answer.reason,
            f"a ROCm build for {gpu.target.processor}",
            "device-code",
        )
    level = "native" if answer.level is AmdRunLevel.EXACT else "compatible"
    return Cell(level, str(answer.via) if answer.via else None, answer.reason)


# How each vendor's GPUs judge a library: the one place doctor's core chooses by vendor.
_CELLS: dict[str, Callable[[Library, Gpu, Driver], Cell]] = {
    "nvidia": _nvidia_cell,
    "amd": _amd_cell,
}


def _unloadable_cell(lib: Library) -> Cell:
    """A library the dynamic loader refuses runs on no GPU: dlopen fails before any kernel."""
    name = lib.path.rsplit("/", 1)[-1]
    return Cell("cannot-run", None, f"the loader cannot load {name}: {lib.unloadable}",
                "reinstall the package (the file is damaged)", "unloadable")  # fmt: skip


def _no_gpu_of_its_vendor(lib: Library, cell: Cell) -> Cell:
    """Other-vendor code is no failure beside a GPU of its own vendor; with none, it cannot run."""
    if lib.amd and not lib.has_cuda_code:
        return Cell("cannot-run", None, f"{cell.reason}; no AMD GPU here runs it",
                    "a CUDA build of the package", "vendor")  # fmt: skip
    return Cell("cannot-run", None, f"{cell.reason}; no NVIDIA GPU here runs it",
                "a ROCm build of the package", "vendor")  # fmt: skip


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True, slots=True)
class CpuFacts:
    """The machine's CPU as doctor judges it: its name (``sapphirerapids``) and, for each
    x86-64 level lowest first, whether it runs code built for it (None) or why not (the
    features it lacks), from the CPU target model (archspec)."""

    name: str
    blocked: Mapping[str, str | None]
    source: str  # detected, --cpu

    @property
    def level(self) -> str | None:
        """The highest x86-64 level it runs; None for a CPU that runs none (not x86-64)."""
        runs = [level for level, why in self.blocked.items() if why is None]
        return runs[-1] if runs else None


def cpu_cells(libraries: Sequence[Library], cpu: CpuFacts) -> tuple[tuple[Library, Cell], ...]:
    """Libraries whose recorded x86-64 level this CPU does not run, each with its verdict.
    A library that records no level is not judged: its level is unknown, not baseline."""
    out: list[tuple[Library, Cell]] = []
    for lib in libraries:
        why = cpu.blocked.get(lib.cpu_level) if lib.cpu_level else None
        if why is None:
            continue
        out.append(
            (
                lib,
                Cell(
                    "cannot-run",
                    None,
                    f"built for {lib.cpu_level} (its ELF note GNU_PROPERTY_X86_ISA_1_NEEDED): "
                    f"{why}; the loader refuses it or it dies on an illegal instruction",
                    f"a build for {cpu.level or cpu.name} or lower (capplan plans per-level "
                    "builds from [fleet] cpus)",
                    "cpu-level",
                ),
            )
        )
    return tuple(sorted(out, key=lambda pair: pair[0].path))


# Among libraries that cannot run, the cause a user must fix first: no code for the GPU at all
# (no driver helps), then the driver.
# A GPU the driver does not know and a library for another CPU come above device code: no build
# with more SASS helps there.
_CAUSES = (
    "driver-ptx",
    "driver-runtime",
    "device-code",
    "dropped-arch",
    "driver-gpu",
    "vendor",
    "machine",
    "unloadable",
)


def _severity(cell: Cell) -> tuple[int, int]:
    cause = _CAUSES.index(cell.cause) + 1 if cell.cause in _CAUSES else 0
    return LEVELS.index(cell.level), cause


_CODE_CAUSES = ("device-code", "dropped-arch")
_DRIVER_CAUSES = ("driver-runtime", "driver-ptx")


def _partly(libs: Sequence[Library], cells: Sequence[Cell]) -> Cell:
    """The package runs, except its libraries without code for the GPU: name them, and what
    uses them (:data:`USED_BY`), instead of saying the whole package cannot run."""
    failing = [
        (lib, cell)
        for lib, cell in zip(libs, cells, strict=True)
        if cell.level == "cannot-run" and cell.cause in _CODE_CAUSES
    ]
    names = [lib.path.rsplit("/", 1)[-1].rsplit("!", 1)[-1] for lib, _ in failing]
    uses = [USED_BY[n] for n in names if n in USED_BY]
    first = failing[0][1]
    what = f"; it is used by {'; '.join(uses)}" if uses else ""
    return Cell(
        "partly",
        None,
        f"{', '.join(names)} cannot run ({first.reason}){what}; the rest of the package runs",
        first.fix,
        first.cause,
    )


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """Every verdict, grouped by package; ``ok`` when nothing that applies cannot run."""

    gpus: tuple[Gpu, ...]
    packages: tuple[tuple[Package, tuple[Library, ...]], ...]
    cells: Mapping[str, tuple[Cell, ...]]  # library path -> one cell per GPU, in gpus' order
    mixed_majors: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    cpu: CpuFacts | None = None
    cpu_cannot_run: tuple[tuple[Library, Cell], ...] = ()
    cpu_recorded: int = 0  # libraries whose ELF records an x86-64 level
    cpu_unrecorded: int = 0  # ELF libraries that record none (level unknown)

    @property
    def ok(self) -> bool:
        gpu_ok = not any(c.level == "cannot-run" for cells in self.cells.values() for c in cells)
        return gpu_ok and not self.cpu_cannot_run and not self.unloadable

    @property
    def unloadable(self) -> tuple[Library, ...]:
        """The libraries the dynamic loader cannot load, in path order."""
        libs = (lib for _, group in self.packages for lib in group if lib.unloadable is not None)
        return tuple(sorted(libs, key=lambda lib: lib.path))

    def package_cells(self, package: Package) -> list[Cell]:
        """One summary cell per GPU for ``package``: its worst library's, or ``partly`` where a
        library lacks code for the GPU while another with device code runs on it."""
        libs = dict(self.packages)[package]
        summary: list[Cell] = []
        for index in range(len(self.gpus)):
            cells = [self.cells[lib.path][index] for lib in libs]
            worst = max(cells, key=_severity)
            # Libraries with device code that run, or would with a newer driver.
            running = [
                cell
                for lib, cell in zip(libs, cells, strict=True)
                if lib.has_cuda_code
                and (
                    cell.level in ("native", "compatible", "ptx-jit")
                    or cell.cause in _DRIVER_CAUSES
                )
            ]
            if worst.level == "cannot-run" and worst.cause in _CODE_CAUSES and running:
                driver = [c for c in running if c.cause in _DRIVER_CAUSES]
                # The driver is the first fix when the rest of the package needs it too.
                worst = max(driver, key=_severity) if driver else _partly(libs, cells)
            summary.append(worst)
        return summary

    def package_majors(self, package: Package) -> tuple[int, ...]:
        libs = dict(self.packages)[package]
        majors = {m for lib in libs for m in lib.cuda_majors}
        hinted = cuda_major_of_name(package.name)
        if hinted is not None:
            majors.add(hinted)
        return tuple(sorted(majors))


def diagnose(
    libraries: Sequence[Library],
    packages: Mapping[str, Package],
    gpus: Sequence[Gpu],
    driver: Driver,
    cpu: CpuFacts | None = None,
) -> DoctorReport:
    """Judge every library with GPU code (or a CUDA runtime link) on every GPU, and, with
    ``cpu``, every library that records its x86-64 level on the machine's CPU.

    ``packages`` maps each library's ``package`` key to the package; the report keeps packages
    in name order and libraries in path order.
    """
    relevant = [
        lib
        for lib in libraries
        if lib.has_cuda_code
        or lib.stubs  # device code with nothing to launch: judged, and said to run
        or lib.static_cudart
        or lib.amd
        or lib.cuda_majors
        or lib.unloadable is not None
    ]
    by_package: dict[str, list[Library]] = {}
    for lib in relevant:
        pkg = packages.get(lib.package)
        hinted = cuda_major_of_name(lib.path) or (cuda_major_of_name(pkg.name) if pkg else None)
        if hinted is not None and lib.major_hint is None:
            lib = replace(lib, major_hint=hinted)
        by_package.setdefault(lib.package, []).append(lib)
    cells: dict[str, tuple[Cell, ...]] = {}
    grouped: list[tuple[Package, tuple[Library, ...]]] = []
    for key in sorted(
        by_package, key=lambda k: (packages[k].name.lower(), k) if k in packages else (k, k)
    ):
        libs = tuple(sorted(by_package[key], key=lambda lib: lib.path))
        grouped.append((packages.get(key, Package(key, None, "unowned")), libs))
        for lib in libs:
            row = []
            for gpu in gpus:
                row.append(_CELLS.get(gpu.vendor, _amd_cell)(lib, gpu, driver))
            if lib.unloadable is not None:
                row = [_unloadable_cell(lib) for _ in gpus]
            elif row and all(c.level == "other-vendor" for c in row):
                row = [_no_gpu_of_its_vendor(lib, c) for c in row]
            cells[lib.path] = tuple(row)
    majors: dict[int, set[str]] = {}
    for pkg, libs in grouped:
        for lib in libs:
            for major in lib.cuda_majors:
                majors.setdefault(major, set()).add(pkg.name)
    mixed = (
        {m: tuple(sorted(names)) for m, names in sorted(majors.items())} if len(majors) > 1 else {}
    )
    if cpu is None:
        return DoctorReport(tuple(gpus), tuple(grouped), cells, mixed)
    recorded = sum(1 for lib in libraries if lib.cpu_level)
    return DoctorReport(
        tuple(gpus),
        tuple(grouped),
        cells,
        mixed,
        cpu,
        cpu_cells(libraries, cpu),
        recorded,
        len(libraries) - recorded,
    )
