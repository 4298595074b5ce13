"""``capplan gpus``: find GPU models by loose names, with their capability.

A name no NVIDIA model matches is looked up among AMD models (kb/amd_gpus.json, issue 16
groundwork): ``capplan gpus mi300x`` prints the gfx target instead of a capability.
"""

from __future__ import annotations

from typing import Any

import click

from capplan.cli.output import emit_json, print_rows
from capplan.cli.planning import kb_directory
from capplan.errors import InvalidInputError, shorten

__all__ = ["gpus"]


@click.command()
@click.argument("query", required=False)
@click.option(
    "--pci",
    "pci_id",
    metavar="VVVV:DDDD",
    help="The models of this PCI id (as 'lspci -nn' prints it, e.g. 10de:2684).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def gpus(query: str | None, pci_id: str | None, as_json: bool) -> None:
    """List GPU models (all, or those matching QUERY, best match first)."""
    from capplan.adapters.kb import load_nvidia_kb
    from capplan.core.families.registry import gpu_names

    # The NVIDIA side only: an AMD model is looked up (and its files read) when no NVIDIA
    # model matches.
    names = gpu_names(load_nvidia_kb(kb_directory()))
    if pci_id is not None:
        if query is not None:
            raise InvalidInputError(
                f"give a name or --pci, not both (got '{shorten(query)}' and '{shorten(pci_id)}')",
                hint="drop one of them",
            )
        _emit(names.pci_rows(pci_id), as_json)
        return
    rows = names.rows(query)
    if query is not None and not rows:
        amd_close = _print_amd(query, as_json)
        if amd_close is None:
            return
        close = [*names.suggestions(query), *amd_close[:2]]
        hint = (
            ("did you mean " + " or ".join(f"'{c}'" for c in close) + "?")
            if close
            else "run 'capplan gpus' for the full list"
        )
        raise InvalidInputError(f"unknown GPU '{shorten(query)}'", hint=hint)
    _emit(rows, as_json)


def _print_amd(query: str, as_json: bool) -> list[str] | None:
    """Print the AMD models matching ``query`` (None); when none does, close AMD names."""
    from capplan.adapters.kb import load_amd_kb

    amd = load_amd_kb(kb_directory())
    try:
        models = amd.lookup_gpu(query)
    except InvalidInputError:
        return amd.suggest_gpus(query)
    rows: list[dict[str, Any]] = []
    for model in models:
        info = amd.target_info(model.target)
        rows.append(
            {
                "vendor": "amd",
                "name": model.name,
                "target": str(model.target),
                "family": info.family if info else None,
                "generic": str(info.generic) if info and info.generic else None,
                "kind": model.kind,
                "gfx_target_version": model.target.gfx_target_version,
                "nixpkgs_default": info.nixpkgs_default if info else False,
                "aliases": list(model.aliases),
            }
        )
    if as_json:
        emit_json(rows)
        return None
    print_rows(
        ("name", "gfx target", "family", "generic target", "kind", "nixpkgs default"),
        [
            (
                r["name"],
                r["target"],
                r["family"] or "-",
                r["generic"] or "-",
                r["kind"],
                "yes" if r["nixpkgs_default"] else "no",
            )
            for r in rows
        ],
    )
    return None


def _emit(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json(rows)
        return
    # Drawn without rich where the output is no terminal (print_rows): about 30 ms of the
    # start (issue 42).
    print_rows(
        ("name", "capability", "arch", "segment", "chips"),
        [
            (r["name"], r["capability"], r["arch"], r["segment"], ", ".join(r["chips"]))
            for r in rows
        ],
    )
