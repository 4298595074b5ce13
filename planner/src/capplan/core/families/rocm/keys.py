"""How a variant's ROCm spec is written: plan.json's keys (what pkgs/families/rocm.nix reads),
``capplan plan --json``'s fields and a matrix job's (issue 42: each family writes its own spec;
:mod:`capplan.core.families.registry` merges every family's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from capplan.core.families.rocm.fleet import rocm_part
from capplan.core.families.rocm.spec import RocmSpec
from capplan.core.planning.plan import Plan, Variant
from capplan.errors import InvalidInputError

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase

__all__ = [
    "rocm_job_keys",
    "rocm_nix_keys",
    "rocm_plan_keys",
    "rocm_spec",
    "rocm_table_keys",
    "rocm_verify_targets",
]


def rocm_spec(v: Variant) -> RocmSpec | None:
    """``v``'s ROCm spec; None for another family's variant."""
    spec = v.spec
    return spec if isinstance(spec, RocmSpec) else None


def rocm_nix_keys(v: Variant) -> dict[str, Any]:
    """plan.json's AMD keys (only on AMD variants): the ROCm package set pkgs/variant.nix
    imports (``rocm.scope``, ``rocm.scope_attr``, ``rocm.overrides``) and the targets."""
    spec = rocm_spec(v)
    if spec is None:
        return {}
    return {
        "vendor": v.vendor,
        "rocm": {
            "scope": spec.scope,
            "scope_attr": spec.scope_attr,
            "targets": [str(t) for t in spec.targets],
            "overrides": {key: list(values) for key, values in spec.overrides},
            **({"arguments": dict(spec.arguments)} if spec.arguments else {}),
            **(
                {"scope_overrides": {lib: dict(args) for lib, args in spec.scope_overrides}}
                if spec.scope_overrides
                else {}
            ),
        },
    }


def rocm_plan_keys(v: Variant) -> dict[str, Any]:
    """``capplan plan --json``'s ROCm fields, on every variant (empty on others)."""
    spec = rocm_spec(v)
    return {
        "gfx_targets": [str(t) for t in spec.targets] if spec is not None else [],
        "rocm_scope": spec.scope if spec is not None else None,
    }


def rocm_job_keys(v: Variant) -> dict[str, Any]:
    """A matrix job's ROCm fields: on AMD jobs only (CUDA jobs keep their shape)."""
    spec = v.spec  # (no rocm_spec call: asked of every job of a matrix)
    if not isinstance(spec, RocmSpec):
        return {}
    return {"vendor": v.vendor, "gfx_targets": [str(t) for t in spec.targets]}


def rocm_table_keys(v: Variant) -> dict[str, str]:
    """``capplan plan``'s table cells of an AMD variant: its gfx targets, and ROCm and its
    scope in the CUDA column."""
    spec = rocm_spec(v)
    if spec is None:
        return {}
    if spec.scope_attr is not None:
        toolkit = f"ROCm (rocmPackages.{spec.scope_attr})"
    else:
        toolkit = "ROCm" if spec.targets else "ROCm (default targets)"
    return {"targets": ", ".join(map(str, spec.targets)), "toolkit": toolkit}


def rocm_verify_targets(
    plan: Plan, v: Variant, kb: Callable[[], KnowledgeBase]
) -> tuple[object, ...] | None:
    """What an AMD variant's build must hold (``capplan verify --variant``): its gfx targets;
    a shared ROCm build, such as ``onnxruntime-rocm``, holds nixpkgs' default list
    (``clr.gpuTargets``). None for every other variant."""
    spec = rocm_spec(v)
    if spec is None:
        return None
    from capplan.core.families.rocm.kb import AmdKnowledgeBase

    amd = kb().part(AmdKnowledgeBase)
    build = amd.builds.get(v.package) if amd is not None else None
    if build is not None and not build.device_code:
        raise InvalidInputError(
            f"variant '{v.name}' holds no GPU code: {v.package}'s ROCm build compiles "
            "none (it only links the torch of its set)",
            hint="verify the variant it builds against, such as "
            + (", ".join(v.needs) or "torch-gfx942"),
        )
    return spec.targets or rocm_part(plan).default_targets
