"""The CUDA family's part of a plan: its fleet entries (NVIDIA GPUs, resolved to a capability)
and the CUDA policy it planned with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.fleet import PlanPart

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan

__all__ = ["CudaPart", "FleetGpu", "cuda_part"]


@dataclass(frozen=True, slots=True)
class FleetGpu:
    """One fleet entry as the user wrote it, resolved to a capability."""

    label: str
    capability: Capability
    model: str | None  # the KB model name when the label named a GPU
    jetson: bool
    count: int = 1
    system: str = "x86_64-linux"  # where it lives: the KB default or fleet.systems


@dataclass(frozen=True, slots=True)
class CudaPart(PlanPart):
    """The plan's CUDA policy (newest first, as resolved) and NVIDIA fleet."""

    family: ClassVar[str] = "cuda"
    holds_gpus: ClassVar[bool] = True

    policy: tuple[CudaVersion, ...] = ()
    fleet: tuple[FleetGpu, ...] = ()

    def json_fields(self) -> dict[str, object]:
        return {
            "cuda_policy": [str(c) for c in self.policy],
            "fleet": [
                {
                    "gpu": g.label,
                    "capability": str(g.capability),
                    "model": g.model,
                    "jetson": g.jetson,
                    "count": g.count,
                    "system": g.system,
                }
                for g in self.fleet
            ],
        }


_NONE = CudaPart()


def cuda_part(plan: Plan) -> CudaPart:
    """The plan's CUDA part (an empty one when the plan has none)."""
    return plan.part(CudaPart, _NONE)
