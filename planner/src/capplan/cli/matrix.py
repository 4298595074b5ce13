"""``capplan matrix``: the build matrix for CI, minus what binary caches already hold."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from capplan.cli.bottomline import print_bottom_line
from capplan.cli.output import (
    AsciiIntRange,
    emit_json,
    err_console,
    make_table,
    out_console,
    print_table,
    print_wrapped,
    progress,
)
from capplan.cli.planning import (
    cache_query_options,
    config_option,
    current_kb,
    flag_layer,
    plan_with_settings,
    planned_costs,
    planned_matrix,
    policy_options,
)
from capplan.core.planning.costbasis import CostBasis, cost_bases, cost_line
from capplan.core.planning.failures import KnownFailures
from capplan.core.planning.matrix import GITHUB_MAX_JOBS, Matrix
from capplan.core.planning.plan import Plan
from capplan.core.planning.summary import runner_warnings
from capplan.errors import InvalidInputError

if TYPE_CHECKING:
    from capplan.cli.planning import Planned
    from capplan.core.planning.runners import JobCost
    from capplan.core.report.data import Report

__all__ = ["cached_jobs", "matrix", "report_data"]


@click.command()
@config_option
@policy_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "github", "github-output", "summary"]),
    default=None,
    help="table (default), json, github: GitHub Actions' strategy.matrix "
    '({"include": [...]}, or {"matrices": [{"include": [...]}, ...]} when the jobs exceed '
    "--max-jobs), or github-output: the stage-and-shard layout as $GITHUB_OUTPUT lines "
    "(capplan ci github), or summary: Markdown for a GitHub job summary.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option(
    "--needs", "show_needs", is_flag=True, help="Table: list each job's needs, not their count."
)
@click.option(
    "--runners",
    type=AsciiIntRange(1, 10_000),
    default=None,
    help="CI runners in each system's pool (default: policy.runners).",
)
@click.option(
    "--max-jobs",
    type=AsciiIntRange(1, GITHUB_MAX_JOBS),
    default=GITHUB_MAX_JOBS,
    show_default=True,
    help='Jobs per GitHub matrix; more jobs give {"matrices": [...]}, one matrix each.',
)
@cache_query_options("Drop jobs whose outputs every --cache check finds present.")
@click.option(
    "--failures",
    "failures_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Failure record (capplan failures): leave out known failures and what needs them.",
)
@click.option(
    "--retry-failed",
    is_flag=True,
    envvar="CAPPLAN_RETRY_FAILED",
    help="With --failures: schedule known failures anyway (env CAPPLAN_RETRY_FAILED=true).",
)
@click.option(
    "--stage",
    type=AsciiIntRange(0),
    default=None,
    help="With --format github: only this stage's jobs.",
)
@click.option(
    "--shards",
    is_flag=True,
    help="With --format github: the stage-and-shard layout as one JSON object.",
)
@click.option(
    "--rows",
    "rows_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="With --format github-output: write each job's other values (attribute, system, "
    "derivation, CPU level) to FILE, one tab-separated line each, for the build jobs to read.",
)
@click.option(
    "--summary",
    "summary_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="With --format github-output: also write --format summary's Markdown to FILE.",
)
@click.option(
    "--expect-shards",
    default=None,
    metavar="LAYOUT",
    help="Exit 11 unless the plan's shards per stage are LAYOUT (e.g. 1,1,2,1; 'none').",
)
def matrix(
    config_path: Path | None,
    cuda: str | None,
    share: str | None,
    fat: str | None,
    ptx: str | None,
    gpus: tuple[str, ...],
    rocm_scope: str | None,
    fmt: str | None,
    as_json: bool,
    show_needs: bool,
    runners: int | None,
    max_jobs: int,
    caches: tuple[str, ...],
    skip_cached: bool,
    trusted_keys: tuple[str, ...],
    jobs_file: Path | None,
    flake: str,
    override_inputs: tuple[tuple[str, str], ...],
    offline: bool,
    failures_file: Path | None,
    retry_failed: bool,
    stage: int | None,
    shards: bool,
    rows_file: Path | None,
    summary_file: Path | None,
    expect_shards: str | None,
) -> None:
    """Print the build matrix (table, JSON, or GitHub Actions' strategy.matrix).

    The table shows each job's needs as a count (--needs lists them; --json has them all).
    --format github prints {"include": [...]} for strategy.matrix, or, when the jobs exceed
    --max-jobs, {"matrices": [{"include": [...]}, ...]}: one matrix per CI job.
    """
    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json contradicts --format {fmt}")
    fmt = "json" if as_json else (fmt or "table")
    if jobs_file is not None and not skip_cached and failures_file is None:
        raise click.UsageError(
            "--jobs is only read with --skip-cached or --failures (add one of them)"
        )
    if retry_failed and failures_file is None:
        raise click.UsageError("--retry-failed goes with --failures FILE")
    if rows_file is not None and fmt != "github-output":
        raise click.UsageError("--rows goes with --format github-output")
    if summary_file is not None and fmt != "github-output":
        raise click.UsageError("--summary goes with --format github-output")
    planned = plan_with_settings(
        config_path, flag_layer(cuda, share, fat, ptx, gpus, runners, rocm_scope)
    )
    plan = planned.plan
    cached: dict[str, str] = {}
    if skip_cached and not caches:
        raise InvalidInputError(
            "--skip-cached needs at least one --cache URL", hint="add --cache https://..."
        )
    failures = None
    if failures_file is not None:
        from capplan.cli.failures import prepare_matrix_failures

        failures = prepare_matrix_failures(
            plan, failures_file, jobs_file=jobs_file, offline=offline, retry=retry_failed,
            github=fmt in ("github", "github-output"), flake=flake,
            overrides=dict(override_inputs),
        )  # fmt: skip
    if skip_cached and not offline:
        cached = cached_jobs(
            plan, caches, trusted_keys, jobs_file, flake, dict(override_inputs),
            failures.outputs if failures else None,
        )  # fmt: skip
    for name, url in sorted(cached.items()):
        err_console().print(
            f"skipped {name}: every output is in {url}", markup=False, highlight=False
        )
    # Each job's minutes on its runner, placed once for the whole plan: the failure record's
    # skips and both schedules below read them.
    costs = planned_costs(planned, plan)
    known = None
    if failures:
        on_runners = {name: c.minutes for name, c in costs.items()}
        known = failures.apply(plan.variants, cached, on_runners)
    if fmt in ("github", "github-output"):
        from capplan.cli.ci import print_github_matrix

        # Stages come before cached jobs go: the layout stays put.
        full = planned_matrix(planned, plan, costs)
        print_github_matrix(
            full, planned.config, cached, fmt, max_jobs, stage, shards, expect_shards, known,
            drvs=failures.drvs if failures else None, rows_file=rows_file,
        )  # fmt: skip
        if summary_file is not None:
            from capplan.adapters.files import atomic_write_text

            atomic_write_text(summary_file, _summary(planned, costs, cached, known, skip_cached))
        return
    if fmt == "summary":
        if stage is not None or shards:
            raise InvalidInputError(
                "--stage and --shards work with --format github", hint="add --format github"
            )
        sys.stdout.write(_summary(planned, costs, cached, known, skip_cached))
        sys.stdout.flush()
        return
    if stage is not None or shards:
        raise InvalidInputError(
            "--stage and --shards work with --format github", hint="add --format github"
        )
    if cached or known is not None:
        plan = _without(plan, set(cached) | (known.dropped if known else set()))
    result = planned_matrix(planned, plan, costs)
    bases = cost_bases(current_kb(), plan)
    if fmt == "json":
        data = result.to_json()
        data["summary"]["cost_basis"] = [b.to_json() for b in bases]
        measured = {(b.package, b.vendor) for b in bases if b.measured}
        for job in data["jobs"]:
            v = plan.variant(job["name"])
            key = (job["package"], (v.vendor if v is not None else None) or "cpu")
            job["cost_basis"] = "measured" if key in measured else "estimate"
        data["summary"]["skipped_cached"] = sorted(cached)
        if known is not None:
            from capplan.cli.failures import known_failures_json

            known_failures_json(data, known)
        emit_json(data)
    else:
        _table(result, show_needs, plan, cached, known, bases)
        if known is not None:
            from capplan.cli.failures import known_failures_table

            known_failures_table(known)


def report_data(
    planned: Planned,
    costs: Mapping[str, JobCost],
    cached: Mapping[str, str],
    known: KnownFailures | None,
    *,
    asked_cache: bool,
) -> Report:
    """What ``capplan report`` draws and ``--format summary`` writes (core/report/): the whole
    plan's matrix, and the matrix of the jobs left to build when a cache or the failure record
    took some out, scheduled as the table schedules them."""
    from capplan.core.report.data import gather

    plan = planned.plan
    full = planned_matrix(planned, plan, costs)
    scheduled = None
    dropped = set(cached) | (known.dropped if known is not None else set())
    if dropped:
        scheduled = planned_matrix(planned, _without(plan, dropped), costs)
    return gather(
        plan, full, scheduled=scheduled, cached=cached, known=known, asked_cache=asked_cache
    )


def _summary(
    planned: Planned,
    costs: Mapping[str, JobCost],
    cached: Mapping[str, str],
    known: KnownFailures | None,
    asked_cache: bool,
) -> str:
    from capplan.core.report.markdown import plan_summary

    return plan_summary(report_data(planned, costs, cached, known, asked_cache=asked_cache))


def _without(plan: Plan, drop: set[str]) -> Plan:
    """The plan minus cached jobs; a kept job's cached needs are built already: drop those edges."""
    kept = tuple(
        v._replace(needs=tuple(n for n in v.needs if n not in drop))
        for v in plan.variants
        if v.name not in drop
    )
    return replace(plan, variants=kept)


def cached_jobs(
    plan: Plan,
    caches: tuple[str, ...],
    trusted_keys: tuple[str, ...],
    jobs_file: Path | None,
    flake: str,
    overrides: dict[str, str],
    known_outputs: dict[str, list[str]] | None = None,
) -> dict[str, str]:
    from capplan.adapters.binary_cache import output_paths_from_jobs, query_caches
    from capplan.adapters.nix import flake_output_paths
    from capplan.core.model.systems import variant_of_attr

    names = list(plan.identifiers())
    outputs: dict[str, list[str]] = {}
    if known_outputs is not None:
        outputs = known_outputs  # evaluated once already, with the derivations
    elif jobs_file is not None:
        # Several systems: nix-eval-jobs prints `<system>.<variant>` or `<variant>.<system>`.
        for attr, found in output_paths_from_jobs(jobs_file).items():
            outputs.setdefault(variant_of_attr(attr), found)
    else:
        # One nix eval per system: each system's variants live under packages.<system>.
        for system in plan.systems:
            here = [v.name for v in plan.variants if v.system == system]
            if here:
                outputs.update(flake_output_paths(flake, here, overrides, system=system))
    paths = sorted({p for name in names for p in outputs.get(name, [])})
    token = os.environ.get("CAPPLAN_CACHE_TOKEN") or None
    with progress(len(paths), "querying binary caches") as bar:
        result = query_caches(
            paths,
            list(caches),
            trusted_keys=list(trusted_keys),
            token=token,
            on_progress=bar.advance,
        )
    for warning in result.warnings:
        err_console().print(f"warning: {warning}", markup=False, highlight=False)
    cached: dict[str, str] = {}
    for name in names:
        job_paths = outputs.get(name, [])
        if job_paths and all(p in result.present for p in job_paths):
            cached[name] = result.present[job_paths[0]]
    return cached


def _table(
    result: Matrix,
    show_needs: bool,
    plan: Plan,
    cached: dict[str, str],
    known: KnownFailures | None,
    bases: tuple[CostBasis, ...] = (),
) -> None:
    """The bottom line first (jobs, hours, the schedule, warnings), then the jobs, then the
    detail: each system's pool, the baselines, each unserved GPU's whole reason."""
    console = out_console()
    several = len(result.pools) > 1
    s: dict[str, Any] = result.summary()
    skipped: list[tuple[str, str]] = []
    if cached:
        jobs = "job" if len(cached) == 1 else "jobs"
        skipped.append(("skipped", f"{len(cached)} {jobs} that a binary cache holds"))
    if known is not None and known.failed:
        skipped.append(
            (
                "skipped",
                f"known failures: {', '.join(sorted(known.failed))}, and {len(known.blocked)} "
                "jobs that need them (--retry-failed builds them)",
            )
        )
    print_bottom_line(
        console,
        plan,
        jobs=s["jobs"],
        minutes=round(sum(v.minutes for v in plan.variants), 2),
        on_runners=s["total_minutes"] if result.costs else None,
        extra=[
            f"{s['stages']} stages; on {s['runners']} runners the schedule takes "
            f"{s['makespan_minutes']:g} min (lower bound {s['lower_bound_minutes']:g}, ratio "
            f"{s['makespan_over_lower_bound']:g})",
            *filter(None, [cost_line(bases)]),
        ],
        more_warnings=[*runner_warnings(result.costs), *skipped],
    )
    console.print()
    # No system column: a job's name carries its system (-aarch64), and names stay whole, so
    # the table keeps to 80 columns; --json and --format github have the system of each job.
    columns = ["stage", "job", "caps", "CUDA", "PTX", "needs", "min", "runner"]
    table = make_table(*columns, whole=("job",))
    for job in result.jobs():
        needs = job["needs"]
        table.add_row(
            str(job["stage"]),
            job["name"],
            ", ".join(job["capabilities"] or job.get("gfx_targets", ())) or "any",
            job["cuda"] or "ROCm",
            ", ".join(job["ptx"]) or "-",
            str(len(needs)),
            f"{job['estimated_minutes']:g}",
            str(job["runner"]),
        )
    print_table(console, table)
    if show_needs:
        # Its own table: beside seven other columns a list of names has no room at 80 columns.
        needs_table = make_table("job", "needs", title="needs", whole=("job",))
        for job in result.jobs():
            needs_table.add_row(job["name"], ", ".join(job["needs"]) or "-")
        print_table(console, needs_table)
    if several:
        for system, pool in s["pools"].items():
            console.print(
                f"  {system}: {pool['jobs']} jobs on {pool['runners']} runners, "
                f"{pool['makespan_minutes']:g} min (lower bound {pool['lower_bound_minutes']:g})"
            )
    base = s["baselines"]
    console.print(
        f"nixpkgs default: {base['nixpkgs_default']['jobs']} fat jobs, "
        f"{base['nixpkgs_default']['minutes']:g} min; naive: {base['naive']['jobs']} jobs, "
        f"{base['naive']['minutes']:g} min"
    )
    for u in s["unserved"]:
        print_wrapped(console, f"{u['package']}: {u['gpu']}: {u['reason']}", label="unserved: ")
