"""The families' adapters, reached through the registry: this machine's GPUs and CPU, and the
CPU family's target model.

``capplan detect``, ``doctor``, the planning commands and ``export`` ask here instead of
importing a vendor's detector or archspec's adapter, so a new family's detector is one adapter
file and its line in :mod:`capplan.core.families.registry`, which names each adapter as
``module:function`` (core/ imports no adapter). Each module is imported when first asked for.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from capplan.core.families import registry

if TYPE_CHECKING:
    from capplan.core.families.base import Found
    from capplan.core.families.registry import CpuModel
    from capplan.core.model.kb import KnowledgeBase

__all__ = ["cpu_model", "find_cpu", "find_driver", "find_gpus"]


def _function(name: str) -> Any:
    module, _, function = name.partition(":")
    return getattr(import_module(module), function)


def find_gpus(kb: KnowledgeBase, *, board: bool = True) -> tuple[Found, ...]:
    """What each GPU family's detector finds, in the registry's detection order; ``board``:
    read a board's own description (the Jetson device tree) when no driver tool answers."""
    found: list[Found] = [_function(name)(kb, board=board) for name in registry.gpu_detectors()]
    return tuple(found)


def find_driver(kb: KnowledgeBase) -> str | None:
    """The first GPU driver version a detector reports (the detectors in order, stopping at
    the first that has one); None when none does."""
    for name in registry.gpu_detectors():
        found: Found = _function(name)(kb, board=False)
        driver = next((d.driver for d in found.devices if d.driver), None)
        if driver is not None:
            return driver
    return None


def find_cpu() -> tuple[Any, str]:
    """This machine's CPU (the CPU family's detector: ``microarchitecture``, ``arch``,
    ``to_json()``) and, when none is known, why."""
    found: tuple[Any, str] = _function(registry.cpu_detector())()
    return found


def cpu_model(*, packages: bool = True) -> CpuModel:
    """The CPU family's target model; ``packages=False`` leaves out its package file (for the
    commands that only judge a CPU)."""
    model: CpuModel = _function(registry.cpu_adapter())(packages=packages)
    return model
