"""The bottom line that ``capplan plan`` and ``capplan matrix`` print first: how many build
jobs, how many build hours on the builder the knowledge base's costs assume, how many GPUs they
serve, and the warnings that matter; the tables and every decision come after it.

One word for one thing across commands: a *variant* is a package built for a target list
(``torch-sm86``, what ``generate`` writes to plan.json), and each variant is one build *job*
(what the matrix schedules).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from capplan.cli.output import print_wrapped

if TYPE_CHECKING:
    from rich.console import Console

    from capplan.core.planning.plan import Decision, Plan

__all__ = ["BUILDER", "gpu_counts", "print_bottom_line", "warnings"]

# The builder every cost in kb/packages.json and kb/amd_packages.json is estimated for (each
# entry's "source" says so).
BUILDER = "a 16-core builder"


def _hours(minutes: float) -> str:
    return f"{minutes / 60:.1f} h"


def gpu_counts(plan: Plan) -> dict[str, int]:
    """Fleet GPU label -> how many the fleet runs ([fleet.count], 1 when not given)."""
    counts = {gpu.label: gpu.count for gpu in plan.fleet}
    counts.update({gpu.label: gpu.count for gpu in plan.amd_fleet})
    return counts


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


def print_bottom_line(
    console: Console,
    plan: Plan,
    *,
    jobs: int,
    minutes: float,
    extra: Sequence[str] = (),
    more_warnings: Iterable[tuple[str, str]] = (),
) -> None:
    """The first lines: jobs and build hours, whom they serve, then the warnings."""
    b = plan.baselines
    print_wrapped(
        console,
        f"{jobs} build jobs (one per variant), {minutes:g} build minutes: about "
        f"{_hours(minutes)} on {BUILDER} (knowledge-base costs); nixpkgs' default fat "
        f"builds: {b.nixpkgs_default_jobs} jobs, {_hours(b.nixpkgs_default_minutes)}",
    )
    counts = gpu_counts(plan)
    models = len(counts)
    if models:
        total = sum(counts.values())
        weighted = any(n != 1 for n in counts.values())
        print_wrapped(
            console,
            f"for {total} GPUs of {models} models"
            + (" ([fleet.count])" if weighted else "")
            + f" on {', '.join(plan.systems)}; packages: {', '.join(plan.packages)}",
        )
    for line in extra:
        print_wrapped(console, line)
    found = [*warnings(plan), *more_warnings]
    if not found:
        print_wrapped(console, "no warnings")
        return
    plural = "" if len(found) == 1 else "s"
    print_wrapped(console, f"{len(found)} warning{plural} (the reasons follow below):")
    for kind, text in found:
        print_wrapped(console, text, indent="  ", label=f"{kind}: ")
