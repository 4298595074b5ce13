"""``capplan report``: the plan as one self-contained HTML page (coverage, schedule, costs,
and the cache and failures when asked), drawn by core/report/ from the same plan and matrix
that ``plan`` and ``matrix`` print."""

from __future__ import annotations

from pathlib import Path

import click

from capplan.cli.output import AsciiIntRange, err_console
from capplan.cli.planning import (
    cache_query_options,
    config_option,
    flag_layer,
    plan_with_settings,
    planned_costs,
    policy_options,
)
from capplan.errors import InvalidInputError, shorten

__all__ = ["report"]


@click.command()
@config_option
@policy_options
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The HTML file to write (atomically; /dev/stdout prints it).",
)
@click.option(
    "--runners",
    type=AsciiIntRange(1, 10_000),
    default=None,
    help="CI runners in each system's pool (default: policy.runners).",
)
@cache_query_options("Leave out of the schedule what every --cache holds.")
@click.option(
    "--failures",
    "failures_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Failure record (capplan failures): show known failures and what they block.",
)
def report(
    config_path: Path | None,
    cuda: str | None,
    share: str | None,
    fat: str | None,
    ptx: str | None,
    gpus: tuple[str, ...],
    rocm_scope: str | None,
    output: Path,
    runners: int | None,
    caches: tuple[str, ...],
    skip_cached: bool,
    trusted_keys: tuple[str, ...],
    jobs_file: Path | None,
    flake: str,
    override_inputs: tuple[tuple[str, str], ...],
    offline: bool,
    failures_file: Path | None,
) -> None:
    """Write the plan as one HTML page that needs no network: coverage, schedule, costs.

    The coverage grid (each GPU by each package: native SASS, same-major SASS, PTX JIT or
    unserved, with the variant and the reason), the matrix as a Gantt chart per runner pool with
    the critical path, and the costs against nixpkgs' default and the naive plan; with
    --skip-cached or --failures, what a cache holds and what the failure record skips. Every
    picture has a table beside it with the same facts.
    """
    from capplan.adapters.files import atomic_write_text
    from capplan.cli.matrix import cached_jobs, report_data
    from capplan.core.report.html import render_html

    if skip_cached and not caches:
        raise InvalidInputError(
            "--skip-cached needs at least one --cache URL", hint="add --cache https://..."
        )
    if jobs_file is not None and not skip_cached and failures_file is None:
        raise click.UsageError(
            "--jobs is only read with --skip-cached or --failures (add one of them)"
        )
    planned = plan_with_settings(
        config_path, flag_layer(cuda, share, fat, ptx, gpus, runners, rocm_scope)
    )
    plan = planned.plan
    failures = None
    if failures_file is not None:
        from capplan.cli.failures import prepare_matrix_failures

        failures = prepare_matrix_failures(
            plan, failures_file, jobs_file=jobs_file, offline=offline, retry=False,
            github=False, flake=flake, overrides=dict(override_inputs),
        )  # fmt: skip
    cached: dict[str, str] = {}
    if skip_cached and not offline:
        cached = cached_jobs(
            plan, caches, trusted_keys, jobs_file, flake, dict(override_inputs),
            failures.outputs if failures else None,
        )  # fmt: skip
    costs = planned_costs(planned, plan)
    known = None
    if failures:
        known = failures.apply(plan.variants, cached, {n: c.minutes for n, c in costs.items()})
    data = report_data(planned, costs, cached, known, asked_cache=skip_cached)
    text = render_html(data)
    atomic_write_text(output, text)
    err_console().print(
        f"wrote {shorten(str(output))}: {len(text.encode()):,} bytes",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
