"""The ROCm family's spec of a variant: its gfx targets and the ROCm package set (scope,
overrides) of its nixpkgs instance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from capplan.core.families.rocm.target import AmdTarget
from capplan.core.model.spec import FamilySpec

__all__ = ["RocmSpec"]


@dataclass(frozen=True, slots=True)
class RocmSpec(FamilySpec):
    """The ROCm package set of an AMD variant (plan.json ``rocm``): every variant with equal
    values shares one nixpkgs instance (``cudaSupport = false; rocmSupport = true;``)."""

    family: ClassVar[str] = "rocm"

    scope: str  # "package" or "stack"
    scope_attr: str | None  # stack: rocmPackages = rocmPackages.<scope_attr>
    targets: tuple[AmdTarget, ...]  # what the variant's device code is for; () = the default list
    # gpuTargets overrides in the instance: "torch" (the Python torch) or a top-level attribute.
    overrides: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The override argument where it is not gpuTargets: ("llama-cpp", "rocmGpuTargets").
    arguments: tuple[tuple[str, str], ...] = ()
    # Libraries changed inside a stack scope, for every consumer of it:
    # (("miopen", (("withComposableKernel", False),)),) where composable_kernel cannot build.
    scope_overrides: tuple[tuple[str, tuple[tuple[str, bool], ...]], ...] = ()

    def order(self) -> tuple[object, ...]:
        # After CUDA's variants of a package, by target list.
        return (1, self.targets, True, ())

    def compiled_targets(self) -> int:
        # () is nixpkgs' default list, which the plan does not count per variant.
        return len(self.targets)

    def dependency_targets(self) -> tuple[object, ...]:
        # A ROCm job's dependencies are built for its target or nixpkgs' default list (its
        # shared builds): nothing to check.
        return ()

    def toolkit(self) -> str | None:
        # nixpkgs' one ROCm release (its rocmPackages), the same for every build.
        return None
