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
from capplan.core.planning.summary import gpu_counts, warnings

if TYPE_CHECKING:
    from rich.console import Console

    from capplan.core.planning.plan import Plan

__all__ = ["BUILDER", "gpu_counts", "print_bottom_line", "warnings"]

# The builder every cost in kb/packages.json and kb/amd_packages.json is estimated for (each
# entry's "source" says so).
BUILDER = "a 16-core builder"


def _hours(minutes: float) -> str:
    return f"{minutes / 60:.1f} h"


def print_bottom_line(
    console: Console,
    plan: Plan,
    *,
    jobs: int,
    minutes: float,
    extra: Sequence[str] = (),
    more_warnings: Iterable[tuple[str, str]] = (),
    on_runners: float | None = None,
) -> None:
    """The first lines: jobs and build hours, whom they serve, then the warnings.
    ``on_runners``: the jobs' minutes on the runners they are scheduled on (the matrix's),
    said beside ``minutes``, the knowledge base's on its reference builder."""
    b = plan.baselines
    if on_runners is None:
        cost = (
            f"{minutes:g} build minutes: about {_hours(minutes)} on {BUILDER} (knowledge-base "
            "costs)"
        )
    else:
        cost = (
            f"{on_runners:g} build minutes on the runners they are scheduled on ({minutes:g}, "
            f"about {_hours(minutes)}, on {BUILDER}: knowledge-base costs)"
        )
    print_wrapped(
        console,
        f"{jobs} build jobs (one per variant), {cost}; nixpkgs' default fat builds: "
        f"{b.nixpkgs_default_jobs} jobs, {_hours(b.nixpkgs_default_minutes)}",
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
