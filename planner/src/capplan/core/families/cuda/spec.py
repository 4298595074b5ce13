"""The CUDA family's spec of a variant: the capabilities it is built for, those that also get
PTX, the CUDA release and package set it is built with, and the settings of its nixpkgs
instance (``cudaForwardCompat``, torch's ``gpuTargets``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from capplan.core.families.cuda.capability import Capability, Target
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.spec import FamilySpec

__all__ = ["CudaSpec"]


@dataclass(frozen=True, slots=True)
class CudaSpec(FamilySpec):
    """How a CUDA variant is built (plan.json ``capabilities``, ``forward_compat``,
    ``gpu_targets``): every variant built for the same CUDA and capability list shares one
    nixpkgs instance."""

    family: ClassVar[str] = "cuda"
    measured_costs: ClassVar[bool] = True

    capabilities: tuple[Capability, ...]  # sorted; () for capability-independent jobs
    ptx: tuple[Capability, ...] = ()  # capabilities that also get PTX
    forward_compat: bool = False
    gpu_targets: tuple[str, ...] = ()  # torch's gpuTargets in the instance's Python set
    # The CUDA release the variant is built with (plan.json ``cuda``); None only in the empty
    # spec another family's variant reads as (keys.py's cuda_spec).
    version: CudaVersion | None = None
    cuda_set: str | None = None  # None: nixpkgs' default CUDA package set
    # Built with a pre-SBSA Jetson capability set: nixpkgs then takes the Jetson
    # (linux-aarch64) redistributables, so such jobs never share them with SBSA jobs.
    jetson: bool = False

    def order(self) -> tuple[object, ...]:
        # CUDA's (and the CPU family's) variants first, by capability list, then by release.
        return (0, tuple(c.sort_key for c in self.capabilities), False, (self.version,))

    def compiled_targets(self) -> int:
        return len(self.capabilities) + len(self.ptx)

    def dependency_targets(self) -> tuple[object, ...]:
        return self.capabilities

    def toolkit(self) -> str | None:
        # The version's own text: one object per release, so dependencies compare by identity.
        return None if self.version is None else self.version.text

    @property
    def targets(self) -> tuple[Target, ...]:
        ptx = set(self.ptx)
        return tuple(Target(c, c in ptx) for c in self.capabilities)
