"""Output helpers shared by every command: JSON on stdout, rich text, progress on a terminal."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID
    from rich.segment import Segment
    from rich.table import Table

from capplan.core.planning.gcpause import gc_paused
from capplan.errors import json_printable, printable

__all__ = [
    "ACTION_STYLES",
    "AsciiIntRange",
    "Progressor",
    "emit_json",
    "err_console",
    "escape",
    "make_table",
    "out_console",
    "print_rows",
    "print_table",
    "print_wrapped",
    "progress",
    "to_json_text",
]


# A line's start (blanks and colour codes aside) and the first colon of a "::" there.
_WORKFLOW_COMMAND = re.compile(r"(?m)^((?:[ \t]|\x1b\[[0-9;]*m)*):(?=:)")

# Compact pieces come from the json module's C encoder (it is only used when indent is None).
# allow_nan=False: a non-finite number is a bug to report, never "Infinity" (not JSON) printed.
_COMPACT = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(", ", ": "), allow_nan=False
)
_INDENT_DEPTH = 2


def _compact_encoder() -> Callable[[Any], str]:
    """``_COMPACT.encode`` without its per-call set-up: one C encoder (the very one
    ``JSONEncoder.encode`` builds on every call, same settings) for one document. A 388,000-job
    matrix calls it once per job. Its circular-reference markers are fresh per document."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the pure-Python path, same bytes
        return lambda value: json_printable(_COMPACT.encode(value))
    c_encode = make(
        {},
        _COMPACT.default,
        json.encoder.encode_basestring,  # ensure_ascii=False
        None,
        _COMPACT.key_separator,
        _COMPACT.item_separator,
        _COMPACT.sort_keys,
        _COMPACT.skipkeys,
        _COMPACT.allow_nan,
    )

    def encode(value: Any) -> str:
        # The escapes JSON lacks (C1 controls, bidi overrides, a name's undecodable bytes),
        # piece by piece: an ASCII piece is let through at once, so a document holding one
        # non-ASCII value scans that value's piece, not the whole 150 MB.
        return json_printable("".join(c_encode(value, 0)))

    return encode


@gc_paused
def to_json_text(obj: Any) -> str:
    """Deterministic JSON with a trailing newline: sorted keys; the outer two levels indented by
    two spaces, each value below them on one line (a matrix job, a plan variant, a GPU).

    One record per line reads and greps well, and it is several times faster than
    ``json.dumps(indent=2)``, whose indenting encoder is pure Python (a 39,000-job matrix:
    0.2 s instead of 0.8 s).
    """
    out: list[str] = []
    _render(obj, 0, _compact_encoder(), out)
    out.append("\n")
    # One join at the end: the text of a 388,000-job matrix is about 150 MB, and building it
    # level by level copied it several times over (each copy slower as the text outgrows the
    # caches: what made 20,000 packages cost more than ten times 2,000).
    return "".join(out)


def _render(value: Any, depth: int, encode: Callable[[Any], str], out: list[str]) -> None:
    """Append ``value``'s text at nesting ``depth`` to ``out``."""
    if depth >= _INDENT_DEPTH or not value or not isinstance(value, (dict, list, tuple)):
        out.append(encode(value))
        return
    pad = "  " * (depth + 1)
    between = ",\n" + pad
    if isinstance(value, dict):
        items = sorted((k if isinstance(k, str) else json.dumps(k), v) for k, v in value.items())
        out.append("{\n" + pad)
        for i, (key, item) in enumerate(items):
            if i:
                out.append(between)
            out.append(encode(key) + ": ")
            _render(item, depth + 1, encode, out)
        out.append("\n" + "  " * depth + "}")
        return
    out.append("[\n" + pad)
    first = True
    for item in value:
        if not first:
            out.append(between)
        first = False
        _render(item, depth + 1, encode, out)
    out.append("\n" + "  " * depth + "]")


def emit_json(obj: Any) -> None:
    sys.stdout.write(to_json_text(obj))
    sys.stdout.flush()


def _on_broken_pipe(console: Console) -> None:
    """The reader of our output has gone (``capplan plan | head -1``): stop quietly with exit 0,
    as ``git log | head`` does (rich's own default exits 1)."""
    console.quiet = True
    _reader_gone()


def _reader_gone() -> NoReturn:
    """Exit 0 with stdout pointed at /dev/null, so the interpreter's last flush at exit does not
    raise BrokenPipeError again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    raise SystemExit(0)


@functools.cache
def _console_class() -> type[Console]:
    # rich loads here, not at import: a command that prints JSON never needs it.
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            _on_broken_pipe(self)

        def render_str(self, text: str, **options: Any) -> Any:
            # Every string printed, table cells included, passes here before rich reads its
            # markup: a control character a value brought along (an ESC sequence in a GPU
            # model, a CR in a log line) is shown escaped, never sent to the terminal. Our own
            # line breaks stay; a value that may hold one goes through escape() first.
            lines = text.split("\n")
            return super().render_str("\n".join(map(printable, lines)), **options)

        def _render_buffer(self, buffer: Iterable[Segment]) -> str:
            # A GitHub Actions runner reads a line that starts with "::" as a workflow command
            # (::error::, ::add-mask::). No line of ours starts so; one that does comes from a
            # value (a GPU name nvidia-smi printed, a job name), put there by the layout or by
            # a wrap at a blank, so its first colon is escaped whatever put it there.
            text = super()._render_buffer(buffer)
            return _WORKFLOW_COMMAND.sub(r"\1\\x3a", text) if "::" in text else text

    return _Console


def _console(stderr: bool) -> Console:
    # NO_COLOR is honoured by rich itself; a fixed COLUMNS gives golden tests a stable width.
    from capplan.cli.plaintable import columns_setting

    width = columns_setting(os.environ)
    # rich reads COLUMNS and LINES with int() when they are digits by str.isdigit ("\u00b2",
    # 5,000 digits: a ValueError): it sees only those int() reads.
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in _SIZES or columns_setting({"COLUMNS": v}) is not None
    }
    return _console_class()(
        stderr=stderr, width=width, highlight=False, soft_wrap=False, _environ=environ
    )


_SIZES = ("COLUMNS", "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES")


def out_console() -> Console:
    return _console(stderr=False)


def err_console() -> Console:
    return _console(stderr=True)


def escape(text: str) -> str:
    """A value for rich text: control characters escaped, newlines included
    (:func:`capplan.errors.printable`), and rich markup escaped (rich's own ``escape``, loaded
    only when a command has something to draw: a command that answers with an error never
    imports rich)."""
    from rich.markup import escape as rich_escape

    return rich_escape(printable(text))


def make_table(*columns: str, title: str | None = None, whole: Iterable[str] = ()) -> Table:
    """A table whose ``whole`` columns (variant, job and package names) are never cut or
    wrapped; the other columns wrap (fold) rather than hide text behind an ellipsis."""
    from rich.table import Table

    keep = set(whole)
    # No outer border and no padding at the edges: four columns more of room at 80 columns,
    # where the matrix's eight columns and a whole job name need every one.
    table = Table(
        title=title, title_justify="left", header_style="bold", show_edge=False, pad_edge=False
    )
    for column in columns:
        if column in keep:
            table.add_column(column, no_wrap=True, overflow="ignore")
        else:
            table.add_column(column, overflow="fold")
    return table


def print_rows(columns: Sequence[str], rows: Sequence[Sequence[str | None]]) -> None:
    """Print ``make_table(*columns)`` holding ``rows`` on stdout (a None cell is empty, as rich
    has it): drawn without loading rich where rich would draw it without colour and the text is
    plain (cli/plaintable.py, the same bytes), else with rich."""
    from capplan.cli.plaintable import plain_width, render

    width = plain_width()
    cells = [["" if cell is None else cell for cell in row] for row in rows]
    text = None if width is None else render(columns, cells, width)
    if text is None:
        table = make_table(*columns)
        for row in cells:
            table.add_row(*row)
        print_table(out_console(), table)
        return
    try:
        sys.stdout.write(_WORKFLOW_COMMAND.sub(r"\1\\x3a", text) if "::" in text else text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader has gone: exit 0 quietly, as a rich console does (_on_broken_pipe).
        _reader_gone()


def _column_widths(table: Table, whole: set[int]) -> list[tuple[int, int]]:
    """Each column's (narrowest, widest) content width: a whole column's narrowest is its
    longest line, another's its longest word (words are never split), its widest the longest
    line of any cell or of its header."""
    from rich.cells import cell_len

    out = []
    for index, column in enumerate(table.columns):
        texts = [str(column.header), *(str(cell) for cell in column.cells)]
        lines = [line for text in texts for line in text.splitlines() or [""]]
        widest = max((cell_len(line) for line in lines), default=0)
        if index in whole:
            narrowest = widest
        else:
            narrowest = max((cell_len(word) for line in lines for word in line.split()), default=0)
        out.append((narrowest, widest))
    return out


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` at the console's width (``COLUMNS`` or the terminal), or wider only when
    its whole columns and longest words need more: a name is never cut and a word never split.

    rich shrinks the widest wrappable columns first when a table is too wide, down past their
    longest word (``x86_64-linu|x``) and, with no wrappable column left, cuts no_wrap ones; so
    the widths are set here: every column gets its narrowest width, and the room left goes to
    the columns that can use it, in proportion to what they lack."""
    width = console.width
    if isinstance(table.title, str):
        # Its own line, at the console's width: rich wraps a title at the table's, so a narrow
        # table broke "capability-independent (one build each)" in two.
        from rich.text import Text

        console.print(Text(table.title, style="table.title"), soft_wrap=True)
        table.title = None
    from capplan.cli.plaintable import fit_widths

    whole = {i for i, column in enumerate(table.columns) if column.no_wrap}
    padding = sum(table._get_padding_width(i) for i in range(len(table.columns)))
    overhead = table._extra_width + padding
    widths = fit_widths(_column_widths(table, whole), overhead, width)
    if widths is None:
        console.print(table)
        return
    for column, w in zip(table.columns, widths, strict=True):
        column.width = w
    needed = sum(widths) + overhead
    if needed <= width:
        console.print(table)
        return
    console.width = needed  # print(width=...) never goes beyond the console's own width
    try:
        console.print(table)
    finally:
        console.width = width


# The colour of each decision, where the terminal has colour (rich honours NO_COLOR).
ACTION_STYLES = {
    "kept": "green",
    "shared": "cyan",
    "substituted": "cyan",
    "ptx": "cyan",
    "cuda": "cyan",
    "dropped": "red",
    "excluded": "red",
    "unserved": "yellow",
    "warning": "yellow",
    "missing": "yellow",
    "skipped": "magenta",
}


def print_wrapped(
    console: Console, text: str, *, indent: str = "", hang: str = "    ", label: str = ""
) -> None:
    """``indent + label + text`` wrapped at the console's width between words, later lines
    indented by ``hang`` more; ``label`` (a decision's action) in its colour."""
    import textwrap

    from rich.text import Text

    lines = textwrap.wrap(
        label + text,
        width=max(console.width - len(indent), 20),
        subsequent_indent=hang,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [""]
    body = Text("\n".join(indent + line for line in lines))
    word = label.split(":")[0].strip()
    if label and word in ACTION_STYLES:
        at = len(indent) + label.index(word)
        body.stylize(ACTION_STYLES[word], at, at + len(word))
    console.print(body, soft_wrap=True)


class Progressor:
    """What :func:`progress` yields: call :meth:`advance` as work completes."""

    def __init__(self, bar: Progress | None, task: TaskID | None) -> None:
        self._bar = bar
        self._task = task

    def advance(self, n: int = 1) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, n)


@contextmanager
def progress(total: int, description: str) -> Iterator[Progressor]:
    """A rich progress bar on stderr when it is a terminal; silent otherwise (CI, pipes)."""
    console = err_console()
    if not console.is_terminal:
        yield Progressor(None, None)
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield Progressor(bar, task)


class AsciiIntRange(click.IntRange):
    """click's IntRange for ASCII digits only: Python's int() also takes other scripts'
    digits ("\u0664"), which are no number a CI runner count is written in."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
            shown = value if len(value) <= 200 else value[:200] + "..."
            self.fail(f"{shown!r} is not a whole number written in ASCII digits", param, ctx)
        if isinstance(value, str):
            digits = value.strip().lstrip("+-").lstrip("0")
            if len(digits) > _FLAG_DIGITS:
                # Past every range a flag has; past 4,300 digits int() itself refuses it. An
                # input error (exit 4), as a --version or --wheel-name number of 5,000 digits.
                from capplan.errors import InvalidInputError

                name = param.get_error_hint(ctx) if param is not None and ctx is not None else ""
                raise InvalidInputError(
                    f"{name or 'the value'} is a number of {len(digits):,} digits, more than "
                    f"it may have (its range: {self._describe_range()})",
                    hint="give a number in that range",
                )
        return super().convert(value, param, ctx)


# More digits than any range a flag has (and int() reads up to 4,300).
_FLAG_DIGITS = 18


# A committed plan.json or workflow: 20,000 packages give about 60 MB of plan.json.
MAX_COMMITTED_BYTES = 512 * 1024 * 1024


# The part of each side that --check diffs: difflib holds about 80 times what it compares,
# so a whole 60 MB file would take gigabytes; the diff shows the first difference, this much
# of each side from a few lines before it.
DIFF_WINDOW_BYTES = 256 * 1024
_CONTEXT_LINES = 3
_CHUNK = 1024 * 1024
_HUNK = re.compile(r"@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@")


def check_committed(output: Path, text: str, *, fix: str, limit: int = MAX_COMMITTED_BYTES) -> None:
    """``--check`` for a generated file: exit 11 (StaleError) with a unified diff when the file
    at ``output`` differs from ``text``, is missing, cannot be read or is larger than ``limit``;
    ``fix`` says how to regenerate it (``run 'capplan generate' and commit the result``).

    The file is compared as bytes, a chunk at a time, and only a window around the first
    difference is diffed (:data:`DIFF_WINDOW_BYTES` of each side), so memory stays bounded
    whatever the committed file's size."""
    from capplan.adapters.files import open_regular
    from capplan.errors import StaleError, shorten

    shown = shorten(os.fsdecode(output))
    expected = text.encode("utf-8")
    try:
        with open_regular(output) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > max(limit, len(expected)):
                raise StaleError(
                    f"{shown} is stale: it is {size:,} bytes, larger than the {limit:,} bytes "
                    "--check reads",
                    hint=fix,
                )
            offset = _first_difference(handle, expected)
            if offset is None:
                err_console().print(f"{shown} is up to date", markup=False, highlight=False)
                return
            start = _window_start(expected, offset)
            handle.seek(start)
            committed = handle.read(DIFF_WINDOW_BYTES)
            more = bool(handle.read(1))
    except FileNotFoundError:
        raise StaleError(f"{shown} is missing", hint=fix) from None
    except OSError as error:
        raise StaleError(f"{shown} cannot be read: {error.strerror or error}", hint=fix) from None
    planned = expected[start : start + DIFF_WINDOW_BYTES]
    more = more or len(expected) > start + DIFF_WINDOW_BYTES
    first_line = expected.count(b"\n", 0, start)
    _print_diff(shown, committed, planned, first_line, cut=more)
    raise StaleError(f"{shown} is stale", hint=fix)


def _first_difference(handle: Any, expected: bytes) -> int | None:
    """The offset of the first byte where the open file and ``expected`` differ (the shorter's
    end when one is the other's start); None when they are equal."""
    offset = 0
    while True:
        chunk = handle.read(_CHUNK)
        want = expected[offset : offset + len(chunk)] if chunk else b""
        if chunk != want:
            return offset + next(
                (i for i, (a, b) in enumerate(zip(chunk, want, strict=False)) if a != b),
                min(len(chunk), len(want)),
            )
        if not chunk:
            return None if offset == len(expected) else offset
        offset += len(chunk)


def _window_start(expected: bytes, offset: int) -> int:
    """Where the diffed window starts: the whole file when it is small, else a few lines before
    the first difference (both sides agree up to ``offset``)."""
    if len(expected) <= DIFF_WINDOW_BYTES and offset <= DIFF_WINDOW_BYTES:
        return 0
    start = offset
    for _ in range(_CONTEXT_LINES + 1):
        found = expected.rfind(b"\n", 0, max(start - 1, 0))
        if found < 0:
            return 0
        start = found + 1
    return start


def _print_diff(shown: str, committed: bytes, planned: bytes, first_line: int, cut: bool) -> None:
    import difflib  # only for --check's diff

    def lines(data: bytes) -> list[str]:
        if cut and b"\n" in data:
            data = data[: data.rindex(b"\n") + 1]  # whole lines only
        return data.decode("utf-8", errors="replace").splitlines(keepends=True)

    def renumber(match: re.Match[str]) -> str:
        old, new = int(match.group(1)) + first_line, int(match.group(3)) + first_line
        return f"@@ -{old}{match.group(2)} +{new}{match.group(4)} @@"

    diff = difflib.unified_diff(
        lines(committed),
        lines(planned),
        fromfile=f"{shown} (committed)",
        tofile=f"{shown} (from the plan)",
    )
    for line in diff:
        if line.startswith("@@"):
            line = _HUNK.sub(renumber, line, count=1)
        # The committed side is anyone's bytes: shown escaped like every value (an ESC, a CR, a
        # "::error::" after a newline in it does nothing), a line at a time.
        end = "\n" if line.endswith("\n") else ""
        click.echo(printable(line.removesuffix("\n")) + end, nl=False)
    if cut:
        err_console().print(
            f"capplan: the diff shows {shown} from line {first_line + 1}, at most "
            f"{DIFF_WINDOW_BYTES // 1024} KiB of each side; the files may differ further on",
            markup=False,
            highlight=False,
        )
