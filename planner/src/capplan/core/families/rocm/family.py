"""The ROCm family's target interface (:class:`capplan.core.families.base.TargetFamily`):
AMD gfx processors, parsed, ordered and judged by :mod:`~capplan.core.families.rocm.target`
against :mod:`~capplan.core.families.rocm.kb`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from capplan.core.families.base import Explained, Machine, Pick, RunLevel, RunsOn
from capplan.core.families.rocm.claim import amd_entry, looks_like_gfx
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.target import (
    AmdRunLevel,
    AmdTarget,
    amd_how_runs,
    parse_amd_targets,
)
from capplan.core.model.kb import KnowledgeBase
from capplan.errors import InvalidInputError

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan

__all__ = ["RocmFamily"]


_AMD_LEVEL = {
    AmdRunLevel.EXACT: RunLevel.NATIVE,
    AmdRunLevel.COMPATIBLE: RunLevel.COMPATIBLE,
    AmdRunLevel.CANNOT_RUN: RunLevel.CANNOT_RUN,
}


class RocmFamily:
    """AMD ROCm gfx processors (``gfx942``, ``gfx11-generic``); spellings starting with gfx."""

    name = "rocm"
    vendor: str | None = "amd"

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.amd: AmdKnowledgeBase | None = kb.part(AmdKnowledgeBase)

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

    def owns_device(self, text: str) -> bool:
        return amd_entry(self.kb, text) is not None

    def knows_device(self, text: str) -> bool:
        if looks_like_gfx(text):
            return True
        if self.amd is None:
            return False
        try:
            self.amd.lookup_gpu(text)
        except InvalidInputError:
            return False
        return True

    def device_suggestions(self, text: str) -> list[str]:
        return [] if self.amd is None else self.amd.suggest_gpus(text)

    def explain(self, targets: str, device: str) -> Explained:
        found = amd_entry(self.kb, device)
        if found is None:
            raise ValueError(f"{device!r} is no AMD GPU: ask the family that owns it")
        processor, name = found
        items = [i for i in targets.replace(";", ",").split(",") if i.strip()]
        amd_targets = parse_amd_targets(items)
        answer = amd_how_runs(processor, amd_targets)
        fields: dict[str, object] = {
            "device": name or str(processor),
            "vendor": "amd",
            "target": str(processor),
            "capability": None,
            "targets": [str(t) for t in amd_targets],
            "level": answer.level.value,
            "via": str(answer.via) if answer.via else None,
            "reason": answer.reason,
        }
        return Explained(fields, str(processor))

    def pick(self, plan: Plan, machine: Machine) -> tuple[Pick, ...]:
        from capplan.core.families.rocm.select import pick_on_machine

        return pick_on_machine(plan, self.kb, machine)

    def device_fields(self, device: AmdTarget | None, driver: str | None) -> dict[str, object]:
        if device is None:
            return {"target": None}
        return {"target": str(device), "overlay": f'gpuTargets = [ "{device}" ];'}
