"""The Plan: what to build, for which GPUs, and why. Plain frozen values, sorted, no I/O.

The per-job values (:class:`Variant`, :class:`Serve`, :class:`Decision`) are NamedTuples: a plan
holds tens of thousands of them, and a NamedTuple is built about three times faster than a frozen
dataclass while staying just as immutable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from capplan.core.model.fleet import FleetEntry, PlanPart
from capplan.core.model.runs import RunLevel
from capplan.core.model.spec import FamilySpec

__all__ = [
    "Baselines",
    "CpuCosts",
    "Decision",
    "Plan",
    "Serve",
    "Variant",
]


_Part = TypeVar("_Part", bound=PlanPart)


@dataclass(frozen=True, slots=True)
class CpuCosts:
    """CPU-side builds priced three ways: this plan, one generic build per package, and every
    package built for every fleet CPU target."""

    plan_jobs: int = 0
    plan_minutes: float = 0.0
    plan_size_mb: float = 0.0
    generic_jobs: int = 0
    generic_minutes: float = 0.0
    generic_size_mb: float = 0.0
    every_level_jobs: int = 0
    every_level_minutes: float = 0.0
    every_level_size_mb: float = 0.0


class Serve(NamedTuple):
    """How one variant serves one fleet GPU."""

    gpu: str
    level: RunLevel
    reason: str


class Decision(NamedTuple):
    """One recorded planning decision: kept / substituted / ptx / dropped / unserved / cuda."""

    package: str
    subject: str
    action: str
    reason: str


class Variant(NamedTuple):
    """One build job: a package built for its family's targets (``spec``)."""

    name: str
    package: str
    attr: str
    independent: bool
    fat: bool
    needs: tuple[str, ...]  # names of the variants this one builds against
    minutes: float
    size_mb: float
    big_parallel: bool
    serves: tuple[Serve, ...] = ()
    system: str = "x86_64-linux"
    vendor: str | None = "nvidia"  # "nvidia" or "amd"; None for a CPU-side package's build
    # The family's own spec (issue 42: one typed field, not one per family): CUDA's
    # capabilities, PTX and CUDA release, ROCm's targets and scope, a CPU target; None: generic
    # CPU code (nixpkgs' default) of a CPU-side package.
    spec: FamilySpec | None = None

    @property
    def attr_path(self) -> tuple[str, ...]:
        return tuple(self.attr.split("."))


@dataclass(frozen=True, slots=True)
class Baselines:
    """Total build minutes and output size of the plan and of the two reference strategies."""

    plan_minutes: float
    plan_size_mb: float
    plan_jobs: int
    nixpkgs_default_minutes: float
    nixpkgs_default_size_mb: float
    nixpkgs_default_jobs: int
    naive_minutes: float
    naive_size_mb: float
    naive_jobs: int
    exact_jobs: int  # what share="exact" would build (the saving of "compatible" is against it)


@dataclass(frozen=True)
class Plan:
    system: str  # the first (default) system: its variants carry no system suffix
    packages: tuple[str, ...]  # the requested packages, sorted
    variants: tuple[Variant, ...]  # sorted by name
    decisions: tuple[Decision, ...]
    unserved: tuple[Decision, ...]
    baselines: Baselines
    share: str
    systems: tuple[str, ...] = ()  # every planned system, the default first
    # Each family's part (its fleet entries and policy), in the registry's order: the plan
    # names no family's type (issue 42), the family reads its own part.
    parts: tuple[PlanPart, ...] = ()
    cpu_costs: CpuCosts | None = None  # None: the fleet lists no CPUs
    _index: dict[str, Variant] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {v.name: v for v in self.variants})
        if not self.systems:
            object.__setattr__(self, "systems", (self.system,))

    def variant(self, name: str) -> Variant | None:
        return self._index.get(name)

    def identifiers(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)

    def part(self, kind: type[_Part], empty: _Part) -> _Part:
        """The family's part of type ``kind``; ``empty`` when the plan has none (a plan
        built by hand, a family with nothing to plan)."""
        for part in self.parts:
            if isinstance(part, kind):
                return part
        return empty

    def gpus(self) -> tuple[FleetEntry, ...]:
        """Every family's fleet GPUs, in the registry's order."""
        return tuple(g for part in self.parts if part.holds_gpus for g in part.fleet)

    def variants_of(self, package: str) -> tuple[Variant, ...]:
        return tuple(v for v in self.variants if v.package == package)
