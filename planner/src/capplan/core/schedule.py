"""Scheduling jobs onto K identical CI runners: a list schedule over the dependency DAG.

Jobs become ready when everything they need has finished; a free runner takes the ready job with
the longest remaining path to the end of the graph (its "bottom level"), then the longest job:
the critical-path refinement of Graham's longest-processing-time list schedule. The lower bound
max(critical path, total work / K) bounds every schedule, so ``makespan / lower_bound`` is an
honest quality figure.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Schedule", "list_schedule"]


@dataclass(frozen=True)
class Schedule:
    runners: int
    makespan: float
    lower_bound: float
    critical_path: float
    total_work: float
    start: dict[str, float]
    runner: dict[str, int]

    @property
    def ratio(self) -> float:
        return self.makespan / self.lower_bound if self.lower_bound else 1.0


def list_schedule(
    order: Sequence[str],
    minutes: Mapping[str, float],
    needs: Mapping[str, Sequence[str]],
    dependents: Mapping[str, Sequence[str]],
    runners: int,
) -> Schedule:
    """Schedule ``order`` (a topological order) onto ``runners`` runners."""
    bottom: dict[str, float] = {}
    for name in reversed(order):
        bottom[name] = minutes[name] + max((bottom[d] for d in dependents[name]), default=0.0)
    total = sum(minutes[n] for n in order)
    critical = max(bottom.values(), default=0.0)
    waiting = {n: len(needs[n]) for n in order}
    ready_at = dict.fromkeys(order, 0.0)
    index = {n: i for i, n in enumerate(order)}
    # Ready jobs, best first: longest bottom level, then longest job, then order.
    ready: list[tuple[float, float, int, str]] = [
        (-bottom[n], -minutes[n], index[n], n) for n in order if waiting[n] == 0
    ]
    heapq.heapify(ready)
    free: list[tuple[float, int]] = [(0.0, r) for r in range(runners)]
    heapq.heapify(free)
    running: list[tuple[float, str]] = []
    start: dict[str, float] = {}
    runner_of: dict[str, int] = {}
    makespan = 0.0
    while ready or running:
        if not ready:
            # Nothing ready: let the earliest running job finish and release its dependents.
            finish, done = heapq.heappop(running)
            _release(done, finish, dependents, waiting, ready_at, ready, bottom, minutes, index)
            continue
        free_at, runner = heapq.heappop(free)
        # Finish every job that ends before this runner is free, so their dependents compete.
        while running and running[0][0] <= free_at:
            finish, done = heapq.heappop(running)
            _release(done, finish, dependents, waiting, ready_at, ready, bottom, minutes, index)
        _, _, _, name = heapq.heappop(ready)
        begin = max(free_at, ready_at[name])
        end = begin + minutes[name]
        start[name] = begin
        runner_of[name] = runner
        makespan = max(makespan, end)
        heapq.heappush(running, (end, name))
        heapq.heappush(free, (end, runner))
    lower = max(critical, total / runners) if order else 0.0
    return Schedule(
        runners,
        round(makespan, 4),
        round(lower, 4),
        round(critical, 4),
        round(total, 4),
        start,
        runner_of,
    )


def _release(
    done: str,
    finish: float,
    dependents: Mapping[str, Sequence[str]],
    waiting: dict[str, int],
    ready_at: dict[str, float],
    ready: list[tuple[float, float, int, str]],
    bottom: Mapping[str, float],
    minutes: Mapping[str, float],
    index: Mapping[str, int],
) -> None:
    for dep in dependents[done]:
        waiting[dep] -= 1
        ready_at[dep] = max(ready_at[dep], finish)
        if waiting[dep] == 0:
            heapq.heappush(ready, (-bottom[dep], -minutes[dep], index[dep], dep))
