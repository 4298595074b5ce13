"""A conda-forge ``conda_build_config.yaml`` that builds one row per planned NVIDIA variant,
chosen on the user's machine through CEP 46's ``__cuda_arch`` virtual package.

Read from conda-incubator/nvidia-virtual-packages, README.md: ``__cuda_arch`` is the *lowest*
compute capability of the machine's GPUs; a ``cuda-arch`` metapackage (one version per
major.minor, ``run_constrained: __cuda_arch {{ version }}``, ``run_exports: cuda-arch
>={{ version }}``) is pinned in ``host`` at ``{{ cuda_arch_min }}``; rows are zipped
``CUDAARCHS`` (CMake's spelling), ``TORCH_CUDA_ARCH_LIST`` for torch, ``cuda_arch_min`` and
``priority`` (higher first; ``build.number`` adds ``priority * 100``). conda-build's
conda_build_config.yaml rules (docs.conda.io, "Build variants"): every key is a list, keys in one
``zip_keys`` group have lists of equal length, and ``# [expr]`` selectors keep or drop a line.
"""

from __future__ import annotations

from typing import Any

from capplan.core.export.common import (
    Export,
    ExportFile,
    export_variants,
    fleet_nvidia,
    mixed_machine_misses,
    yaml_string,
)
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.planning.plan import Plan, Variant

__all__ = ["conda_config"]


def _cudaarchs(capabilities: tuple[Capability, ...], ptx: tuple[Capability, ...]) -> str:
    """CMake's CUDA_ARCHITECTURES: ``86-real`` is SASS alone, ``86`` SASS and PTX."""
    return ";".join(c.cmake if c in ptx else f"{c.cmake}-real" for c in capabilities)


def _torch_list(capabilities: tuple[Capability, ...], ptx: tuple[Capability, ...]) -> str:
    """torch's TORCH_CUDA_ARCH_LIST: ``8.6``, ``9.0a``, ``12.0+PTX``."""
    return " ".join(f"{c}+PTX" if c in ptx else str(c) for c in capabilities)


def _row(plan: Plan, v: Variant) -> dict[str, Any]:
    nvidia = fleet_nvidia(plan)
    served = [nvidia[s.gpu][0] for s in v.serves if s.gpu in nvidia]
    lowest = min(served) if served else min(v.capabilities)
    notes = []
    misses = mixed_machine_misses(plan, v, keyed_on="lowest")
    if misses:
        notes.append(
            "__cuda_arch is a machine's lowest GPU: a machine that also holds "
            f"{', '.join(misses)} can be given this build, which does not run there"
        )
    if any(c.suffix == "f" for c in v.capabilities):
        notes.append("cuda-arch has no family ('f') versions: the row keys on the base capability")
    return {
        "variants": [v.name],
        "system": v.system,
        "cuda": str(v.cuda),
        "CUDAARCHS": _cudaarchs(v.capabilities, v.ptx),
        "TORCH_CUDA_ARCH_LIST": _torch_list(v.capabilities, v.ptx),
        "cuda_arch_min": str(lowest.base),
        "serves": sorted({s.gpu for s in v.serves}),
        "notes": notes,
        "_key": (v.cuda, lowest.base, v.capabilities),
    }


def _fat(plan: Plan, package: str, rows: list[dict[str, Any]], group: Group) -> dict[str, Any]:
    """The fallback row of one system and CUDA version: the plan's fat build when it has one,
    else every target the group's per-GPU rows hold, in one build."""
    system, cuda = group
    fat = [
        v
        for v in plan.variants
        if v.fat and v.package == package and v.cuda is not None and (v.system, v.cuda) == group
    ]
    mine = [r for r in rows if r["_group"] == group]
    if fat:
        capabilities, ptx = fat[0].capabilities, fat[0].ptx
    else:
        capabilities = tuple(sorted({c for r in mine for c in r["_caps"]}))
        ptx = tuple(sorted({c for r in mine for c in r["_ptx"]}))
    return {
        "variants": [v.name for v in fat],
        "system": system,
        "cuda": str(cuda),
        "CUDAARCHS": _cudaarchs(capabilities, ptx),
        "TORCH_CUDA_ARCH_LIST": _torch_list(capabilities, ptx),
        "cuda_arch_min": str(min(capabilities).base),
        "serves": sorted(
            {g for r in mine for g in r["serves"]} | {s.gpu for v in fat for s in v.serves}
        ),
        "notes": [
            "the fat fallback for clients without __cuda_arch: such a client may install any "
            "row and takes the highest build number, so it gets this row (priority 0) only "
            "when it asks for it"
        ],
        "fat": True,
        "_group": group,
        "_key": (cuda, min(capabilities).base, capabilities),
    }


Group = tuple[str, CudaVersion]


def conda_config(plan: Plan, package: str, version: str, *, torch_like: bool) -> Export:
    """``conda_build_config.yaml`` and ``recipe-snippet.yaml`` for ``package``'s NVIDIA builds."""
    # The builds with a CUDA toolkit: __cuda_arch rows say nothing about ROCm or CPU builds.
    variants = [v for v in export_variants(plan, package) if v.cuda is not None]
    if not variants:
        from capplan.errors import InvalidInputError

        raise InvalidInputError(
            f"package '{package}' has no NVIDIA builds in the plan: __cuda_arch rows are for CUDA",
            hint="export it as wheel-variants or spack, or add NVIDIA GPUs to the fleet",
        )
    rows = []
    for v in variants:
        if v.fat:
            continue
        assert v.cuda is not None
        row = _row(plan, v)
        row.update(_caps=v.capabilities, _ptx=v.ptx, _group=(v.system, v.cuda))
        rows.append(row)
    groups = sorted({(v.system, v.cuda) for v in variants if v.cuda is not None})
    rows.extend(_fat(plan, package, rows, group) for group in groups)
    # Newest first: the highest cuda_arch_min gets the highest priority, the fat rows 0.
    rows.sort(key=lambda r: (r.get("fat", False), tuple(-x for x in _order(r["_key"]))))
    ranked = [r for r in rows if not r.get("fat")]
    for index, row in enumerate(ranked):
        row["priority"] = len(ranked) - index
    for row in rows:
        row.setdefault("priority", 0)
    text = _render(
        package,
        rows,
        torch_like=torch_like,
        systems=len({g[0] for g in groups}) > 1,
        cudas=len({g[1] for g in groups}) > 1,
    )
    entries = tuple({k: r[k] for k in sorted(r) if not k.startswith("_")} for r in rows)
    return Export(
        "conda",
        package,
        version,
        (
            ExportFile("conda_build_config.yaml", text),
            ExportFile(
                "recipe-snippet.yaml",
                _SNIPPET.format(
                    package=package, torch=" and TORCH_CUDA_ARCH_LIST" if torch_like else ""
                ),
            ),
        ),
        entries,
    )


def _order(key: tuple[Any, ...]) -> tuple[int, ...]:
    cuda, lowest, capabilities = key
    return (
        *lowest.sort_key,
        cuda.major,
        cuda.minor,
        *(n for c in capabilities for n in c.sort_key),
    )


# conda-build's platform selectors for the systems capplan plans.
_SELECTORS = {"x86_64-linux": "linux64", "aarch64-linux": "aarch64"}


def _selector(row: dict[str, Any], *, systems: bool, cudas: bool) -> str:
    parts = []
    if systems:
        parts.append(_SELECTORS.get(row["system"], row["system"].replace("-", "_")))
    if cudas:
        parts.append(f"cuda_compiler_version == {yaml_string(row['cuda'])}")
    return f"  # [{' and '.join(parts)}]" if parts else ""


def _render(
    package: str, rows: list[dict[str, Any]], *, torch_like: bool, systems: bool, cudas: bool
) -> str:
    keys = ["CUDAARCHS", *(["TORCH_CUDA_ARCH_LIST"] if torch_like else []), "cuda_arch_min"]
    lines = [
        f"# conda_build_config.yaml for {package}: written by `capplan export conda` from the",
        "# plan. One zipped row per planned NVIDIA build, chosen on a user's machine by",
        "# cuda-arch / __cuda_arch (CEP 46: the machine's lowest compute capability).",
        "#",
    ]
    for r in rows:
        what = ", ".join(r["variants"]) or "fat fallback"
        serves = ", ".join(r["serves"]) or "(no fleet GPU)"
        lines.append(
            f"# priority {r['priority']}: {what} ({r['system']}, CUDA {r['cuda']}, "
            f"CUDAARCHS {r['CUDAARCHS']}) "
            f"serves {serves}"
        )
        lines.extend(f"#   cannot express: {note}" for note in r["notes"])
    lines.append("")
    for key in [*keys, "priority"]:
        lines.append(f"{key}:")
        for r in rows:
            value = str(r[key]) if key == "priority" else yaml_string(r[key])
            selector = _selector(r, systems=systems, cudas=cudas)
            lines.append(f"  - {value}{selector}")
        lines.append("")
    lines.append("zip_keys:")
    lines.append("  -")
    lines.extend(f"    - {key}" for key in [*keys, "priority"])
    return "\n".join(lines) + "\n"


_SNIPPET = """\
# The meta.yaml lines each row of conda_build_config.yaml needs (after the cuda-arch pattern of
# conda-incubator/nvidia-virtual-packages): build.number ranks the rows, so that of the rows a
# machine's __cuda_arch admits the solver takes the newest; cuda-arch pins __cuda_arch.
# CUDAARCHS{torch} reach the build script as the row's variant keys.
{{% set build = 0 %}}

build:
  number: {{{{ build + priority * 100 }}}}

requirements:
  host:
    # {package}'s dependencies must also run on the lowest capability the row serves.
    - cuda-arch {{{{ cuda_arch_min }}}}
"""
