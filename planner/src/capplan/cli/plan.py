"""``capplan plan``: per-package variants, which GPUs each serves and how, and the costs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from capplan.cli.bottomline import gpu_counts, print_bottom_line
from capplan.cli.output import emit_json, make_table, out_console, print_table, print_wrapped
from capplan.cli.planning import (
    config_option,
    current_kb,
    flag_layer,
    plan_with_settings,
    planned_costs,
    policy_options,
)
from capplan.core.families.base import DispatchCost
from capplan.core.families.registry import dispatcher, is_cpu_side, table_keys
from capplan.core.planning.costbasis import CostBasis, cost_bases, cost_line
from capplan.core.planning.matrix import plan_dict
from capplan.core.planning.plan import Plan
from capplan.core.planning.runners import JobCost
from capplan.core.planning.summary import runner_warnings

__all__ = ["plan"]


@click.command()
@config_option
@policy_options
@click.option("--json", "as_json", is_flag=True, help="Print the whole plan as JSON.")
@click.option("--print-identifiers", is_flag=True, help="Print one variant name per line and exit.")
@click.option(
    "--verbose", "-v", is_flag=True, help="Also list the routine decisions (each 'kept' build)."
)
def plan(
    config_path: Path | None,
    cuda: str | None,
    share: str | None,
    fat: str | None,
    ptx: str | None,
    gpus: tuple[str, ...],
    rocm_scope: str | None,
    as_json: bool,
    print_identifiers: bool,
    verbose: bool,
) -> None:
    """Plan which variants to build for the fleet, and why."""
    planned = plan_with_settings(
        config_path, flag_layer(cuda, share, fat, ptx, gpus, rocm_scope=rocm_scope)
    )
    result = planned.plan
    if print_identifiers:
        click.echo("\n".join(result.identifiers()))
        return
    kb = current_kb()
    dispatch = dispatcher(kb)
    costs = [
        dispatch.cost(result, p, system)
        for system in result.systems
        for p in dispatch.packages(result, system)
    ]
    bases = cost_bases(kb, result)
    on_runners = planned_costs(planned)
    if as_json:
        emit_json(
            {
                **plan_dict(result),
                "dispatch": [c.to_json() for c in costs],
                "cost_basis": [b.to_json() for b in bases],
                "runners": [_runner_json(v.name, on_runners[v.name]) for v in result.variants],
            }
        )
        return
    _print(result, costs, bases, verbose=verbose, on_runners=on_runners)


def _runner_json(name: str, cost: JobCost) -> dict[str, Any]:
    """One job on the runner it is scheduled on (core/planning/runners.py)."""
    return {
        "job": name,
        "runner": list(cost.runner.labels),
        "runner_kind": cost.runner.kind,
        "cores": cost.cores,
        "minutes": cost.minutes,
        "critical_minutes": cost.critical_minutes,
        "cannot_finish": cost.problem,
    }


def _times(counts: dict[str, int], gpu: str) -> str:
    return f" x{counts[gpu]}" if gpu in counts else ""


_HOLDS = ("holds", "gap")


def _print(
    result: Plan,
    dispatch: list[DispatchCost],
    bases: tuple[CostBasis, ...] = (),
    *,
    verbose: bool = False,
    on_runners: dict[str, JobCost] | None = None,
) -> None:
    console = out_console()
    b = result.baselines
    line = cost_line(bases)
    print_bottom_line(
        console,
        result,
        jobs=b.plan_jobs,
        minutes=b.plan_minutes,
        extra=[line] if line else [],
        more_warnings=runner_warnings(on_runners or {}),
        on_runners=round(sum(c.minutes for c in on_runners.values()), 2) if on_runners else None,
    )
    console.print()
    # [fleet.count]'s effect where it is set: how many GPUs of each model a build serves.
    counts = gpu_counts(result)
    if all(n == 1 for n in counts.values()):
        counts = {}
    for package in sorted({v.package for v in result.variants if not v.independent}):
        table = make_table(
            "variant", "capabilities", "CUDA", "PTX", "serves", title=package, whole=("variant",)
        )
        for v in result.variants_of(package):
            serves = (
                ", ".join(f"{s.gpu}{_times(counts, s.gpu)} ({s.level.value})" for s in v.serves)
                or "(dependency)"
            )
            # The families' cells: the targets, the CUDA version (ROCm and its scope for an
            # AMD variant) and the PTX capabilities.
            cells = table_keys(v)
            table.add_row(v.name, cells["targets"], cells["toolkit"], cells["ptx"] or "-", serves)
        print_table(console, table)
    # CPU-side builds (vendor None) get their own table; GPU packages' shared jobs stay here.
    shared = [v for v in result.variants if v.independent and not is_cpu_side(v)]
    _print_cpu(console, result)
    if shared:
        table = make_table(
            "job", "CUDA", "serves", title="capability-independent (one build each)", whole=("job",)
        )
        for v in shared:
            table.add_row(
                v.name,
                table_keys(v)["toolkit"],
                ", ".join(s.gpu for s in v.serves) or "(dependency)",
            )
        print_table(console, table)
    _print_decisions(console, result, verbose)
    costs = make_table("strategy", "jobs", "build minutes", "output MB", title="Costs")
    costs.add_row("this plan", str(b.plan_jobs), f"{b.plan_minutes:g}", f"{b.plan_size_mb:g}")
    costs.add_row(
        "nixpkgs default (one fat build)",
        str(b.nixpkgs_default_jobs),
        f"{b.nixpkgs_default_minutes:g}",
        f"{b.nixpkgs_default_size_mb:g}",
    )
    costs.add_row(
        "naive (one variant per fleet capability)",
        str(b.naive_jobs),
        f"{b.naive_minutes:g}",
        f"{b.naive_size_mb:g}",
    )
    print_table(console, costs)
    _print_cost_bases(console, bases)
    _print_cpu_costs(console, result)
    if dispatch:
        sizes = make_table(
            "package",
            "system",
            "variants",
            "dispatch MB",
            "one fat build MB",
            "one variant MB",
            title="One package for every GPU: closure sizes (<package>-dispatch)",
        )
        for c in dispatch:
            sizes.add_row(
                c.package,
                c.system,
                str(c.variants),
                f"{c.dispatch_mb:g}",
                f"{c.fat_mb:g}",
                f"{c.one_variant_mb:g}",
            )
        print_table(console, sizes)
    if result.share == "compatible":
        console.print(
            f"share=compatible builds {sum(1 for v in result.variants if not v.fat)} "
            f"variants where exact builds {b.exact_jobs}"
        )


def _print_decisions(console: Any, result: Plan, verbose: bool) -> None:
    """Every decision but the routine ones (a build kept as planned: --verbose lists those),
    each action in its colour; then each unserved GPU with its whole reason."""
    decisions = [d for d in result.decisions if d.action not in _HOLDS]
    held = [d for d in result.decisions if d.action in _HOLDS]
    shown = [d for d in decisions if verbose or d.action != "kept"]
    hidden = len(decisions) - len(shown)
    if decisions:
        console.print("[bold]Decisions[/bold]")
    for d in shown:
        text = f"{d.package}: {d.subject}: {d.reason}"
        print_wrapped(console, text, indent="  ", label=f"{d.action}: ")
    if hidden:
        note = f"({hidden} builds kept as planned, one per package and GPU: --verbose lists them)"
        print_wrapped(console, note, indent="  ")
    if held:
        # core/families/rocm/planning.py rule 6: what each AMD library really holds, and in plain
        # words where a variant's copy of a library lacks its GPU's code.
        console.print("[bold]What the AMD libraries hold[/bold]")
        for d in held:
            if d.action == "gap":
                print_wrapped(console, f"{d.subject}: {d.reason}", indent="  ", label="missing: ")
            else:
                print_wrapped(console, d.reason, indent="  ")
    for d in result.unserved:
        print_wrapped(console, f"{d.package}: {d.subject}: {d.reason}", label="unserved: ")


def _print_cpu(console: Any, result: Plan) -> None:
    """The CPU-side packages' builds: generic, per CPU level, or laid out by glibc-hwcaps."""
    cpu_side = [v for v in result.variants if is_cpu_side(v)]
    if not cpu_side:
        return
    table = make_table("build", "CPU", "serves", title="CPU-side packages", whole=("build",))
    for v in cpu_side:
        target = table_keys(v)["cpu"]
        serves = ", ".join(f"{s.gpu} ({s.level.value})" for s in v.serves) or "-"
        table.add_row(v.name, target, serves)
    print_table(console, table)


def _print_cpu_costs(console: Any, result: Plan) -> None:
    c = result.cpu_costs
    if c is None:
        return
    table = make_table("strategy", "jobs", "build minutes", "output MB", title="CPU-side costs")
    table.add_row("this plan", str(c.plan_jobs), f"{c.plan_minutes:g}", f"{c.plan_size_mb:g}")
    table.add_row(
        "one generic build each",
        str(c.generic_jobs),
        f"{c.generic_minutes:g}",
        f"{c.generic_size_mb:g}",
    )
    table.add_row(
        "every package for every fleet CPU",
        str(c.every_level_jobs),
        f"{c.every_level_minutes:g}",
        f"{c.every_level_size_mb:g}",
    )
    print_table(console, table)


def _print_cost_bases(console: Any, bases: tuple[CostBasis, ...]) -> None:
    """Where each package's minutes come from: measured or estimated, on which machine (the
    whole source is in --json's cost_basis)."""
    if not bases:
        return
    table = make_table(
        "package", "vendor", "basis", "minutes stated for", title="Build minutes: basis"
    )
    for b in bases:
        table.add_row(b.package, b.vendor, b.basis, b.reference)
    print_table(console, table)
