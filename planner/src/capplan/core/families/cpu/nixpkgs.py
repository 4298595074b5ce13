"""The CPU family's part of ``capplan nixpkgs check`` (pure): the recipe arguments its per-level
builds rely on, from the CPU package file (kb/cpu_packages.json): what a build sets (its
``arguments``, ``always`` and override rules) and what its verdict rests on (``relies_on``).
The shared check (core/planning/nixpkgs_check.py) asks it through the registry's
``nixpkgs_checks``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from capplan.core.families.cpu.kb import CpuPackagesFile

__all__ = ["CpuNixpkgs"]


class CpuNixpkgs:
    """The CPU family's :class:`capplan.core.families.base.ReliesOnArguments`; ``packages``:
    the CPU package file (None: no CPU facts are asked)."""

    def __init__(self, packages: CpuPackagesFile | None) -> None:
        self._packages = packages

    def arguments(
        self, variants: Mapping[str, Mapping[str, Any]], packages: Sequence[str]
    ) -> Iterator[tuple[str, tuple[str, ...], str]]:
        entries = self._packages.packages if self._packages is not None else ()
        for name in packages:
            for entry in entries:
                if entry.package != name:
                    continue
                attr = tuple(entry.attr.split("."))
                # Every argument a per-level build sets (overrides and always) and every one
                # its verdict relies on: a pin whose recipe lost one drifts, never silently.
                relied = (*entry.arguments, *entry.always, *entry.relies_on)
                for argument in (*relied, *(rule.argument for rule in entry.overrides)):
                    yield (name, attr, argument)
