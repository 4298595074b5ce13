"""The target families capplan knows, in one table: the only module that names them.

Everything else reaches a family through :mod:`capplan.core.families.base` and the functions
here. Adding a family (Intel GPUs, say) is one package under ``core/families/`` and one entry in
each table below (docs/layout.md, "How to add a family"). A family's modules are imported when
first asked for, so a command that only looks a GPU up never loads the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from capplan.core.families.base import FamilyPlanning, GpuFamily, TargetFamily, Verifier

if TYPE_CHECKING:
    # Re-exported for annotations: the CPU family's target model, which the CPU adapter gives
    # (cpu_adapter below) and the planner takes.
    from capplan.core.families.cpu.planning import CpuModel as CpuModel
    from capplan.core.families.rocm.kb import AmdKnowledgeBase
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.config import Config
    from capplan.core.planning.plan import Variant

__all__ = [
    "cpu_adapter",
    "cpu_detector",
    "cpu_family",
    "family_for_text",
    "gccarch_feature",
    "gpu_detectors",
    "gpu_families",
    "gpu_verifiers",
    "is_cpu_side",
    "nix_keys",
    "planning_families",
]


def gpu_families(kb: KnowledgeBase) -> tuple[GpuFamily[Any], ...]:
    """The GPU families in claiming order: the fallback (CUDA) last."""
    from capplan.core.families.cuda.family import CudaFamily
    from capplan.core.families.rocm.family import RocmFamily

    return (RocmFamily(kb), CudaFamily(kb))


def gpu_verifiers(
    kb: Callable[[], KnowledgeBase],
    capability_kb: Callable[[], KnowledgeBase],
    amd_kb: Callable[[], AmdKnowledgeBase],
) -> tuple[Verifier, ...]:
    """What ``capplan verify`` asks each GPU family, in claiming order (the fallback, CUDA,
    last). The loaders are called only when a question needs them: the whole knowledge base,
    the capability table alone, the AMD knowledge base."""
    from capplan.core.families.cuda.verify import CudaVerifier
    from capplan.core.families.rocm.verify import RocmVerifier

    return (RocmVerifier(amd_kb), CudaVerifier(kb, capability_kb))


# Each family's adapters, which read the machine or a database and so live in capplan.adapters
# (core/ imports none of them): named here as "module:function", imported by
# capplan.adapters.families when a command asks. A GPU detector's function takes the knowledge
# base and board= (whether to read a board's own description, the Jetson device tree, when no
# driver tool answers) and returns a base.Found; the detection order is the order detect lists
# the GPUs in.
_GPU_DETECTORS = (
    "capplan.adapters.detect.nvidia:find_devices",
    "capplan.adapters.detect.amd:find_devices",
)
_CPU_DETECTOR = "capplan.adapters.detect.cpu:detect_cpu"
# The CPU family's target model (archspec's, with kb/cpu_packages.json's package entries).
_CPU_ADAPTER = "capplan.adapters.cpu_archspec:load_cpu_model"


def gpu_detectors() -> tuple[str, ...]:
    """Every GPU family's detector, as ``module:function``, in detection order."""
    return _GPU_DETECTORS


def cpu_detector() -> str:
    """The CPU family's detector (``module:function``): this machine's CPU and, when none is
    known, why."""
    return _CPU_DETECTOR


def cpu_adapter() -> str:
    """The loader of the CPU family's target model (``module:function``; its ``packages=False``
    skips the package file)."""
    return _CPU_ADAPTER


def cpu_family(model: CpuModel) -> TargetFamily[str]:
    """The CPU family, judging CPUs with ``model`` (archspec's, from the adapters)."""
    from capplan.core.families.cpu.planning import CpuFamily

    return CpuFamily(model)


def is_cpu_side(v: Variant) -> bool:
    """Whether ``v`` is a CPU-side package's build (generic, per level or hwcaps) rather than a
    GPU family's variant."""
    from capplan.core.families.cpu.planning import is_cpu_side as cpu_side

    return cpu_side(v)


def gccarch_feature(v: Variant) -> str | None:
    """The ``gccarch-<arch>`` system feature a CPU-level variant's job requires (None for
    every other variant): the matrix's part of the CPU family."""
    from capplan.core.families.cpu.planning import gccarch_feature as feature

    return feature(v)


def family_for_text(families: Sequence[GpuFamily[Any]], text: str) -> GpuFamily[Any]:
    """The first family that claims a user's spelling (``families`` ends with a fallback)."""
    return next(f for f in families if f.claims(text))


def planning_families(
    kb: KnowledgeBase, config: Config, cpu: CpuModel | None = None
) -> tuple[FamilyPlanning, ...]:
    """Every family's planning for one plan, in planning order (decisions and error messages
    follow it); the fallback family (CUDA) claims what the others leave. The CPU family plans
    last: it keeps CPU levels to the packages no GPU family built."""
    from capplan.core.families.cpu.planning import CpuPlanning
    from capplan.core.families.cuda.planning import CudaPlanning
    from capplan.core.families.rocm.planning import RocmPlanning

    rocm = RocmPlanning(kb, config)
    cuda = CudaPlanning(kb, config, others=(rocm.family,))
    return (cuda, rocm, CpuPlanning(kb, config, cpu))


@cache
def _nix_key_functions() -> tuple[Callable[[Variant], dict[str, Any]], ...]:
    # Each family's plan.json keys of a variant (pkgs/variant.nix reads them).
    from capplan.core.families.cpu.planning import cpu_nix_keys
    from capplan.core.families.cuda.planning import cuda_nix_keys
    from capplan.core.families.rocm.planning import rocm_nix_keys

    return (cuda_nix_keys, rocm_nix_keys, cpu_nix_keys)


def nix_keys(v: Variant) -> dict[str, Any]:
    """Every family's plan.json keys of ``v``."""
    found: dict[str, Any] = {}
    for keys in _nix_key_functions():
        found.update(keys(v))
    return found
