"""How many compiles a runner holds at once: peak memory per compile against the runner's
memory (issue 34). A CUDA build runs one nvcc per core (Nix's ``cores``, NIX_BUILD_CORES);
each nvcc process peaks at the package's measured ``peak_mb_per_compile`` (bench/data), so a
job runs ``min(cores, memory / peak)`` compiles at once, never more compile memory than the
runner has. A job that cannot use every core of the configured runner takes longer and needs a
bigger one (core/planning/runners.py: its minutes on the runner it is scheduled on, and the
``big-parallel`` runners of [policy.runners_os]); one a single compile does not fit is refused.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["RunnerSize", "compile_fit"]


class RunnerSize(NamedTuple):
    """One CI runner: cores and memory ([policy] runner_cores, runner_memory_gb)."""

    cores: int
    memory_mb: float


def compile_fit(runner: RunnerSize, peak_mb: float) -> int:
    """Compiles at once: ``min(cores, floor(memory / peak))``; 0 when one does not fit."""
    return min(runner.cores, math.floor(runner.memory_mb / peak_mb))
