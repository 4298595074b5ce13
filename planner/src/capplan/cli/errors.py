"""How the CLI reports errors: one line on stderr and a documented exit code.

Every exit code lives in :class:`capplan.errors.ExitCode` (shared with core and adapters, which
raise the errors); this module is the only place that turns them into process exits.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

import click

from capplan.errors import CapplanError, ExitCode, shorten

__all__ = ["EXIT_CODE_HELP", "fail", "quiet_stdout", "report_unexpected", "usage_error"]

# A usage error's message quotes the bad value; keep the line readable whatever was typed.
_MESSAGE_LIMIT = 300

EXIT_CODE_HELP = "\n".join(
    f"  {code.value:>2}  {code.name.lower().replace('_', '-')}" for code in ExitCode
)


def fail(error: CapplanError, *, debug: bool) -> NoReturn:
    if debug:
        import traceback  # only when something went wrong

        traceback.print_exc()
    sys.stderr.write(f"capplan: error: {error.one_line()}\n")
    raise SystemExit(int(error.exit_code))


def report_unexpected(error: BaseException, *, debug: bool) -> NoReturn:
    if debug:
        import traceback  # only when something went wrong

        traceback.print_exc()
    detail = shorten(" ".join(str(error).split()), _MESSAGE_LIMIT) or type(error).__name__
    sys.stderr.write(
        f"capplan: internal error: {type(error).__name__}: {detail} "
        "(this is a bug; rerun with --debug for the traceback and report it)\n"
    )
    raise SystemExit(int(ExitCode.FAILURE))


def usage_error(error: click.ClickException) -> NoReturn:
    """One line, ``capplan: error: <click's message> (see 'capplan <command> --help')``, with
    click's "did you mean" where it has one: click's own block (usage, "Try ...", "Error: ...")
    said the same thing over four lines.

    Exit code 2 (usage) for every click-level error: click gives some (FileError) exit 1,
    which capplan reserves for internal errors.
    """
    if type(error).__name__ == "NoArgsIsHelpError":  # bare `capplan`: the help is the answer
        with contextlib.suppress(BrokenPipeError):
            error.show()  # the whole help: a message, not a value to cut
        raise SystemExit(error.exit_code)
    message = shorten(" ".join(error.format_message().split()), _MESSAGE_LIMIT)
    ctx = getattr(error, "ctx", None)
    where = ctx.command_path if isinstance(ctx, click.Context) else "capplan"
    sys.stderr.write(f"capplan: error: {message} (see '{shorten(where, 80)} --help')\n")
    code = error.exit_code if error.exit_code not in (0, int(ExitCode.FAILURE)) else 2
    raise SystemExit(code)


def quiet_stdout() -> None:
    """Send the rest of stdout to /dev/null: its reader has gone (a closed pipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
