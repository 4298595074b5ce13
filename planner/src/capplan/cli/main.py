"""The ``capplan`` command group: global options, command registration, error handling."""

from __future__ import annotations

import importlib
import os
from typing import Any

import click

from capplan import __version__
from capplan.cli.errors import EXIT_CODE_HELP, fail, report_unexpected
from capplan.errors import CapplanError

__all__ = ["COMMANDS", "cli", "main"]

_EPILOG = "Exit codes:\n\n\b\n" + EXIT_CODE_HELP


# Commands load on demand, so `capplan inspect` does not pay for networkx or pydantic models.
COMMANDS = {
    "caps": "capplan.cli.caps:caps",
    "ci": "capplan.cli.ci:ci",
    "detect": "capplan.cli.detect:detect",
    "dispatch": "capplan.cli.dispatch:dispatch",
    "explain": "capplan.cli.explain:explain",
    "generate": "capplan.cli.generate:generate",
    "gpus": "capplan.cli.gpus:gpus",
    "inspect": "capplan.cli.inspect:inspect",
    "limits": "capplan.cli.limits:limits",
    "matrix": "capplan.cli.matrix:matrix",
    "plan": "capplan.cli.plan:plan",
    "schema": "capplan.cli.schema:schema",
    "verify": "capplan.cli.verify:verify",
}


class _Group(click.Group):
    """Turns CapplanError into one line and its exit code; tracebacks only with --debug."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug")) or os.environ.get("CAPPLAN_DEBUG") == "1"
        try:
            return super().invoke(ctx)
        except CapplanError as error:
            fail(error, debug=debug)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except (KeyboardInterrupt, BrokenPipeError):
            raise SystemExit(130) from None
        except Exception as error:
            report_unexpected(error, debug=debug)


@click.group(cls=_Group, epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="capplan")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(debug: bool) -> None:
    """Plan CUDA capability-specific builds and caches for nixpkgs."""


def main() -> None:
    cli(prog_name="capplan")
