"""What a real build's ninja log says about its cost (issue 40): pure, text in, figures out.

A ninja log (``.ninja_log`` in the build folder, read by :mod:`capplan.adapters.ninja_log`)
holds one line per output: start and end in ms since the build began, the output's mtime, its
path and the command's hash (ninja's src/build_log.cc, format v5-v7; an edge with several
outputs writes one line per output with the same times and hash). From it: the wall time, the
CPU time of the edges (a compile is one process on one core, so its span is its CPU time), the
CUDA translation units (CMake names their objects ``<source>.cu.o``) against the host part, and
the longest unit, which no number of cores makes shorter.

Two builds of the same sources for 1 and for k targets pair their CUDA units by output name; the
time-weighted ratio of the pairs is how much a unit grows from 1 to k targets. Compile time is
linear in targets on top of a fixed part (shared/CUDA.md, "Compile cost grows with every
target": nvcc compiles the targets one after another), so a unit costs
``t1 * (1 - p + p * n)`` for n targets, with ``p = (growth - 1) / (k - 1)`` the share of its
one-target time each target adds. That is the extrapolation behind :func:`measured_cost`.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from capplan.errors import DataError, shorten

__all__ = [
    "MAX_LINE_BYTES",
    "BuildFigures",
    "Edge",
    "Growth",
    "MeasuredCost",
    "build_figures",
    "measured_cost",
    "parse_ninja_log",
    "unit_growth",
]

# The formats whose lines are "start end mtime output hash" (ninja src/build_log.cc:
# kOldestSupportedVersion 4 wrote the same columns, v6 a nanosecond mtime, v7 a 64-bit hash).
_HEADER = re.compile(r"# ninja log v([4-7])")
MAX_LINE_BYTES = 64 * 1024  # a path of PATH_MAX and numbers fit many times over
_NUMBER = re.compile(r"[0-9]{1,15}")  # ms since the build's start: 15 digits is 31,000 years
_CUDA_OBJECT = ".cu.o"


class Edge(NamedTuple):
    """One build step: its span in ms and its outputs (sorted)."""

    start_ms: int
    end_ms: int
    outputs: tuple[str, ...]

    @property
    def seconds(self) -> float:
        return (self.end_ms - self.start_ms) / 1000

    @property
    def cuda(self) -> bool:
        """A CUDA translation unit: CMake's object of a ``.cu`` source."""
        return any(o.endswith(_CUDA_OBJECT) for o in self.outputs)


def _bad(name: str, number: int, what: str) -> DataError:
    return DataError(
        f"ninja log {shorten(name)} line {number}: {what}",
        hint="give the .ninja_log of a build folder (lines: start, end, mtime, output, hash, "
        "tab-separated, after '# ninja log v5'..'v7')",
    )


def parse_ninja_log(text: str, name: str = "ninja log") -> tuple[Edge, ...]:
    """The edges of a ninja log's text, in the order they finished; a later line for the same
    output replaces the earlier one (ninja appends a rebuilt output's new line). ``name`` is
    the file's, for the one-line error a malformed line gives."""
    lines = text.split("\n")
    first = lines[0].rstrip("\r")
    if not _HEADER.fullmatch(first):
        raise _bad(name, 1, f"'{shorten(first, 60)}' is not a ninja log header")
    latest: dict[str, tuple[int, int, str, int]] = {}
    for number, raw in enumerate(lines[1:], start=2):
        line = raw.rstrip("\r")
        if not line:
            continue
        if len(line) > MAX_LINE_BYTES:
            raise _bad(name, number, f"a line of {len(line):,} characters")
        fields = line.split("\t")
        if len(fields) != 5:
            raise _bad(name, number, f"{len(fields)} tab-separated fields, not 5")
        start, end, _mtime, output, command = fields
        if not (_NUMBER.fullmatch(start) and _NUMBER.fullmatch(end)):
            raise _bad(
                name, number, f"start '{shorten(start, 20)}' or end '{shorten(end, 20)}' is no ms"
            )
        if int(end) < int(start):
            raise _bad(name, number, f"ends ({end} ms) before it starts ({start} ms)")
        if not output:
            raise _bad(name, number, "no output path")
        latest[output] = (int(start), int(end), command, number)
    edges: dict[tuple[int, int, str], list[str]] = {}
    for path, (begin, finish, command, _) in sorted(latest.items(), key=lambda kv: kv[1][3]):
        edges.setdefault((begin, finish, command), []).append(path)
    return tuple(
        Edge(start, end, tuple(sorted(outputs)))
        for (start, end, _), outputs in sorted(edges.items(), key=lambda kv: (kv[0][1], kv[1]))
    )


class BuildFigures(NamedTuple):
    """A build's figures as its log gives them (seconds)."""

    edges: int
    wall_s: float
    cpu_s: float
    cuda_units: int
    cuda_s: float  # the CUDA units' CPU seconds
    host_s: float  # every other edge's: host C/C++, links, archives
    longest_unit: str  # the slowest CUDA unit's object
    longest_unit_s: float

    @property
    def parallelism(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s else 0.0


def build_figures(edges: Sequence[Edge]) -> BuildFigures:
    if not edges:
        raise DataError("the ninja log has no build steps", hint="give the log of a build")
    wall = (max(e.end_ms for e in edges) - min(e.start_ms for e in edges)) / 1000
    units = [e for e in edges if e.cuda]
    cuda = sum(e.seconds for e in units)
    cpu = sum(e.seconds for e in edges)
    longest = max(units, key=lambda e: (e.seconds, e.outputs), default=None)
    return BuildFigures(
        edges=len(edges),
        wall_s=round(wall, 3),
        cpu_s=round(cpu, 3),
        cuda_units=len(units),
        cuda_s=round(cuda, 3),
        host_s=round(cpu - cuda, 3),
        longest_unit=longest.outputs[0] if longest else "",
        longest_unit_s=longest.seconds if longest else 0.0,
    )


class Growth(NamedTuple):
    """How the CUDA units found in both builds grew from the first to the second."""

    pairs: int
    weighted: float  # sum of the second's times over the sum of the first's
    median: float  # the median unit's ratio

    def per_target_share(self, targets: int) -> float:
        """``p``: the share of a unit's one-target time each target adds, from a second build
        of ``targets`` targets (linear in targets: shared/CUDA.md)."""
        return (self.weighted - 1) / (targets - 1)


def _units(edges: Iterable[Edge]) -> dict[str, float]:
    return {o: e.seconds for e in edges if e.cuda for o in e.outputs if o.endswith(_CUDA_OBJECT)}


def unit_growth(one: Sequence[Edge], more: Sequence[Edge]) -> Growth:
    """The CUDA units of ``more`` paired by output name with those of ``one``; a unit only one
    build has (a build stopped early) is left out."""
    first, second = _units(one), _units(more)
    pairs = [(first[o], second[o]) for o in sorted(second) if o in first and first[o] > 0]
    if not pairs:
        raise DataError(
            "the two ninja logs share no CUDA unit (no '*.cu.o' output in both)",
            hint="give two builds of the same sources for different target counts",
        )
    weighted = sum(b for _, b in pairs) / sum(a for a, _ in pairs)
    return Growth(len(pairs), weighted, statistics.median(b / a for a, b in pairs))


class MeasuredCost(NamedTuple):
    """A package's build minutes on its reference machine (base + per target), and its longest
    unit's (one core), fitted from a one-target build and the growth its units showed."""

    base_minutes: float
    per_target_minutes: float
    longest_base_minutes: float
    longest_per_target_minutes: float

    def minutes(self, targets: int) -> float:
        return self.base_minutes + targets * self.per_target_minutes

    def longest(self, targets: int) -> float:
        return self.longest_base_minutes + targets * self.longest_per_target_minutes


def measured_cost(one: BuildFigures, growth: Growth, targets: int, cores: int) -> MeasuredCost:
    """The cost model of a build of 1 target (``one``) whose units grew ``growth`` at
    ``targets`` targets, on ``cores`` cores kept busy: the host part does not grow with the
    target count, each CUDA unit grows linearly (module docstring); minutes = CPU / cores."""
    p = growth.per_target_share(targets)
    per_core = 60 * cores
    return MeasuredCost(
        base_minutes=(one.host_s + one.cuda_s * (1 - p)) / per_core,
        per_target_minutes=one.cuda_s * p / per_core,
        longest_base_minutes=one.longest_unit_s * (1 - p) / 60,
        longest_per_target_minutes=one.longest_unit_s * p / 60,
    )
