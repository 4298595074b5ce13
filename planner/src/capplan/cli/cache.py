"""``capplan cache status`` and ``capplan cache why``: is this machine's build in a cache, and
if not, why not."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from capplan.cli.helpformat import Group
from capplan.cli.output import emit_json, escape, make_table, out_console, print_table
from capplan.cli.planning import config_option, current_kb, plan_with_settings
from capplan.errors import ExitCode, printable

__all__ = ["cache"]

F = TypeVar("F", bound=Callable[..., Any])


def _machine_options(func: F) -> F:
    options = [
        click.option(
            "--gpu",
            "gpus",
            multiple=True,
            metavar="GPU",
            help="A GPU of the machine (RTX 3090, 8.6, gfx1100; repeatable); default: detect.",
        ),
        click.option(
            "--cache",
            "caches",
            multiple=True,
            metavar="URL",
            help="Binary cache to ask (repeatable), beside capplan.toml's [cache] substituters; "
            "without both, nix's own substituters.",
        ),
        click.option(
            "--failures",
            "failures_file",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            metavar="FILE",
            help="Failure record (capplan failures): show recorded failures.",
        ),
        click.option(
            "--flake",
            default=".",
            show_default=True,
            help="The fleet flake whose legacyPackages hold the variants.",
        ),
        click.option(
            "--override-input",
            "override_inputs",
            nargs=2,
            multiple=True,
            metavar="INPUT REF",
            help="Passed to nix eval.",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(0.1, 600.0),
            default=5.0,
            show_default=True,
            metavar="SECONDS",
            help="Time limit of one cache request (each is retried 3 times).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
        config_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(cls=Group)
def cache() -> None:
    """Is this machine's build in a binary cache, and if not, why not."""


@cache.command()
@_machine_options
def status(
    gpus: tuple[str, ...],
    caches: tuple[str, ...],
    failures_file: Path | None,
    flake: str,
    override_inputs: tuple[tuple[str, str], ...],
    timeout: float,
    as_json: bool,
    config_path: Path | None,
) -> None:
    """Each planned package's variant for this machine's GPUs (or --gpu), and where it is cached.

    Output paths come from one nix eval of the fleet flake; each cache is asked for them with
    bounded queries. A package no cache holds shows the minutes it takes to build on this
    machine's cores, and its recorded failure (--failures) with date and log line. Exit 0 when
    every package is cached, 18 when some are not.
    """
    from capplan.adapters.detect.system import host_system
    from capplan.adapters.failures import flake_derivations
    from capplan.cli.cachestate import (
        caches_to_ask,
        machine_gpus,
        picks_for,
        present_at,
        read_failure_record,
    )
    from capplan.core.caches.status import StatusRow, bottom_line, minutes_here

    kb = current_kb()
    machine = machine_gpus(kb, gpus)
    planned = plan_with_settings(config_path)
    system = host_system(os.environ)
    record = read_failure_record(failures_file)
    picked: list[tuple[str, Any]] = []
    for gpu in machine:
        picked += [(gpu.label, p) for p in picks_for(kb, planned.plan, planned.config, gpu, system)]
    names = sorted({p.variant.name for _, p in picked if p.variant is not None})
    evaluated = flake_derivations(flake, names, dict(override_inputs), system=system)
    urls = caches_to_ask(planned.config, caches)
    present = present_at(
        {name: outs for name, (_, outs) in evaluated.items()},
        urls,
        planned.config.cache.public_keys,
        timeout,
    )
    cores = os.cpu_count() or 1
    rows: list[StatusRow] = []
    for label, pick in picked:
        v = pick.variant
        if v is None:
            rows.append(StatusRow(pick.package, label, None, reason=pick.reason))
            continue
        drv, outs = evaluated[v.name]
        here = present.get(v.name, {})
        cached = any(here.values())
        rows.append(
            StatusRow(
                pick.package,
                label,
                v.name,
                tuple(outs),
                drv,
                here,
                None
                if cached
                else minutes_here(v.minutes, compiled=not v.independent, cores=cores),
                None if record is None else record.failures.get(drv),
            )
        )
    line = bottom_line(rows)
    missing = any(r.state() in ("build", "failed") for r in rows)
    if as_json:
        emit_json(
            {
                "summary": line,
                "caches": urls,
                "cores": cores,
                "packages": [r.to_json() for r in rows],
            }
        )
    else:
        _status_table(line, rows, urls, cores)
    if missing:
        raise SystemExit(int(ExitCode.NOT_CACHED))


def _status_table(line: str, rows: list[Any], urls: list[str], cores: int) -> None:
    console = out_console()
    console.print(printable(line), markup=False, highlight=False, soft_wrap=True)
    if not urls:
        console.print("no http(s) cache to ask (give --cache URL)", markup=False)
    table = make_table("package", "gpu", "variant", "state", "where / cost", whole=("variant",))
    failed: list[str] = []
    for row in rows:
        state = row.state()
        if state == "cached":
            where = row.cached_at
        elif state == "no variant":
            where = row.reason
        else:
            where = f"about {row.minutes:.0f} min on {cores} cores"
        if row.failure is not None:
            log = row.failure.log_tail[-1] if row.failure.log_tail else "no log line"
            failed.append(
                f"{row.variant} failed on {row.failure.last} ({row.failure.count}x): {log}"
            )
        table.add_row(
            escape(row.package),
            escape(row.gpu),
            escape(row.variant or "-"),
            state,
            escape(where or ""),
        )
    print_table(console, table)
    for text in failed:
        console.print(printable(text), markup=False, highlight=False, soft_wrap=True)


@cache.command()
@click.argument("installable")
@_machine_options
def why(
    installable: str,
    gpus: tuple[str, ...],
    caches: tuple[str, ...],
    failures_file: Path | None,
    flake: str,
    override_inputs: tuple[tuple[str, str], ...],
    timeout: float,
    as_json: bool,
    config_path: Path | None,
) -> None:
    """Why INSTALLABLE is not from the cache: where its derivation and the plan's variant part.

    INSTALLABLE is what you build: FLAKE#ATTRIBUTE (.#torch-sm86,
    /etc/nixos#nixosConfigurations.host.pkgs.python3Packages.torch,
    .#devShells.x86_64-linux.default: then every planned package in its closure) or a .drv
    path. Both derivation graphs are walked
    from the roots to the first inputs that differ, and the cause is named: capability list,
    PTX / forward compatibility, CUDA release, nixpkgs revision, an overlay's patch or
    override, or the system. Exit 0 when your build is cached, 18 when it is not.
    """
    from capplan.cli.cache_why import explain_why

    cached = explain_why(
        installable,
        gpus=gpus,
        caches=caches,
        failures_file=failures_file,
        flake=flake,
        overrides=dict(override_inputs),
        timeout=timeout,
        as_json=as_json,
        config_path=config_path,
    )
    if not cached:
        raise SystemExit(int(ExitCode.NOT_CACHED))
