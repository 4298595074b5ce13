"""The ROCm family's part of ``capplan doctor``: how a library runs on an AMD GPU. Pure.

:mod:`capplan.core.binaries.doctor` holds the facts and the report and asks each GPU
(:class:`AmdGpu` here, built through :func:`capplan.core.families.registry.doctor_gpu` and
``detected_gpu``) for its verdicts: a library's AMD code objects judged with
:func:`~capplan.core.families.rocm.target.amd_how_runs` (exact processor, nixpkgs'
ISA-compatibility pairs, generic targets), and what a variant wheel's ``amd :: gfx_arch``
covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from capplan.core.binaries.doctor import Cell, Driver, Library, Properties
from capplan.core.families.rocm.target import AmdRunLevel, AmdTarget, amd_how_runs
from capplan.errors import CapplanError

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase

__all__ = ["AmdGpu", "detected_gpu", "device_gpu"]


@dataclass(frozen=True, slots=True)
class AmdGpu:
    """An AMD GPU to judge against: its processor (``target``)."""

    label: str
    target: AmdTarget

    @property
    def vendor(self) -> str:
        return "amd"

    @property
    def device(self) -> AmdTarget:
        return self.target

    def cell(self, lib: Library, driver: Driver) -> Cell:
        # No AMD rule reads the driver: code objects run or not by processor.
        if not lib.amd:
            if lib.has_cuda_code or lib.cuda_majors:
                return Cell("other-vendor", None, "CUDA code only; an AMD GPU needs a ROCm build")
            return Cell("other-vendor", None, "no AMD code objects")
        # The reader (adapters/fatbin.py) gives code objects' targets as this family's AmdTarget;
        # the shared record types them by what shared code asks (binaries/doctor.py's CodeObject).
        answer = amd_how_runs(self.target, cast("tuple[AmdTarget, ...]", lib.amd))
        if answer.level is AmdRunLevel.CANNOT_RUN:
            return Cell(
                "cannot-run",
                None,
                answer.reason,
                f"a ROCm build for {self.target.processor}",
                "device-code",
            )
        level = "native" if answer.level is AmdRunLevel.EXACT else "compatible"
        return Cell(level, str(answer.via) if answer.via else None, answer.reason)

    def judge_variant(self, properties: Properties) -> tuple[bool, str] | None:
        stated = properties.get("amd", {}).get("gfx_arch")
        if not stated:
            return None
        targets = []
        for value in stated:
            try:
                targets.append(AmdTarget.parse(value))
            except CapplanError:  # a target capplan does not know covers no GPU it knows
                continue
        level = amd_how_runs(self.target, targets).level
        covered = level is not AmdRunLevel.CANNOT_RUN
        how = level.value if covered else "not covered"
        return covered, f"gfx_arch {', '.join(stated)}: {how} on {self.target}"

    def to_json(self) -> dict[str, object]:
        return {
            "label": self.label,
            "vendor": self.vendor,
            "capability": None,
            "target": str(self.target),
            "arch": None,
            "jetson": False,
            "cuda": None,
        }


def device_gpu(kb: KnowledgeBase, text: str) -> AmdGpu | None:
    """The AMD GPU ``--device`` names (a name or a processor), None when it names none."""
    from capplan.core.families.rocm.claim import amd_entry

    amd = amd_entry(kb, text)
    if amd is None:
        return None
    target, name = amd
    return AmdGpu(f"{name} ({target})" if name else str(target), target)


def detected_gpu(name: str, target: AmdTarget, kb: KnowledgeBase) -> AmdGpu:
    """A GPU the AMD detector found, named ``name``."""
    return AmdGpu(f"{name} ({target})", target)
