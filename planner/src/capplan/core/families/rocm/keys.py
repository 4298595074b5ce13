"""How a variant's ROCm spec is written: plan.json's keys (what pkgs/families/rocm.nix reads),
``capplan plan --json``'s fields and a matrix job's (issue 42: each family writes its own spec;
:mod:`capplan.core.families.registry` merges every family's)."""

from __future__ import annotations

from typing import Any

from capplan.core.families.rocm.spec import RocmSpec
from capplan.core.planning.plan import Variant

__all__ = ["rocm_job_keys", "rocm_nix_keys", "rocm_plan_keys", "rocm_spec"]


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
    spec = rocm_spec(v)
    if spec is None:
        return {}
    return {"vendor": v.vendor, "gfx_targets": [str(t) for t in spec.targets]}
