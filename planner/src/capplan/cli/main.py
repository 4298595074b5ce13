"""The ``capplan`` command group: global options, command registration, error handling."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from capplan import __version__
from capplan.cli.errors import (
    EXIT_CODE_HELP,
    fail,
    finish,
    quiet_stdout,
    report_unexpected,
    unwritable_output,
    usage_error,
)
from capplan.errors import CapplanError, DataError, InvalidInputError

__all__ = ["COMMANDS", "SUMMARIES", "cli", "main"]

_EPILOG = "Exit codes:\n\n\b\n" + EXIT_CODE_HELP


# Commands load on demand, so `capplan inspect` does not pay for networkx or pydantic models.
COMMANDS = {
    "build": "capplan.cli.build:build",
    "cache": "capplan.cli.cache:cache",
    "caps": "capplan.cli.caps:caps",
    "ci": "capplan.cli.ci:ci",
    "detect": "capplan.cli.detect:detect",
    "dispatch": "capplan.cli.dispatch:dispatch",
    "doctor": "capplan.cli.doctor:doctor",
    "explain": "capplan.cli.explain:explain",
    "export": "capplan.cli.export:export",
    "failures": "capplan.cli.failures:failures",
    "generate": "capplan.cli.generate:generate",
    "gpus": "capplan.cli.gpus:gpus",
    "host": "capplan.cli.host:host",
    "init": "capplan.cli.init:init",
    "inspect": "capplan.cli.inspect:inspect",
    "limits": "capplan.cli.limits:limits",
    "matrix": "capplan.cli.matrix:matrix",
    "nixpkgs": "capplan.cli.nixpkgs:nixpkgs",
    "plan": "capplan.cli.plan:plan",
    "report": "capplan.cli.report:report",
    "run": "capplan.cli.run:run",
    "schema": "capplan.cli.schema:schema",
    "verify": "capplan.cli.verify:verify",
}


# One-line summaries for `capplan --help`, each short enough to read whole in 80 columns.
SUMMARIES = {
    "build": "Build the plan with Nix's builders, record failures, push.",
    "cache": "Is this machine's build in a binary cache; if not, why not.",
    "caps": "List CUDA capabilities: architecture, CUDA range, Jetson.",
    "ci": "CI workflows that build the plan and push it to a binary cache.",
    "detect": "Detect local GPUs and name the variant to use for each.",
    "dispatch": "Which variant a <package>-dispatch output starts on a machine.",
    "doctor": "Check that an environment's GPU libraries run on these GPUs.",
    "explain": "Say how a build of TARGETS runs on a device.",
    "export": "Write a package's plan as wheel variants, conda or Spack files.",
    "failures": "Remember failed builds so the matrix skips them.",
    "generate": "Write overlays/plan.json, the data the flake reads.",
    "gpus": "List GPU models, or those matching QUERY.",
    "host": "Show this host's NVIDIA driver and how Nix programs find it.",
    "init": "Start a repository of your own: flake.nix, capplan.toml.",
    "inspect": "List SASS, PTX and LTO-IR targets inside binaries.",
    "limits": "Read capability limits from package sources or binaries.",
    "matrix": "Print the build matrix (table, JSON or GitHub Actions).",
    "nixpkgs": "Check the knowledge base against the nixpkgs you pin.",
    "plan": "Plan which variants to build for the fleet, and why.",
    "report": "Write the plan as one HTML page: coverage, schedule, costs.",
    "run": "Run a program with the host's NVIDIA driver libraries only.",
    "schema": "Print the JSON Schema of capplan.toml.",
    "verify": "Check that a build holds exactly the planned device code.",
}


def _summary(name: str, command: click.Command) -> str:
    """The command's one-line summary, whole: never cut mid-phrase with '...'."""
    from capplan.cli.helpformat import summary  # only for a command SUMMARIES lacks

    return SUMMARIES.get(name) or summary(command)


class _Group(click.Group):
    """Turns CapplanError into one line and its exit code; tracebacks only with --debug."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in SUMMARIES:  # no import: `capplan --help` must not load every command
                rows.append((name, SUMMARIES[name]))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, _summary(name, command)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as error:
            # The commands load on demand, so click's own list (self.commands) is empty and it
            # has no "did you mean" to give: offer the names it would have had.
            raise click.exceptions.NoSuchCommand(
                args[0], possibilities=sorted(COMMANDS), ctx=ctx
            ) from error

    def invoke(self, ctx: click.Context) -> Any:
        debug = bool(ctx.params.get("debug")) or os.environ.get("CAPPLAN_DEBUG") == "1"
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
            return result
        except CapplanError as error:
            fail(error, debug=debug)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            # `capplan plan | head -1`: the reader is done; that is not an error (git log does
            # the same). Point stdout at /dev/null so the final flush cannot fail again.
            quiet_stdout()
            raise SystemExit(0) from None
        except KeyboardInterrupt:
            raise SystemExit(130) from None
        except MemoryError:
            # Not a bug of capplan's: an input too large for the memory this process may use
            # (ulimit -v, a cgroup limit). Said in one line like a nesting too deep.
            fail(
                DataError(
                    "out of memory: the input is too large for the memory capplan may use here",
                    hint="give a smaller input, or raise the memory limit (ulimit -v, the "
                    "container's limit)",
                ),
                debug=debug,
            )
        except RecursionError:
            fail(
                DataError(
                    "the input is nested too deeply to read",
                    hint="flatten the nested arrays or objects in the file given",
                ),
                debug=debug,
            )
        except ValueError as error:
            if "null byte" not in str(error):
                report_unexpected(error, debug=debug)
            # Only in-process callers can pass a NUL (argv and the environment cannot hold one).
            fail(
                InvalidInputError(
                    "a path or value holds a NUL byte", hint="remove the \\0 from the argument"
                ),
                debug=debug,
            )
        except OSError as error:
            problem = unwritable_output(error)
            if problem is None:
                report_unexpected(error, debug=debug)
            fail(problem, debug=debug)
        except Exception as error:
            report_unexpected(error, debug=debug)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's own main, plus the documented last line for usage errors."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            self._standalone(args, prog_name, complete_var, **extra)
        except SystemExit as done:
            finish(done.code)
        except OSError as error:  # --version or --help printed to a full disk
            problem = unwritable_output(error)
            if problem is None:
                report_unexpected(error, debug=False)
            fail(problem, debug=False)

    def _standalone(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        **extra: Any,
    ) -> None:
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as error:
            usage_error(error)
        except click.exceptions.Abort:
            sys.stderr.write("capplan: error: interrupted\n")
            sys.exit(130)
        except BrokenPipeError:
            quiet_stdout()
            sys.exit(0)
        sys.exit(result if isinstance(result, int) else 0)


@click.group(cls=_Group, epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="capplan")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(debug: bool) -> None:
    """Plan CUDA, ROCm and CPU-level builds for nixpkgs, and the caches that hold them.

    capplan plans one build per CUDA capability (torch-sm86), ROCm gfx target (torch-gfx942)
    or CPU level (gromacs-x86-64-v3) where a package needs one, and one generic build where it
    does not; it writes the flake's plan, the CI that fills a cache, and checks that builds and
    environments run on the GPUs at hand."""


def main() -> None:
    # The last line of defence of the output layer: every value is escaped before it is
    # printed (errors.printable, json_printable), and a character stdout's encoding lacks (a
    # lone surrogate, anything under LANG=C) is written as a backslash escape, never a
    # UnicodeEncodeError.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):
            reconfigure(errors="backslashreplace")
    cli(prog_name="capplan")
