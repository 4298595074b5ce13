"""The Jetson redistributable split (issue 12): on aarch64-linux, which CUDA builds take the
Jetson (``linux-aarch64``) redistributables rather than the SBSA ones.

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

from collections.abc import Iterable

from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.systems import AARCH64

__all__ = ["is_pre_sbsa_jetson", "uses_jetson_redist"]

_SBSA_FROM = CudaVersion(13, 0)
_THOR = Capability.parse("10.1")


def is_pre_sbsa_jetson(cap: Capability, jetson: bool, cuda: CudaVersion) -> bool:
    """A Jetson capability that makes a build a Jetson (linux-aarch64) build under ``cuda``."""
    return jetson and cuda < _SBSA_FROM and cap.base < _THOR.base


def uses_jetson_redist(
    system: str, cuda: CudaVersion, caps: Iterable[tuple[Capability, bool]]
) -> bool:
    """Whether a build of ``caps`` (each with its Jetson flag) takes the Jetson redistributables."""
    return system == AARCH64 and any(is_pre_sbsa_jetson(c, j, cuda) for c, j in caps)
