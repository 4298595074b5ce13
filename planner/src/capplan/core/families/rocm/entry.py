"""The ROCm family's line in the registry: what it has, each part imported when first asked
for (:mod:`capplan.core.families.registry` reads this module, and nothing else of the family,
until a command needs a part)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capplan.core.binaries.doctor import Gpu
    from capplan.core.binaries.reading import BinaryReader
    from capplan.core.families.base import FamilyPlanning, GpuFamily, NixpkgsCheck, Verifier
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.config import Config

FALLBACK = False
DETECTOR = "capplan.adapters.detect.amd:find_devices"
# The vendor its detector's devices carry (base.Device.vendor).
VENDOR = "amd"


def gpu_family(kb: KnowledgeBase) -> GpuFamily[Any]:
    from capplan.core.families.rocm.family import RocmFamily

    return RocmFamily(kb)


def binary_reader() -> BinaryReader:
    """How ``capplan inspect`` reads the family's device code in binaries."""
    from capplan.core.families.rocm.binary import RocmReader

    return RocmReader()


def verifier(amd_kb: Callable[[], Any], **_: Any) -> Verifier:
    from capplan.core.families.rocm.verify import RocmVerifier

    return RocmVerifier(amd_kb)


def planning(
    kb: KnowledgeBase,
    config: Config,
    *,
    others: Sequence[GpuFamily[Any]],
    cpu: object,  # the CPU family's model: not this family's
) -> FamilyPlanning:
    from capplan.core.families.rocm.planning import RocmPlanning

    return RocmPlanning(kb, config)


def nixpkgs_check(kb: KnowledgeBase, **_: Any) -> NixpkgsCheck:
    from capplan.core.families.rocm.nixpkgs import RocmNixpkgs

    return RocmNixpkgs(kb)


def doctor_gpu(kb: KnowledgeBase, text: str) -> Gpu | None:
    from capplan.core.families.rocm.doctor import device_gpu

    return device_gpu(kb, text)


def detected_gpu(name: str, target: Any, kb: KnowledgeBase) -> Gpu:
    from capplan.core.families.rocm.doctor import detected_gpu as detected

    return detected(name, target, kb)
