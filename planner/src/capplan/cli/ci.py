"""``capplan ci github``: the GitHub Actions workflow that builds the plan and pushes to cachix.

Also the GitHub shapes of ``capplan matrix`` (``--format github`` with ``--stage``/``--shards``,
and ``--format github-output``, the lines the workflow's plan job appends to $GITHUB_OUTPUT).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from capplan.adapters.config import CONFIG_ENV
from capplan.adapters.files import MAX_INPUT_BYTES, atomic_write_text
from capplan.cli.helpformat import Group
from capplan.cli.output import AsciiIntRange, check_committed, emit_json, err_console
from capplan.cli.planning import config_option, plan_with_settings, planned_matrix
from capplan.cli.whereami import warn_without_flake
from capplan.core.planning.config import Config
from capplan.core.planning.failures import KnownFailures
from capplan.core.planning.matrix import GITHUB_MAX_JOBS, Matrix
from capplan.core.planning.summary import runner_warnings
from capplan.core.planning.workflow import (
    GITHUB_HOSTED_LIMIT_MINUTES,
    GITHUB_OUTPUT_LIMIT_BYTES,
    WorkflowSettings,
    build_workflow,
    check_cache_name,
    check_cache_url,
    check_named_path,
    check_ref_name,
    check_relative_path,
    generator_command,
    github_output_lines,
    github_rows,
    layout_text,
    output_bytes,
    over_hosted_limit,
    over_run_limits,
    render_yaml,
    rows_text,
    runner_labels,
    shard_layout,
    shard_matrices,
    without_cached,
)
from capplan.errors import InfeasibleError, InvalidInputError, StaleError, json_printable, shorten

__all__ = ["ci", "print_github_matrix"]

DEFAULT_OUTPUT = Path(".github/workflows/cuda-cache.yml")
# One-line JSON for $GITHUB_OUTPUT values (name=value lines cannot hold a newline).
# What --expect-shards takes: layout_text's own spelling (shards per stage), or "none".
_LAYOUT = re.compile(r"none|[1-9][0-9]{0,6}(?:,[1-9][0-9]{0,6})*")
# The most a committed CI file --check reads: a workflow of GitHub's 256 jobs a shard is far
# smaller; a larger file is stale without reading it.
_CI_FILE_BYTES = MAX_INPUT_BYTES
_ONE_LINE = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _one_line(value: object) -> str:
    """A value as one line of compact JSON, escaped as every JSON output is."""
    return json_printable(_ONE_LINE.encode(value))


def _say(text: str) -> None:
    err_console().print(text, markup=False, highlight=False, soft_wrap=True)


def _refuse_unfinishable(matrix: Matrix, names: set[str] | None = None) -> None:
    """Exit 7 when a job (of ``names``; default every job) cannot finish on its runner."""
    costs = matrix.costs
    if names is not None:
        costs = {name: cost for name, cost in costs.items() if name in names}
    stuck = runner_warnings(costs)
    if not stuck:
        return
    several = len(stuck) > 1
    more = len(stuck) - 3
    raise InfeasibleError(
        f"{len(stuck)} job{'s' if several else ''} cannot finish on the runner "
        f"{'they are' if several else 'it is'} scheduled on: "
        + "; ".join(text for _, text in stuck[:3])
        + (f"; and {more} more ('capplan plan' lists them)" if more > 0 else ""),
        hint="give such jobs a runner in capplan.toml, then rerun",
    )


def print_github_matrix(
    full: Matrix,
    config: Config,
    cached: dict[str, str],
    fmt: str,
    max_jobs: int,
    stage: int | None,
    shards_flag: bool,
    expect_shards: str | None,
    known: KnownFailures | None = None,
    drvs: Mapping[str, str] | None = None,
    rows_file: Path | None = None,
) -> None:
    """``capplan matrix --format github|github-output`` from the whole plan's matrix.

    ``known`` (``--failures``) leaves its jobs out like cached ones; ``drvs`` gives each row
    its derivation (``drv``), which a failed build job records. ``rows_file`` (``--rows``,
    github-output only) receives every kept row's values that the outputs leave out."""
    rows = github_rows(full.jobs(), config.policy.runners_os)
    if drvs:
        rows = [{**row, "drv": drvs.get(row["name"], "")} for row in rows]
    layout = shard_layout(rows, max_jobs)
    text = layout_text(layout)
    if expect_shards is not None and not _LAYOUT.fullmatch(expect_shards.strip()):
        # Not a layout at all: a typo in the workflow, not a plan that moved on (exit 11).
        raise InvalidInputError(
            f"--expect-shards '{shorten(expect_shards)}' is not a layout",
            hint="give shards per stage as 'capplan ci github' writes them, e.g. 1,1,2,1, "
            "or 'none' for a plan with no jobs",
        )
    stages = sorted({int(row["stage"]) for row in rows})
    if stage is not None and stage not in stages:
        # The stages come from the whole plan (cached jobs included), so a stage the workflow
        # names always exists: one that does not is a mistake, not an empty matrix.
        having = f"stages 0 to {stages[-1]}" if stages else "no stages (no jobs)"
        raise InvalidInputError(
            f"--stage {stage}: the plan has {having}",
            hint="give a stage of the plan ('capplan matrix' lists each job's stage)",
        )
    if expect_shards is not None and expect_shards.strip() != (text or "none"):
        raise StaleError(
            f"the workflow expects shards per stage '{shorten(expect_shards)}' but the plan has "
            f"'{text or 'none'}'",
            hint="regenerate the workflow with 'capplan ci github ... --output FILE' and commit it",
        )
    kept = without_cached(rows, set(cached) | (known.dropped if known else set()))
    # The rows are the timeouts the build jobs get: none a job cannot meet (issue 40). The
    # workflow was written when every job could finish; a plan that moved on since (a new
    # knowledge base, a new fleet) stops its plan job here with the jobs and the runner needed.
    _refuse_unfinishable(full, {str(row["name"]) for row in kept})
    if fmt == "github-output":
        lines = github_output_lines(layout, kept, _one_line)
        size = output_bytes(lines)
        if size > GITHUB_OUTPUT_LIMIT_BYTES:
            raise InfeasibleError(
                f"the outputs for {len(kept)} jobs take {size:,} bytes (UTF-16), more than the "
                f"{GITHUB_OUTPUT_LIMIT_BYTES:,} GitHub allows a job",
                hint=_ENGINES,
            )
        if rows_file is not None:
            atomic_write_text(rows_file, rows_text(kept))
        sys.stdout.write(lines)
        sys.stdout.flush()
        return
    if shards_flag:
        matrices = shard_matrices(layout, kept)
        if stage is not None:
            matrices = {s.key: matrices[s.key] for s in layout if s.stage == stage}
        emit_json(
            {
                "layout": text,
                "max_jobs": max_jobs,
                "shards": [
                    {"key": s.key, "stage": s.stage, "shard": s.index, "jobs": list(s.jobs)}
                    for s in layout
                    if stage is None or s.stage == stage
                ],
                "matrices": matrices,
                "skipped_cached": sorted(cached),
                **({"known_failures": known.to_json()} if known is not None else {}),
            }
        )
        return
    if stage is not None:
        kept = [row for row in kept if row["stage"] == stage]
    chunks = [{"include": kept[i : i + max_jobs]} for i in range(0, len(kept), max_jobs)]
    chunks = chunks or [{"include": []}]
    emit_json(chunks[0] if len(chunks) == 1 else {"matrices": chunks})


# Where a plan outgrows one GitHub workflow run (docs/ci-engines.md).
_ENGINES = (
    "build it with Hydra or buildbot-nix, which read the flake's hydraJobs through "
    "nix-eval-jobs (docs/ci-engines.md), or split the packages over several capplan.toml files "
    "and workflows"
)


@click.group(cls=Group)
def ci() -> None:
    """CI workflows that build the plan and push it to a binary cache."""


@ci.command("github")
@config_option
@click.option(
    "--cache",
    "cache_name",
    default=None,
    metavar="NAME",
    help="cachix cache to push to (and query at https://NAME.cachix.org).",
)
@click.option(
    "--cache-url", default=None, metavar="URL", help="Query this cache URL instead of cachix's."
)
@click.option(
    "--max-jobs",
    type=AsciiIntRange(1, GITHUB_MAX_JOBS),
    default=GITHUB_MAX_JOBS,
    show_default=True,
    help="Jobs per shard (GitHub runs at most 256 per matrix).",
)
@click.option(
    "--branch", default="main", show_default=True, help="The default branch: pushes to it build."
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help=f"Write the workflow here (atomically), e.g. {DEFAULT_OUTPUT}; default: stdout.",
)
@click.option(
    "--check", is_flag=True, help="Write nothing; exit 11 with a diff when --output is stale."
)
def github(
    config_path: Path | None,
    cache_name: str | None,
    cache_url: str | None,
    max_jobs: int,
    branch: str,
    output: Path | None,
    check: bool,
) -> None:
    """Write the GitHub Actions workflow that builds what the cache lacks, stage after stage.
    The cache is --cache, else capplan.toml's [cache] cachix."""
    if cache_name is not None:
        check_cache_name(cache_name)
    if cache_url is not None:
        cache_url = check_cache_url(cache_url)
    check_ref_name(branch)
    config_arg = None
    if config_path is not None:
        config_arg = check_relative_path(config_path.as_posix())
    if check and output is None:
        raise InvalidInputError(
            "--check needs the committed file", hint=f"add --output {DEFAULT_OUTPUT}"
        )
    if output is not None:
        check_named_path(output.as_posix(), "--output")

    planned = plan_with_settings(config_path)
    if cache_name is None:
        # The flag wins; without it, the fleet's own cache (validated with the config).
        cache_name = planned.config.cache.cachix
    if cache_name is None:
        raise InvalidInputError(
            "no cache to push to"
            + (f" (--cache-url {cache_url} is only queried)" if cache_url else ""),
            hint='pass --cache NAME or set [cache] cachix = "NAME" in capplan.toml, your '
            "cachix cache (create one at https://app.cachix.org)",
        )
    matrix = planned_matrix(planned)
    runners_os = planned.config.policy.runners_os
    rows = github_rows(matrix.jobs(), runners_os)
    layout = shard_layout(rows, max_jobs)
    settings = WorkflowSettings(
        cache=cache_name,
        cache_url=cache_url,
        branch=branch,
        max_jobs=max_jobs,
        config=config_arg,
        plan_runner=runner_labels(planned.plan.system, False, runners_os),
    )
    shown = output.as_posix() if output is not None else None
    header = [
        f"Generated by `{generator_command(settings, shown)}` from the plan;",
        "do not edit: change capplan.toml and rerun it (`--check` tells when this file is stale).",
        "Needs the repository secret CACHIX_AUTH_TOKEN (a cachix auth token that can push).",
    ]
    text = render_yaml(build_workflow(settings, layout), header)
    problems = over_run_limits(layout, rows, text, _one_line)
    if problems:
        raise InfeasibleError(
            "the plan does not fit one GitHub Actions run: " + "; ".join(problems),
            hint=_ENGINES,
        )
    # A job that cannot finish on its runner (core/planning/runners.py) would be written with
    # a timeout it cannot meet: no workflow, the jobs and the runner they need instead (issue 40).
    _refuse_unfinishable(matrix)
    for row in over_hosted_limit(rows):
        # Only a job without a cost on its runner comes here (every planned job has one).
        _say(
            f"warning: {row['name']} is estimated at {row['estimated_minutes']:g} min, more than "
            f"GitHub-hosted runners allow ({GITHUB_HOSTED_LIMIT_MINUTES} min)"
        )
    for name in sorted(
        n for n in (*CONFIG_ENV, "CAPPLAN_CONFIG", "CAPPLAN_KB_DIR") if n in os.environ
    ):
        _say(
            f"warning: {name} is set here but not in the workflow's plan job, which plans from "
            "the committed files only (put the setting in capplan.toml)"
        )
    if not layout:
        _say(
            "note: the plan has no build jobs: the workflow only plans (add packages or GPUs "
            "to capplan.toml and regenerate it)"
        )

    if check:
        assert output is not None
        _check(output, text)
        return
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        _write(output, text)
        _say(f"wrote {shorten(os.fsdecode(output))}")
    stages = len({s.stage for s in layout})
    _say(
        f"{len(rows)} build jobs in {stages} stages, {len(layout)} shard jobs "
        f"(shards per stage: {layout_text(layout) or 'none'}); cache {settings.cache}"
    )
    if planned.config_file is not None:
        # The workflow builds and runs capplan in the repository root, the config's folder.
        root = planned.config_file.parent
        warn_without_flake(root, root / "overlays" / "plan.json")


def _plan_jobs(config_path: Path | None) -> list[dict[str, Any]]:
    planned = plan_with_settings(config_path)
    return planned_matrix(planned).jobs()


def _features_note(jobs: list[dict[str, Any]], where: str) -> None:
    from capplan.core.planning.engines import builder_features, features_text

    lines = features_text(builder_features(jobs))
    if lines:
        _say(f"note: builders must declare these system features ({where}); a job whose "
             "derivation requires one waits for a builder that has it:")  # fmt: skip
        for line in lines:
            _say(f"  {line}")


def _emit(text: str, output: Path | None, check: bool, command: str) -> None:
    if check:
        if output is None:
            raise InvalidInputError("--check needs the committed file", hint="add --output FILE")
        check_committed(
            output, text, fix=f"run '{command}' and commit the result", limit=_CI_FILE_BYTES
        )
    elif output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        _write(output, text)
        _say(f"wrote {shorten(os.fsdecode(output))}")


@ci.command("hydra")
@config_option
@click.option(
    "--flake",
    "flake_ref",
    required=True,
    metavar="URI",
    help="The flake Hydra fetches, e.g. github:my-org/my-flake.",
)
@click.option(
    "--jobset", default="cuda", show_default=True, help="The jobset's name in the project."
)
@click.option(
    "--check-interval",
    type=AsciiIntRange(0, 7 * 24 * 3600),
    default=3600,
    show_default=True,
    help="Seconds between Hydra's checks of the flake for changes (0: never).",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the spec here (atomically), e.g. .hydra/spec.json; default: stdout.",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 11 with a diff when stale.")
def hydra(
    config_path: Path | None,
    flake_ref: str,
    jobset: str,
    check_interval: int,
    output: Path | None,
    check: bool,
) -> None:
    """Write a Hydra declarative project's spec.json: one flake jobset building hydraJobs."""
    from capplan.core.planning.engines import check_flake_ref, hydra_spec, hydra_spec_text

    check_flake_ref(flake_ref)
    jobs = _plan_jobs(config_path)
    spec = hydra_spec(jobset, flake_ref, checkinterval=check_interval)
    _emit(hydra_spec_text(spec), output, check, "capplan ci hydra ...")
    _features_note(jobs, "the supported features of each machine in Hydra's machines file")


@ci.command("buildbot-nix")
@config_option
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Write it here (atomically): buildbot-nix reads buildbot-nix.toml at the repository "
    "root; default: stdout.",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 11 with a diff when stale.")
def buildbot_nix(config_path: Path | None, output: Path | None, check: bool) -> None:
    """Write buildbot-nix.toml: buildbot-nix evaluates the flake's hydraJobs, not its checks."""
    from capplan.core.planning.engines import buildbot_nix_toml

    for path, option in ((config_path, "--config"), (output, "--output")):
        if path is not None:
            check_named_path(path.as_posix(), option)
    jobs = _plan_jobs(config_path)
    argv = ["capplan", "ci", "buildbot-nix"]
    argv += ["--config", config_path.as_posix()] if config_path is not None else []
    argv += ["--output", output.as_posix()] if output is not None else []
    header = [
        f"Generated by `{shlex.join(argv)}`: buildbot-nix builds the flake's",
        "hydraJobs (every variant of the plan), evaluated with nix-eval-jobs, not its checks.",
    ]
    _emit(buildbot_nix_toml(header), output, check, "capplan ci buildbot-nix ...")
    _features_note(jobs, "system-features in each worker's nix.conf")


def _check(output: Path, text: str) -> None:
    check_committed(
        output,
        text,
        fix="run the 'capplan ci github' command in its header and commit the result",
        limit=_CI_FILE_BYTES,
    )


def _write(output: Path, text: str) -> None:
    # atomic_write_text reports every failure as a WriteError (exit 15) naming the path.
    atomic_write_text(output, text)


# What `ci results --results` takes: `job=result` words as the workflow writes them.
_RESULT_WORD = re.compile(r"([A-Za-z0-9_]{1,64})=([a-z]{0,16})")


@ci.command("results")
@config_option
@click.option(
    "--max-jobs",
    type=AsciiIntRange(1, GITHUB_MAX_JOBS),
    default=GITHUB_MAX_JOBS,
    show_default=True,
    help="Jobs per shard, as the workflow was generated with.",
)
@click.option(
    "--rows",
    "rows_file",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The plan job's rows file (the jobs it scheduled); missing: the plan job gave none.",
)
@click.option(
    "--failed",
    "failed_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder of the failure records the build jobs uploaded (capplan failures add).",
)
@click.option(
    "--results",
    default="",
    metavar="JOB=RESULT ...",
    help="Each build job's needs.<job>.result, space-separated (the workflow passes them).",
)
def results(
    config_path: Path | None, max_jobs: int, rows_file: Path, failed_dir: Path, results: str
) -> None:
    """Print the run's results as Markdown: built, failed and skipped per variant.

    The summary job of `capplan ci github`'s workflow appends it to $GITHUB_STEP_SUMMARY. The
    rows and failures are what the run's plan and build jobs uploaded; each job's shard comes
    from the plan's own layout.
    """
    from capplan.adapters.failures import read_record
    from capplan.adapters.files import read_input_bytes
    from capplan.core.model.systems import variant_of_attr
    from capplan.core.report.markdown import outcomes, results_summary

    shard_results: dict[str, str] = {}
    for word in results.split():
        match = _RESULT_WORD.fullmatch(word)
        if match is None:
            raise InvalidInputError(
                f"--results: '{shorten(word)}' is not JOB=RESULT",
                hint="give the build jobs' results as the workflow does: stage0_shard0=success",
            )
        shard_results[match.group(1)] = match.group(2)
    scheduled: set[str] | None = None
    if rows_file.exists():
        text = read_input_bytes(rows_file, hint="the plan job's rows file").decode(
            "utf-8", "replace"
        )
        scheduled = {
            line.split("\t", 1)[0] for line in text.splitlines() if line and line[0] != "#"
        }
    failed: set[str] = set()
    if failed_dir.is_dir():
        for path in sorted(failed_dir.glob("*.json")):
            if path.is_file():
                # A record names its job as the jobs source did (x86_64-linux.torch-sm86).
                failed.update(variant_of_attr(f.attr) for f in read_record(path).entries())
    planned = plan_with_settings(config_path)
    jobs = planned_matrix(planned).jobs()
    layout = shard_layout(github_rows(jobs, planned.config.policy.runners_os), max_jobs)
    shard_of = {name: shard.key for shard in layout for name in shard.jobs}
    found = outcomes(
        [(job["name"], job["package"]) for job in jobs],
        shard_of,
        scheduled,
        shard_results,
        failed,
    )
    sys.stdout.write(results_summary(found))
    sys.stdout.flush()
