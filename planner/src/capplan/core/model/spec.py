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

__all__ = ["FamilySpec", "spec_order", "spec_toolkit"]


class FamilySpec:
    """The base of every family's spec (a frozen dataclass in the family's folder)."""

    __slots__ = ()
    # The family's name, as plan.json and ``--json`` spell it ("cuda", "rocm", "cpu").
    family: ClassVar[str]
    # Whether the knowledge base's measured build of a package (kb/packages.json's cost: the
    # peak memory of one compile, its longest units) describes the family's builds: only
    # nvcc's are measured, a ROCm or CPU build is not.
    measured_costs: ClassVar[bool] = False

    def order(self) -> tuple[object, ...]:
        """The spec's place among a package's variants (the plan lists them in this order):
        a family's rank, then its own order of target lists, then of builds of one target
        list: ``(False, (release,))`` by the toolkit release they are compiled with (CUDA's),
        ``(True, ())`` for a family whose builds carry none (after those that do)."""
        raise NotImplementedError

    def compiled_targets(self) -> int:
        """How many device-code targets the build compiles (CUDA: each capability's SASS
        and each PTX; what a package's measured longest compile unit is scaled by)."""
        raise NotImplementedError

    def dependency_targets(self) -> tuple[object, ...]:
        """What a capability-dependent dependency must be built for too (the planner hands
        it the variant's own list); () where the family checks nothing."""
        raise NotImplementedError

    def toolkit(self) -> str | None:
        """The toolkit release the build is compiled with, as users write it (CUDA's
        ``12.9``), which every dependency of the variant shares (one package set per build
        closure); None where the family's builds carry no release of their own."""
        raise NotImplementedError


def spec_order(spec: FamilySpec | None) -> tuple[object, ...]:
    """:meth:`FamilySpec.order`, with a generic CPU build (no spec) first."""
    return _GENERIC if spec is None else spec.order()


def spec_toolkit(spec: FamilySpec | None) -> str | None:
    """:meth:`FamilySpec.toolkit`; None for a generic CPU build (no spec)."""
    return None if spec is None else spec.toolkit()


# A generic CPU build's place: with the CPU family's (no toolkit release).
_GENERIC: tuple[object, ...] = (0, (), True, ())
