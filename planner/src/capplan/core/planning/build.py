"""``capplan build``'s pure part: the order jobs start in, what a failure blocks, the progress
and ETA, the events and the summary. No clock and no I/O: the runner passes times in.

Order: dependencies first; among the jobs that are ready, the longest critical path first (the
bottom level the matrix's list schedule ranks by, then the longest job), so torch starts before
the small jobs and the makespan comes close to the schedule ``matrix`` prints.
"""

from __future__ import annotations

import difflib
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from capplan.core.families.registry import gccarch_feature
from capplan.core.planning.schedule import bottom_levels, schedule_jobs
from capplan.errors import ExitCode, InvalidInputError, printable, shorten

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan, Variant

__all__ = [
    "BuildEvent",
    "BuildJob",
    "BuildProgress",
    "BuildQueue",
    "BuildSummary",
    "derivation_features",
    "with_needs",
]


@dataclass(frozen=True)
class BuildJob:
    name: str
    system: str
    needs: tuple[str, ...]  # jobs of the plan this one builds against
    minutes: float  # estimated
    features: tuple[str, ...]  # required system features (big-parallel, gccarch-...)
    drv: str
    outputs: tuple[str, ...]


def _topological(jobs: Sequence[BuildJob]) -> list[int]:
    """Job numbers in a dependency order (Kahn), the given order among equals; needs outside
    ``jobs`` are met already."""
    index = {j.name: i for i, j in enumerate(jobs)}
    waiting = [sum(1 for n in set(j.needs) if n in index) for j in jobs]
    later: list[list[int]] = [[] for _ in jobs]
    for i, j in enumerate(jobs):
        for n in set(j.needs):
            if n in index:
                later[index[n]].append(i)
    order = [i for i, w in enumerate(waiting) if w == 0]
    k = 0
    while k < len(order):
        for d in sorted(later[order[k]]):
            waiting[d] -= 1
            if waiting[d] == 0:
                order.append(d)
        k += 1
    if len(order) != len(jobs):
        raise ValueError("the jobs' needs have a cycle")  # build_job_graph refused it already
    return order


class BuildQueue:
    """The jobs left to start, ready ones best first; a failure blocks what needs it."""

    def __init__(self, jobs: Sequence[BuildJob]) -> None:
        order = _topological(jobs)
        self.jobs = [jobs[i] for i in order]
        number = {j.name: k for k, j in enumerate(self.jobs)}
        self.later: list[list[int]] = [[] for _ in self.jobs]
        self.waiting = [0] * len(self.jobs)
        for k, j in enumerate(self.jobs):
            for n in sorted(set(j.needs)):
                if n in number:
                    self.later[number[n]].append(k)
                    self.waiting[k] += 1
        self.bottom = bottom_levels([j.minutes for j in self.jobs], self.later)
        ranked = sorted(
            range(len(self.jobs)), key=lambda k: (-self.bottom[k], -self.jobs[k].minutes, k)
        )
        self._rank = [0] * len(self.jobs)
        for r, k in enumerate(ranked):
            self._rank[k] = r
        self._by_rank = ranked
        self._number = number
        self._ready = [self._rank[k] for k, w in enumerate(self.waiting) if w == 0]
        heapq.heapify(self._ready)
        self._gone: set[int] = set()  # started or blocked

    def __len__(self) -> int:
        """Jobs neither started nor blocked yet."""
        return len(self.jobs) - len(self._gone)

    def pop(self) -> BuildJob | None:
        """The best ready job, or None while none is ready."""
        while self._ready:
            k = self._by_rank[heapq.heappop(self._ready)]
            if k not in self._gone:
                self._gone.add(k)
                return self.jobs[k]
        return None

    def peek(self) -> BuildJob | None:
        """The job :meth:`pop` would return, left in the queue."""
        while self._ready and self._by_rank[self._ready[0]] in self._gone:
            heapq.heappop(self._ready)
        return self.jobs[self._by_rank[self._ready[0]]] if self._ready else None

    def ready(self) -> int:
        """How many jobs are ready (an upper bound while blocked ones wait to be dropped)."""
        return len(self._ready)

    def built(self, name: str) -> None:
        for d in self.later[self._number[name]]:
            self.waiting[d] -= 1
            if self.waiting[d] == 0 and d not in self._gone:
                heapq.heappush(self._ready, self._rank[d])

    def failed(self, name: str) -> list[str]:
        """The jobs that need ``name``, directly or not, in start order: blocked, never tried."""
        todo = list(self.later[self._number[name]])
        blocked: list[int] = []
        while todo:
            k = todo.pop()
            if k in self._gone:
                continue
            self._gone.add(k)
            blocked.append(k)
            todo.extend(self.later[k])
        return [self.jobs[k].name for k in sorted(blocked)]

    def remaining(self) -> list[str]:
        """The jobs neither started nor blocked, in start order."""
        return [j.name for k, j in enumerate(self.jobs) if k not in self._gone]

    def critical_minutes(self, name: str) -> float:
        return self.bottom[self._number[name]]


def estimate_minutes(jobs: Sequence[BuildJob], slots: int) -> float:
    """The makespan of the jobs' list schedule on ``slots`` builders (what the matrix's schedule
    says for one pool of that size)."""
    if not jobs or slots < 1:
        return 0.0
    queue = BuildQueue(jobs)
    return schedule_jobs(
        [j.name for j in queue.jobs],
        [j.minutes for j in queue.jobs],
        list(queue.waiting),
        queue.later,
        slots,
    ).makespan


@dataclass
class _Count:
    done: int = 0
    running: int = 0
    left: int = 0


@dataclass
class BuildProgress:
    """Done, running and left per system; each running job's elapsed time; the ETA from the
    estimates, corrected by how long finished jobs took against theirs."""

    jobs: Mapping[str, BuildJob]
    slots: int
    started: dict[str, float] = field(default_factory=dict)  # running job -> start time (s)
    finished: set[str] = field(default_factory=set)
    took: float = 0.0  # seconds the finished builds took
    estimated: float = 0.0  # minutes they were estimated at

    def start(self, name: str, now: float) -> None:
        self.started[name] = now

    def finish(self, name: str, now: float, *, measured: bool = True) -> None:
        begun = self.started.pop(name, None)
        self.finished.add(name)
        if begun is not None and measured:
            self.took += max(0.0, now - begun)
            self.estimated += self.jobs[name].minutes

    def drop(self, names: Iterable[str]) -> None:
        """Jobs that will not run (blocked): no longer left."""
        self.finished.update(names)

    def factor(self) -> float:
        """Measured over estimated time of the finished builds (1 before any finished)."""
        if self.estimated <= 0 or self.took <= 0:
            return 1.0
        return min(100.0, max(0.001, self.took / (self.estimated * 60)))

    def per_system(self) -> dict[str, tuple[int, int, int]]:
        counts: dict[str, _Count] = {}
        for name, job in sorted(self.jobs.items()):
            c = counts.setdefault(job.system, _Count())
            if name in self.started:
                c.running += 1
            elif name in self.finished:
                c.done += 1
            else:
                c.left += 1
        return {s: (c.done, c.running, c.left) for s, c in sorted(counts.items())}

    def eta_seconds(self, now: float) -> float:
        """Seconds until the last job ends: the work left (a running job's estimate less its
        elapsed time) spread over the slots, never below the longest job still running or left."""
        k = self.factor()
        work = 0.0
        longest = 0.0
        for name, job in self.jobs.items():
            if name in self.finished:
                continue
            left = job.minutes * 60 * k
            if name in self.started:
                left = max(0.0, left - (now - self.started[name]))
            work += left
            longest = max(longest, left)
        return max(longest, work / max(1, self.slots))


@dataclass(frozen=True)
class BuildEvent:
    """One thing that happened, said as a JSON object (--json), a plain line or a live row."""

    event: str  # unbuildable, skipped, present, started, built, failed, blocked, pushed, ...
    job: str | None = None
    system: str | None = None
    detail: str = ""  # one line: why, where, the log's last line
    seconds: float | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.event}
        if self.job is not None:
            out["job"] = self.job
        if self.system is not None:
            out["system"] = self.system
        if self.detail:
            out["detail"] = self.detail
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 3)
        out.update(self.data)
        return out

    def line(self) -> str:
        """The plain line, values escaped: a job name or a log line never acts on a terminal."""
        parts = [self.event]
        if self.job is not None:
            parts.append(self.job)
        if self.system is not None:
            parts.append(f"({self.system})")
        text = " ".join(parts)
        if self.seconds is not None:
            text += f" in {self.seconds:.1f} s"
        if self.detail:
            text += f": {self.detail}"
        return printable(text)


@dataclass
class BuildSummary:
    built: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)  # built before (a rerun)
    cached: list[str] = field(default_factory=list)  # --skip-cached: in a --cache
    known_failures: list[str] = field(default_factory=list)  # skipped: in the failure record
    failed: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    unbuildable: list[str] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)
    push_failed: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    not_started: list[str] = field(default_factory=list)  # after a failure, without --keep-going
    wall_seconds: float = 0.0
    estimated_minutes: float = 0.0

    def exit_code(self) -> ExitCode:
        if self.failed:
            return ExitCode.BUILD_FAILED
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        keys = (
            "built", "present", "cached", "known_failures", "failed", "blocked", "unbuildable",
            "pushed", "push_failed", "interrupted", "not_started",
        )  # fmt: skip
        out: dict[str, Any] = {"event": "summary"}
        for key in keys:
            out[key] = sorted(getattr(self, key))
        out["wall_seconds"] = round(self.wall_seconds, 3)
        out["estimated_minutes"] = round(self.estimated_minutes, 2)
        out["exit_code"] = int(self.exit_code())
        return out

    def lines(self) -> list[str]:
        counts = (
            f"built {len(self.built)}, already built {len(self.present)}, cached "
            f"{len(self.cached)}, failed {len(self.failed)}, blocked {len(self.blocked)}, "
            f"no builder {len(self.unbuildable)}, known failures {len(self.known_failures)}, "
            f"pushed {len(self.pushed)}"
            + (f", push failed {len(self.push_failed)}" if self.push_failed else "")
            + (f", interrupted {len(self.interrupted)}" if self.interrupted else "")
            + (f", not started {len(self.not_started)}" if self.not_started else "")
        )
        out = [counts]
        out.append(
            f"wall time {self.wall_seconds / 60:.1f} min against an estimate of "
            f"{self.estimated_minutes:g} min"
        )
        for key, label in (
            ("failed", "failed"),
            ("blocked", "blocked"),
            ("push_failed", "not pushed"),
        ):
            names = sorted(getattr(self, key))
            if names:
                out.append(printable(f"{label}: {', '.join(names)}"))
        return out


def with_needs(plan: Plan, only: Sequence[str]) -> Plan:
    """The plan, or with ``only`` (``capplan build --only``) those jobs and every job they
    need."""
    if not only:
        return plan
    names = {v.name for v in plan.variants}
    for name in only:
        if name not in names:
            close = difflib.get_close_matches(name, sorted(names), n=3)
            raise InvalidInputError(
                f"--only {shorten(name)!r} is not a job of the plan",
                hint=("did you mean " + " or ".join(close) + "?")
                if close
                else "list the jobs with capplan matrix",
            )
    keep: set[str] = set()
    todo = list(only)
    by_name = {v.name: v for v in plan.variants}
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo.extend(by_name[name].needs)
    return replace(plan, variants=tuple(v for v in plan.variants if v.name in keep))


def derivation_features(v: Variant) -> tuple[str, ...]:
    """What the job's derivation requires of a machine: big-parallel (the knowledge base's
    packages that nixpkgs marks so) and a CPU level's gccarch feature."""
    out = ["big-parallel"] if v.big_parallel else []
    feature = gccarch_feature(v)
    if feature is not None:
        out.append(feature)
    return tuple(out)
