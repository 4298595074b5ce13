"""How the CLI reports errors: one line on stderr and a documented exit code.

Every exit code lives in :class:`capplan.errors.ExitCode` (shared with core and adapters, which
raise the errors); this module is the only place that turns them into process exits.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import NoReturn

import click

from capplan.errors import CapplanError, ExitCode, WriteError, shorten

__all__ = [
    "EXIT_CODE_HELP",
    "fail",
    "finish",
    "quiet_stdout",
    "report_unexpected",
    "unwritable_output",
    "usage_error",
]

# A usage error's message quotes the bad value; keep the line readable whatever was typed.
_MESSAGE_LIMIT = 300

EXIT_CODE_HELP = "\n".join(
    f"  {code.value:>2}  {code.name.lower().replace('_', '-')}" for code in ExitCode
)


def fail(error: CapplanError, *, debug: bool) -> NoReturn:
    if debug:
        import traceback  # only when something went wrong

        traceback.print_exc()
    with contextlib.suppress(OSError):  # a stderr that cannot be written still gets the code
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


# What only a write gives: no space left, a quota, past the largest file. Files capplan writes
# turn these into WriteError where they are written, so one that reaches the CLI came from
# writing a stream: stdout (``capplan plan > /dev/full``) or stderr.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def unwritable_output(error: OSError) -> WriteError | None:
    """The error for output that cannot be written (``capplan plan > /dev/full``), or None when
    ``error`` is not one. stdout is then pointed at /dev/null, so the interpreter's last flush
    cannot print "Exception ignored" and exit 120."""
    if error.errno not in _WRITE_ERRNOS:
        return None
    quiet_stdout()
    return WriteError(
        f"cannot write the output: {error.strerror or error}",
        hint="free space where it goes, or send it elsewhere",
    )


def finish(code: object) -> NoReturn:
    """Exit with ``code`` (a SystemExit's) once stdout is flushed: output that cannot be written
    is exit 15 and one line, never the interpreter's "Exception ignored" and exit 120."""
    problem = None
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
    except OSError as error:
        problem = unwritable_output(error)
        if problem is None:
            quiet_stdout()
            problem = WriteError(f"cannot write the output: {error.strerror or error}")
    except (ValueError, AttributeError):  # closed, or no stdout at all
        pass
    if problem is not None:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"capplan: error: {problem.one_line()}\n")
        if code in (None, 0):
            code = int(problem.exit_code)
    raise SystemExit(code)
