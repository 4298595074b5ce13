"""``capplan gpus``: find GPU models by loose names, with their capability."""

from __future__ import annotations

from typing import Any

import click

from capplan.cli.output import emit_json, make_table, out_console
from capplan.cli.planning import current_kb
from capplan.core.gpus import find_gpus, suggestions
from capplan.errors import InvalidInputError

__all__ = ["gpus"]


@click.command()
@click.argument("query", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def gpus(query: str | None, as_json: bool) -> None:
    """List GPU models (all, or those matching QUERY, best match first)."""
    kb = current_kb()
    if query is None:
        models = sorted(kb.gpus, key=lambda m: (m.capability.sort_key, m.name))
    else:
        matches = find_gpus(query, kb.gpus)
        if not matches:
            close = suggestions(query, kb.gpus)
            hint = (
                ("did you mean " + " or ".join(f"'{c}'" for c in close) + "?")
                if close
                else "run 'capplan gpus' for the full list"
            )
            raise InvalidInputError(f"unknown GPU '{query}'", hint=hint)
        models = [m.model for m in matches]
    rows: list[dict[str, Any]] = []
    for model in models:
        info = kb.capability(model.capability)
        rows.append(
            {
                "name": model.name,
                "capability": str(model.capability),
                "arch": info.arch,
                "segment": model.segment,
                "jetson": info.jetson,
                "aliases": list(model.aliases),
            }
        )
    if as_json:
        emit_json(rows)
        return
    table = make_table("name", "capability", "arch", "segment")
    for r in rows:
        table.add_row(r["name"], r["capability"], r["arch"], r["segment"])
    out_console().print(table)
