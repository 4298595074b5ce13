"""What a plan's first lines say, as data (pure): how many GPUs of each model the fleet runs,
and the warnings that matter, in a fixed order. ``capplan plan`` and ``capplan matrix`` print
them (cli/bottomline.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capplan.core.planning.plan import Decision, Plan
    from capplan.core.planning.runners import JobCost

__all__ = ["gpu_counts", "runner_warnings", "warnings"]


def gpu_counts(plan: Plan) -> dict[str, int]:
    """Fleet GPU label -> how many the fleet runs ([fleet.count], 1 when not given)."""
    return {gpu.label: gpu.count for gpu in plan.gpus()}


def warnings(plan: Plan) -> list[tuple[str, str]]:
    """(kind, text) for each warning that matters, in a fixed order: per package, the GPUs it
    has no build for (with how many of each the fleet runs); then every excluded target (a
    variant whose code, or whose dependency's code, does not cover the GPU it is named for);
    then what a variant's library copy lacks for the GPU it serves (an AMD ``gap``)."""
    counts = gpu_counts(plan)
    out: list[tuple[str, str]] = []
    by_package: dict[str, list[str]] = {}
    for d in plan.unserved:
        by_package.setdefault(d.package, []).append(d.subject)
    for package, gpus in sorted(by_package.items()):
        shown = ", ".join(f"{gpu} (x{counts[gpu]})" if gpu in counts else gpu for gpu in gpus)
        lost = sum(counts.get(gpu, 1) for gpu in gpus)
        out.append(("unserved", f"{package} has no build for {shown}: {lost} GPUs go without"))
    gaps = [d for d in plan.decisions if d.action == "gap"]
    for d in plan.decisions:
        if d.action in ("excluded", "dropped") and not _said_by_a_gap(d, gaps):
            first = d.reason.split(": ")[0]
            out.append((d.action, f"{d.package}: {d.subject}: {first}"))
    for d in gaps:
        # A variant whose copy of a library lacks its GPU's code (ROCm: magma-hip's own target
        # list): what breaks, in plain words, after what the library holds.
        at = d.reason.rfind(": no ")
        what = d.reason[at + 2 :] if at >= 0 else d.reason
        out.append(("missing", f"{d.subject}: {what}"))
    return out


def _said_by_a_gap(excluded: Decision, gaps: Sequence[Decision]) -> bool:
    """Whether a ``gap`` warning already says what ``excluded`` does (a dependency's target
    excluded, ``magma-hip:gfx942``), in the plainer words of what breaks on which GPU."""
    library, _, target = excluded.subject.rpartition(":")
    return any(
        g.package == excluded.package
        and g.subject.endswith(f": {library}")
        and f"no {target} code" in g.reason
        for g in gaps
    )


def runner_warnings(costs: Mapping[str, JobCost]) -> list[tuple[str, str]]:
    """("runner", text) for each job that cannot finish on the runner it is scheduled on
    (core/planning/runners.py), by job name: what it would take, and the runner it needs."""
    out = []
    for name, cost in sorted(costs.items()):
        if cost.problem is None:
            continue
        if cost.runner.kind == "standard":
            need = 'it needs a big-parallel runner ([policy.runners_os] "big-parallel")'
        else:
            need = "it needs a bigger big-parallel runner ([policy] big_parallel_cores)"
        out.append(("runner", f"{name} cannot finish: {cost.problem}; {need}"))
    return out
