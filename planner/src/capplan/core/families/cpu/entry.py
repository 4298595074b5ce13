"""The CPU family's line in the registry: what it has, each part imported when first asked
for (:mod:`capplan.core.families.registry` reads this module, and nothing else of the family,
until a command needs a part). It has no GPU family, verifier or GPU detector: its detector
and target model are the registry's CPU adapters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capplan.core.families.base import FamilyPlanning, GpuFamily, NixpkgsCheck
    from capplan.core.families.cpu.kb import CpuPackagesFile
    from capplan.core.families.cpu.planning import CpuModel
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.config import Config

# The adapters (capplan.adapters) that are this family's own: archspec's CPU model, which reads
# the CPU family's package file and builds its planning policies (registry.adapter_owners).
ADAPTERS: tuple[str, ...] = ("capplan.adapters.cpu_archspec",)


def planning(
    kb: KnowledgeBase,
    config: Config,
    *,
    others: Sequence[GpuFamily[Any]],
    cpu: CpuModel | None,
) -> FamilyPlanning:
    from capplan.core.families.cpu.planning import CpuPlanning

    return CpuPlanning(kb, config, cpu)


def nixpkgs_check(
    kb: KnowledgeBase, *, cpu_packages: CpuPackagesFile | None, **_: Any
) -> NixpkgsCheck:
    from capplan.core.families.cpu.nixpkgs import CpuNixpkgs

    return CpuNixpkgs(cpu_packages)
