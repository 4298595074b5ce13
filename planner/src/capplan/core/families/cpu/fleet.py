"""The CPU family's part of a plan: the fleet's CPUs (``fleet.cpus``), resolved to CPU
targets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from capplan.core.model.fleet import PlanPart

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan

__all__ = ["CpuFleetEntry", "CpuPart", "cpu_part"]


@dataclass(frozen=True, slots=True)
class CpuFleetEntry:
    """One ``fleet.cpus`` entry as the user wrote it, resolved to a CPU target."""

    label: str
    target: str  # the canonical name: x86-64-v3, sapphirerapids, neoverse_v2
    arch: str  # x86_64, aarch64
    count: int = 1
    system: str = "x86_64-linux"


@dataclass(frozen=True, slots=True)
class CpuPart(PlanPart):
    """The plan's fleet CPUs."""

    family: ClassVar[str] = "cpu"
    holds_gpus: ClassVar[bool] = False

    fleet: tuple[CpuFleetEntry, ...] = ()

    def json_fields(self) -> dict[str, object]:
        return {
            "cpu_fleet": [
                {
                    "cpu": e.label,
                    "target": e.target,
                    "arch": e.arch,
                    "count": e.count,
                    "system": e.system,
                }
                for e in self.fleet
            ]
        }


_NONE = CpuPart()


def cpu_part(plan: Plan) -> CpuPart:
    """The plan's CPU part (an empty one when the plan has none)."""
    return plan.part(CpuPart, _NONE)
