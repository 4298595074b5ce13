"""The CUDA family's spec of a variant: the capabilities it is built for, those that also get
PTX, and the settings of its nixpkgs instance (``cudaForwardCompat``, torch's ``gpuTargets``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from capplan.core.families.cuda.capability import Capability, Target
from capplan.core.model.spec import FamilySpec

__all__ = ["CudaSpec"]


@dataclass(frozen=True, slots=True)
class CudaSpec(FamilySpec):
    """How a CUDA variant is built (plan.json ``capabilities``, ``forward_compat``,
    ``gpu_targets``): every variant built for the same CUDA and capability list shares one
    nixpkgs instance."""

    family: ClassVar[str] = "cuda"

    capabilities: tuple[Capability, ...]  # sorted; () for capability-independent jobs
    ptx: tuple[Capability, ...] = ()  # capabilities that also get PTX
    forward_compat: bool = False
    gpu_targets: tuple[str, ...] = ()  # torch's gpuTargets in the instance's Python set

    def order(self) -> tuple[object, ...]:
        # CUDA's (and the CPU family's) variants first, by capability list.
        return (0, tuple(c.sort_key for c in self.capabilities))

    def compiled_targets(self) -> int:
        return len(self.capabilities) + len(self.ptx)

    def dependency_targets(self) -> tuple[object, ...]:
        return self.capabilities

    @property
    def targets(self) -> tuple[Target, ...]:
        ptx = set(self.ptx)
        return tuple(Target(c, c in ptx) for c in self.capabilities)
