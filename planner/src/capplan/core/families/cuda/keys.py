"""How a variant's CUDA spec is written: plan.json's keys (what pkgs/families/cuda.nix and
pkgs/variant.nix read), ``capplan plan --json``'s fields and a matrix job's (issue 42: each
family writes its own spec; :mod:`capplan.core.families.registry` merges every family's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from capplan.core.families.cuda.spec import CudaSpec
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.planning.plan import Plan, Variant

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase

__all__ = [
    "cuda_job_keys",
    "cuda_nix_keys",
    "cuda_plan_keys",
    "cuda_spec",
    "cuda_table_keys",
    "cuda_verify_targets",
    "cuda_version",
]

# What a variant of another family reads as: no capabilities, no PTX, no instance settings.
_NONE = CudaSpec(capabilities=())


def cuda_spec(v: Variant) -> CudaSpec:
    """``v``'s CUDA spec; an empty one for another family's variant (the keys below are on
    every variant, with empty values there)."""
    spec = v.spec
    return spec if isinstance(spec, CudaSpec) else _NONE


def cuda_version(v: Variant) -> CudaVersion | None:
    """The CUDA release ``v`` is built with; None for another family's variant."""
    spec = v.spec
    return spec.version if isinstance(spec, CudaSpec) else None


def cuda_nix_keys(v: Variant) -> dict[str, Any]:
    """plan.json's CUDA keys, on every variant (readers of earlier plans expect them; an AMD
    variant has none of the values): pkgs/variant.nix imports nixpkgs with
    ``cudaCapabilities``, ``cudaForwardCompat`` and the CUDA package set, and torch's
    ``gpuTargets`` for its Python set."""
    spec = cuda_spec(v)
    return {
        "capabilities": [str(c) for c in spec.capabilities],
        "cuda": None if spec.version is None else str(spec.version),
        "cuda_set": spec.cuda_set,
        "forward_compat": spec.forward_compat,
        "gpu_targets": list(spec.gpu_targets),
    }


def cuda_plan_keys(v: Variant) -> dict[str, Any]:
    """``capplan plan --json``'s CUDA fields, on every variant."""
    spec = cuda_spec(v)
    return {
        "cuda": None if spec.version is None else str(spec.version),
        "capabilities": [str(c) for c in spec.capabilities],
        "ptx": [str(c) for c in spec.ptx],
        "gpu_targets": list(spec.gpu_targets),
        "forward_compat": spec.forward_compat,
    }


def cuda_job_keys(v: Variant) -> dict[str, Any]:
    """A matrix job's CUDA fields, on every job."""
    spec = v.spec  # (no cuda_spec call: asked of every job of a matrix)
    if not isinstance(spec, CudaSpec):
        return {"cuda": None, "capabilities": [], "ptx": []}
    return {
        "cuda": None if spec.version is None else spec.version.text,
        "capabilities": [c.text for c in spec.capabilities],
        "ptx": [c.text for c in spec.ptx],
    }


def cuda_table_keys(v: Variant) -> dict[str, str]:
    """``capplan plan``'s table cells, on every variant: the capabilities, the CUDA version
    and the PTX capabilities."""
    spec = cuda_spec(v)
    return {
        "targets": ", ".join(map(str, spec.capabilities)),
        "toolkit": str(spec.version),
        "ptx": ", ".join(map(str, spec.ptx)),
    }


def cuda_verify_targets(
    plan: Plan, v: Variant, kb: Callable[[], KnowledgeBase]
) -> tuple[object, ...] | None:
    """What a capability-dependent CUDA variant's build must hold (``capplan verify
    --variant``): its capabilities, with PTX where planned; None for every other variant."""
    spec = v.spec
    if not isinstance(spec, CudaSpec) or v.independent:
        return None
    return spec.targets
