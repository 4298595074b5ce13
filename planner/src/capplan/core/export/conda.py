"""A rattler-build v1 ``recipe.yaml`` and its variant config (``variants.yaml``) that build one
row per planned GPU build, chosen on a user's machine through the ``__cuda_arch`` and
``__amdgpu_arch`` virtual packages.

Read from rattler-build's documentation ("Variants": variant keys are lists, keys in one
``zip_keys`` group have equal lengths, and a key reaches the build only where the recipe uses
it, here in ``build.script.env``; "Recipe file": ``schema_version: 1``, ``${{ }}`` Jinja,
``if:``/``then:`` list items) and checked with rattler-build 0.73 (py-rattler-build's
Stage0Recipe.render). The virtual packages are py-rattler 0.28's (rattler_virtual_packages):
``__cuda_arch`` is a machine's *lowest* compute capability (CEP 46, after
conda-incubator/nvidia-virtual-packages; CONDA_OVERRIDE_CUDA_ARCH) and ``__amdgpu_arch`` an AMD
GPU's ISA version (gfx942 is 9.4.2, gfx90a 9.0.10; CONDA_OVERRIDE_AMDGPU_ARCH).

Each row's package requires the virtual package at the versions its code runs on (SASS for X.Y
runs on X.Y to X.9, PTX on every later capability, arch-specific code on X.Y alone, gfx code on
its ISA alone), and ``build.number`` is ``priority * 100``: of the rows a machine admits, the
solver takes the highest number, the newest row. The fallback row (the plan's fat build, else
every target of the rows) states the same as a run constraint, which applies only where the
virtual package exists: a client without it can install the fallback row alone.
"""

from __future__ import annotations

from typing import Any

from capplan.core.export.common import Export, ExportFile, export_variants, yaml_string
from capplan.core.families.registry import export_writer, export_writers, has_export
from capplan.core.planning.plan import Plan
from capplan.errors import InvalidInputError

__all__ = ["conda_config"]

# conda's platform names (subdirs) for the systems capplan plans.
SUBDIRS = {"x86_64-linux": "linux-64", "aarch64-linux": "linux-aarch64"}


def conda_config(plan: Plan, package: str, version: str, *, torch_like: bool) -> Export:
    """``recipe.yaml`` and ``variants.yaml`` (``variants-<subdir>.yaml`` per system when the
    plan has several) for ``package``'s GPU builds."""
    # The GPU builds: CPU builds have no virtual package to key on.
    variants = [v for v in export_variants(plan, package) if has_export("conda", v)]
    if not variants:
        raise InvalidInputError(
            f"package '{package}' has no GPU builds in the plan: conda rows key on "
            "__cuda_arch and __amdgpu_arch",
            hint="export it as wheel-variants or spack, or add GPUs to the fleet",
        )
    rows: list[dict[str, Any]] = []
    for v in variants:
        if v.fat:
            continue
        # The variant's family writes its row (core/families/<family>/export.py).
        _, write_row = export_writer("conda", v)
        rows.append(write_row(plan, v, torch_like))
    systems = sorted({v.system for v in variants}, key=lambda s: (s != plan.system, s))
    fallbacks = [
        r
        for s in systems
        for fallback in export_writers("conda_fallbacks")
        for r in fallback(plan, package, rows, s, torch_like)
    ]
    # Newest first: the highest lowest-capability gets the highest priority, the fallbacks 0.
    rows.sort(key=lambda r: tuple(-x for x in r["_key"]))
    for index, row in enumerate(rows):
        row["priority"] = len(rows) - index
        row["fallback"] = False
    for row in fallbacks:
        row["priority"] = 0
    rows.extend(fallbacks)
    keys = _keys(rows, torch_like)
    files = []
    for system in systems:
        mine = [r for r in rows if r["system"] == system]
        name = "variants.yaml" if len(systems) == 1 else f"variants-{SUBDIRS[system]}.yaml"
        for row in mine:
            row["variant_config"] = name
        files.append(ExportFile(name, _variants(package, system, mine, keys)))
    files.append(ExportFile("recipe.yaml", _recipe(package, version or "0", keys)))
    entries = tuple(
        {k: r[k] for k in sorted(r) if not k.startswith("_") and r[k] is not None} for r in rows
    )
    return Export("conda", package, version, tuple(sorted(files, key=lambda f: f.path)), entries)


def _keys(rows: list[dict[str, Any]], torch_like: bool) -> list[str]:
    """The zipped variant keys: the vendors' target lists, then what every row has."""
    keys = []
    if any(r["cuda"] is not None for r in rows):
        keys += ["CUDAARCHS", *(["TORCH_CUDA_ARCH_LIST"] if torch_like else [])]
    if any(r["cuda"] is None for r in rows):
        keys += ["AMDGPU_TARGETS"]
    return [*keys, "cuda_compiler_version", "gpu_requirement", "fallback", "priority"]


def _value(row: dict[str, Any], key: str) -> str:
    if key == "priority":
        return str(row["priority"])
    if key == "cuda_compiler_version":
        return yaml_string(row["cuda"] or "None")  # conda-forge's value for no CUDA
    if key == "gpu_requirement":
        return yaml_string(row["requires"])
    if key == "fallback":
        return yaml_string("yes" if row["fallback"] else "no")
    return yaml_string(row.get(key, ""))


def _variants(package: str, system: str, rows: list[dict[str, Any]], keys: list[str]) -> str:
    lines = [
        f"# rattler-build variant config for {package} on {SUBDIRS[system]} ({system}): written",
        "# by `capplan export conda` from the plan, one zipped row per planned GPU build. Build",
        f"# with: rattler-build build --recipe recipe.yaml -m <this file> --target-platform "
        f"{SUBDIRS[system]}",
        "#",
    ]
    for r in rows:
        what = ", ".join(r["variants"]) or "fallback"
        serves = ", ".join(r["serves"]) or "(no fleet GPU)"
        targets = r.get("CUDAARCHS") or r.get("AMDGPU_TARGETS")
        lines.append(
            f"# priority {r['priority']}: {what} ({r['requires']}; {targets}) serves {serves}"
        )
        lines.extend(f"#   cannot express: {note}" for note in r["notes"])
    lines.append("")
    if any(r["cuda"] is not None for r in rows):
        lines += ["cuda_compiler:", '  - "cuda-nvcc"', ""]
    for key in keys:
        lines.append(f"{key}:")
        lines.extend(f"  - {_value(r, key)}" for r in rows)
        lines.append("")
    lines.append("zip_keys:")
    lines.append("  -")
    lines.extend(f"    - {key}" for key in keys)
    return "\n".join(lines) + "\n"


def _recipe(package: str, version: str, keys: list[str]) -> str:
    env = [k for k in keys if k.isupper()]
    lines = [
        f"# rattler-build recipe (v1) for {package}'s planned GPU builds: written by `capplan",
        "# export conda`. Add the source and the build script; the variant keys below reach the",
        "# build only because the recipe uses them (rattler-build keeps the keys a recipe uses).",
        "schema_version: 1",
        "",
        "context:",
        f"  name: {yaml_string(package)}",
        f"  version: {yaml_string(version)}",
        "",
        "package:",
        "  name: ${{ name }}",
        "  version: ${{ version }}",
        "",
        "build:",
        "  # Of the rows a machine's virtual packages admit, the solver takes the highest number.",
        "  number: ${{ (priority | int) * 100 }}",
        "  script:",
        "    env:",
        *(f"      {k}: ${{{{ {k} }}}}" for k in env),
        "    file: build",
        "",
        "requirements:",
        "  build:",
        '    - if: cuda_compiler_version != "None"',
        "      then: ${{ compiler('cuda') }}",
        "  run:",
        '    - if: fallback == "no"',
        "      then: ${{ gpu_requirement }}",
        "  run_constraints:",
        "    # The fallback row: a constraint only where __cuda_arch exists.",
        '    - if: fallback == "yes"',
        "      then: ${{ gpu_requirement }}",
    ]
    return "\n".join(lines) + "\n"
