"""The one check of an identifier a user or a file gives capplan: a job attribute, a system.

An identifier is echoed in tables, progress lines and error lines, and it is written into
records other branches' CI runs read back: a newline in one would let the next line of a CI log
start with ``::error::`` (a GitHub Actions workflow command), an ESC would colour, retitle or
clear a terminal. So an identifier holds no control character at all (tab and newline
included), has no surrounding blanks, is not empty and has a bounded length.
"""

from __future__ import annotations

import re

from capplan.errors import InvalidInputError, printable, shorten

__all__ = ["MAX_IDENTIFIER", "MAX_KB_NAME", "check_identifier", "check_kb_attr", "check_kb_name"]

MAX_IDENTIFIER = 500
MAX_KB_NAME = 100
# A knowledge base's package names become variant names (torch-sm86), Nix attribute names, YAML
# keys and values of recipe.yaml and variants.yaml, and lines of `plan --print-identifiers`;
# their attributes are Nix attribute paths. A knowledge base is user input (CAPPLAN_KB_DIR):
# a name is checked where it is loaded, so none can break a generated file or start a line
# with "::error::". Every name nixpkgs and the packaged knowledge base use fits these.
_KB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_ATTR_PART = r"[A-Za-z_][A-Za-z0-9_-]*"
_KB_ATTR = re.compile(rf"{_ATTR_PART}(?:\.{_ATTR_PART})*")


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


def check_kb_name(value: str, what: str) -> None:
    """ValueError unless ``value`` is a knowledge-base name capplan may write into generated
    files: ASCII letters, digits, ``_``, ``.``, ``+`` and ``-``, not starting with one of the
    last three, at most :data:`MAX_KB_NAME` characters."""
    if len(value) > MAX_KB_NAME or not _KB_NAME.fullmatch(value):
        raise ValueError(
            f"{what} '{shorten(value)}' is not a name capplan writes into generated files "
            f"(letters, digits, '_', '.', '+', '-'; at most {MAX_KB_NAME} characters)"
        )


def check_kb_attr(value: str, what: str) -> None:
    """ValueError unless ``value`` is a Nix attribute path of plain identifiers
    (``python3Packages.torch``)."""
    if len(value) > MAX_IDENTIFIER or not _KB_ATTR.fullmatch(value):
        raise ValueError(
            f"{what} '{shorten(value)}' is not a Nix attribute path of plain names "
            "(like python3Packages.torch)"
        )
