"""The knowledge base: frozen records of the data files in ``capplan/kb/``.

Every entry carries a ``source``. The records are plain dataclasses, so reading the packaged
files needs no validation library (commands that only look things up start fast); pydantic
validates them, strictly (``extra="forbid"``: a typo in a data file is an error, not a silently
ignored field), in the tests, at ``--update-kb`` time and for a user's ``CAPPLAN_KB_DIR``
(:mod:`capplan.core.model.kb_schema`). Loading from disk lives in :mod:`capplan.adapters.kb`;
this module only holds the data and answers questions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Literal

from capplan.core.families.cuda.capability import ACCEPTED_SPELLINGS, Capability, Target
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.records import Record, check_costs, record
from capplan.errors import DataError, InvalidInputError, shorten

if TYPE_CHECKING:  # only an annotation here: commands without AMD data never import it
    from capplan.core.families.rocm.kb import AmdKnowledgeBase

__all__ = [
    "REFERENCE_CORES",
    "CapField",
    "CapabilitiesFile",
    "CapabilityInfo",
    "ChipInfo",
    "ChipsFile",
    "Cost",
    "CostBasisKind",
    "CudaField",
    "CudaFile",
    "CudaRelease",
    "GpuModel",
    "GpusFile",
    "KnowledgeBase",
    "LeftOutChip",
    "Limits",
    "PackageInfo",
    "PackagesFile",
    "PciDevice",
    "PciFile",
    "SourceNote",
    "TorchFile",
    "TorchRelease",
]


# The value types of fields (kept as names: other modules import them).
CapField = Capability
CudaField = CudaVersion


@record
class SourceNote(Record):
    """What another source says where it disagrees with the entry's main source."""

    source: str
    min_cuda: CudaField | None = None
    max_cuda: CudaField | None = None
    note: str = ""


@record
class CapabilityInfo(Record):
    capability: CapField
    arch: str
    min_cuda: CudaField
    max_cuda: CudaField | None  # inclusive; None: still supported by the newest toolkit
    jetson: bool
    dont_default_after: CudaField | None
    nixpkgs: bool  # whether nixpkgs' capability table has this entry
    note: str
    source: str
    other_sources: tuple[SourceNote, ...] = ()
    # The oldest NVIDIA driver that knows a GPU of this capability (a driver older than the GPU
    # does not enumerate it, whatever the code); None: the toolkit driver of ``min_cuda`` (the
    # first toolkit that supports it ships with the first driver that knows it), when known.
    min_driver: str | None = None
    min_driver_source: str | None = None

    def supported_by(self, cuda: CudaVersion) -> bool:
        return self.min_cuda <= cuda and (self.max_cuda is None or cuda <= self.max_cuda)

    def default_for(self, cuda: CudaVersion) -> bool:
        """nixpkgs' default-list rule over its own table (Jetson, ``a``, ``f``: never defaults)."""
        if not self.nixpkgs or self.jetson or self.capability.suffix or not self.supported_by(cuda):
            return False
        return self.dont_default_after is None or cuda <= self.dont_default_after


@record
class CapabilitiesFile(Record):
    source: str
    capabilities: tuple[CapabilityInfo, ...]


@record
class CudaRelease(Record):
    version: CudaField
    min_driver: str  # minor-version compatibility minimum for this major
    toolkit_driver: str  # the driver the toolkit ships with: full support incl. new PTX
    nixpkgs_set: str | None
    source: str


@record
class CudaFile(Record):
    source: str
    releases: tuple[CudaRelease, ...]


Segment = Literal["datacenter", "workstation", "consumer", "embedded"]


@record
class GpuModel(Record):
    name: str
    aliases: tuple[str, ...]
    capability: CapField
    segment: Segment
    source: str
    chips: tuple[str, ...] = ()  # the chip(s) it is built on, each in chips.json
    pci_ids: tuple[str, ...] = ()  # "10de:2684" (generated models of pci.json)
    note: str = ""
    # The Nix systems its host runs, the default first (issue 12): absent means a discrete card
    # in an x86_64 server; Jetson/DRIVE modules and Grace superchips (GH200, GB200, GB300, GB10)
    # are aarch64-linux.
    systems: tuple[Literal["x86_64-linux", "aarch64-linux"], ...] = ("x86_64-linux",)


@record
class GpusFile(Record):
    source: str
    gpus: tuple[GpuModel, ...]


@record
class ChipInfo(Record):
    """One GPU chip and its one capability (``AD102`` -> 8.9)."""

    chip: str
    capability: CapField
    arch: str
    pci: bool  # False: integrated in a Tegra SoC, no PCI id
    products: str
    note: str
    source: str


@record
class LeftOutChip(Record):
    chip: str
    reason: str


@record
class ChipsFile(Record):
    source: str
    chips: tuple[ChipInfo, ...]
    left_out: tuple[LeftOutChip, ...]


@record
class PciDevice(Record):
    """An NVIDIA PCI device id, its chip, and the models sold with it."""

    id: str
    chip: str
    pci_name: str | None
    models: tuple[str, ...]

    def __post_init__(self) -> None:
        if not _PCI_ID.fullmatch(self.id):
            raise ValueError(f"PCI id {self.id!r} is not 10de:dddd in lower-case hex")


@record
class PciFile(Record):
    source: str
    devices: tuple[PciDevice, ...]
    models: tuple[GpuModel, ...]


_PCI_ID = re.compile(r"10de:[0-9a-f]{4}")

SuffixField = Literal["", "a", "f"]


@record
class Limits(Record):
    allow_from: str | None = None  # "torch@2.12": the allowlist of that release in torch.json
    allow: tuple[CapField, ...] | None = None
    exclude: tuple[CapField, ...] = ()
    min: CapField | None = None
    max: CapField | None = None
    suffixes: tuple[SuffixField, ...] = ("", "a", "f")
    cuda: tuple[CudaField, ...] | None = None
    source: str


# Where a cost's minutes come from (issue 40): "measured" on a real build or compiles (the
# source names the data and the command), or an "estimate" (the source says on what it rests).
CostBasisKind = Literal["measured", "estimate"]
# The builder every cost's minutes are stated for unless its entry names another
# (kb/packages.json's top-level source): minutes scale from its cores to a runner's.
REFERENCE_CORES = 16


@record
class Cost(Record):
    base_minutes: float
    per_target_minutes: float
    base_size_mb: float
    per_target_size_mb: float
    source: str
    basis: CostBasisKind = "estimate"
    # The machine the minutes are stated for: its cores (minutes scale by cores to a runner's,
    # core/planning/runners.py) and, where measured, its CPU class.
    reference_cores: int = REFERENCE_CORES
    reference_cpu: str | None = None
    # Peak resident memory of one compiler process (nvcc), measured (bench/data): how many
    # compiles a runner holds at once (core/planning/memory.py). None: not measured.
    peak_mb_per_compile: float | None = None
    # The longest compile unit's minutes on one core, base + per target (measured only): a job
    # takes at least this long whatever its runner's cores. None: not measured.
    longest_unit_minutes: float | None = None
    longest_unit_per_target_minutes: float | None = None

    def __post_init__(self) -> None:
        check_costs(
            self, "base_minutes", "per_target_minutes", "base_size_mb", "per_target_size_mb"
        )
        if self.peak_mb_per_compile is not None and not self.peak_mb_per_compile > 0:
            raise ValueError(
                f"peak_mb_per_compile must be positive, got {self.peak_mb_per_compile}"
            )
        if not 1 <= self.reference_cores <= 4096:
            raise ValueError(f"reference_cores must be 1 to 4096, got {self.reference_cores}")
        longest = (self.longest_unit_minutes, self.longest_unit_per_target_minutes)
        if (longest[0] is None) != (longest[1] is None):
            raise ValueError("give longest_unit_minutes and longest_unit_per_target_minutes both")
        if longest[0] is not None:
            check_costs(self, "longest_unit_minutes", "longest_unit_per_target_minutes")

    def longest_unit(self, targets: int) -> float | None:
        """The longest compile unit's minutes for ``targets`` targets; None: not measured."""
        if self.longest_unit_minutes is None or self.longest_unit_per_target_minutes is None:
            return None
        return self.longest_unit_minutes + targets * self.longest_unit_per_target_minutes


PackageKind = Literal["capability-dependent", "capability-independent", "ignores-capabilities"]
# How a package gets PTX: `gpu-targets` (torch: `.override { gpuTargets = [ "8.6+PTX" ]; }`),
# `forward-compat` (config.cudaForwardCompat: PTX of the last capability), `inherited`
# (torchvision: builds against its package set's torch, its own kernels follow
# torch.cudaCapabilities, never PTX), `none`.
PtxMode = Literal["gpu-targets", "forward-compat", "inherited", "none"]


@record
class PackageInfo(Record):
    attr: str
    kind: PackageKind
    depends: tuple[str, ...] = ()
    # Dependencies (also in depends) the package uses only where they build, e.g. torch's
    # nccl (`useSystemNccl ? cudaSupport && cudaPackages.nccl.meta.available`): a build for a
    # capability the dependency cannot take goes on without it instead of failing.
    optional: tuple[str, ...] = ()
    ptx: PtxMode
    limits: Limits
    cost: Cost
    big_parallel: bool = False
    note: str = ""
    source: str

    @property
    def capability_dependent(self) -> bool:
        return self.kind == "capability-dependent"


@record
class PackagesFile(Record):
    source: str
    packages: dict[str, PackageInfo]


@record
class TorchRelease(Record):
    version: str
    supported: tuple[CapField, ...]
    named: dict[str, tuple[str, ...]]
    ptx_suffix: bool
    cuda: tuple[CudaField, ...]
    source: str


@record
class TorchFile(Record):
    source: str
    releases: tuple[TorchRelease, ...]


@record
class KnowledgeBase(Record):
    """All data files, validated, with the lookups the planner and the CLI need."""

    capabilities: tuple[CapabilityInfo, ...]
    cuda_releases: tuple[CudaRelease, ...]
    gpus: tuple[GpuModel, ...]
    packages: Mapping[str, PackageInfo]
    torch_releases: tuple[TorchRelease, ...]
    chips: tuple[ChipInfo, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    # The AMD side (kb/amd_*.json); None only for hand-built CUDA-only knowledge bases.
    amd: AmdKnowledgeBase | None = None
    _by_cap: dict[Capability, CapabilityInfo] = field(init=False, repr=False, compare=False)
    _by_cuda: dict[CudaVersion, CudaRelease] = field(init=False, repr=False, compare=False)
    _by_chip: dict[str, ChipInfo] = field(init=False, repr=False, compare=False)
    _by_pci: dict[str, PciDevice] = field(init=False, repr=False, compare=False)
    _by_name: dict[str, GpuModel] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_cap", {c.capability: c for c in self.capabilities})
        object.__setattr__(self, "_by_cuda", {r.version: r for r in self.cuda_releases})
        object.__setattr__(self, "_by_chip", {c.chip: c for c in self.chips})
        object.__setattr__(self, "_by_pci", {d.id: d for d in self.pci_devices})
        object.__setattr__(self, "_by_name", {g.name: g for g in self.gpus})
        if self.chips:
            self._check_chips()

    def _check_chips(self) -> None:
        """Every model's chips exist and share its capability; every device's chip exists."""
        for model in self.gpus:
            for chip in model.chips:
                info = self._by_chip.get(chip)
                if info is None:
                    raise DataError(
                        f"GPU model '{model.name}' names unknown chip '{chip}'",
                        hint="add the chip to kb/chips.json or fix the model",
                    )
                if info.capability != model.capability:
                    raise DataError(
                        f"GPU model '{model.name}' has capability {model.capability} but its chip"
                        f" {chip} has {info.capability}",
                        hint="a chip has one capability: fix kb/chips.json or the model",
                    )
        for device in self.pci_devices:
            if device.chip not in self._by_chip:
                raise DataError(
                    f"PCI device {device.id} names unknown chip '{device.chip}'",
                    hint="regenerate kb/pci.json with planner/scripts/pci_kb.py",
                )
            for name in device.models:
                if name not in self._by_name:
                    raise DataError(
                        f"PCI device {device.id} names unknown model '{name}'",
                        hint="regenerate kb/pci.json with planner/scripts/pci_kb.py",
                    )

    # -- chips and PCI ids --------------------------------------------------------------------
    def chip(self, name: str) -> ChipInfo | None:
        return self._by_chip.get(name)

    def pci_device(self, pci_id: str) -> PciDevice | None:
        """The NVIDIA device with this ``10de:dddd`` id (lower case), or None."""
        return self._by_pci.get(pci_id)

    def gpu(self, name: str) -> GpuModel | None:
        return self._by_name.get(name)

    # -- capabilities -------------------------------------------------------------------------
    def capability(self, cap: Capability) -> CapabilityInfo:
        info = self._by_cap.get(cap)
        if info is None:
            known = ", ".join(
                str(c.capability) for c in self.capabilities if not c.capability.suffix
            )
            raise InvalidInputError(
                f"unknown capability '{cap}'",
                hint=f"known capabilities: {known}; spellings: {ACCEPTED_SPELLINGS}",
            )
        return info

    def check_targets(self, targets: tuple[Target, ...]) -> tuple[Target, ...]:
        """``targets`` when the knowledge base knows every capability in them; else exit 4."""
        for target in targets:
            self.capability(target.capability)
        return targets

    def knows(self, cap: Capability) -> bool:
        return cap in self._by_cap

    def supported(self, cuda: CudaVersion) -> tuple[CapabilityInfo, ...]:
        return tuple(c for c in self.capabilities if c.supported_by(cuda))

    def defaults(self, cuda: CudaVersion) -> tuple[Capability, ...]:
        """The capability list nixpkgs builds when ``cudaCapabilities = []`` for this CUDA."""
        return tuple(sorted(c.capability for c in self.capabilities if c.default_for(cuda)))

    def cuda_supporting(self, cap: Capability) -> tuple[CudaVersion, ...]:
        info = self.capability(cap)
        return tuple(r.version for r in self.cuda_releases if info.supported_by(r.version))

    # -- CUDA releases ------------------------------------------------------------------------
    def cuda_release(self, version: CudaVersion) -> CudaRelease:
        release = self._by_cuda.get(version)
        if release is not None:
            return release
        known = ", ".join(str(r.version) for r in self.cuda_releases)
        raise InvalidInputError(f"unknown CUDA version '{version}'", hint=f"known: {known}")

    def nixpkgs_cuda(self) -> tuple[CudaVersion, ...]:
        """CUDA versions nixpkgs has a package set for, oldest first."""
        return tuple(r.version for r in self.cuda_releases if r.nixpkgs_set)

    # -- packages -----------------------------------------------------------------------------
    def package(self, name: str) -> PackageInfo:
        info = self.packages.get(name)
        if info is None:
            from capplan.core.model.suggest import closest

            raise InvalidInputError(
                f"unknown package '{shorten(name)}'",
                hint=closest(name, sorted(self.packages), what="package"),
            )
        return info

    def torch_release(self, version: str) -> TorchRelease:
        for release in self.torch_releases:
            if release.version == version or _minor(release.version) == _minor(version):
                return release
        known = ", ".join(r.version for r in self.torch_releases)
        raise InvalidInputError(f"unknown torch release '{version}'", hint=f"known: {known}")


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])
