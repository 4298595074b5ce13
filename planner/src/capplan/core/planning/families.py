"""The families the planner runs (:mod:`capplan.core.planning.family`), in planning order, and
how each hands its targets to Nix (plan.json keys)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.config import Config
from capplan.core.planning.cpu import CpuModel, CpuPlanning, cpu_nix_keys
from capplan.core.planning.cuda import CudaPlanning, cuda_nix_keys
from capplan.core.planning.family import FamilyPlanning
from capplan.core.planning.plan import Variant
from capplan.core.planning.rocm import RocmPlanning, rocm_nix_keys

__all__ = ["NIX_KEYS", "nix_keys", "planning_families"]


def planning_families(
    kb: KnowledgeBase, config: Config, cpu: CpuModel | None = None
) -> tuple[FamilyPlanning, ...]:
    """Every family's planning for one plan, in planning order (decisions and error messages
    follow it); the fallback family (CUDA) claims what the others leave. The CPU family plans
    last: it keeps CPU levels to the packages no GPU family built."""
    rocm = RocmPlanning(kb, config)
    cuda = CudaPlanning(kb, config, others=(rocm.family,))
    return (cuda, rocm, CpuPlanning(kb, config, cpu))


# Each family's plan.json keys of a variant (pkgs/variant.nix reads them).
NIX_KEYS: tuple[Callable[[Variant], dict[str, Any]], ...] = (
    cuda_nix_keys,
    rocm_nix_keys,
    cpu_nix_keys,
)


def nix_keys(v: Variant) -> dict[str, Any]:
    """Every family's plan.json keys of ``v``."""
    found: dict[str, Any] = {}
    for keys in NIX_KEYS:
        found.update(keys(v))
    return found
