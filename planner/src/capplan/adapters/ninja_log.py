"""Reading a ninja log (``.ninja_log``) from disk: bounded, a regular file only, UTF-8 (issue 40).

A ninja log is input from outside (a build folder, a file someone sent): a FIFO, a file past
:data:`MAX_NINJA_LOG_BYTES`, bytes that are not UTF-8 or a malformed line each give one
:class:`~capplan.errors.DataError` line (exit 6), never a traceback; so does a log whose steps
all took no time, which gives no figure to divide by. The figures are read in
:mod:`capplan.core.planning.buildlog`.
"""

from __future__ import annotations

from pathlib import Path

from capplan.adapters.files import read_bounded
from capplan.core.planning.buildlog import Edge, parse_ninja_log
from capplan.errors import DataError, shorten

__all__ = ["MAX_NINJA_LOG_BYTES", "read_ninja_log"]

# A clean torch build writes about 8,000 lines of some 150 bytes (1.2 MB); a log that has
# seen years of rebuilds is still far below this.
MAX_NINJA_LOG_BYTES = 64 * 1024 * 1024


def read_ninja_log(path: Path, limit: int = MAX_NINJA_LOG_BYTES) -> tuple[Edge, ...]:
    name = str(path)
    try:
        data = read_bounded(path, limit)
    except FileNotFoundError:
        raise DataError(
            f"no such ninja log: {shorten(name)}", hint="give the .ninja_log of a build folder"
        ) from None
    except OSError as exc:
        raise DataError(f"cannot read ninja log {shorten(name)}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(
            f"ninja log {shorten(name)} line {line}: byte {exc.start} is not UTF-8",
            hint="give the .ninja_log as ninja wrote it, in UTF-8",
        ) from None
    edges = parse_ninja_log(text, name)
    if edges and not any(edge.end_ms > edge.start_ms for edge in edges):
        # Every figure of a build is a share of its time (wall, CPU, a unit's growth): a log
        # whose steps all took 0 ms (or start and end at one 15-digit time) has none to give.
        raise DataError(
            f"ninja log {shorten(name)}: every build step took 0 ms, so it gives no build time",
            hint="give the .ninja_log of a build that ran",
        )
    return edges
