"""The one check of an identifier a user or a file gives capplan: a job attribute, a system.

An identifier is echoed in tables, progress lines and error lines, and it is written into
records other branches' CI runs read back: a newline in one would let the next line of a CI log
start with ``::error::`` (a GitHub Actions workflow command), an ESC would colour, retitle or
clear a terminal. So an identifier holds no control character at all (tab and newline
included), has no surrounding blanks, is not empty and has a bounded length.
"""

from __future__ import annotations

from capplan.errors import InvalidInputError, printable, shorten

__all__ = ["MAX_IDENTIFIER", "check_identifier"]

MAX_IDENTIFIER = 500


def check_identifier(value: str, what: str, *, example: str, limit: int = MAX_IDENTIFIER) -> str:
    """``value`` when it is a usable identifier; else InvalidInputError saying why, naming
    ``what`` it is (``job attribute``) and how to write one (``example``)."""
    why = None
    if not value:
        why = "it is empty"
    elif len(value) > limit:
        why = f"it is {len(value)} characters long, more than {limit}"
    elif printable(value) != value:
        why = "it holds a control character (a newline, tab, ESC or the like)"
    elif value != value.strip():
        why = "it begins or ends with a blank"
    if why is None:
        return value
    raise InvalidInputError(
        f"invalid {what} '{shorten(value)}': {why}", hint=f"give it as, e.g., {example}"
    )
