"""The CUDA family's line in the registry: what it has, each part imported when first asked
for (:mod:`capplan.core.families.registry` reads this module, and nothing else of the family,
until a command needs a part)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capplan.core.binaries.doctor import Driver, Gpu
    from capplan.core.binaries.reading import BinaryReader
    from capplan.core.families.base import (
        Dispatcher,
        FamilyPlanning,
        GpuFamily,
        GpuNames,
        NixpkgsCheck,
        Verifier,
    )
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.config import Config

# Takes every fleet entry and target spelling no other family claims: claimed last.
FALLBACK = True
# The detector (capplan.adapters imports it; core/ names it as data).
DETECTOR = "capplan.adapters.detect.nvidia:find_devices"
# The vendor its detector's devices carry (base.Device.vendor).
VENDOR = "nvidia"
# Adapters of its own (registry.adapter_owners): the host's driver on disk (capplan host, run
# and doctor's driver check).
ADAPTERS: tuple[str, ...] = ("capplan.adapters.host_driver",)


def gpu_family(kb: KnowledgeBase) -> GpuFamily[Any]:
    from capplan.core.families.cuda.family import CudaFamily

    return CudaFamily(kb)


def gpu_names(kb: KnowledgeBase) -> GpuNames:
    from capplan.core.families.cuda.gpus import NvidiaGpuNames

    return NvidiaGpuNames(kb)


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


def dispatcher(kb: KnowledgeBase) -> Dispatcher:
    from capplan.core.families.cuda.dispatch import CudaDispatcher

    return CudaDispatcher(kb)


def nixpkgs_check(
    kb: KnowledgeBase, *, policy_cuda: Sequence[str] | None, **_: Any
) -> NixpkgsCheck:
    from capplan.core.families.cuda.nixpkgs import CudaNixpkgs

    return CudaNixpkgs(kb, policy_cuda)


def doctor_gpu(kb: KnowledgeBase, text: str) -> Gpu:
    from capplan.core.families.cuda.doctor import device_gpu

    return device_gpu(kb, text)


def detected_gpu(name: str, target: Any, kb: KnowledgeBase) -> Gpu:
    from capplan.core.families.cuda.doctor import detected_gpu as detected

    return detected(name, target, kb)


# The driver doctor checks (``--driver``) is the NVIDIA driver.
def driver_facts(kb: KnowledgeBase, version: str | None) -> Driver:
    from capplan.core.families.cuda.doctor import driver_facts as facts

    return facts(kb, version)


def is_driver_version(text: str) -> bool:
    from capplan.core.families.cuda.doctor import is_driver_version as spells

    return spells(text)
