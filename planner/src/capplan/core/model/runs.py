"""How well a build runs on a device: the one answer every target family gives.

A shared value type, below the families and the plan: :mod:`capplan.core.planning.plan` (a
variant's :class:`~capplan.core.planning.plan.Serve`) and the binary readers use it without
importing the family interface (:mod:`capplan.core.families.base`, which re-exports both and
imports the plan's types), so no two modules import each other (issue 42).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

__all__ = ["RunLevel", "RunsOn"]


class RunLevel(Enum):
    """How well a build runs on a device, best first."""

    NATIVE = "native"
    COMPATIBLE = "compatible"
    PTX_JIT = "ptx-jit"
    CANNOT_RUN = "cannot-run"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {
    RunLevel.NATIVE: 0,
    RunLevel.COMPATIBLE: 1,
    RunLevel.PTX_JIT: 2,
    RunLevel.CANNOT_RUN: 3,
}


class RunsOn(NamedTuple):
    """How a device runs a build: the family-independent level and why."""

    level: RunLevel
    reason: str

    @property
    def runs(self) -> bool:
        return self.level is not RunLevel.CANNOT_RUN
