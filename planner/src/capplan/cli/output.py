"""Output helpers shared by every command: JSON on stdout, rich text, progress on a terminal."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

__all__ = [
    "Progressor",
    "emit_json",
    "err_console",
    "make_table",
    "out_console",
    "progress",
    "to_json_text",
]


def to_json_text(obj: Any) -> str:
    """Deterministic JSON: sorted keys, two-space indent, a trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def emit_json(obj: Any) -> None:
    sys.stdout.write(to_json_text(obj))
    sys.stdout.flush()


def _console(stderr: bool) -> Console:
    # NO_COLOR is honoured by rich itself; a fixed COLUMNS gives golden tests a stable width.
    width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else None
    return Console(stderr=stderr, width=width, highlight=False, soft_wrap=False)


def out_console() -> Console:
    return _console(stderr=False)


def err_console() -> Console:
    return _console(stderr=True)


def make_table(*columns: str, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        table.add_column(column)
    return table


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
