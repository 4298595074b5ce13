"""``capplan doctor``'s verdicts: will each library of an environment run on each GPU? Pure.

The facts come from adapters (what a library holds and links, which GPUs and driver are there);
this module holds them and orchestrates the verdicts, and each GPU family judges its own GPUs
(``core/families/<family>/doctor.py``, whose GPU is a :class:`Gpu`, built through
:mod:`capplan.core.families.registry`), with the rules of ../shared/CUDA.md:

- device code: :func:`capplan.core.families.cuda.compat.how_runs` (exact SASS > compatible SASS
  > family > PTX JIT > cannot run, the Jetson rule) and, for AMD code objects, ``amd_how_runs``;
- the CUDA runtime a library links (``libcudart.so.13`` in its ``DT_NEEDED``, or the
  ``nvidia-*-cu13`` distribution it comes from) needs the major's minimum driver (11.x >=
  450.80.02, 12.x >= 525.60.13, 13.x >= 580: minor-version compatibility);
- PTX is JIT-compiled only by a driver that knows its ISA version (the driver of the toolkit that
  emitted it), else CUDA error 222 "unsupported PTX version";
- a CUDA major that dropped the GPU's architecture (CUDA 13 dropped Maxwell, Pascal and Volta)
  holds no code for it: the fix is a build from a major that still supports it.

What stays here is what every GPU shares: the records, a library's CUDA majors as its names and
PTX headers state them, the CPU check, the severity of causes, a package's "partly", and the
report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Self

__all__ = [
    "PTX_ISA_CUDA",
    "Cell",
    "CodeObject",
    "CpuFacts",
    "DoctorReport",
    "Driver",
    "Gpu",
    "Group",
    "Library",
    "Package",
    "Properties",
    "Ptx",
    "Target",
    "cuda_major_of_name",
    "cuda_majors_linked",
    "diagnose",
    "isa_cuda",
    "isa_major",
    "judged",
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

# A major of at most 4 digits: a ``libcudart.so.<5,000 digits>`` is no CUDA runtime (and past
# Python's 4,300-digit limit for int()).
_CUDART = re.compile(r"^libcudart\.so\.([0-9]{1,4})(?:\.|$)")
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


class Target(Protocol):
    """A SASS or PTX target as doctor's readers give it (sm_90a / compute_90): the CUDA
    family's capability, which judges it (core/families/cuda/doctor.py); shared code and the
    adapters only keep, order and name it."""

    @property
    def sm(self) -> str: ...

    @property
    def compute(self) -> str: ...

    def __lt__(self, other: Self, /) -> bool: ...

    def __hash__(self) -> int: ...


class CodeObject(Protocol):
    """An AMD code object's target as doctor's readers give it (gfx942): the ROCm family's
    target, which judges it (core/families/rocm/doctor.py); shared code only keeps, orders
    and prints it."""

    def __lt__(self, other: Self, /) -> bool: ...

    def __hash__(self) -> int: ...


# One container's targets as (SASS, PTX).
Group = tuple[tuple[Target, ...], tuple[Target, ...]]


@dataclass(frozen=True, slots=True)
class Ptx:
    """One PTX entry: its target, its ISA version (None: unread) and its size in bytes."""

    capability: Target
    isa: tuple[int, int] | None
    size: int


@dataclass(frozen=True, slots=True)
class Library:
    """What one library file holds and links (from inspect's reader and its dynamic section)."""

    path: str
    package: str
    sass: tuple[Target, ...] = ()
    ptx: tuple[Ptx, ...] = ()
    amd: tuple[CodeObject, ...] = ()
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
    # the CUDA family's coverage vote (core/families/cuda/doctor.py; a per-arch kernel set is
    # one target a container).
    groups: tuple[Group, ...] = ()
    # cudart linked statically (``libcudart_static_*`` symbols): it needs its CUDA major's
    # driver though no DT_NEEDED says which; its package name (cupy-cuda13x) may.
    static_cudart: bool = False
    # Device-code entries that cannot be read ("sm_90 entry: not a readable cubin (...)"): a
    # damaged file, whose module the CUDA driver refuses to load; such a library never runs.
    unreadable: tuple[str, ...] = ()

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


# A PEP 825 variant wheel's properties: namespace -> feature -> values (core/binaries/variants.py).
Properties = Mapping[str, Mapping[str, tuple[str, ...]]]


@dataclass(frozen=True, slots=True)
class Driver:
    """The GPU driver doctor checks (``version`` None: unknown; ``key``: the version as its
    family orders it, None when unknown or unreadable) and the knowledge base's driver table.
    Built by the family whose driver it is (the NVIDIA driver: the CUDA family's
    ``driver_facts``)."""

    version: str | None
    major_minimum: Mapping[int, str]  # CUDA major -> lowest driver (minor-version compatibility)
    toolkit_driver: Mapping[str, str]  # CUDA release ("13.0") -> its toolkit's driver
    runs_cuda: str | None = None  # the newest CUDA release this driver runs, for messages
    key: tuple[int, ...] | None = None


class Gpu(Protocol):
    """A GPU to judge against, built by its family (core/families/<family>/doctor.py, through
    :func:`capplan.core.families.registry.doctor_gpu` and ``detected_gpu``): the family's own
    GPU type, which judges each library on it."""

    @property
    def label(self) -> str: ...

    @property
    def vendor(self) -> str:
        """The vendor of the family that judges it (nvidia, amd)."""
        ...

    @property
    def device(self) -> object:
        """Its target in its family's own type (a CUDA capability, an AMD processor): what the
        family's pick and messages take."""
        ...

    def cell(self, lib: Library, driver: Driver) -> Cell:
        """How ``lib`` runs on this GPU under ``driver``."""
        ...

    def judge_variant(self, properties: Properties) -> tuple[bool, str] | None:
        """Whether a variant wheel's properties cover this GPU, and why; None when they state
        nothing about its vendor's GPUs."""
        ...

    def to_json(self) -> dict[str, object]:
        """Its fields in ``doctor --json``'s ``gpus`` (docs/doctor.md)."""
        ...


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


def _unloadable_cell(lib: Library) -> Cell:
    """A library the dynamic loader refuses runs on no GPU: dlopen fails before any kernel."""
    name = lib.path.rsplit("/", 1)[-1]
    return Cell("cannot-run", None, f"the loader cannot load {name}: {lib.unloadable}",
                "reinstall the package (the file is damaged)", "unloadable")  # fmt: skip


def _unreadable_cell(lib: Library) -> Cell:
    """A library with a damaged device-code entry: the driver refuses its module (the file is
    damaged), whatever the GPU."""
    name = lib.path.rsplit("/", 1)[-1]
    return Cell("cannot-run", None, f"{name} is damaged: {'; '.join(lib.unreadable)}",
                "reinstall the package (the file is damaged)", "unloadable")  # fmt: skip


def _no_gpu_of_its_vendor(lib: Library, cell: Cell) -> Cell:
    """Other-vendor code is no failure beside a GPU of its own vendor; with none, it cannot run."""
    if lib.amd and not lib.has_cuda_code:
        return Cell("cannot-run", None, f"{cell.reason}; no AMD GPU here runs it",
                    "a CUDA build of the package", "vendor")  # fmt: skip
    return Cell("cannot-run", None, f"{cell.reason}; no NVIDIA GPU here runs it",
                "a ROCm build of the package", "vendor")  # fmt: skip


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


def judged(lib: Library) -> bool:
    """Whether doctor judges ``lib`` on the GPUs: it holds device code (stubs included: judged,
    and said to run), links or embeds a CUDA runtime, or cannot be loaded or read at all. An
    environment with none such holds no GPU code: nothing to check."""
    return bool(
        lib.has_cuda_code
        or lib.stubs
        or lib.static_cudart
        or lib.amd
        or lib.cuda_majors
        or lib.unloadable is not None
        or lib.unreadable
    )


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
    relevant = [lib for lib in libraries if judged(lib)]
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
                row.append(gpu.cell(lib, driver))
            if lib.unloadable is not None:
                row = [_unloadable_cell(lib) for _ in gpus]
            elif lib.unreadable:
                row = [_unreadable_cell(lib) for _ in gpus]
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
