"""The target families capplan knows (:mod:`capplan.core.model.family`): CUDA capabilities and
ROCm gfx processors. Everything family-specific about parsing, order, "runs on", a package's
limits and naming is reached through these objects; the modules they wrap
(:mod:`~capplan.core.model.capability`, :mod:`~capplan.core.model.compat`,
:mod:`~capplan.core.model.amd`, :mod:`~capplan.core.model.amd_kb`) stay the family's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capplan.core.model.amd import AmdRunLevel, AmdTarget, amd_how_runs
from capplan.core.model.amd_kb import AmdKnowledgeBase
from capplan.core.model.capability import Capability
from capplan.core.model.compat import RunLevel, how_runs, is_jetson
from capplan.core.model.cuda import CudaVersion
from capplan.core.model.family import RunsOn, TargetFamily
from capplan.core.model.kb import KnowledgeBase, Limits
from capplan.core.model.vendors import looks_like_gfx

__all__ = [
    "CudaFamily",
    "RocmFamily",
    "cuda_limits_reason",
    "family_for_text",
    "gpu_families",
]


def cuda_limits_reason(
    kb: KnowledgeBase, name: str, limits: Limits, cap: Capability, cuda: CudaVersion | None
) -> str | None:
    """Why a package's CUDA limits (kb/packages.json ``limits``) refuse ``cap``; None when they
    allow it. ``cuda`` None: the CUDA range is not checked."""
    if cap.suffix not in limits.suffixes:
        kind = {"a": "arch-specific", "f": "family-specific"}.get(cap.suffix, "baseline")
        return f"{name} does not accept {kind} capabilities like {cap}"
    if limits.allow_from:
        base_pkg, _, version = limits.allow_from.partition("@")
        release = kb.torch_release(version)
        if cap not in release.supported:
            return f"{cap} is not in {base_pkg} {release.version}'s supported_arches"
    if limits.allow is not None and cap not in limits.allow:
        return f"{cap} is not in {name}'s allowlist"
    if cap in limits.exclude:
        return f"{name} excludes {cap} ({limits.source})"
    if limits.min is not None and cap.base < limits.min.base:
        return f"{name} needs capability >= {limits.min}"
    if limits.max is not None and cap.base > limits.max.base:
        return f"{name} supports capabilities up to {limits.max}"
    if cuda is not None and limits.cuda is not None and cuda not in limits.cuda:
        return f"{name} does not build with CUDA {cuda}"
    return None


class CudaFamily:
    """NVIDIA CUDA capabilities (``8.6``, ``sm_90a``): the fallback family, which claims every
    spelling no other family does (a bad one is then a capability error)."""

    name = "cuda"
    vendor: str | None = "nvidia"

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb

    def claims(self, text: str) -> bool:
        return True

    def parse(self, text: str) -> Capability:
        return Capability.parse(text)

    def sort_key(self, target: Capability) -> tuple[object, ...]:
        return target.sort_key

    def label(self, target: Capability) -> str:
        return target.slug

    def runs_on(self, device: Capability, built: Sequence[Capability]) -> RunsOn:
        verdict = how_runs(device, built, (), jetson=is_jetson(device, self.kb))
        return RunsOn(verdict.level, verdict.reason)

    def package_limit(self, package: str, target: Capability) -> str | None:
        info = self.kb.package(package)
        return cuda_limits_reason(self.kb, package, info.limits, target, None)


_AMD_LEVEL = {
    AmdRunLevel.EXACT: RunLevel.NATIVE,
    AmdRunLevel.COMPATIBLE: RunLevel.COMPATIBLE,
    AmdRunLevel.CANNOT_RUN: RunLevel.CANNOT_RUN,
}


class RocmFamily:
    """AMD ROCm gfx processors (``gfx942``, ``gfx11-generic``); spellings starting with gfx."""

    name = "rocm"
    vendor: str | None = "amd"

    def __init__(self, amd: AmdKnowledgeBase | None) -> None:
        self.amd = amd

    def claims(self, text: str) -> bool:
        return looks_like_gfx(text)

    def parse(self, text: str) -> AmdTarget:
        return AmdTarget.parse(text)

    def sort_key(self, target: AmdTarget) -> tuple[object, ...]:
        return (target,)  # AmdTarget's own total order (see its docstring)

    def label(self, target: AmdTarget) -> str:
        return target.processor

    def runs_on(self, device: AmdTarget, built: Sequence[AmdTarget]) -> RunsOn:
        verdict = amd_how_runs(device, built)
        return RunsOn(_AMD_LEVEL[verdict.level], verdict.reason)

    def package_limit(self, package: str, target: AmdTarget) -> str | None:
        if self.amd is None:
            return None
        build = self.amd.builds.get(package)
        if build is None:
            return f"{package} is CUDA-only: nixpkgs has no ROCm build of it"
        own = self.amd.packages.get(build.targets) if build.targets else None
        if own is None:
            return None
        check = own.check(build.targets or package, [target])
        return None if check.outcome == "ok" else check.reason


def gpu_families(kb: KnowledgeBase) -> tuple[TargetFamily[Any], ...]:
    """The GPU families in claiming order: the fallback (CUDA) last."""
    return (RocmFamily(kb.amd), CudaFamily(kb))


def family_for_text(families: Sequence[TargetFamily[Any]], text: str) -> TargetFamily[Any]:
    """The first family that claims a user's spelling (``families`` ends with a fallback)."""
    return next(f for f in families if f.claims(text))
