"""Nix systems in a plan (issue 12): where a GPU lives, variant-name suffixes, the Jetson
redistributable split and CI runner labels. Pure.

Sources (NixOS/nixpkgs):
- pkgs/development/cuda-modules/packages/backendStdenv.nix: ``hostRedistSystem =
  getRedistSystem { cudaCapabilities; cudaMajorMinorVersion; system; }`` -- on aarch64-linux a
  capability set with a pre-SBSA Jetson capability takes the ``linux-aarch64`` (Jetson)
  redistributables, every other set ``linux-sbsa``; cudnn and TensorRT versions differ too.
- ``_cuda/lib`` (getRedistSystem) and NIXPKGS.md section 3: the "pre-SBSA" rule. On CUDA 12.x
  the Jetson capabilities below 10.1 (7.2 Xavier, 8.7 Orin) are Jetson builds that cannot be
  mixed with other capabilities; from CUDA 13, 8.7 and 11.0 (Thor) use the SBSA toolkit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.version import CudaVersion

__all__ = [
    "AARCH64",
    "DEFAULT_RUNNERS_OS",
    "SYSTEMS",
    "X86_64",
    "is_pre_sbsa_jetson",
    "system_suffix",
    "uses_jetson_redist",
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

_SBSA_FROM = CudaVersion(13, 0)
_THOR = Capability.parse("10.1")


def system_suffix(system: str, default: str) -> str:
    """The variant-name suffix of ``system`` in a plan whose first system is ``default``:
    none for the default, else ``-`` and the CPU (``-aarch64``, ``-x86_64``)."""
    return "" if system == default else "-" + system.split("-", 1)[0]


def is_pre_sbsa_jetson(cap: Capability, jetson: bool, cuda: CudaVersion) -> bool:
    """A Jetson capability that makes a build a Jetson (linux-aarch64) build under ``cuda``."""
    return jetson and cuda < _SBSA_FROM and cap.base < _THOR.base


def uses_jetson_redist(
    system: str, cuda: CudaVersion, caps: Iterable[tuple[Capability, bool]]
) -> bool:
    """Whether a build of ``caps`` (each with its Jetson flag) takes the Jetson redistributables."""
    return system == AARCH64 and any(is_pre_sbsa_jetson(c, j, cuda) for c, j in caps)


_OUTPUT_SETS = {"packages", "legacyPackages", "hydraJobs", "checks"}


def variant_of_attr(attr: str) -> str:
    """The variant name in a nix-eval-jobs ``attr`` of any flake layout: ``torch-sm86``,
    ``x86_64-linux.torch-sm86`` (``--flake .#packages``), ``torch-sm86.x86_64-linux``
    (``.#hydraJobs``) or ``packages.aarch64-linux.torch-sm87-aarch64``. Variant names never
    contain a dot, and names are unique across systems, so dropping the system parts is enough.
    """
    parts = [p for p in attr.split(".") if p not in _OUTPUT_SETS and p not in DEFAULT_RUNNERS_OS]
    return ".".join(parts)
