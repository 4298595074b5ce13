"""The ROCm family's part of a plan: its fleet entries (AMD GPUs, resolved to a gfx
processor), the ROCm scope and nixpkgs' default targets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from capplan.core.families.rocm.target import AmdTarget
from capplan.core.model.fleet import PlanPart

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan

__all__ = ["AmdFleetGpu", "RocmPart", "rocm_part"]


@dataclass(frozen=True, slots=True)
class AmdFleetGpu:
    """One AMD fleet entry as the user wrote it, resolved to a gfx processor."""

    label: str
    target: AmdTarget  # the processor, features dropped (nixpkgs never sets them)
    model: str | None  # the KB model name when the label named a GPU
    count: int = 1
    system: str = "x86_64-linux"  # ROCm jobs are x86_64-linux unless fleet.systems says


@dataclass(frozen=True, slots=True)
class RocmPart(PlanPart):
    """The plan's AMD fleet, ``policy.rocm_scope`` and nixpkgs' default ROCm targets."""

    family: ClassVar[str] = "rocm"
    holds_gpus: ClassVar[bool] = True

    fleet: tuple[AmdFleetGpu, ...] = ()
    scope: str = "package"
    # nixpkgs' default ROCm targets (clr.gpuTargets): what a shared ROCm build holds.
    default_targets: tuple[AmdTarget, ...] = ()

    def json_fields(self) -> dict[str, object]:
        return {
            "amd_fleet": [
                {
                    "gpu": g.label,
                    "target": str(g.target),
                    "model": g.model,
                    "count": g.count,
                    "system": g.system,
                }
                for g in self.fleet
            ],
            "rocm_scope": self.scope,
        }


_NONE = RocmPart()


def rocm_part(plan: Plan) -> RocmPart:
    """The plan's ROCm part (an empty one when the plan has none)."""
    return plan.part(RocmPart, _NONE)
