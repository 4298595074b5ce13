"""The ``capplan`` command group: global options, command registration, error handling."""

from __future__ import annotations

import os
from typing import Any

import click

from capplan import __version__
from capplan.cli.errors import EXIT_CODE_HELP, fail, report_unexpected
from capplan.errors import CapplanError

__all__ = ["cli", "main"]

_EPILOG = "Exit codes:\n\n\b\n" + EXIT_CODE_HELP


class _Group(click.Group):
    """Turns CapplanError into one line and its exit code; tracebacks only with --debug."""

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


def _register() -> None:
    from capplan.cli import caps, detect, explain, generate, gpus, limits, matrix, plan, schema

    for command in (
        caps.caps,
        detect.detect,
        explain.explain,
        generate.generate,
        gpus.gpus,
        limits.limits,
        matrix.matrix,
        plan.plan,
        schema.schema,
    ):
        cli.add_command(command)


_register()


def main() -> None:
    cli(prog_name="capplan")
