"""Reading many files at once: a pool of forked workers for independent per-file work
(``capplan inspect`` on a folder, ``capplan doctor`` on an environment).

Files are handed out largest first (a 500 MB libtorch_cuda.so should not start last) and the
results come back in the order given, so the output never depends on the number of workers.
Below ``POOL_MIN_BYTES`` in all, or with one CPU, or where ``fork`` is unavailable, the work
runs in this process: starting workers would cost more than it saves.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["POOL_MIN_BYTES", "default_jobs", "map_files"]

T = TypeVar("T")
R = TypeVar("R")

POOL_MIN_BYTES = 64 << 20


def default_jobs() -> int:
    """Worker processes for a scan: the CPUs this process may use, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def map_files(
    work: Callable[[T], R],
    items: Sequence[T],
    sizes: Sequence[int],
    *,
    jobs: int | None = None,
    on_done: Callable[[int], None] | None = None,
) -> list[R]:
    """``[work(item) for item in items]``, with a pool of forked workers where that pays.

    ``work`` must be a module-level function (it is sent to the workers by name); ``sizes``
    are the items' byte counts (the pool threshold, the largest-first order, and what
    ``on_done`` is told as each item finishes, for a progress bar)."""
    workers = min(default_jobs() if jobs is None else max(1, jobs), len(items))
    if workers <= 1 or sum(sizes) < POOL_MIN_BYTES or not _can_fork():
        out = []
        for item, size in zip(items, sizes, strict=True):
            out.append(work(item))
            if on_done is not None:
                on_done(size)
        return out
    # Imported here: a single file, the common case, never pays for multiprocessing's import.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # The stop-signal guard of the bounded runner: held while the workers run.
    from capplan.runtime.selector import Stopped, Stops

    order = sorted(range(len(items)), key=lambda i: -sizes[i])
    found: dict[int, R] = {}
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    stopped = False
    try:
        # SIGTERM (a CI cancel, ``timeout``), SIGHUP or SIGINT ends the workers first, then acts
        # on capplan as it would have (docs/limits.md: capplan's children end with it).
        with Stops() as stops:
            try:
                stops.child_started()
                futures = {pool.submit(work, items[i]): i for i in order}
                for future in as_completed(futures):
                    index = futures[future]
                    found[index] = future.result()
                    if on_done is not None:
                        on_done(sizes[index])
            except Stopped as stop:
                stops.pending = stop.signum
                stopped = True
                _end_workers(pool)
    finally:
        if stopped:
            pool.shutdown(wait=False, cancel_futures=True)
        else:
            pool.shutdown(wait=True, cancel_futures=True)
    return [found[i] for i in range(len(items))]


def _end_workers(pool: Any) -> None:
    """Kill the pool's worker processes and reap them (the executor keeps them in
    ``_processes``; Python 3.14's ``terminate_workers`` does the same)."""
    import multiprocessing

    processes = list((getattr(pool, "_processes", None) or {}).values())
    # A signal that lands while submit() is still starting workers finds the last one forked
    # but not yet in ``_processes``; multiprocessing's own list of children has it.
    processes += [p for p in multiprocessing.active_children() if p not in processes]
    for process in processes:
        with contextlib.suppress(OSError, ValueError):
            process.kill()
    for process in processes:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            process.join(5)
