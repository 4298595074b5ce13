"""How many compiles a runner holds at once: peak memory per compile against the runner's
memory (issue 34). A CUDA build runs one nvcc per core (Nix's ``cores``, NIX_BUILD_CORES);
each nvcc process peaks at the package's measured ``peak_mb_per_compile`` (bench/data), so a
job runs ``min(cores, memory / peak)`` compiles at once, never more compile memory than the
runner has. A job that cannot use every core of the configured runner takes longer (its
minutes times ``cores / parallel`` in the schedule) and needs a bigger one: the matrix adds
``big-parallel`` to its required system features ([policy.runners_os] "big-parallel" names
such runners); one a single compile does not fit is refused.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from capplan.errors import ConfigError

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.plan import Plan

__all__ = ["CompileFit", "RunnerSize", "compile_fit", "compile_fits"]


class RunnerSize(NamedTuple):
    """One CI runner: cores and memory ([policy] runner_cores, runner_memory_gb)."""

    cores: int
    memory_mb: float


class CompileFit(NamedTuple):
    """A job's compiles on one runner: peak MB per compile, how many run at once, and
    whether memory (not cores) sets that number."""

    peak_mb: float
    parallel: int
    memory_bound: bool
    cores: int  # the runner's

    def minutes(self, minutes: float) -> float:
        """A job's minutes with ``parallel`` of the runner's cores busy: compiles wait for
        memory, so a memory-bound job takes ``cores / parallel`` times as long."""
        return round(minutes * self.cores / self.parallel, 2)


def compile_fit(runner: RunnerSize, peak_mb: float) -> int:
    """Compiles at once: ``min(cores, floor(memory / peak))``; 0 when one does not fit."""
    return min(runner.cores, math.floor(runner.memory_mb / peak_mb))


def compile_fits(kb: KnowledgeBase, plan: Plan, runner: RunnerSize) -> dict[str, CompileFit]:
    """Job name -> its fit, for each CUDA job whose package has a measured peak per compile
    (kb/packages.json ``cost.peak_mb_per_compile``); other jobs keep every core."""
    fits: dict[str, CompileFit] = {}
    for v in plan.variants:
        info = kb.packages.get(v.package)
        # Only nvcc's peak is measured: a ROCm or CPU build of the same package is not.
        if v.cuda is None or info is None or info.cost.peak_mb_per_compile is None:
            continue
        peak = info.cost.peak_mb_per_compile
        parallel = compile_fit(runner, peak)
        if parallel < 1:
            raise ConfigError(
                f"job {v.name}: one compile of {v.package} peaks at {peak:g} MB, more than the "
                f"runner's {runner.memory_mb / 1024:g} GB ([policy] runner_memory_gb)",
                hint=f"set runner_memory_gb to at least {math.ceil(peak / 1024)} (the memory of "
                "the runners that build it)",
            )
        fits[v.name] = CompileFit(peak, parallel, parallel < runner.cores, runner.cores)
    return fits
