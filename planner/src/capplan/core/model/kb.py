"""The knowledge base: frozen records of the data files in ``capplan/kb/``.

Every entry carries a ``source``. The records are plain dataclasses, so reading the packaged
files needs no validation library (commands that only look things up start fast); pydantic
validates them, strictly (``extra="forbid"``: a typo in a data file is an error, not a silently
ignored field), in the tests, at ``--update-kb`` time and for a user's ``CAPPLAN_KB_DIR``
(:mod:`capplan.core.model.kb_schema`). Loading from disk lives in :mod:`capplan.adapters.kb`;
this module only holds the data and answers questions.

What every family shares is here: the package list the planner, the graph, the costs and the
matrix read (kb/packages.json's entries, through :class:`PackageInfo`, with their
:class:`Cost`). Each family's own records are the family's (CUDA's capability, GPU, PCI and
torch tables and the packages' capability limits: ``core/families/cuda/kb.py``; ROCm's:
``core/families/rocm/kb.py``), and the :class:`KnowledgeBase` holds each family's part, which
the family reads with :meth:`KnowledgeBase.part`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Literal, Protocol, TypeVar, runtime_checkable

from capplan.core.model.records import Record, check_costs, record
from capplan.errors import InvalidInputError, shorten

__all__ = [
    "REFERENCE_CORES",
    "Cost",
    "CostBasisKind",
    "KnowledgeBase",
    "PackageInfo",
    "PackageKind",
    "PricesBuilds",
    "PtxMode",
]

P = TypeVar("P")


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


class PackageInfo(Protocol):
    """One package of kb/packages.json as every family reads it: its attribute, kind,
    dependencies, PTX mode and cost (the entry's record is its family's: the CUDA family's,
    whose limits are written in capabilities)."""

    @property
    def attr(self) -> str: ...

    @property
    def kind(self) -> PackageKind: ...

    @property
    def depends(self) -> tuple[str, ...]: ...

    @property
    def optional(self) -> tuple[str, ...]:
        """Dependencies (also in depends) the package uses only where they build."""
        ...

    @property
    def ptx(self) -> PtxMode: ...

    @property
    def cost(self) -> Cost: ...

    @property
    def big_parallel(self) -> bool: ...

    @property
    def note(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def capability_dependent(self) -> bool: ...


@runtime_checkable
class PricesBuilds(Protocol):
    """A family's part of the knowledge base that prices builds of its own beyond
    packages.json (ROCm's builds and stack libraries): what the plan's cost-basis notes say
    of them."""

    def cost_sources(self) -> tuple[str, dict[str, tuple[CostBasisKind, str]]]:
        """The vendor whose variants the builds are, and each build's cost basis and source."""
        ...


@record
class KnowledgeBase(Record):
    """The data files, validated: the package list every family plans from and each family's
    own part (CUDA's tables, the AMD knowledge base), which the family asks for by its type."""

    packages: Mapping[str, PackageInfo]
    # Each family's part of the knowledge base, one per type; a family without its files (a
    # command that reads only NVIDIA's, a hand-built knowledge base) has none.
    parts: Sequence[object] = ()
    _by_kind: dict[type, object] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_kind", {type(p): p for p in self.parts})

    def part(self, kind: type[P]) -> P | None:
        """The family's part of type ``kind``; None when this knowledge base has none."""
        found = self._by_kind.get(kind)
        return found if isinstance(found, kind) else None

    def package(self, name: str) -> PackageInfo:
        """``packages[name]``; an unknown package is exit 4 with the closest names."""
        info = self.packages.get(name)
        if info is None:
            from capplan.core.model.suggest import closest

            raise InvalidInputError(
                f"unknown package '{shorten(name)}'",
                hint=closest(name, sorted(self.packages), what="package"),
            )
        return info
