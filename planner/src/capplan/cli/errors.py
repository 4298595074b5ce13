"""How the CLI reports errors: one line on stderr and a documented exit code.

Every exit code lives in :class:`capplan.errors.ExitCode` (shared with core and adapters, which
raise the errors); this module is the only place that turns them into process exits.
"""

from __future__ import annotations

import sys
import traceback
from typing import NoReturn

from capplan.errors import CapplanError, ExitCode

__all__ = ["EXIT_CODE_HELP", "fail", "report_unexpected"]

EXIT_CODE_HELP = "\n".join(
    f"  {code.value:>2}  {code.name.lower().replace('_', '-')}" for code in ExitCode
)


def fail(error: CapplanError, *, debug: bool) -> NoReturn:
    if debug:
        traceback.print_exc()
    sys.stderr.write(f"capplan: error: {error.one_line()}\n")
    raise SystemExit(int(error.exit_code))


def report_unexpected(error: BaseException, *, debug: bool) -> NoReturn:
    if debug:
        traceback.print_exc()
    detail = " ".join(str(error).split()) or type(error).__name__
    sys.stderr.write(
        f"capplan: internal error: {type(error).__name__}: {detail} "
        "(this is a bug; rerun with --debug for the traceback and report it)\n"
    )
    raise SystemExit(int(ExitCode.FAILURE))
