"""Nix systems in a plan (issue 12): where a GPU lives, variant-name suffixes and CI runner
labels. Pure. (The Jetson redistributable split on aarch64-linux is the CUDA family's:
core/families/cuda/redist.py.)
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AARCH64",
    "ARCH_LABELS",
    "DEFAULT_RUNNERS_OS",
    "SYSTEMS",
    "X86_64",
    "system_suffix",
    "variant_of_attr",
]

X86_64 = "x86_64-linux"
AARCH64 = "aarch64-linux"
# The systems nixpkgs builds CUDA for (cudaPackages evaluate only on these two Linux systems).
SYSTEMS = (X86_64, AARCH64)

# GitHub-hosted runners per system (nix-github-actions' mapping; the arm64 Ubuntu image runs
# aarch64-linux natively). `[policy.runners_os]` overrides them
# (core/planning/workflow.runner_labels).
DEFAULT_RUNNERS_OS: Mapping[str, tuple[str, ...]] = {
    X86_64: ("ubuntu-latest",),
    AARCH64: ("ubuntu-24.04-arm",),
}


# The architecture label GitHub gives every self-hosted runner, per system (X64 on x86-64,
# ARM64 on aarch64: docs.github.com, "Using labels with self-hosted runners"; labels are
# case-insensitive). A self-hosted label list without one lets a runner of the other
# architecture take a job it cannot build (issue 46).
ARCH_LABELS: Mapping[str, str] = {
    X86_64: "X64",
    AARCH64: "ARM64",
    "x86_64-darwin": "X64",
    "aarch64-darwin": "ARM64",
    "i686-linux": "X86",
    "armv7l-linux": "ARM",
}


def system_suffix(system: str, default: str) -> str:
    """The variant-name suffix of ``system`` in a plan whose first system is ``default``:
    none for the default, else ``-`` and the CPU (``-aarch64``, ``-x86_64``)."""
    return "" if system == default else "-" + system.split("-", 1)[0]


_OUTPUT_SETS = {"packages", "legacyPackages", "hydraJobs", "checks"}


def variant_of_attr(attr: str) -> str:
    """The variant name in a nix-eval-jobs ``attr`` of any flake layout: ``torch-sm86``,
    ``x86_64-linux.torch-sm86`` (``--flake .#packages``), ``torch-sm86.x86_64-linux``
    (``.#hydraJobs``) or ``packages.aarch64-linux.torch-sm87-aarch64``. Variant names never
    contain a dot, and names are unique across systems, so dropping the system parts is enough.
    """
    parts = [p for p in attr.split(".") if p not in _OUTPUT_SETS and p not in DEFAULT_RUNNERS_OS]
    return ".".join(parts)
