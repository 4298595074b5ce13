"""A target family's planning: the part of the seam (:mod:`capplan.core.model.family`) that the
planner loops over.

:func:`capplan.core.planning.planner.make_plan` runs every family through the same phases, in
this order, so that the first bad input any family finds is the one reported:

1. :meth:`FamilyPlanning.prepare`: the family's own policy inputs (CUDA: ``policy.cuda``);
2. fleet: :meth:`FamilyPlanning.claims_gpu` gives each ``fleet.gpus`` entry to one family
   (the fallback last), :meth:`FamilyPlanning.resolve_fleet` resolves what it was given;
3. per requested package: :meth:`FamilyPlanning.check_vendors`, then each ``extra`` /
   ``exclude`` value through the family that claims it (:meth:`FamilyPlanning.check_target`),
   then :meth:`FamilyPlanning.check_package`;
4. :meth:`FamilyPlanning.validate` (the fleet against the family's policy and knowledge base);
5. :meth:`FamilyPlanning.unplanned` (fleet entries on systems the plan leaves out);
6. :meth:`FamilyPlanning.plan`: the family's variants, decisions and unserved entries;
7. :meth:`FamilyPlanning.costs`: the family's part of the reference strategies.

How Nix receives a family's targets is its ``nix_keys`` function (the plan.json keys of a
variant, :data:`capplan.core.planning.families.NIX_KEYS`); :meth:`FamilyPlanning.plan_fields`
are the family's fields of the Plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from capplan.core.model.family import TargetFamily
from capplan.core.planning.plan import Decision, Variant

__all__ = ["CostPart", "FamilyPlanning", "FamilyResult"]


@dataclass
class FamilyResult:
    """What one family planned."""

    variants: list[Variant] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    unserved: list[Decision] = field(default_factory=list)
    active_systems: tuple[str, ...] = ()  # the systems the family planned builds on


@dataclass(frozen=True, slots=True)
class CostPart:
    """A family's share of the reference strategies (Baselines): nixpkgs' default build and
    the naive one-build-per-fleet-target plan."""

    default_minutes: float = 0.0
    default_size_mb: float = 0.0
    default_jobs: int = 0
    naive_minutes: float = 0.0
    naive_size_mb: float = 0.0
    naive_jobs: int = 0


class FamilyPlanning(Protocol):
    """One family's planning for one (knowledge base, config); made per plan."""

    @property
    def family(self) -> TargetFamily[Any]: ...

    @property
    def fallback(self) -> bool:
        """Whether the family takes every fleet entry and spelling no other family claims."""
        ...

    def prepare(self) -> None: ...

    def claims_gpu(self, label: str) -> bool: ...

    def resolve_fleet(self, labels: Sequence[str]) -> None: ...

    def fleet_labels(self) -> tuple[str, ...]:
        """The fleet entries the family resolved."""
        ...

    def knows(self, package: str) -> bool:
        """Whether the family's knowledge base has the package (a package no family knows is
        an unknown package)."""
        ...

    def check_vendors(self, package: str) -> None: ...

    def check_target(self, package: str, key: str, text: str) -> None: ...

    def check_package(self, package: str) -> None: ...

    def validate(self, requested: Sequence[str]) -> None: ...

    def unplanned(self, requested: Sequence[str]) -> list[Decision]: ...

    def plan(self, requested: Sequence[str], earlier: FamilyResult) -> FamilyResult:
        """``earlier``: what the families before this one planned (variants, decisions) and
        what the plan left unserved so far."""
        ...

    def costs(self, requested: Sequence[str], result: FamilyResult) -> CostPart: ...

    def plan_fields(self) -> dict[str, Any]: ...
