"""A variant's family spec: the one typed field through which a plan holds a family's targets.

A shared value type, below the families and the plan (issue 42): :class:`~capplan.core.planning.
plan.Variant` holds one :class:`FamilySpec` (CUDA's capabilities and PTX, ROCm's targets and
scope, a CPU level and its gccarch), each family defines its own in ``core/families/<family>/
spec.py``, and the plan names only this base, never a family's type. How a spec reaches Nix
(its plan.json keys) and ``capplan plan --json`` is the family's own code
(:func:`capplan.core.families.registry.nix_keys`, :func:`~capplan.core.families.registry.
plan_keys`).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["FamilySpec", "spec_order"]


class FamilySpec:
    """The base of every family's spec (a frozen dataclass in the family's folder)."""

    __slots__ = ()
    # The family's name, as plan.json and ``--json`` spell it ("cuda", "rocm", "cpu").
    family: ClassVar[str]

    def order(self) -> tuple[object, ...]:
        """The spec's place among a package's variants (the plan lists them in this order):
        a family's rank, then its own order of target lists."""
        raise NotImplementedError

    def compiled_targets(self) -> int:
        """How many device-code targets the build compiles (CUDA: each capability's SASS
        and each PTX; what a package's measured longest compile unit is scaled by)."""
        raise NotImplementedError

    def dependency_targets(self) -> tuple[object, ...]:
        """What a capability-dependent dependency must be built for too (the planner hands
        it the variant's own list); () where the family checks nothing."""
        raise NotImplementedError


def spec_order(spec: FamilySpec | None) -> tuple[object, ...]:
    """:meth:`FamilySpec.order`, with a generic CPU build (no spec) first."""
    return (0, ()) if spec is None else spec.order()
