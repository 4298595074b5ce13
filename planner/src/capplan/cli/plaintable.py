"""A table drawn as rich draws it, without loading rich: for output that is not a terminal.

Importing rich's console and table modules is about 25 ms of CPU time, and drawing a table 7
more: the largest part of ``capplan inspect``'s start after the scan itself (issue 42). Where
rich would draw without colour or styles (stdout is no terminal, nothing forces one) and every
cell is plain printable ASCII, this module draws the table :func:`capplan.cli.output.make_table`
builds (left-justified columns that fold, one space of padding between columns, no outer edge,
rich's HEAVY_HEAD box) by rich's own rules, as rich 15 has them: the column widths
(``Table._calculate_column_widths``: each column's widest line, then the widest wrappable
columns reduced first, ``_collapse_widths`` and ``ratio_reduce``), the word wrap that folds a
word longer than its column (``rich._wrap.divide_line``), the header aligned to its bottom and
every line cropped at the console's width. Anything else (a terminal, text that could be
markup or an emoji code, other characters, a console too narrow for the padding) is None, and
the caller draws with rich. tests/unit/test_plaintable.py compares both on random tables.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence

__all__ = ["columns_setting", "fit_widths", "plain_width", "render", "same_rich"]

# The layout below is rich 15's (tests/unit/test_plaintable.py compares them): with another rich
# installed (nixpkgs' own, an older pip install), rich draws, so the bytes never depend on which
# of the two drew them.
RICH_MAJOR = 15

_WORD = re.compile(r"\s*\S+\s*")
_TRAILING_BLANKS = re.compile(r"\s+$")
# Printable ASCII without rich markup ("[bold]") and without anything an emoji code could be
# (":name:"): such text reaches the screen exactly as written.
_PLAIN = re.compile(r"[ -Z\\^-~]*")
_EMOJI_LIKE = re.compile(r":\S*?:")


def same_rich() -> bool:
    """Whether the installed rich is the one whose layout :func:`render` reproduces, read from
    its ``rich-X.Y.Z.dist-info`` beside the package (no import of rich, no metadata scan)."""
    from importlib.util import find_spec

    spec = find_spec("rich")
    places = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not places:
        return False
    try:
        names = os.listdir(os.path.dirname(places[0]))
    except OSError:
        return False
    prefix = f"rich-{RICH_MAJOR}."
    return any(name.startswith(prefix) and name.endswith(".dist-info") for name in names)


def columns_setting(environ: Mapping[str, str]) -> int | None:
    """``COLUMNS`` as rich's console reads it: digits int() reads, else unset. ``str.isdigit``
    is true of "\u00b2" and of 5,000 digits, which int() refuses (a ValueError rich catches)."""
    columns = environ.get("COLUMNS", "")
    if not columns.isdigit():
        return None
    try:
        return int(columns)
    except ValueError:
        return None


def plain_width() -> int | None:
    """The width rich's console would draw stdout at when it would draw without colour or
    styles (rich's ``Console.is_terminal`` false, a UTF-8 stream, not Windows), with the rich
    whose layout :func:`render` reproduces installed; None otherwise."""
    if sys.platform == "win32" or not same_rich():
        return None
    environ = os.environ
    tty = environ.get("TTY_COMPATIBLE", "")
    if tty == "1":
        return None
    if tty != "0":
        force = environ.get("FORCE_COLOR")
        if force is not None:
            if force != "":
                return None
        else:
            try:
                if sys.stdout.isatty():
                    return None
            except ValueError:
                pass
    if not (getattr(sys.stdout, "encoding", None) or "utf-8").lower().startswith("utf"):
        return None  # rich draws an ASCII box then
    width = columns_setting(environ)
    if width is not None:
        return width
    for fd in (0, 1, 2):
        try:
            width = os.get_terminal_size(fd).columns
        except (AttributeError, ValueError, OSError):
            continue
        break
    return width or 80


def fit_widths(ranges: Sequence[tuple[int, int]], overhead: int, width: int) -> list[int] | None:
    """Each column's content width for a table ``width`` wide, from each column's (narrowest,
    widest) content width (narrowest: its longest word, or its longest line where a column is
    never wrapped) and the width its separators and padding take; None when every column fits
    at its widest (then drawn as rich draws it).

    No column gets less than its narrowest, so a word is never split (rich, left to itself,
    shrinks the widest columns past their longest word: ``compute_8|6``, issue 46): the room
    left goes to the columns that can use it, in proportion to what they lack, and the table is
    wider than ``width`` only when the narrowest widths need it."""
    if sum(widest for _, widest in ranges) + overhead <= width:
        return None
    room = max(width, sum(narrowest for narrowest, _ in ranges) + overhead) - overhead
    widths = [narrowest for narrowest, _ in ranges]
    lacking = [widest - narrowest for narrowest, widest in ranges]
    spare = room - sum(widths)
    total = sum(lacking)
    if total and spare > 0:
        shares = [spare * lack // total for lack in lacking]
        widths = [w + share for w, share in zip(widths, shares, strict=True)]
        # What integer division left over, one column at a time, the most lacking first.
        order = sorted(range(len(widths)), key=lambda i: (-(lacking[i] - shares[i]), i))
        for i in order[: spare - sum(shares)]:
            widths[i] += 1
    return [max(w, 1) for w in widths]


def _ratio_reduce(
    total: int, ratios: list[int], maximums: list[int], values: list[int]
) -> list[int]:
    ratios = [ratio if limit else 0 for ratio, limit in zip(ratios, maximums, strict=True)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    remaining = total
    result: list[int] = []
    for ratio, limit, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            share = min(limit, round(ratio * remaining / total_ratio))
            result.append(value - share)
            remaining -= share
            total_ratio -= ratio
        else:
            result.append(value)
    return result


def _collapse(widths: list[int], max_width: int) -> list[int]:
    """Every column wraps: the widest ones lose width first, down to the next widest."""
    total = sum(widths)
    excess = total - max_width
    while total and excess > 0:
        widest = max(widths)
        second = max((w if w != widest else 0) for w in widths)
        difference = widest - second
        ratios = [1 if w == widest else 0 for w in widths]
        if not any(ratios) or not difference:
            break
        widths = _ratio_reduce(excess, ratios, [min(excess, difference)] * len(widths), widths)
        total = sum(widths)
        excess = total - max_width
    return widths


def _normalised(low: int, high: int) -> tuple[int, int]:
    low = min(max(0, low), high)
    return max(0, low), max(0, max(low, high))


def _measure(texts: Sequence[str], padding: int, limit: int) -> tuple[int, int]:
    """A column's (narrowest, widest) width, padding included, at most ``limit``."""
    if limit < 1:
        return 0, 0
    lows: list[int] = []
    highs: list[int] = []
    for text in texts:
        if limit - padding < 1:
            low, high = limit, limit
        else:
            widest = len(text)
            words = text.split()
            low, high = _normalised(max((len(w) for w in words), default=widest), widest)
            low, high = min(low, limit), min(high, limit)
            if high < 1:
                low, high = 0, 0
            else:
                low, high = _normalised(low, high)
            low, high = min(low + padding, limit), min(high + padding, limit)
        low, high = _normalised(low, high)
        low, high = min(low, limit), min(high, limit)
        if high < 1:
            low, high = 0, 0
        else:
            low, high = _normalised(low, high)
        lows.append(low)
        highs.append(high)
    return min(max(lows, default=1), limit), min(max(highs, default=limit), limit)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` folded into lines of ``width`` (rich's divide_line, Text.wrap with fold)."""
    breaks: list[int] = []
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            pieces = [word[i : i + width] for i in range(0, len(word), width)]
            for index, piece in enumerate(pieces):
                if start:
                    breaks.append(start)
                if index == len(pieces) - 1:
                    offset = len(piece)
                else:
                    start += len(piece)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    lines = [text[a:b] for a, b in zip([0, *breaks], [*breaks, len(text)], strict=True)]
    out: list[str] = []
    for line in lines:
        if len(line) > width:
            blanks = _TRAILING_BLANKS.search(line)
            if blanks is not None:
                line = line[: len(line) - min(len(blanks.group(0)), len(line) - width)]
        out.append(line[:width].ljust(width))
    return out


def render(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> str | None:
    """The text rich prints for ``make_table(*columns)`` holding ``rows`` on a console
    ``width`` wide without colour, or None where this module does not draw it the same."""
    count = len(columns)
    table = [list(columns), *(list(row) for row in rows)]
    if count == 0 or any(len(row) != count for row in table):
        return None
    for row in table:
        for text in row:
            if _PLAIN.fullmatch(text) is None or _EMOJI_LIKE.search(text):
                return None
    pads = [(0 if i == 0 else 1, 0 if i == count - 1 else 1) for i in range(count)]
    cells = [[row[i] for row in table] for i in range(count)]
    max_width = width - (count - 1)
    if max_width < 1:
        return None
    ranges = [
        (max((len(w) for t in cell for w in t.split()), default=0), max(map(len, cell)))
        for cell in cells
    ]
    fixed = fit_widths(ranges, sum(map(sum, pads)) + count - 1, width)
    if fixed is None:
        widths = [_measure(cells[i], sum(pads[i]), max_width)[1] or 1 for i in range(count)]
    else:
        # print_table's widths (rich then draws each column at exactly its width, plus its
        # padding), the console as wide as they need.
        widths = [w + sum(pad) for w, pad in zip(fixed, pads, strict=True)]
        width = max(width, sum(widths) + count - 1)
    if any(w - sum(pad) < 1 for w, pad in zip(widths, pads, strict=True)):
        return None  # too narrow for its padding: rich's own edge cases
    lines: list[str] = []
    for index, row in enumerate(table):
        drawn: list[list[str]] = []
        for text, w, (left, right) in zip(row, widths, pads, strict=True):
            inner = _wrap(text, w - left - right)
            drawn.append([" " * left + line + " " * right for line in inner])
        height = max(len(cell) for cell in drawn)
        for i, cell in enumerate(drawn):
            blank = [" " * widths[i]] * (height - len(cell))
            # rich aligns the header's cells to their bottom, the others to their top.
            drawn[i] = blank + cell if index == 0 else cell + blank
        divider = "┃" if index == 0 else "│"
        lines.extend(divider.join(cell[n] for cell in drawn) for n in range(height))
        if index == 0:
            lines.append("╇".join("━" * w for w in widths))
    return "".join(line[:width] + "\n" for line in lines)
