"""Target families: the one interface every axis of device code implements.

A *target family* is a kind of build target a package can be specialised for: CUDA
capabilities (``sm86``), ROCm gfx processors (``gfx942``), and next CPU levels (``x86-64-v3``).
Each family answers the same five questions, so the planner, ``explain``, ``detect`` and the
plan.json writer ask them through this interface instead of branching on the vendor:

1. **parse and order** its targets: :meth:`TargetFamily.parse` takes every spelling users
   write, :meth:`TargetFamily.sort_key` is the family's documented order;
2. **runs on**: :meth:`TargetFamily.runs_on` is the best way a device runs a build holding some
   targets, with the reason (explaining never raises);
3. **limits**: :meth:`TargetFamily.package_limit` is why the knowledge base says a package
   cannot build a target (None when it can);
4. **naming**: :meth:`TargetFamily.label` is a target's part of a variant name (``torch-sm86``,
   ``torch-gfx942``);
5. **Nix**: how plan.json hands the targets to Nix lives with each family's planning
   (:mod:`capplan.core.planning.family`), which this model layer must not import.

:meth:`TargetFamily.claims` says which family a user's spelling in ``packages.<name>.extra`` /
``exclude`` belongs to. The implementations are in :mod:`capplan.core.model.families`. This
follows archspec's shape (Spack's microarchitecture database): data with provenance, a partial
order, and a small query API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, TypeVar

from capplan.core.model.compat import RunLevel

__all__ = ["RunsOn", "TargetFamily"]

T = TypeVar("T")


class RunsOn(NamedTuple):
    """How a device runs a build: the family-independent level and why."""

    level: RunLevel
    reason: str

    @property
    def runs(self) -> bool:
        return self.level is not RunLevel.CANNOT_RUN


class TargetFamily(Protocol[T]):
    """One family of build targets (see the module docstring)."""

    @property
    def name(self) -> str:
        """``"cuda"``, ``"rocm"`` (plan.json and ``--json`` spell families this way)."""
        ...

    @property
    def vendor(self) -> str | None:
        """The GPU vendor ``packages.<name>.vendors`` names for the family; None for a family
        every package has (CPU levels)."""
        ...

    def claims(self, text: str) -> bool:
        """Whether a user's target spelling belongs to this family (it is then parsed by it,
        and a bad spelling is an error of this family's)."""
        ...

    def parse(self, text: str) -> T:
        """A target from any spelling users write; bad input is an InvalidInputError (exit 4)."""
        ...

    def sort_key(self, target: T) -> tuple[object, ...]:
        """The family's documented order of targets."""
        ...

    def label(self, target: T) -> str:
        """The target's part of a variant name: ``sm86``, ``gfx942``."""
        ...

    def runs_on(self, device: T, built: Sequence[T]) -> RunsOn:
        """The best way ``device`` runs a build holding ``built``, with the reason."""
        ...

    def package_limit(self, package: str, target: T) -> str | None:
        """Why the knowledge base says ``package`` cannot build ``target``; None when it can
        (or the knowledge base has no entry of this family for the package)."""
        ...
