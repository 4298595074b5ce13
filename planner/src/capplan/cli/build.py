"""``capplan build``: fill the cache from your own machines, through Nix's remote builders.

What is built: the plan's jobs (``--only`` and what they need) for the systems this machine and
the builders take. Left out, each said in one line first: jobs no builder takes (a missing
system or feature) and what needs them; with ``--skip-cached`` jobs a ``--cache`` holds; with
``--failures`` jobs the record holds for the same derivation (``--retry-failed`` builds them);
jobs whose outputs this store holds already (a rerun builds only what is missing).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from capplan.cli.build_view import BuildView
from capplan.cli.output import AsciiIntRange
from capplan.cli.planning import (
    config_option,
    override_input_option,
    plan_with_settings,
    planned_costs,
)
from capplan.core.planning.build import (
    BuildEvent,
    BuildJob,
    BuildSummary,
    derivation_features,
    with_needs,
)
from capplan.core.planning.plan import Plan
from capplan.errors import InvalidInputError, NothingToDo, shorten

__all__ = ["build"]


@click.command()
@config_option
@click.option(
    "--skip-cached",
    is_flag=True,
    help="Leave out jobs whose outputs a --cache holds (default: [cache] substituters).",
)
@click.option(
    "--cache", "caches", multiple=True, metavar="URL", help="Binary cache to query (repeatable)."
)
@click.option(
    "--failures",
    "failures_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Failure record: leave out known failures, and record new ones.",
)
@click.option(
    "--retry-failed",
    is_flag=True,
    envvar="CAPPLAN_RETRY_FAILED",
    help="With --failures: build known failures anyway.",
)
@click.option(
    "--push",
    "push_target",
    default=None,
    metavar="TARGET",
    help="Push each success: a Nix store URL (file://, s3://, ...), cachix:NAME or attic:CACHE.",
)
@click.option(
    "--builders",
    default=None,
    metavar="SPEC|@FILE",
    help="Nix's remote builders (passed on to nix build); default: Nix's builders setting.",
)
@click.option(
    "--max-jobs",
    type=AsciiIntRange(0, 10_000),
    default=None,
    help="Local build slots (passed on to nix build); default: Nix's max-jobs.",
)
@click.option(
    "--keep-going", is_flag=True, help="After a failure, go on with the jobs it does not block."
)
@click.option("--only", "only", multiple=True, metavar="NAME", help="Only this job and its needs.")
@click.option("--json", "as_json", is_flag=True, help="Events and the summary as JSON lines.")
@click.option(
    "--flake", default=".", show_default=True, help="Flake whose legacyPackages hold the jobs."
)
@override_input_option
def build(
    config_path: Path | None,
    skip_cached: bool,
    caches: tuple[str, ...],
    failures_file: Path | None,
    retry_failed: bool,
    push_target: str | None,
    builders: str | None,
    max_jobs: int | None,
    keep_going: bool,
    only: tuple[str, ...],
    as_json: bool,
    flake: str,
    override_inputs: tuple[tuple[str, str], ...],
) -> None:
    """Build the plan's jobs with Nix (dependencies first, the longest critical path first),
    record failures, push successes.

    Nix places each derivation (--builders, --max-jobs); capplan reads the builders only to say
    up front which jobs no builder can take. Exit 0: all built or cached (and pushed); 19: some
    failed, or were built but not pushed; 3: nothing to build here; 14: Nix missing, too old or
    failing.
    """
    from capplan.adapters.nix_build import (
        builders_text,
        check_push_target,
        local_machine,
        nix_settings,
        nix_version,
    )
    from capplan.cli.build_loop import BuildRun, push_present
    from capplan.core.planning.build import BuildProgress, estimate_minutes
    from capplan.core.planning.builders import blocked_behind, parse_machines, slots, unplaceable

    if retry_failed and failures_file is None:
        raise click.UsageError("--retry-failed goes with --failures FILE")
    if push_target is not None:
        check_push_target(push_target)
    version = nix_version()
    planned = plan_with_settings(config_path, {})
    trusted: tuple[str, ...] = ()
    if skip_cached and not caches:
        # The fleet's own cache ([cache] in capplan.toml), counted only where signed by its keys.
        caches = planned.config.cache.substituters
        trusted = planned.config.cache.public_keys
        if not caches:
            raise InvalidInputError(
                "--skip-cached needs a --cache URL, or [cache] substituters in capplan.toml",
                hint="add --cache https://...",
            )
    plan = with_needs(planned.plan, only)
    if not plan.variants:
        raise NothingToDo("the plan has no jobs", hint="add GPUs or packages to capplan.toml")
    overrides = dict(override_inputs)
    settings = nix_settings()
    local = local_machine(settings, max_jobs)
    machines = (local, *parse_machines(builders_text(builders, settings), local.systems[0]))
    build_slots = max(1, slots(machines))
    summary = BuildSummary()
    progress = BuildProgress({}, build_slots)
    with BuildView(progress, as_json=as_json) as view:
        # Placed before evaluating: a system no machine builds is never evaluated.
        systems = {v.name: v.system for v in plan.variants}
        cannot = unplaceable(
            [(v.name, v.system, derivation_features(v)) for v in plan.variants], machines
        )
        for name, why in sorted(cannot.items()):
            view.event(BuildEvent("unbuildable", name, systems[name], why))
        behind = blocked_behind({v.name: v.needs for v in plan.variants}, cannot)
        for name, by in sorted(behind.items()):
            view.event(BuildEvent("blocked", name, systems[name], f"needs {by}: no builder"))
        summary.unbuildable = sorted(cannot)
        summary.blocked = sorted(behind)
        plan = replace(
            plan,
            variants=tuple(
                v for v in plan.variants if v.name not in cannot and v.name not in behind
            ),
        )
        if not plan.variants:
            view.summary(summary)
            raise NothingToDo(
                "no job of the plan can be built by this machine or the builders",
                hint="add a builder for the systems and features listed (--builders)",
            )
        costs = planned_costs(planned, plan)
        from capplan.adapters.failures import plan_derivations

        drvs, outputs = plan_derivations(plan, flake, overrides)
        jobs = {
            v.name: BuildJob(
                name=v.name,
                system=v.system,
                needs=tuple(v.needs),
                minutes=costs[v.name].minutes if v.name in costs else float(v.minutes),
                features=derivation_features(v),
                drv=drvs[v.name],
                outputs=tuple(outputs[v.name]),
            )
            for v in plan.variants
        }
        left = dict(jobs)
        if skip_cached:
            cached = _cached(plan, left, caches, trusted, flake, overrides, outputs)
            for name, url in sorted(cached.items()):
                view.event(BuildEvent("cached", name, jobs[name].system, f"in {url}"))
            summary.cached = sorted(cached)
            left = {n: j for n, j in left.items() if n not in cached}
        if failures_file is not None:
            left = _known_failures(
                plan, left, drvs, outputs, failures_file, retry_failed, summary, view
            )
        invalid = _invalid([p for j in left.values() for p in j.outputs])
        present = sorted(n for n, j in left.items() if not set(j.outputs) & invalid)
        for name in present:
            view.event(BuildEvent("present", name, jobs[name].system, "built already"))
        summary.present = present
        todo = [j for n, j in left.items() if n not in set(present)]
        summary.estimated_minutes = estimate_minutes(todo, build_slots)
        progress.jobs = {j.name: j for j in todo}
        run = BuildRun(
            todo,
            progress=progress,
            view=view,
            summary=summary,
            version=version,
            builders=builders,
            max_jobs=max_jobs,
            slots=build_slots,
            push_target=push_target,
            failures_file=failures_file,
            keep_going=keep_going,
        )
        if push_target is not None and present:
            push_present(run, [jobs[n] for n in present])
        run.run()
    view.summary(summary)  # after the live display is gone
    if summary.failed:
        from capplan.errors import BuildFailedError

        raise BuildFailedError(
            f"{len(summary.failed)} job(s) failed: {shorten(', '.join(summary.failed))}"
            + (
                f"; {len(summary.blocked)} blocked behind them or no builder"
                if summary.blocked
                else ""
            )
            + (f"; {len(summary.push_failed)} not pushed" if summary.push_failed else ""),
            hint="read each failure's log with nix log, or capplan failures list",
        )
    if summary.push_failed:
        from capplan.errors import BuildFailedError

        # Built is not cached: a cron job or CI that fills a cache must see that it did not.
        raise BuildFailedError(
            f"{len(summary.push_failed)} job(s) built but not pushed to "
            f"{shorten(push_target or '')}: {shorten(', '.join(summary.push_failed))}",
            hint="the builds stay in the local store; fix the target and run capplan build "
            "again, which pushes them",
        )


def _cached(
    plan: Plan,
    left: dict[str, BuildJob],
    caches: tuple[str, ...],
    trusted: tuple[str, ...],
    flake: str,
    overrides: dict[str, str],
    outputs: dict[str, list[str]],
) -> dict[str, str]:
    """The jobs whose outputs a cache holds (the narinfo query of ``matrix --skip-cached``)."""
    from capplan.cli.matrix import cached_jobs

    here = replace(plan, variants=tuple(v for v in plan.variants if v.name in left))
    return cached_jobs(here, caches, trusted, None, flake, overrides, outputs)


def _known_failures(
    plan: Plan,
    left: dict[str, BuildJob],
    drvs: dict[str, str],
    outputs: dict[str, list[str]],
    path: Path,
    retry: bool,
    summary: BuildSummary,
    view: BuildView,
) -> dict[str, BuildJob]:
    """The jobs left once the record's known failures (and what needs them) are out; said on
    stderr as ``matrix --failures`` says it, and with ``--json`` as events too."""
    from capplan.cli.failures import MatrixFailures, read_failures

    record = read_failures(path, None, False)
    hook = MatrixFailures(record, drvs, outputs, retry)
    variants = [v for v in plan.variants if v.name in left]
    known = hook.apply(variants, ())
    summary.known_failures = sorted(known.failed)
    summary.blocked = sorted({*summary.blocked, *known.blocked})
    if view.as_json:
        for name, f in sorted(known.failed.items()):
            last = f.log_tail[-1] if f.log_tail else ""
            view.event(
                BuildEvent("known-failure", name, f.system, last, data={"derivation": f.drv})
            )
        for name, by in sorted(known.blocked.items()):
            view.event(
                BuildEvent(
                    "blocked", name, left[name].system, f"needs {', '.join(by)}, a known failure"
                )
            )
    return {n: j for n, j in left.items() if n not in known.dropped}


def _invalid(paths: list[str]) -> set[str]:
    from capplan.adapters.nix_build import invalid_paths

    return invalid_paths(sorted(set(paths)))
