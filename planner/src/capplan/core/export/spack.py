"""A Spack environment (``spack.yaml``) whose specs are the plan's builds of one package.

Read from Spack's documentation ("Environments (spack.yaml)": ``spack: specs:``,
``definitions:``, ``concretizer: unify:``; "CI Pipelines": ``spack ci generate`` reads the
environment's ``ci: pipeline-gen``), its spec grammar (spack/spack,
lib/spack/spack/spec_parser.py: a node is ``name@version %compiler variants``, and ``^`` starts a
dependency node, so what follows ``^cuda@12.9`` constrains cuda) and spack-packages' CI stack
``stacks/ml-linux-x86_64/spack.yaml`` (one stack for the CPU, CUDA and ROCm builds, each group
requiring ``target=x86_64_v3`` with ``+cuda cuda_arch=80`` or ``+rocm amdgpu_target=gfx90a``).

The packages and their variants are spack-packages' recipes
(repos/spack_repo/builtin/packages/<name>/package.py at commit
1e8cf059e35d55c4fe1142fed41785bedf6c7246): a spec names only variants its package has
(CudaPackage gives ``cuda`` and ``cuda_arch``, ROCmPackage ``rocm`` and ``amdgpu_target``).
The several builds of one package cannot be unified into one concretization: ``unify: false``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capplan.core.export.common import Export, ExportFile, export_variants, yaml_string
from capplan.core.families.registry import export_writer
from capplan.core.planning.plan import Plan, Variant
from capplan.errors import InvalidInputError

__all__ = [
    "AMDGPU_TARGET_ONLY",
    "SPACK_PACKAGES",
    "SpackPackage",
    "generic_target",
    "level_target",
    "spack_environment",
]


@dataclass(frozen=True, slots=True)
class SpackPackage:
    """A spack-packages recipe: its name, whether it has CudaPackage's and ROCmPackage's
    variants, and the package carrying them when it has none (py-torchvision builds its CUDA
    code through py-torch's)."""

    name: str
    cuda: bool = False
    rocm: bool = False
    via: str | None = None


# capplan package -> spack-packages recipe (the commit in the module docstring).
SPACK_PACKAGES: dict[str, SpackPackage] = {
    "torch": SpackPackage("py-torch", cuda=True, rocm=True),
    "torchvision": SpackPackage("py-torchvision", via="torch"),
    "magma": SpackPackage("magma", cuda=True, rocm=True),
    "magma-hip": SpackPackage("magma", cuda=True, rocm=True),
    "nccl": SpackPackage("nccl", cuda=True),
    "cupy": SpackPackage("py-cupy", cuda=True, rocm=True),
    "jaxlib": SpackPackage("py-jaxlib", cuda=True, rocm=True),
    "llama-cpp": SpackPackage("llama-cpp", cuda=True, rocm=True),
    "ollama": SpackPackage("ollama", cuda=True),
    "onnxruntime": SpackPackage("py-onnxruntime", cuda=True, rocm=True),
    "tensorflow": SpackPackage("py-tensorflow", cuda=True, rocm=True),
    "gromacs": SpackPackage("gromacs", cuda=True),
    "openblas": SpackPackage("openblas"),
    "numpy": SpackPackage("py-numpy"),
    "onednn": SpackPackage("onednn"),
    "miopen": SpackPackage("miopen-hip"),
    "composable_kernel": SpackPackage("composable-kernel"),
    "hipblaslt": SpackPackage("hipblaslt"),
    "hipsparselt": SpackPackage("hipsparselt", rocm=True),
    "aotriton": SpackPackage("aotriton"),
}
# ROCm libraries whose recipe has amdgpu_target without ROCmPackage's rocm variant.
AMDGPU_TARGET_ONLY = frozenset({"miopen-hip", "composable-kernel", "hipblaslt"})


def generic_target(system: str) -> str:
    """Spack's generic target of a system's family (``x86_64``, ``aarch64``): the CPU code
    nixpkgs' GPU builds carry."""
    return system.split("-", 1)[0]


def level_target(text: str) -> str:
    """archspec's names are Spack's targets; capplan spells the x86-64 levels with hyphens."""
    return text.replace("-", "_") if text.startswith("x86-64") else text


def _specs(plan: Plan, v: Variant, version: str) -> tuple[str, list[str], list[str]]:
    """(group, specs, notes): the variant's family writes its specs (``<family>_spack`` in
    core/families/<family>/export.py) and names its group (Spack's CI stack splits its groups
    the same way)."""
    family, render = export_writer("spack", v)
    specs, notes = render(plan, v, SPACK_PACKAGES[v.package], f"@{version}" if version else "")
    return f"{family}_{generic_target(v.system)}", specs, notes


def spack_environment(plan: Plan, package: str, version: str) -> Export:
    """``spack.yaml``: one definition per vendor and architecture (as the groups of Spack's CI
    stack are split), one spec per planned build."""
    variants = export_variants(plan, package)
    if package not in SPACK_PACKAGES:
        raise InvalidInputError(
            f"package '{package}' has no spack-packages recipe capplan knows",
            hint="export it as wheel-variants or conda "
            f"(known: {', '.join(sorted(SPACK_PACKAGES))})",
        )
    groups: dict[str, list[str]] = {}
    entries: list[dict[str, Any]] = []
    for v in variants:
        group, specs, notes = _specs(plan, v, version)
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
