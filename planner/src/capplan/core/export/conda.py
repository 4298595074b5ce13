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

import re
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
from capplan.core.families.cuda.keys import cuda_spec
from capplan.core.families.rocm.keys import rocm_spec
from capplan.core.planning.plan import Plan, Variant
from capplan.errors import InvalidInputError

__all__ = ["amdgpu_arch", "conda_config", "cuda_arch_spec"]

# conda's platform names (subdirs) for the systems capplan plans.
SUBDIRS = {"x86_64-linux": "linux-64", "aarch64-linux": "linux-aarch64"}


def _cudaarchs(capabilities: tuple[Capability, ...], ptx: tuple[Capability, ...]) -> str:
    """CMake's CUDA_ARCHITECTURES: ``86-real`` is SASS alone, ``86`` SASS and PTX."""
    return ";".join(c.cmake if c in ptx else f"{c.cmake}-real" for c in capabilities)


def _torch_list(capabilities: tuple[Capability, ...], ptx: tuple[Capability, ...]) -> str:
    """torch's TORCH_CUDA_ARCH_LIST: ``8.6``, ``9.0a``, ``12.0+PTX``."""
    return " ".join(f"{c}+PTX" if c in ptx else str(c) for c in capabilities)


def cuda_arch_spec(capabilities: tuple[Capability, ...], ptx: tuple[Capability, ...]) -> str:
    """The ``__cuda_arch`` versions a build runs on, as a conda version spec: SASS for X.Y on
    X.Y up to the next major (the lowest minor of a major covers the others), PTX on X.Y and
    later, arch-specific code on X.Y alone."""
    lowest_sass: dict[int, Capability] = {}
    exact: list[Capability] = []
    later: list[Capability] = []
    for c in capabilities:
        if c.suffix == "a":
            exact.append(c)
        elif c in ptx:
            later.append(c)
        elif c.major not in lowest_sass or c < lowest_sass[c.major]:
            lowest_sass[c.major] = c
    sass = [c for _, c in sorted(lowest_sass.items())]
    if later:
        lowest_ptx = min(later)
        sass = [c for c in sass if (c.major, c.minor) < (lowest_ptx.major, lowest_ptx.minor)]
    parts = [f">={c.major}.{c.minor},<{c.major + 1}" for c in sass]
    if later:
        parts.append(f">={lowest_ptx.major}.{lowest_ptx.minor}")
    covered = {c.major: c for c in sass}
    for c in exact:  # arch-specific code: X.Y alone, unless a wider part holds it already
        held = covered.get(c.major)
        if (held is None or held.minor > c.minor) and not (
            later and (c.major, c.minor) >= (lowest_ptx.major, lowest_ptx.minor)
        ):
            parts.append(f"=={c.major}.{c.minor}")
    return "|".join(dict.fromkeys(parts))


_GFX = re.compile(r"gfx([0-9]+)([0-9a-f])([0-9a-f])")


def amdgpu_arch(gfx: str) -> str | None:
    """A gfx target's ISA version as ``__amdgpu_arch`` states it: the last two hex digits are
    minor and stepping (gfx942 -> 9.4.2, gfx90a -> 9.0.10, gfx1100 -> 11.0.0), whatever its
    xnack/sramecc features; None for a generic target (gfx9-4-generic), which names no one
    ISA."""
    match = _GFX.fullmatch(gfx.split(":", 1)[0])
    if match is None:
        return None
    major, minor, stepping = match.groups()
    return f"{int(major)}.{int(minor, 16)}.{int(stepping, 16)}"


def _cuda_row(plan: Plan, v: Variant, torch_like: bool) -> dict[str, Any]:
    assert v.cuda is not None
    nvidia = fleet_nvidia(plan)
    served = [nvidia[s.gpu][0] for s in v.serves if s.gpu in nvidia]
    lowest = min(served) if served else min(cuda_spec(v).capabilities)
    notes = []
    misses = mixed_machine_misses(plan, v, keyed_on="lowest")
    if misses:
        notes.append(
            "__cuda_arch is a machine's lowest GPU: a machine that also holds "
            f"{', '.join(misses)} can be given this build, which does not run there"
        )
    row: dict[str, Any] = {
        "variants": [v.name],
        "system": v.system,
        "cuda": str(v.cuda),
        "CUDAARCHS": _cudaarchs(cuda_spec(v).capabilities, cuda_spec(v).ptx),
        "cuda_arch_min": str(lowest.base),
        "requires": f"__cuda_arch {cuda_arch_spec(cuda_spec(v).capabilities, cuda_spec(v).ptx)}",
        "serves": sorted({s.gpu for s in v.serves}),
        "notes": notes,
        # Rows serving fleet GPUs above rows for extra targets (an 'a' or 'f' build beside
        # the plain one): the plan picks those for its GPUs.
        "_key": (
            0,
            int(bool(served)),
            *lowest.base.sort_key,
            v.cuda.major,
            v.cuda.minor,
            *(-n for c in cuda_spec(v).capabilities for n in c.sort_key),
        ),
    }
    if torch_like:
        row["TORCH_CUDA_ARCH_LIST"] = _torch_list(cuda_spec(v).capabilities, cuda_spec(v).ptx)
    return row


def _amd_row(plan: Plan, v: Variant) -> dict[str, Any]:
    spec = rocm_spec(v)
    assert spec is not None
    targets = spec.targets or plan.amd_default_targets
    bases = sorted({t.base for t in targets})
    notes = []
    if not spec.targets:
        notes.append("a shared ROCm build: it holds nixpkgs' default gfx targets")
    if any(t != t.base for t in targets):
        notes.append("__amdgpu_arch has no xnack/sramecc features: the row keys on the ISA")
    isas = [found for t in bases if (found := amdgpu_arch(str(t))) is not None]
    if len(isas) < len(bases):
        notes.append("a generic gfx target names no one ISA: __amdgpu_arch cannot key on it")
    return {
        "variants": [v.name],
        "system": v.system,
        "cuda": None,
        "AMDGPU_TARGETS": ";".join(str(t) for t in targets),
        "requires": "__amdgpu_arch " + ("|".join(f"=={isa}" for isa in isas) or "*"),
        "serves": sorted({s.gpu for s in v.serves}),
        "notes": notes,
        # AMD rows rank below NVIDIA ones: a machine has one or the other virtual package.
        "_key": (-1, *(int(n) for isa in isas for n in isa.split("."))),
    }


def _fallback(
    plan: Plan, package: str, rows: list[dict[str, Any]], system: str, torch_like: bool
) -> list[dict[str, Any]]:
    """Per CUDA version of ``system``: the plan's fat build when it has one, else every target
    its rows hold in one build, unless a row already is that build."""
    found = []
    cudas = sorted({v.cuda for v in plan.variants_of(package) if v.cuda and v.system == system})
    for cuda in cudas:
        fat = [
            v
            for v in plan.variants_of(package)
            if v.fat and v.cuda == cuda and v.system == system and not v.independent
        ]
        mine = [r for r in rows if r["system"] == system and r["cuda"] == str(cuda)]
        if fat:
            capabilities, ptx = cuda_spec(fat[0]).capabilities, cuda_spec(fat[0]).ptx
        else:
            capabilities = tuple(sorted({c for r in mine for c in r["_caps"]}))
            ptx = tuple(sorted({c for r in mine for c in r["_ptx"]}))
        archs = _cudaarchs(capabilities, ptx)
        if not fat and any(r["CUDAARCHS"] == archs for r in mine):
            continue  # one row holds every target already: it is the fallback
        row: dict[str, Any] = {
            "variants": [v.name for v in fat],
            "system": system,
            "cuda": str(cuda),
            "CUDAARCHS": archs,
            "cuda_arch_min": str(min(capabilities).base),
            "requires": f"__cuda_arch {cuda_arch_spec(capabilities, ptx)}",
            "serves": sorted(
                {g for r in mine for g in r["serves"]} | {s.gpu for v in fat for s in v.serves}
            ),
            "notes": [
                "the fallback for clients without __cuda_arch: its __cuda_arch versions are a "
                "run constraint, which applies only where the virtual package exists, so such "
                "a client installs this row and no other"
            ],
            "fallback": True,
        }
        if torch_like:
            row["TORCH_CUDA_ARCH_LIST"] = _torch_list(capabilities, ptx)
        found.append(row)
    return found


def conda_config(plan: Plan, package: str, version: str, *, torch_like: bool) -> Export:
    """``recipe.yaml`` and ``variants.yaml`` (``variants-<subdir>.yaml`` per system when the
    plan has several) for ``package``'s GPU builds."""
    # The GPU builds: CPU builds have no virtual package to key on.
    variants = [
        v for v in export_variants(plan, package) if v.cuda is not None or rocm_spec(v) is not None
    ]
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
        if rocm_spec(v) is not None:
            rows.append(_amd_row(plan, v))
        else:
            row = _cuda_row(plan, v, torch_like)
            row.update(_caps=cuda_spec(v).capabilities, _ptx=cuda_spec(v).ptx)
            rows.append(row)
    systems = sorted({v.system for v in variants}, key=lambda s: (s != plan.system, s))
    fallbacks = [r for s in systems for r in _fallback(plan, package, rows, s, torch_like)]
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
