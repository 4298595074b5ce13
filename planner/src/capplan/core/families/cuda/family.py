"""The CUDA family's target interface (:class:`capplan.core.families.base.TargetFamily`):
NVIDIA capabilities, parsed, ordered and judged by :mod:`~capplan.core.families.cuda.capability`
and :mod:`~capplan.core.families.cuda.compat`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from capplan.core.families.base import Explained, Machine, Pick, RunsOn
from capplan.core.families.cuda.capability import Capability, parse_targets
from capplan.core.families.cuda.compat import device_verdict, how_runs, is_jetson
from capplan.core.families.cuda.gpus import find_gpus, resolve_known_device, suggestions
from capplan.core.families.cuda.kb import Limits, cuda_package, nvidia
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.kb import KnowledgeBase
from capplan.errors import InvalidInputError

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan

__all__ = ["CudaFamily", "cuda_limits_reason"]


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
        release = nvidia(kb).torch_release(version)
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
        info = cuda_package(self.kb, package)
        return cuda_limits_reason(self.kb, package, info.limits, target, None)

    def owns_device(self, text: str) -> bool:
        # The fallback: resolve_known_device (in explain) says when a spelling is no GPU.
        return True

    def knows_device(self, text: str) -> bool:
        try:
            Capability.parse(text)
            return True
        except InvalidInputError:
            pass
        return bool(find_gpus(text, nvidia(self.kb).gpus))

    def device_suggestions(self, text: str) -> list[str]:
        return suggestions(text, nvidia(self.kb).gpus)

    def explain(self, targets: str, device: str) -> Explained:
        parsed = nvidia(self.kb).check_targets(parse_targets(targets))
        cap, model = resolve_known_device(device, self.kb)
        verdict = device_verdict(
            cap,
            [t.capability for t in parsed],
            [t.capability for t in parsed if t.ptx],
            self.kb,
        )
        fields: dict[str, object] = {
            "device": model.name if model else str(cap),
            "vendor": "nvidia",
            "target": None,
            "capability": str(cap),
            "targets": [str(t) for t in parsed],
            "level": verdict.level.value,
            "via": str(verdict.via) if verdict.via else None,
            "reason": verdict.reason,
        }
        return Explained(fields, str(cap))

    def pick(self, plan: Plan, machine: Machine) -> tuple[Pick, ...]:
        from capplan.core.families.cuda.select import pick_on_machine

        return pick_on_machine(plan, self.kb, machine)

    def device_fields(self, device: Capability | None, driver: str | None) -> dict[str, object]:
        from capplan.core.families.cuda.select import driver_support

        support = driver_support(self.kb, driver)
        runs = support.max_cuda()
        full = support.max_cuda(full=True)
        fields: dict[str, object] = {
            "capability": str(device) if device else None,
            "driver": driver,
            "max_cuda": str(full) if full else None,
            "max_cuda_minor_compat": str(runs) if runs else None,
        }
        if device is not None:
            fields["overlay"] = f'cudaCapabilities = [ "{device}" ];'
        return fields
