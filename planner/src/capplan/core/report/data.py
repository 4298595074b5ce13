"""What the report and the summaries show, gathered from the Plan and the Matrix (pure).

Nothing here is computed anew: coverage is each variant's ``serves`` (the families' own
ranking, the one ``explain`` and ``plan`` give) and the plan's unserved decisions; the
schedule is the matrix's (start, runner, minutes on the runner); costs are the plan's
baselines. Only the critical path is traced here, over the matrix's own graph and minutes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capplan.core.model.runs import RunLevel

if TYPE_CHECKING:
    from capplan.core.planning.failures import KnownFailures
    from capplan.core.planning.matrix import Matrix
    from capplan.core.planning.plan import Plan

__all__ = [
    "LEVELS",
    "Bar",
    "Cell",
    "CostRow",
    "Coverage",
    "Lane",
    "Level",
    "Report",
    "Stage",
    "bottom_line",
    "coverage",
    "critical_jobs",
    "gather",
]


@dataclass(frozen=True)
class Level:
    """One kind of coverage cell: its key, words, symbol and colour (Okabe-Ito, which readers
    with each common colour-vision deficiency tell apart; the symbol says it without colour)."""

    key: str
    words: str
    symbol: str
    colour: str


LEVELS: dict[str, Level] = {
    level.key: level
    for level in (
        Level("native", "native code (exact SASS, gfx target or CPU level)", "●", "#009E73"),
        Level("compatible", "same-major SASS (compatible code)", "◐", "#56B4E9"),
        Level("ptx-jit", "PTX JIT (compiled by the driver at first run)", "◇", "#E69F00"),
        Level("unserved", "unserved (no build runs here)", "✕", "#D55E00"),
        Level("none", "not planned for this device (another vendor's or a CPU package)", "·",
              "#EEEEEE"),
    )
}  # fmt: skip
_KEY = {
    RunLevel.NATIVE: "native",
    RunLevel.COMPATIBLE: "compatible",
    RunLevel.PTX_JIT: "ptx-jit",
    RunLevel.CANNOT_RUN: "unserved",
}


@dataclass(frozen=True)
class Cell:
    level: str  # a key of LEVELS
    variant: str | None
    reason: str


@dataclass(frozen=True)
class Coverage:
    devices: tuple[tuple[str, int, str], ...]  # (fleet label, count, system), fleet order
    packages: tuple[str, ...]
    cells: tuple[tuple[Cell, ...], ...]  # [device][package]


@dataclass(frozen=True)
class Bar:
    job: str
    stage: int
    start: float
    minutes: float  # on the runner it is scheduled on
    critical: bool
    runner_kind: str  # "standard", "big-parallel" (the runner it needs), "reference"


@dataclass(frozen=True)
class Lane:
    system: str
    runner: int
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Stage:
    stage: int
    jobs: int
    to_build: int
    cached: int
    skipped: int  # known failures and the jobs that need them
    minutes: float  # the jobs to build, on their runners


@dataclass(frozen=True)
class CostRow:
    strategy: str
    jobs: int
    minutes: float
    size_mb: float


@dataclass(frozen=True)
class Report:
    plan: Plan
    matrix: Matrix  # the whole plan's: every job, cached and skipped ones included
    scheduled: Matrix  # the jobs left to build, as `capplan matrix` schedules them
    coverage: Coverage
    lanes: tuple[Lane, ...]
    makespan: float
    critical_minutes: float
    stages: tuple[Stage, ...]
    costs: tuple[CostRow, ...]
    cached: Mapping[str, str]  # job -> the cache that holds it
    failed: tuple[str, ...]  # recorded failures
    blocked: Mapping[str, tuple[str, ...]]  # job -> the failed jobs it needs
    asked_cache: bool
    asked_failures: bool
    title: str


def coverage(plan: Plan) -> Coverage:
    """Every fleet entry (GPUs, then CPUs) by every requested package: the best way a variant
    of the package runs there (the families' ranking), its variant and reason."""
    devices = tuple(
        (entry.label, entry.count, entry.system) for part in plan.parts for entry in part.fleet
    )
    best: dict[tuple[str, str], Cell] = {}
    for v in plan.variants:
        for serve in v.serves:
            key = (serve.gpu, v.package)
            cell = Cell(_KEY[serve.level], v.name, serve.reason)
            old = best.get(key)
            if old is None or _better(cell, old):
                best[key] = cell
    for d in plan.unserved:
        best.setdefault((d.subject, d.package), Cell("unserved", None, d.reason))
    none = "no variant of this package is planned for this device"
    cells = tuple(
        tuple(best.get((label, p), Cell("none", None, none)) for p in plan.packages)
        for label, _, _ in devices
    )
    return Coverage(devices, plan.packages, cells)


_ORDER = ("native", "compatible", "ptx-jit", "unserved", "none")


def _better(a: Cell, b: Cell) -> bool:
    return (_ORDER.index(a.level), a.variant or "") < (_ORDER.index(b.level), b.variant or "")


def critical_jobs(matrix: Matrix, minutes: Sequence[float]) -> set[str]:
    """The jobs of the longest chain of needs by minutes on their runners (the schedule's
    critical path), one chain per runner pool: no schedule ends before it does."""
    graph = matrix.graph
    n = len(graph.order)
    bottom = [0.0] * n
    nxt = [-1] * n
    for i in range(n - 1, -1, -1):
        tail, pick = 0.0, -1
        for d in graph.later[i]:
            if bottom[d] > tail:
                tail, pick = bottom[d], d
        bottom[i] = minutes[i] + tail
        nxt[i] = pick
    system = {name: matrix.plan.variant(name) for name in graph.order}
    heads: dict[str, int] = {}
    for i, name in enumerate(graph.order):
        v = system[name]
        pool = v.system if v is not None else ""
        if pool not in heads or bottom[i] > bottom[heads[pool]]:
            heads[pool] = i
    out: set[str] = set()
    for i in heads.values():
        while i >= 0:
            out.add(graph.order[i])
            i = nxt[i]
    return out


def _minutes(matrix: Matrix) -> list[float]:
    """Each job's minutes on the runner it is scheduled on, in the graph's order."""
    costs, variant = matrix.costs, matrix.plan.variant
    return [
        costs[n].minutes if n in costs else variant(n).minutes  # type: ignore[union-attr]
        for n in matrix.graph.order
    ]


def gather(
    plan: Plan,
    matrix: Matrix,
    *,
    scheduled: Matrix | None = None,
    cached: Mapping[str, str] | None = None,
    known: KnownFailures | None = None,
    asked_cache: bool = False,
    title: str = "capplan report",
) -> Report:
    """The report's data. ``matrix`` is the whole plan's (its stages count every job);
    ``scheduled`` the matrix of the jobs left to build when ``cached`` (job -> the cache that
    holds it) or ``known`` (the failure record's) took some out, as ``capplan matrix``
    schedules them: the Gantt chart shows that one."""
    cached = dict(cached or {})
    failed = tuple(sorted(known.failed)) if known is not None else ()
    blocked = dict(sorted(known.blocked.items())) if known is not None else {}
    sched = matrix if scheduled is None else scheduled
    minutes = _minutes(sched)
    critical = critical_jobs(sched, minutes)
    by_lane: dict[tuple[str, int], list[Bar]] = {}
    pool_of: dict[str, str] = {}
    for system, pool in sched.pools.items():
        for name in pool.start:
            pool_of[name] = system
        for r in range(pool.runners):
            by_lane[(system, r)] = []
    for i, name in enumerate(sched.graph.order):
        cost = sched.costs.get(name)
        kind = "reference" if cost is None else cost.runner.kind
        bar = Bar(
            name, sched.graph.stage[i], sched.schedule.start[name], minutes[i], name in critical,
            kind,
        )  # fmt: skip
        lane = (pool_of.get(name, plan.system), sched.schedule.runner[name])
        by_lane.setdefault(lane, []).append(bar)
    lanes = tuple(
        Lane(system, runner, tuple(sorted(bars, key=lambda b: (b.start, b.job))))
        for (system, runner), bars in by_lane.items()
    )
    full_minutes = _minutes(matrix)
    per_stage: dict[int, list[int]] = {}
    stage_minutes: dict[int, float] = {}
    for i, name in enumerate(matrix.graph.order):
        stage = matrix.graph.stage[i]
        counts = per_stage.setdefault(stage, [0, 0, 0, 0])
        counts[0] += 1
        if name in cached:
            counts[2] += 1
        elif name in blocked or name in failed:
            counts[3] += 1
        else:
            counts[1] += 1
            stage_minutes[stage] = stage_minutes.get(stage, 0.0) + full_minutes[i]
    b = plan.baselines
    rows = [
        CostRow("this plan", b.plan_jobs, b.plan_minutes, b.plan_size_mb),
        CostRow("nixpkgs default (fat builds)", b.nixpkgs_default_jobs,
                b.nixpkgs_default_minutes, b.nixpkgs_default_size_mb),
        CostRow("naive (one variant per fleet target)", b.naive_jobs, b.naive_minutes,
                b.naive_size_mb),
    ]  # fmt: skip
    return Report(
        plan=plan,
        matrix=matrix,
        scheduled=sched,
        coverage=coverage(plan),
        lanes=lanes,
        makespan=sched.schedule.makespan,
        critical_minutes=round(sched.schedule.critical_path, 2),
        stages=tuple(
            Stage(s, c[0], c[1], c[2], c[3], round(stage_minutes.get(s, 0.0), 2))
            for s, c in sorted(per_stage.items())
        ),
        costs=tuple(rows),
        cached=dict(sorted(cached.items())),
        failed=failed,
        blocked=blocked,
        asked_cache=asked_cache,
        asked_failures=known is not None,
        title=title,
    )


def _listed(names: Sequence[str], most: int = 12) -> str:
    """Names, comma-separated; past ``most``, the first ones and how many more (the coverage
    grid and table name them all)."""
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[:most])} and {len(names) - most:,} more ({len(names):,} in all)"


def bottom_line(report: Report) -> list[str]:
    """The report's first sentences, as ``plan`` and ``matrix`` say them (cli/bottomline.py):
    jobs and minutes against nixpkgs' default, whom they serve, and how long the schedule takes."""
    plan = report.plan
    b = plan.baselines
    summary = report.scheduled.summary()
    planned = len(report.matrix.graph.order)
    of = f" to build of {planned} planned" if planned != summary["jobs"] else ""
    lines = [
        f"{summary['jobs']} build jobs{of} (one per variant), {summary['total_minutes']:g} build "
        f"minutes on the runners they are scheduled on ({b.plan_minutes:g} on the knowledge "
        f"base's reference builder); nixpkgs' default fat builds: {b.nixpkgs_default_jobs} "
        f"jobs, {b.nixpkgs_default_minutes:g} min",
    ]
    gpus = [(label, count) for label, count, _ in report.coverage.devices]
    if gpus:
        lines.append(
            f"for {sum(c for _, c in gpus)} devices of {len(gpus)} models on "
            f"{', '.join(plan.systems)}; packages: {_listed(plan.packages)}"
        )
    lines.append(
        f"{summary['stages']} stages; on {summary['runners']} runners the schedule takes "
        f"{summary['makespan_minutes']:g} min (critical path {report.critical_minutes:g} min, "
        f"lower bound {summary['lower_bound_minutes']:g})"
    )
    return lines
