"""The CUDA family's knowledge-base model: frozen records of ``kb/capabilities.json``,
``cuda.json``, ``gpus.json``, ``chips.json``, ``pci.json``, ``torch.json`` and
``packages.json`` (whose entries hold each package's capability limits), and the family's part
of the knowledge base (:class:`NvidiaKnowledgeBase`, read with :func:`nvidia`).

Every entry carries a ``source``; pydantic validates the records where a file is checked
(:mod:`capplan.core.model.kb_schema`), as every knowledge-base record. Loading from disk lives
in :mod:`capplan.adapters.kb`, which reads these files through the registry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Literal

from capplan.core.families.cuda.capability import ACCEPTED_SPELLINGS, Capability, Target
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.identifiers import check_kb_attr, check_kb_name
from capplan.core.model.kb import Cost, KnowledgeBase, PackageKind, PtxMode
from capplan.core.model.records import Record, record
from capplan.errors import DataError, InvalidInputError

if TYPE_CHECKING:
    from capplan.core.families.base import ReadsKbFile

__all__ = [
    "NVIDIA_KB_FILES",
    "CapField",
    "CapabilitiesFile",
    "CapabilityInfo",
    "ChipInfo",
    "ChipsFile",
    "CudaField",
    "CudaFile",
    "CudaPackageInfo",
    "CudaRelease",
    "GpuModel",
    "GpusFile",
    "LeftOutChip",
    "Limits",
    "NvidiaKnowledgeBase",
    "PackagesFile",
    "PciDevice",
    "PciFile",
    "SourceNote",
    "TorchFile",
    "TorchRelease",
    "cuda_package",
    "nvidia",
    "read_capability_kb",
    "read_nvidia_kb",
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


@record
class CudaPackageInfo(Record):
    """A package of kb/packages.json (shared code reads it as core/model/kb.py's
    PackageInfo), with its capability limits."""

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
    packages: dict[str, CudaPackageInfo]

    def __post_init__(self) -> None:
        for name, info in self.packages.items():
            check_kb_name(name, "package")
            check_kb_attr(info.attr, f"package {name}'s attr")


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
class NvidiaKnowledgeBase(Record):
    """The CUDA family's part of the knowledge base: capabilities, CUDA releases, GPU models,
    chips and PCI ids and torch releases, with the lookups the family and the CLI need (the
    packages, with their capability limits, are the knowledge base's: :func:`cuda_package`)."""

    capabilities: tuple[CapabilityInfo, ...]
    cuda_releases: tuple[CudaRelease, ...]
    gpus: tuple[GpuModel, ...]
    torch_releases: tuple[TorchRelease, ...]
    chips: tuple[ChipInfo, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
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

    # -- torch releases -----------------------------------------------------------------------
    def torch_release(self, version: str) -> TorchRelease:
        for release in self.torch_releases:
            if release.version == version or _minor(release.version) == _minor(version):
                return release
        known = ", ".join(r.version for r in self.torch_releases)
        raise InvalidInputError(f"unknown torch release '{version}'", hint=f"known: {known}")


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def cuda_package(kb: KnowledgeBase, name: str) -> CudaPackageInfo:
    """``kb.package(name)`` with its capability limits: kb/packages.json's entries are this
    family's records (an unknown package is exit 4, as ``kb.package`` says)."""
    info = kb.package(name)
    if not isinstance(info, CudaPackageInfo):
        raise TypeError(f"package {name!r} is no kb/packages.json entry: it has no CUDA limits")
    return info


def nvidia(kb: KnowledgeBase) -> NvidiaKnowledgeBase:
    """The CUDA family's part of ``kb`` (every loaded knowledge base has one)."""
    part = kb.part(NvidiaKnowledgeBase)
    if part is None:
        raise LookupError("this knowledge base has no CUDA part")
    return part


# The CUDA family's knowledge-base files (kb/) and the model of each (the tests validate every
# entry).
NVIDIA_KB_FILES: dict[str, type] = {
    "capabilities.json": CapabilitiesFile,
    "chips.json": ChipsFile,
    "cuda.json": CudaFile,
    "gpus.json": GpusFile,
    "packages.json": PackagesFile,
    "pci.json": PciFile,
    "torch.json": TorchFile,
}


def _by_version(cuda: CudaFile) -> tuple[CudaRelease, ...]:
    return tuple(sorted(cuda.releases, key=lambda r: r.version))


def read_capability_kb(read: ReadsKbFile) -> NvidiaKnowledgeBase:
    """The capability table and the CUDA releases alone (capabilities.json, cuda.json), with
    empty GPU, package, torch, chip and PCI tables."""
    caps = read("capabilities.json", CapabilitiesFile)
    cuda = read("cuda.json", CudaFile)
    return NvidiaKnowledgeBase(
        capabilities=caps.capabilities,
        cuda_releases=_by_version(cuda),
        gpus=(),
        torch_releases=(),
    )


def read_nvidia_kb(
    read: ReadsKbFile,
) -> tuple[Mapping[str, CudaPackageInfo], NvidiaKnowledgeBase]:
    """The package list every family plans from (kb/packages.json, written with the packages'
    capability limits) and the CUDA family's part, from its seven files, each read through
    ``read``."""
    caps = read("capabilities.json", CapabilitiesFile)
    cuda = read("cuda.json", CudaFile)
    gpus = read("gpus.json", GpusFile)
    packages = read("packages.json", PackagesFile)
    torch = read("torch.json", TorchFile)
    chips = read("chips.json", ChipsFile)
    pci = read("pci.json", PciFile)
    part = NvidiaKnowledgeBase(
        capabilities=caps.capabilities,
        cuda_releases=_by_version(cuda),
        # Hand-written models first: on equal match scores they come first.
        gpus=gpus.gpus + pci.models,
        torch_releases=torch.releases,
        chips=chips.chips,
        pci_devices=pci.devices,
    )
    return dict(sorted(packages.packages.items())), part
