"""Escaping shown values: for HTML (text and attributes) and for GitHub's Markdown.

Both first write control characters, bidi overrides and lone surrogates as visible escapes
(:func:`capplan.errors.printable`, the one way every command echoes a value), so a name shows
what it holds and cannot reorder or hide the text around it.
"""

from __future__ import annotations

import html
import re

from capplan.errors import printable

__all__ = ["html_text", "md_text"]

# What CommonMark or GitHub's Markdown gives a meaning inside a line: emphasis, code, links,
# images (``[`` and ``]``: a ``(`` after them is plain), table cells, strike-through, math
# and the backslash itself (``<``, ``>`` and ``&``
# become entities below). A value never starts a line here (each follows a fixed prefix or a
# cell's ``| ``), so the line-start marks (``-``, ``+``, ``1.``, ``=``) stay as they are.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]#!|~$])")


def html_text(value: object) -> str:
    """``value`` as HTML text or a quoted attribute's value."""
    return html.escape(printable(str(value)), quote=True)


def md_text(value: object) -> str:
    """``value`` as literal Markdown text, safe inside a table cell: punctuation that means
    something is backslash-escaped, ``<``, ``>`` and ``&`` become entities (no HTML, no
    autolink), a newline cannot occur (printable wrote it as ``\\n``)."""
    text = _MD_SPECIAL.sub(r"\\\1", printable(str(value)))
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
