"""What every export format shares: the package's variants and the result type (a family's
facts, such as which fleet GPUs a CUDA build runs on, are in core/families/<f>/export.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from capplan.core.families.registry import is_cpu_level, is_cpu_side
from capplan.core.planning.plan import Plan, Variant
from capplan.errors import InvalidInputError, json_printable

__all__ = [
    "Export",
    "ExportFile",
    "export_variants",
    "yaml_string",
]


@dataclass(frozen=True, slots=True)
class ExportFile:
    """One file to write: its path relative to the output folder ('/'-separated) and text."""

    path: str
    text: str


@dataclass(frozen=True, slots=True)
class Export:
    """What an export writes, and per emitted entry (a wheel label, a conda row, a Spack spec)
    the plan variants it comes from and what the format cannot say about it."""

    format: str
    package: str
    version: str
    files: tuple[ExportFile, ...]
    entries: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "package": self.package,
            "version": self.version,
            "files": [f.path for f in self.files],
            "entries": list(self.entries),
        }


def export_variants(plan: Plan, package: str) -> tuple[Variant, ...]:
    """The package's per-target builds (capability-independent dependency jobs excluded), or
    one clear error naming the package when the plan has none."""
    if package not in plan.packages:
        from capplan.core.model.suggest import closest

        hint = closest(package, list(plan.packages), what="package")
        raise InvalidInputError(
            f"package '{package}' is not in the plan (it plans {', '.join(plan.packages)})",
            hint=hint or f"add [packages.{package}] to capplan.toml, or name a planned package",
        )
    # GPU families' per-target builds, and a CPU-side package's builds (per level, hwcaps, or
    # the generic one beside them); not the capability-independent jobs GPU builds need.
    variants = tuple(v for v in plan.variants_of(package) if not v.independent or is_cpu_side(v))
    if all(v.independent and not is_cpu_level(v) for v in variants):
        raise InvalidInputError(
            f"package '{package}' has no per-target builds in the plan",
            hint="one build serves the whole fleet (no per-GPU or per-CPU build): nothing to split",
        )
    return variants


def yaml_string(text: str) -> str:
    """A double-quoted YAML scalar (JSON's string syntax is YAML's double-quoted style)."""
    # NEL, U+2028 and U+2029 are line breaks to YAML 1.1: escaped like every JSON output's.
    return json_printable(json.dumps(text, ensure_ascii=False))
