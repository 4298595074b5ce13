"""Each job's minutes on the runner it is scheduled on, and whether it can finish there (issue 40).

The knowledge base states minutes for a reference builder (``cost.reference_cores``, 16 unless
an entry names another; a measured cost names its CPU class too). A build of many compile
units keeps every core busy (the measured llama.cpp build: 15.6 of 16 cores), so its work is
``minutes x reference cores`` core-minutes, and on a runner it takes that work over the
compiles the runner runs at once: its cores, or fewer where memory holds them
(:func:`capplan.core.planning.memory.compile_fit`). It never takes less than its longest compile
unit at its target count (measured packages: ``longest_unit_minutes``), which no number of
cores splits. Per-core speed is taken as the reference CPU's: no runner's was measured.

A job goes to a big-parallel runner ([policy.runners_os] ``big-parallel``, sized by [policy]
big_parallel_cores / _memory_gb / _disk_gb) when its package needs one (torch), when memory
holds it below the standard runner's cores, or when it cannot finish on the standard runner;
without such a runner it stays on the standard one, and a job that cannot finish there says so
(``problem``): a timeout with the workflow's margin past the runner's limit (GitHub-hosted:
360 min), or outputs past its free disk. A runner that cannot hold one compile is refused
(exit 5, naming the [policy] key: a setting to fix, not a plan to warn about).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from capplan.core.families.registry import gccarch_feature
from capplan.core.model.kb import REFERENCE_CORES
from capplan.core.planning.memory import RunnerSize, compile_fit
from capplan.core.planning.workflow import (
    BIG_PARALLEL,
    GITHUB_HOSTED_LIMIT_MINUTES,
    SELF_HOSTED_LIMIT_MINUTES,
    gccarch_runner,
    runner_labels,
    timeout_minutes,
    with_arch_label,
)
from capplan.errors import ConfigError

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.plan import Plan, Variant

__all__ = ["JobCost", "Runner", "RunnerSizes", "big_parallel_labels", "job_costs", "on_runner"]


class RunnerSizes(NamedTuple):
    """The two runner kinds a plan schedules on ([policy]): cores, memory and free disk."""

    standard: RunnerSize
    standard_disk_mb: float
    big: RunnerSize
    big_disk_mb: float


class Runner(NamedTuple):
    """One runner a job is scheduled on."""

    kind: str  # "standard" or "big-parallel"
    labels: tuple[str, ...]
    cores: int
    memory_mb: float
    disk_mb: float

    @property
    def limit_minutes(self) -> int:
        # GitHub stops a job on a hosted runner after 6 hours, on a self-hosted one after 5
        # days (docs.github.com: "Usage limits, billing, and administration").
        if "self-hosted" in self.labels:
            return SELF_HOSTED_LIMIT_MINUTES
        return GITHUB_HOSTED_LIMIT_MINUTES

    @property
    def text(self) -> str:
        return f"{', '.join(self.labels)} ({self.cores} cores)"


class JobCost(NamedTuple):
    """A job's minutes on its runner and what set them."""

    minutes: float
    runner: Runner
    parallel: int  # compiles at once
    memory_bound: bool  # memory, not cores, set ``parallel``
    critical_minutes: float | None  # the longest compile unit at its target count
    peak_mb: float | None  # measured peak per compile
    needs_big: bool  # needs a big-parallel runner (has one or not)
    problem: str | None  # why it cannot finish on ``runner``; None: it can

    @property
    def cores(self) -> int:
        return self.runner.cores


def big_parallel_labels(
    system: str, runners_os: Mapping[str, Sequence[str]] | None
) -> tuple[str, ...] | None:
    """The labels [policy.runners_os] gives big-parallel jobs of ``system``; None: none."""
    table = runners_os or {}
    for key in (f"{system}/{BIG_PARALLEL}", BIG_PARALLEL):
        if table.get(key):
            return with_arch_label(system, table[key])
    return None


def on_runner(
    minutes: float,
    reference_cores: int | None,
    runner: Runner,
    *,
    peak_mb: float | None = None,
    critical: float | None = None,
    size_mb: float = 0.0,
) -> tuple[float, int, str | None]:
    """(minutes on ``runner``, compiles at once, the reason it cannot finish there or None)
    of a job taking ``minutes`` on ``reference_cores`` cores (None: a job that compiles
    nothing, whose minutes do not depend on cores)."""
    cores = runner.cores
    parallel = (
        cores if peak_mb is None else compile_fit(RunnerSize(cores, runner.memory_mb), peak_mb)
    )
    if parallel < 1:
        return (
            0.0,
            0,
            f"one compile peaks at {peak_mb:g} MB, more than the {runner.memory_mb / 1024:g} GB "
            f"of {runner.text}",
        )
    work = minutes if reference_cores is None else minutes * reference_cores / parallel
    scaled = round(max(work, critical or 0.0), 2)
    if size_mb > runner.disk_mb:
        # What a build needs on disk is not known; its outputs are the least of it.
        return (
            scaled,
            parallel,
            f"its outputs alone take {size_mb / 1024:.1f} GB, more than the "
            f"{runner.disk_mb / 1024:g} GB free on {runner.text}",
        )
    timeout, wanted = timeout_minutes(scaled, runner.labels)
    if wanted > timeout:
        return (
            scaled,
            parallel,
            f"about {scaled:g} min on {runner.text}, {wanted} with the timeout's margin, past "
            f"its {runner.limit_minutes}-min limit",
        )
    return scaled, parallel, None


class _Placer:
    """Places jobs; jobs alike (same minutes, measured figures, size, system and needs) get
    one shared answer: a plan of 40,000 jobs has a few hundred distinct ones."""

    def __init__(
        self,
        kb: KnowledgeBase,
        sizes: RunnerSizes,
        runners_os: Mapping[str, Sequence[str]] | None,
    ) -> None:
        self.kb, self.sizes, self.runners_os = kb, sizes, runners_os
        self.runners: dict[tuple[str, str | None], tuple[Runner, Runner | None]] = {}
        self.placed: dict[tuple[object, ...], JobCost] = {}

    def _runners(self, system: str, feature: str | None) -> tuple[Runner, Runner | None]:
        found = self.runners.get((system, feature))
        if found is None:
            os_ = self.runners_os
            labels = (gccarch_runner(system, feature, os_) if feature else None) or runner_labels(
                system, False, os_
            )
            std, big = self.sizes.standard, self.sizes.big
            standard = Runner(
                "standard", labels, std.cores, std.memory_mb, self.sizes.standard_disk_mb
            )
            # A CPU-level job goes only to runners declared for its gccarch feature.
            big_labels = big_parallel_labels(system, os_) if feature is None else None
            bigger = None
            if big_labels is not None:
                bigger = Runner(
                    BIG_PARALLEL, big_labels, big.cores, big.memory_mb, self.sizes.big_disk_mb
                )
            found = self.runners[(system, feature)] = (standard, bigger)
        return found

    def job(self, v: Variant) -> JobCost:
        reference: int | None = REFERENCE_CORES
        peak, critical = None, None
        spec = v.spec
        info = self.kb.packages.get(v.package) if spec is not None and spec.measured_costs else None
        if info is not None and info.kind == "capability-independent":
            # A prebuilt redistributable: fetched, unpacked and patched, not compiled.
            reference = None
        elif info is not None:
            # Only nvcc's peak and units are measured: a ROCm or CPU build is not.
            reference = info.cost.reference_cores
            peak = info.cost.peak_mb_per_compile
            critical = info.cost.longest_unit(0 if spec is None else spec.compiled_targets())
        feature = gccarch_feature(v)
        key = (v.minutes, reference, peak, critical, v.size_mb, v.big_parallel, v.system, feature)
        found = self.placed.get(key)
        if found is None:
            standard, big = self._runners(v.system, feature)
            found = self.placed[key] = _place(v, reference, peak, critical, standard, big)
        return found


def _place(
    v: Variant,
    reference: int | None,
    peak: float | None,
    critical: float | None,
    standard: Runner,
    big: Runner | None,
) -> JobCost:
    runner = standard
    minutes, parallel, problem = on_runner(
        v.minutes, reference, runner, peak_mb=peak, critical=critical, size_mb=v.size_mb
    )
    needs_big = v.big_parallel or parallel < standard.cores or problem is not None
    if needs_big and big is not None:
        runner = big
        minutes, parallel, problem = on_runner(
            v.minutes, reference, runner, peak_mb=peak, critical=critical, size_mb=v.size_mb
        )
    if parallel < 1:
        assert peak is not None  # only a measured peak holds a runner below one compile
        raise ConfigError(
            f"job {v.name}: one compile of {v.package} peaks at {peak:g} MB, more than the "
            f"runner's {runner.memory_mb / 1024:g} GB ([policy] "
            f"{'big_parallel_memory_gb' if runner.kind == BIG_PARALLEL else 'runner_memory_gb'})",
            hint=f"set it to at least {math.ceil(peak / 1024)} (the memory of the runners that "
            "build it)",
        )
    return JobCost(
        minutes,
        runner,
        parallel,
        parallel < runner.cores,
        None if critical is None else round(critical, 2),
        peak,
        needs_big,
        problem,
    )


def job_costs(
    kb: KnowledgeBase,
    plan: Plan,
    sizes: RunnerSizes,
    runners_os: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, JobCost]:
    """Job name -> its cost on the runner it is scheduled on, for every job of ``plan``."""
    job = _Placer(kb, sizes, runners_os).job
    return {v.name: job(v) for v in plan.variants}
