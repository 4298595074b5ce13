"""``capplan schema``: the JSON Schema of capplan.toml."""

from __future__ import annotations

import click

from capplan.cli.output import emit_json
from capplan.core.planning.config import Config

__all__ = ["schema"]


@click.command()
def schema() -> None:
    """Print the JSON Schema of capplan.toml / [tool.capplan]."""
    emit_json(Config.model_json_schema())
