"""A plan's part of one family: the fleet entries it resolved and the policy it planned with.

A shared value type, below the families and the plan (issue 42), as
:class:`~capplan.core.model.spec.FamilySpec` is for a variant: the Plan holds one
:class:`PlanPart` per family, in the registry's order, and names only this base; each family
defines its own in ``core/families/<family>/fleet.py`` (CUDA: the NVIDIA fleet and the CUDA
policy; ROCm: the AMD fleet, the scope and nixpkgs' default targets; CPU: the fleet's CPUs),
with its fleet entry type written in the family's own target type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

__all__ = ["FleetEntry", "PlanPart"]


class FleetEntry(Protocol):
    """What every family's fleet entry has: the label the user wrote, how many the fleet
    runs ([fleet.count]) and the system it lives on."""

    @property
    def label(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def system(self) -> str: ...


class PlanPart:
    """The base of every family's plan part (a frozen dataclass in the family's folder)."""

    __slots__ = ()
    # The family's name, as plan.json and ``--json`` spell it ("cuda", "rocm", "cpu").
    family: ClassVar[str]
    # Whether the fleet entries are GPUs (``fleet.gpus``; a plan's summary counts those) or
    # CPUs (``fleet.cpus``).
    holds_gpus: ClassVar[bool]
    # The fleet entries the family resolved, in its order (plan --json lists them so).
    fleet: Sequence[FleetEntry]

    def json_fields(self) -> dict[str, object]:
        """The family's top-level fields of ``capplan plan --json`` (written in the registry's
        order of the families, after ``share``)."""
        raise NotImplementedError
