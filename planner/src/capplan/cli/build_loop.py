"""``capplan build``'s loop: start the best ready jobs while slots are free, record each
failure and block what needs it, push each success as it lands, and stop cleanly on a signal.

One ``nix build`` per job, except for jobs estimated under a minute: while more of those are
ready than slots are free, they share the free slots, several derivations to one ``nix build``
(which of them failed: the outputs the store lacks afterwards). A nix process costs 20-40 ms
here (more on a loaded machine); for jobs that take seconds that was most of capplan's overhead
per job (bench/bench_build.py), while a job of minutes or hours never waits behind another.

Interrupted (SIGINT, SIGTERM, SIGHUP): every ``nix build`` and push process group is stopped
(:meth:`Processes.stop_all`); a job in flight is neither recorded as failed nor pushed, and the
failure record is only ever replaced whole (atomic write), so it and the cache stay consistent.
Then the signal acts on capplan as it would have (exit 130 for SIGINT).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capplan.adapters.nix_build import (
    Finished,
    Processes,
    build_argv,
    failure_log,
    invalid_paths,
    push_argv,
)
from capplan.cli.build_view import BuildView
from capplan.core.planning.build import (
    BuildEvent,
    BuildJob,
    BuildProgress,
    BuildQueue,
    BuildSummary,
)
from capplan.runtime.selector import Stopped, Stops

__all__ = ["PUSH_ATTEMPTS", "BuildRun", "push_present"]

PUSH_ATTEMPTS = 3  # a failed push is tried this often, 2 s then 4 s apart, then reported
_PUSHES_AT_ONCE = 2  # uploads beside the builds: more would compete with them for the network
_LIVE_TICK = 0.5  # seconds between redraws of the live display
# Jobs estimated below this many minutes may share one nix build (see the module's note).
BATCH_BELOW_MINUTES = 1.0


@dataclass
class _Push:
    jobs: tuple[BuildJob, ...]  # several: the jobs built already, pushed in one call
    attempt: int = 1
    not_before: float = 0.0


class BuildRun:
    def __init__(
        self,
        jobs: Sequence[BuildJob],
        *,
        progress: BuildProgress,
        view: BuildView,
        summary: BuildSummary,
        version: tuple[int, int],
        builders: str | None,
        max_jobs: int | None,
        slots: int,
        push_target: str | None,
        failures_file: Path | None,
        keep_going: bool,
    ) -> None:
        self.queue = BuildQueue(jobs)
        self.jobs = {j.name: j for j in jobs}
        self.progress = progress
        self.view = view
        self.summary = summary
        self.version = version
        self.builders = builders
        self.max_jobs = max_jobs
        self.slots = slots
        self.push_target = push_target
        self.failures_file = failures_file
        self.keep_going = keep_going
        self.procs = Processes()
        self.pushes: deque[_Push] = deque()
        self.pushing: dict[str, _Push] = {}
        self.building: dict[str, tuple[BuildJob, ...]] = {}  # process key -> its jobs
        self.stopping = False  # a failure without --keep-going: start nothing new
        self._serial = 0

    def run(self) -> None:
        begun = time.monotonic()
        with Stops() as stops:
            try:
                stops.child_started()
                self._loop()
            except Stopped as stopped:
                self._interrupted()
                stops.pending = stopped.signum
            except BaseException:
                self.procs.stop_all()
                raise
            finally:
                self.summary.wall_seconds = time.monotonic() - begun
                if stops.pending is not None:
                    self.view.summary(self.summary)

    def _loop(self) -> None:
        while True:
            now = time.monotonic()
            self._start_builds(now)
            self._start_pushes(now)
            if not self.building and not self.pushing and not self.pushes:
                break  # nothing runs and nothing more can start
            timeout = None
            if self.view.live_mode:
                timeout = _LIVE_TICK
            if self.pushes and len(self.pushing) < _PUSHES_AT_ONCE:
                wait = max(0.0, min(p.not_before for p in self.pushes) - now)
                timeout = wait if timeout is None else min(timeout, wait)
            for done in self.procs.wait(timeout):
                self._finished(done, time.monotonic())
            self.view.refresh(time.monotonic())
        if self.stopping:
            left = self.queue.remaining()
            for name in left:
                self.view.event(
                    BuildEvent("not-started", name, self.jobs[name].system, "after a failure")
                )
            self.summary.not_started = left

    def _start_builds(self, now: float) -> None:
        while not self.stopping and len(self.building) < self.slots:
            first = self.queue.pop()
            if first is None:
                return
            batch = [first]
            if first.minutes < BATCH_BELOW_MINUTES:
                free = self.slots - len(self.building)
                share = -(-(self.queue.ready() + 1) // free)  # the ready small jobs per slot
                while len(batch) < share:
                    following = self.queue.peek()
                    if following is None or following.minutes >= BATCH_BELOW_MINUTES:
                        break
                    batch.append(self.queue.pop())  # type: ignore[arg-type]
            self._serial += 1
            key = f"build:{self._serial}"
            argv = build_argv([j.drv for j in batch], self.version, self.builders, self.max_jobs)
            self.procs.start(key, argv)
            self.building[key] = tuple(batch)
            for job in batch:
                self.progress.start(job.name, now)
                self.view.event(
                    BuildEvent(
                        "started",
                        job.name,
                        job.system,
                        f"estimated {job.minutes:g} min",
                        # Which nix build runs it (jobs under a minute may share one).
                        data={"derivation": job.drv, "nix_build": self._serial},
                    )
                )

    def _start_pushes(self, now: float) -> None:
        assert self.push_target is not None or not self.pushes
        while self.pushes and len(self.pushing) < _PUSHES_AT_ONCE:
            due = [p for p in self.pushes if p.not_before <= now]
            if not due:
                return
            # Everything due goes in one push: jobs that landed together cost one upload call.
            for p in due:
                self.pushes.remove(p)
            push = _Push(tuple(j for p in due for j in p.jobs), max(p.attempt for p in due), now)
            self._serial += 1
            key = f"push:{self._serial}"
            paths = [p for j in push.jobs for p in j.outputs]
            assert self.push_target is not None
            self.procs.start(key, push_argv(self.push_target, paths))
            self.pushing[key] = push

    def _finished(self, done: Finished, now: float) -> None:
        if done.key.startswith("push:"):
            self._pushed(self.pushing.pop(done.key), done, now)
            return
        batch = self.building.pop(done.key)
        failed: set[str] = set()
        if done.returncode != 0:
            if len(batch) == 1:
                failed = {batch[0].name}
            else:
                missing = invalid_paths([p for j in batch for p in j.outputs])
                failed = {j.name for j in batch if set(j.outputs) & missing or not j.outputs}
        for job in batch:
            took = now - self.progress.started.get(job.name, now)
            self.progress.finish(job.name, now)
            if job.name in failed:
                self._failed(job, done, took)
                continue
            self.queue.built(job.name)
            self.summary.built.append(job.name)
            where = done.machine(job.drv)
            self.view.event(
                BuildEvent(
                    "built",
                    job.name,
                    job.system,
                    f"on {where}" if where else "",
                    took,
                    {"machine": where or "local"},
                )
            )
            if self.push_target is not None:
                self.pushes.append(_Push((job,)))

    def _failed(self, job: BuildJob, done: Finished, took: float) -> None:
        from capplan.adapters.failures import locked, read_record, write_record
        from capplan.cli.failures import now as record_now
        from capplan.core.planning.failures import utc_text

        log = failure_log(job.drv, done.stderr)
        if self.failures_file is not None:
            when = utc_text(record_now().timestamp()) or "1970-01-01T00:00:00Z"
            with locked(self.failures_file) as target:
                old = read_record(target, missing_ok=True)
                write_record(target, old.add(job.drv, job.name, job.system, when, log))
        blocked = self.queue.failed(job.name)
        self.progress.drop(blocked)
        self.summary.failed.append(job.name)
        self.summary.blocked.extend(blocked)
        last = log[-1] if log else f"nix build exited {done.returncode}"
        self.view.event(
            BuildEvent(
                "failed",
                job.name,
                job.system,
                last,
                took,
                {"derivation": job.drv, "log_tail": list(log), "blocks": blocked},
            )
        )
        for name in blocked:
            self.view.event(
                BuildEvent("blocked", name, self.jobs[name].system, f"needs {job.name}, failed")
            )
        if not self.keep_going:
            self.stopping = True

    def _pushed(self, push: _Push, done: Finished, now: float) -> None:
        names = [j.name for j in push.jobs]
        if done.returncode == 0:
            self.summary.pushed.extend(names)
            for job in push.jobs:
                self.view.event(BuildEvent("pushed", job.name, job.system, str(self.push_target)))
            return
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        if push.attempt < PUSH_ATTEMPTS:
            delay = 2.0**push.attempt
            for job in push.jobs:
                self.view.event(
                    BuildEvent("push-retry", job.name, job.system, f"{last}; again in {delay:g} s")
                )
            self.pushes.append(_Push(push.jobs, push.attempt + 1, now + delay))
            return
        self.summary.push_failed.extend(names)
        for job in push.jobs:
            self.view.event(
                BuildEvent(
                    "push-failed",
                    job.name,
                    job.system,
                    f"{last} (after {PUSH_ATTEMPTS} tries; the build is kept in the store)",
                )
            )

    def _interrupted(self) -> None:
        stopped = self.procs.stop_all()
        names = sorted(j.name for k in stopped for j in self.building.get(k, ()))
        self.summary.interrupted = names
        for name in names:
            self.view.event(
                BuildEvent(
                    "interrupted", name, self.jobs[name].system, "neither recorded nor pushed"
                )
            )
        self.building.clear()
        self.pushing.clear()
        self.pushes.clear()


def push_present(run: BuildRun, jobs: Sequence[BuildJob]) -> None:
    """Queue one push of the jobs built before (a rerun after a failed push pushes them;
    ``nix copy`` sends only what the target lacks)."""
    run.pushes.append(_Push(tuple(jobs)))
