"""The CUDA family's line in the registry: what it has, each part imported when first asked
for (:mod:`capplan.core.families.registry` reads this module, and nothing else of the family,
until a command needs a part)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capplan.core.binaries.reading import BinaryReader
    from capplan.core.families.base import FamilyPlanning, GpuFamily, Verifier
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.config import Config

# Takes every fleet entry and target spelling no other family claims: claimed last.
FALLBACK = True
# The detector (capplan.adapters imports it; core/ names it as data).
DETECTOR = "capplan.adapters.detect.nvidia:find_devices"


def gpu_family(kb: KnowledgeBase) -> GpuFamily[Any]:
    from capplan.core.families.cuda.family import CudaFamily

    return CudaFamily(kb)


def binary_reader() -> BinaryReader:
    """How ``capplan inspect`` reads the family's device code in binaries."""
    from capplan.core.families.cuda.binary import CudaReader

    return CudaReader()


def verifier(
    kb: Callable[[], KnowledgeBase], capability_kb: Callable[[], Any], **_: Any
) -> Verifier:
    from capplan.core.families.cuda.verify import CudaVerifier

    return CudaVerifier(kb, capability_kb)


def planning(
    kb: KnowledgeBase,
    config: Config,
    *,
    others: Sequence[GpuFamily[Any]],
    cpu: object,  # the CPU family's model: not this family's
) -> FamilyPlanning:
    from capplan.core.families.cuda.planning import CudaPlanning

    return CudaPlanning(kb, config, others=others)
