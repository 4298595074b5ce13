"""``capplan dispatch explain``: which variant a ``<package>-dispatch`` output starts here, and why.

It runs the very selector the dispatch outputs embed (:mod:`capplan.runtime.selector`) on a table
made from the current plan, so what it prints is what the wrappers do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from capplan.cli.helpformat import Group
from capplan.cli.output import emit_json, escape, make_table, out_console, print_table
from capplan.cli.planning import config_option, current_kb, plan_with_settings
from capplan.core.families.registry import dispatcher
from capplan.core.model.suggest import closest
from capplan.errors import CapplanError, ExitCode, InvalidInputError, printable
from capplan.runtime import selector

__all__ = ["dispatch"]


@click.group(cls=Group)
def dispatch() -> None:
    """Which variant a <package>-dispatch output starts on a machine."""


@dispatch.command()
@config_option
@click.option(
    "--package",
    "packages",
    multiple=True,
    help="A planned package (repeatable; default: every package with per-capability variants).",
)
@click.option(
    "--device",
    "devices",
    multiple=True,
    help="A capability or GPU name instead of this machine's GPUs (repeat for several GPUs).",
)
@click.option(
    "--system",
    "system",
    default=None,
    help="The machine's Nix system (default: this machine's, from uname -m or CAPPLAN_SYSTEM).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def explain(
    config_path: Path | None,
    packages: tuple[str, ...],
    devices: tuple[str, ...],
    system: str | None,
    as_json: bool,
) -> None:
    """Say which variant each dispatch output would start on this machine (or --device), and why.

    Exit status: 0 when every package has a variant to start, else the selector's code
    (7 no variant runs on the GPU, 10 no GPU found, 4 a bad CAPPLAN_CAPABILITY).
    """
    from capplan.adapters.detect.system import SYSTEM_ENV, host_system

    # CAPPLAN_SYSTEM names this machine here (as in `capplan detect`), not the planned systems.
    environ = {k: v for k, v in os.environ.items() if k != SYSTEM_ENV}
    planned = plan_with_settings(config_path, environ=environ)
    plan = planned.plan
    kb = current_kb()
    system = system or host_system(os.environ)
    if system not in plan.systems:
        raise InvalidInputError(
            f"the plan has no variants for {system}",
            hint=f"it plans {', '.join(plan.systems)}; pass --system or add {system} to "
            "policy.systems",
        )
    outputs = dispatcher(kb)
    available = outputs.packages(plan, system)
    for name in packages:
        if name not in available:
            why = (
                f"{name} has only capability-independent builds in this plan"
                if name in plan.packages
                else f"{name} is not a planned package"
            )
            raise InvalidInputError(
                f"no dispatch output for '{name}': {why}",
                hint=closest(name, list(available), what="package"),
            )
    env = dict(os.environ)
    if devices:
        from capplan.core.families.registry import gpu_names

        # Each device's capability; an unknown one (99.9) is exit 4, as everywhere.
        env["CAPPLAN_CAPABILITY"] = ",".join(gpu_names(kb).targets(devices))
    report: list[dict[str, Any]] = []
    code = 0
    for name in packages or available:
        table = outputs.table(plan, name, fallback=planned.config.dispatch.fallback, system=system)
        chosen = selector.choose(table, env)
        entry = {"package": name, **chosen.to_json()}
        if devices and entry.get("source") == "CAPPLAN_CAPABILITY":
            # The capabilities travel to the selector as CAPPLAN_CAPABILITY, but the user
            # gave them with --device (issue 46): name the source they came from.
            entry["source"] = "--device"
        report.append(entry)
        code = code or chosen.exit_code
    if as_json:
        emit_json({"dispatch": report})
    else:
        _print(report)
    if code:
        raise _failure(report, code)


def _failure(report: list[dict[str, Any]], code: int) -> CapplanError:
    """The error line on stderr as every command gives one (the table or JSON on stdout says
    the same per package), with the selector's exit code."""
    failed = [entry for entry in report if entry["exit_code"]]
    first = failed[0]
    why = str(first["error"] or "no variant to start").removeprefix("capplan-dispatch: ")
    more = f" (and {len(failed) - 1} more package(s))" if len(failed) > 1 else ""
    error = CapplanError(
        f"{first['package']}-dispatch would start nothing{more}: {why}",
        hint="the output above gives each package's reason",
    )
    error.exit_code = ExitCode(code)
    return error


def _print(report: list[dict[str, Any]]) -> None:
    console = out_console()
    table = make_table("package", "variant", "why")
    for entry in report:
        why = entry["reason"] or entry["error"] or ""
        table.add_row(entry["package"], entry["variant"] or "-", escape(why))
    print_table(console, table)
    first = report[0] if report else None
    if first is not None:
        gpus = ", ".join(first["gpus"]) or "none"
        console.print(f"GPUs: {gpus} (from {first['source'] or 'no source'})", markup=False)
        for note in first["notes"]:
            console.print(f"note: {printable(note)}", markup=False)
