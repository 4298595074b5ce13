"""cli/plaintable.py draws make_table's tables byte for byte as rich does, or declines (issue 42:
``capplan inspect`` prints its table without loading rich where the output is no terminal)."""

from __future__ import annotations

import io
import random

import pytest

from capplan.cli.output import _console_class, make_table, print_table
from capplan.cli.plaintable import RICH_MAJOR, plain_width, render, same_rich

# render reproduces one rich's layout; with another installed, plain_width sends every table to
# rich (test_another_rich_draws_itself), and comparing the two would test nothing of ours.
needs_same_rich = pytest.mark.skipif(
    not same_rich(), reason=f"render reproduces rich {RICH_MAJOR}; another rich is installed"
)


def _rich(columns: list[str], rows: list[list[str]], width: int) -> str:
    table = make_table(*columns)
    for row in rows:
        table.add_row(*row)
    out = io.StringIO()  # no terminal: rich draws without colour, as render does
    print_table(_console_class()(file=out, width=width, highlight=False, soft_wrap=False), table)
    return out.getvalue()


def _tables(seed: int, count: int) -> list[tuple[list[str], list[list[str]], int]]:
    rng = random.Random(seed)
    letters = "abcdefghij_-./0123456789"

    def word() -> str:
        return "".join(rng.choice(letters) for _ in range(rng.choice([1, 2, 5, 8, 13, 30, 60])))

    def cell() -> str:
        pick = rng.random()
        if pick < 0.1:
            return ""
        if pick < 0.15:
            return " " * rng.randint(1, 4)
        text = "".join(word() + rng.choice([" ", "  "]) for _ in range(rng.randint(1, 12)))
        return text if rng.random() < 0.5 else text.strip()

    found = []
    for _ in range(count):
        n = rng.randint(1, 9)
        columns = [word() if rng.random() < 0.7 else cell() for _ in range(n)]
        rows = [[cell() for _ in range(n)] for _ in range(rng.randint(0, 4))]
        found.append((columns, rows, rng.randint(5, 170)))
    return found


@needs_same_rich
def test_plain_tables_match_rich_byte_for_byte() -> None:
    # Random tables (words longer than their column, blank cells, many columns) at widths from
    # 5 to 170 columns: wherever render draws, it draws rich's bytes; it draws most of them.
    drawn = 0
    tables = _tables(42, 400)
    for columns, rows, width in tables:
        text = render(columns, rows, width)
        if text is not None:
            drawn += 1
            assert text == _rich(columns, rows, width), (columns, rows, width)
    assert drawn > 0.8 * len(tables)


@needs_same_rich
def test_plain_tables_never_split_a_word() -> None:
    # Whatever the width, every word of every cell is whole on one line (issue 46: 80 columns,
    # what a pipe gets, drew compute_86 as compute_8 / 6).
    for columns, rows, width in _tables(7, 300):
        text = render(columns, rows, width)
        if text is None:
            continue
        drawn = set(text.replace("│", " ").replace("┃", " ").split())
        words = {word for row in [columns, *rows] for cell in row for word in cell.split()}
        assert words <= drawn, (columns, rows, width)


@needs_same_rich
@pytest.mark.parametrize("width", [30, 60, 80, 100, 200])
def test_inspects_table_matches_rich(width: int) -> None:
    columns = ["path", "SASS", "PTX", "LTO-IR", "compression", "containers", "sections", "AMD"]
    sass = " ".join(f"sm_{a}" for a in (75, 80, 86, 89, 90, "90a", 100, "100a", "103f", 120))
    rows = [
        ["/nix/store/abc-torch/lib/libtorch_cuda.so", sass, "compute_120", "-", "zstd", "475",
         ".nv_fatbin:475", "-"],
        ["libk86.so", "sm_86", "compute_90", "-", "-", "1", ".nv_fatbin:1", "gfx942 gfx90a"],
    ]  # fmt: skip
    for body in (rows, []):
        text = render(columns, body, width)
        # At 30 columns a column is narrower than its padding: rich's own edge case, declined.
        assert (
            text == _rich(columns, body, width)
            if width >= 60
            else text in (None, _rich(columns, body, width))
        )


@pytest.mark.parametrize(
    "text",
    ["[bold]x[/bold]", "see :warning: here", "a::b", "caf\u00e9", "a\tb", "two\nlines", "\x1b[31m"],
)
def test_text_rich_could_read_otherwise_is_left_to_rich(text: str) -> None:
    # Markup, emoji codes, other characters, tabs and line breaks: rich's own rules apply.
    assert render(["name", "value"], [["x", text]], 100) is None
    assert render(["name", text], [], 100) is None


def test_plain_width_follows_richs_terminal_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    # stdout is captured here (no terminal): rich would draw without colour.
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "77")
    assert plain_width() == 77
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then draws as on a terminal
    assert plain_width() is None
    monkeypatch.setenv("FORCE_COLOR", "")
    assert plain_width() == 77
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    assert plain_width() is None
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert plain_width() == 77
    monkeypatch.delenv("COLUMNS")
    monkeypatch.delenv("TTY_COMPATIBLE")
    monkeypatch.delenv("FORCE_COLOR")
    assert plain_width() == _console_class()(file=io.StringIO()).width


@pytest.mark.parametrize(
    "code",
    [
        # drawn without rich (cli/plaintable.py) ...
        "from capplan.cli.output import print_rows\n"
        "print_rows(['n', 'text'], [[str(i), 'x' * 60] for i in range(20000)])",
        # ... and through a rich console
        "from capplan.cli.output import make_table, out_console, print_table\n"
        "t = make_table('n', 'text')\n"
        "[t.add_row(str(i), 'x' * 60) for i in range(5000)]\n"
        "print_table(out_console(), t)",
    ],
)
def test_a_reader_that_has_gone_ends_the_table_quietly_with_exit_0(code: str) -> None:
    # `capplan gpus | head -1`: a closed stdout is not an error (docs/exit-codes.md), on both
    # ways a table is drawn.
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80"}
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.read(100)
    child.stdout.close()
    err = child.stderr.read()
    assert child.wait(timeout=60) == 0 and err == b"", err[-2000:]


def test_the_installed_rich_is_read_from_its_dist_info(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib.metadata import version

    assert same_rich() == (int(version("rich").split(".")[0]) == RICH_MAJOR)
    # Another rich: every table goes to rich, whatever the output is.
    monkeypatch.setattr("capplan.cli.plaintable.RICH_MAJOR", RICH_MAJOR + 1)
    monkeypatch.setenv("COLUMNS", "80")
    assert not same_rich() and plain_width() is None
