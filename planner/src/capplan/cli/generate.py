"""``capplan generate``: write overlays/plan.json from the plan (``--check``: only compare)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from capplan.adapters.files import atomic_write_text
from capplan.cli.output import MAX_COMMITTED_BYTES, check_committed, err_console, to_json_text
from capplan.cli.planning import (
    config_option,
    current_kb,
    nix_eval_seconds_option,
    plan_with_settings,
)
from capplan.cli.whereami import warn_without_flake
from capplan.core.families.registry import dispatcher, is_cpu_level, machine_section
from capplan.core.planning.config import CacheConfig
from capplan.core.planning.matrix import plan_json
from capplan.errors import CapplanError, NixError, NixpkgsDriftError

__all__ = ["cache_json", "generate", "nixpkgs_stamp"]


def _committed_stamp(output: Path) -> Any:
    from capplan.adapters.files import read_bounded

    try:
        return json.loads(read_bounded(output, MAX_COMMITTED_BYTES)).get("nixpkgs")
    except (OSError, ValueError, AttributeError, CapplanError):
        return None


def nixpkgs_stamp(
    lock_file: Path,
    output: Path,
    data: dict[str, Any],
    cuda: Sequence[str] | None,
    *,
    run_check: bool,
    timeout: float | None = None,
) -> dict[str, Any]:
    """plan.json's ``nixpkgs``: the revision flake.lock pins (``locked``) and whether the plan
    was checked against it (``checked``), deterministic wherever it runs.

    ``generate`` runs ``capplan nixpkgs check`` offline when nix and the pinned source are at
    hand (already in the store): agreement stamps ``checked: true``, drift stops with exit 17.
    Where it cannot check (no nix, Nix < 2.18 for real nixpkgs, the source not fetched; CI), and
    always under ``--check``, the committed file's stamp carries over when it names the same
    revision, else ``checked: false``; so ``generate --check`` compares files, never machines.
    """
    from capplan.adapters.nixpkgs import locked_nixpkgs

    if not lock_file.is_file():
        return {"locked": None, "checked": False}
    try:
        locked = locked_nixpkgs(lock_file)
    except CapplanError as error:
        _note(f"plan not checked against nixpkgs: {error.one_line()}")
        return {"locked": None, "checked": False}
    pin = {"rev": locked.rev, "narHash": locked.nar_hash}
    before = _committed_stamp(output)
    carried = isinstance(before, dict) and before.get("locked") == pin and before.get("checked")
    stamp = {"locked": pin, "checked": bool(carried)}
    if not run_check:
        return stamp
    where = locked.store_path() or locked.reference
    why = None if locked.at_hand() else f"{where} is not in the store"
    if why is None:
        from capplan.cli.nixpkgs import check_against

        try:
            _, drifts = check_against(locked.reference, data, cuda, offline=True, timeout=timeout)
        except NixError as error:
            why = error.one_line()
        else:
            if drifts:
                for drift in drifts:
                    click.echo(drift.line())
                raise NixpkgsDriftError(
                    f"the pinned nixpkgs {locked.label()} disagrees with the knowledge base in "
                    f"{len(drifts)} fact{'' if len(drifts) == 1 else 's'}; plan.json not written",
                    hint="correct the knowledge base (each line above names the fact), or pin the "
                    "nixpkgs it describes",
                )
            _note(f"plan checked against nixpkgs {locked.label()}: it agrees")
            return {"locked": pin, "checked": True}
    _note(
        f"plan not checked against nixpkgs {locked.label()} ({why}); "
        + ("keeping the committed check of that revision" if carried else "recorded as unchecked")
        + " (see `capplan nixpkgs check`)"
    )
    return stamp


def _cpu_model(plan: Any) -> Any:
    """The CPU model (archspec's) when the plan has per-level builds: the machine section's
    CPU targets need it; other plans do not load archspec."""
    if not any(is_cpu_level(v) for v in plan.variants):
        return None
    from capplan.adapters.families import cpu_model

    return cpu_model(packages=False)


def cache_json(cache: CacheConfig) -> dict[str, Any]:
    """plan.json's ``cache``: capplan.toml's ``[cache]`` as the NixOS and home-manager modules
    add it to ``nix.settings`` (empty: no key, plan.json's bytes unchanged)."""
    found: dict[str, Any] = {}
    if cache.substituters:
        found["substituters"] = list(cache.substituters)
    if cache.public_keys:
        found["public_keys"] = list(cache.public_keys)
    if cache.cachix is not None:
        found["cachix"] = cache.cachix
    return found


def _refuse_outside_a_fleet() -> None:
    """No capplan.toml here or above: the embedded default plan would land in
    ./overlays/plan.json of a folder that is no fleet (the README tour ran `capplan init
    my-fleet`, then `capplan generate` without the `cd`; issue 46)."""
    import os

    from capplan.adapters.config import find_config_file
    from capplan.errors import ConfigError

    cwd = Path.cwd()
    if find_config_file(None, cwd, os.environ) is None:
        raise ConfigError(
            "no capplan.toml here or above: generate writes a fleet's overlays/plan.json "
            "beside its capplan.toml, and this folder is in no fleet",
            hint="cd into your fleet's folder (after 'capplan init my-fleet': cd my-fleet), "
            "or give --config FILE or --output FILE",
        )


def _note(text: str) -> None:
    click.echo(f"note: {text}", err=True)


@click.command()
@config_option
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write (default: overlays/plan.json beside the config file).",
)
@click.option(
    "--check", is_flag=True, help="Write nothing; exit 11 with a diff when the file is stale."
)
@nix_eval_seconds_option
def generate(
    config_path: Path | None, output: Path | None, check: bool, eval_seconds: int | None
) -> None:
    """Write overlays/plan.json, the data the flake and overlay read.

    It writes beside the fleet's capplan.toml (here or above); outside a fleet it refuses
    (exit 5) unless --config or --output says which plan or where."""
    if config_path is None and output is None:
        _refuse_outside_a_fleet()
    planned = plan_with_settings(config_path)
    plan = planned.plan
    dispatch = dispatcher(current_kb()).section(plan, fallback=planned.config.dispatch.fallback)
    data = plan_json(
        plan,
        dispatch,
        machine=machine_section(current_kb(), plan, _cpu_model(plan)),
        cache=cache_json(planned.config.cache),
    )
    found = planned.config_file
    root = found.parent if found is not None else Path.cwd()
    default = output is None
    if output is None:
        output = root / "overlays" / "plan.json"
    data["nixpkgs"] = nixpkgs_stamp(
        root / "flake.lock",
        output,
        data,
        planned.config.policy.cuda,
        run_check=not check,
        timeout=eval_seconds,
    )
    text = to_json_text(data)
    if check:
        check_committed(output, text, fix="run 'capplan generate' and commit the result")
        return
    for package in plan.packages:
        if package not in dispatch["packages"]:
            err_console().print(
                f"note: no {package}-dispatch output: {package} has only capability-independent "
                "builds in this plan (one build already serves every GPU)",
                markup=False,
                highlight=False,
            )
    # Only the default overlays/ folder is created; a typed --output's folder must exist.
    atomic_write_text(output, text, make_parents=default)
    err_console().print(
        f"wrote {output} ({len(plan.variants)} variants, one build job each: 'capplan matrix' "
        "schedules them)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if planned.config_file is not None:
        warn_without_flake(planned.config_file.parent, output)
