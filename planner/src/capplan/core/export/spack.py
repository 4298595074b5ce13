"""A Spack environment (``spack.yaml``) whose specs are the plan's builds of one package.

Read from Spack's documentation ("Environments (spack.yaml)": ``spack: specs:``,
``definitions:``, ``concretizer: unify:``; "CI Pipelines": ``spack ci generate`` reads the
environment's ``ci: pipeline-gen``) and its CI stacks (spack/spack-packages,
stacks/ml-linux-x86_64-cuda/spack.yaml: one stack per vendor and architecture, ``+cuda
cuda_arch=80`` / ``+rocm amdgpu_target=...`` / ``target=x86_64_v3``). Spack's ``cuda_arch`` and
``amdgpu_target`` are multi-valued variants (``cuda_arch=80,86``). The several builds of one
package cannot be unified into one concretization, so ``unify: false``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capplan.core.export.common import Export, ExportFile, export_variants, yaml_string
from capplan.core.planning.plan import Plan, Variant

__all__ = ["spack_environment", "spack_name"]


def spack_name(package: str, attr: str) -> str:
    """Spack's package name: its Python packages are ``py-<name>`` (py-torch), the rest keep
    nixpkgs' name (magma, nccl, gromacs)."""
    return f"py-{package}" if attr.startswith("python3Packages.") else package


def _target(text: str) -> str:
    """archspec's names are Spack's targets; capplan spells the x86-64 levels with hyphens."""
    return text.replace("-", "_") if text.startswith("x86-64") else text


def _cuda(plan: Plan, v: Variant, name: str) -> tuple[str, list[str]]:
    notes = []
    spec = f"{name} +cuda ~rocm cuda_arch={','.join(c.cmake for c in v.capabilities)}"
    spec += f" ^cuda@{v.cuda}"
    if v.ptx:
        notes.append(
            "cuda_arch has no PTX choice: Spack's CudaPackage flags decide what PTX "
            f"is embedded, not the plan's compute_{max(v.ptx).cmake}"
        )
    return spec, notes


def _rocm(plan: Plan, v: Variant, name: str) -> tuple[str, list[str]]:
    assert v.rocm is not None
    targets = v.rocm.targets or plan.amd_default_targets
    return f"{name} ~cuda +rocm amdgpu_target={','.join(str(t) for t in targets)}", []


def _cpu(plan: Plan, v: Variant, name: str) -> tuple[str, list[str]]:
    if v.cpu is None:
        return f"{name} target={v.system.split('-', 1)[0]}", []
    if v.cpu.target is None:
        return " | ".join(f"{name} target={_target(level)}" for level, _ in v.cpu.hwcaps), [
            "a glibc-hwcaps layout has no Spack spelling: one spec per level it holds"
        ]
    return f"{name} target={_target(v.cpu.target)}", []


# Each target family's spec and its stack (Spack's CI splits stacks the same way).
_FAMILIES: dict[str | None, tuple[str, Callable[[Plan, Variant, str], tuple[str, list[str]]]]] = {
    "nvidia": ("cuda", _cuda),
    "amd": ("rocm", _rocm),
    None: ("cpu", _cpu),
}


def _spec(plan: Plan, v: Variant) -> tuple[str, str, list[str]]:
    """(group, specs joined by ' | ', notes)."""
    arch = v.system.split("-", 1)[0]
    group, render = _FAMILIES[v.vendor]
    spec, notes = render(plan, v, spack_name(v.package, v.attr))
    if group != "cpu" and v.system != plan.system:
        spec += f" target={arch}"
    return f"{group}_{arch}", spec, notes


def spack_environment(plan: Plan, package: str, version: str) -> Export:
    """``spack.yaml``: one definition per vendor and architecture (as Spack's CI stacks are
    split), one spec per planned build."""
    groups: dict[str, list[str]] = {}
    entries: list[dict[str, Any]] = []
    for v in export_variants(plan, package):
        group, joined, notes = _spec(plan, v)
        if version:
            joined = " | ".join(s.replace(" ", f"@{version} ", 1) for s in joined.split(" | "))
        specs = joined.split(" | ")
        for spec in specs:
            if spec not in groups.setdefault(group, []):
                groups[group].append(spec)
        entries.append({"variants": [v.name], "group": group, "specs": specs, "notes": notes})
    lines = [
        f"# Spack environment for {package}: written by `capplan export spack` from the plan,",
        "# one spec per planned build. Use: spack -e . concretize && spack -e . install,",
        "# or spack -e . ci generate (add the mirror and runner your pipeline uses).",
        "spack:",
        "  view: false",
        "  concretizer:",
        "    unify: false",
        "  definitions:",
    ]
    for group in sorted(groups):
        lines.append(f"  - {group}:")
        lines.extend(f"    - {yaml_string(spec)}" for spec in groups[group])
    lines.append("  specs:")
    lines.extend(f"  - ${group}" for group in sorted(groups))
    lines += [
        "  ci:",
        "    pipeline-gen:",
        "    - build-job:",
        "        tags: [capplan]",
    ]
    return Export(
        "spack",
        package,
        version,
        (ExportFile("spack.yaml", "\n".join(lines) + "\n"),),
        tuple(entries),
    )
