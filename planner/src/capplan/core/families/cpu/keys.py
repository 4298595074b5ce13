"""How a variant's CPU spec is written: plan.json's ``cpu`` key (what pkgs/families/cpu.nix
reads), ``capplan plan --json``'s field and a matrix job's (issue 42: each family writes its
own spec; :mod:`capplan.core.families.registry` merges every family's)."""

from __future__ import annotations

from typing import Any

from capplan.core.families.cpu.spec import CpuSpec
from capplan.core.planning.plan import Variant

__all__ = [
    "GCCARCH_PREFIX",
    "cpu_job_keys",
    "cpu_json",
    "cpu_nix_keys",
    "cpu_plan_keys",
    "cpu_spec",
    "cpu_table_keys",
    "gccarch_feature",
]

# nixpkgs' make-derivation.nix: requiredSystemFeatures gains "gccarch-${gcc.arch}".
GCCARCH_PREFIX = "gccarch-"


def cpu_spec(v: Variant) -> CpuSpec | None:
    """``v``'s CPU spec; None for generic CPU code and for a GPU family's variant."""
    spec = v.spec
    return spec if isinstance(spec, CpuSpec) else None


def cpu_json(spec: CpuSpec | None) -> dict[str, Any] | None:
    """plan.json's ``cpu`` object: null for generic CPU code; the target and how the build
    gets it (the package's own options, ``override``, or compiler flags, ``cflags``); or, for a
    ``<package>-hwcaps`` variant, the variant built for each psABI level."""
    if spec is None:
        return None
    if spec.mechanism == "hwcaps":
        return {"hwcaps": dict(spec.hwcaps)}
    return {
        "target": spec.target,
        "arch": spec.arch,
        "mechanism": spec.mechanism,
        "override": dict(spec.override),
        "cflags": list(spec.cflags),
        # make-derivation.nix adds requiredSystemFeatures "gccarch-${gcc.arch}" to every
        # derivation of a set with gcc.arch, so only a builder that declares the feature (its
        # CPU runs that code) builds and tests it; pkgs/variant.nix does the same for this one
        # package.
        "gccarch": spec.gccarch,
    }


def gccarch_feature(v: Variant) -> str | None:
    """The ``gccarch-<arch>`` system feature a CPU-level variant's derivation requires; None
    for generic CPU code and ``-hwcaps`` outputs (which copy builds, running none of them)."""
    spec = cpu_spec(v)
    if spec is None or spec.gccarch is None:
        return None
    return GCCARCH_PREFIX + spec.gccarch


def cpu_nix_keys(v: Variant) -> dict[str, Any]:
    """plan.json's CPU key, on every variant (pkgs/variant.nix reads ``cpu``); a CPU-side
    variant (no GPU vendor) also says ``"vendor": null``, so Nix builds it in a plain package
    set rather than a CUDA one (plans before CPU levels had no such variant)."""
    keys: dict[str, Any] = {"cpu": cpu_json(cpu_spec(v))}
    if v.vendor is None:
        keys["vendor"] = None
    return keys


def cpu_plan_keys(v: Variant) -> dict[str, Any]:
    """``capplan plan --json``'s ``cpu``: the CPU target the variant is built for; None:
    generic CPU code (or a GPU family's variant)."""
    spec = cpu_spec(v)
    return {"cpu": spec.target if spec is not None else None}


def cpu_job_keys(v: Variant) -> dict[str, Any]:
    """A matrix job's CPU fields: on CPU-level jobs only, what the runner's CPU must have
    before it declares the job's gccarch feature (workflow.CPU_CHECK)."""
    spec = v.spec  # (no cpu_spec call: asked of every job of a matrix)
    if not isinstance(spec, CpuSpec) or spec.gccarch is None:
        return {}
    return {"cpu_features": list(spec.features)}


def cpu_table_keys(v: Variant) -> dict[str, str]:
    """``capplan plan``'s CPU table cell: the target a CPU-side build is for ("generic", a
    target, or the levels of a glibc-hwcaps layout)."""
    spec = cpu_spec(v)
    if spec is None:
        return {"cpu": "generic"}
    if spec.target is None:
        return {"cpu": "glibc-hwcaps: " + ", ".join(level for level, _ in spec.hwcaps)}
    return {"cpu": spec.target}
