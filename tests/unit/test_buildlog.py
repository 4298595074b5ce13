"""A ninja log read from outside (issue 40): the figures of a real build, and one clear line
(exit 6, no traceback) for a log that is malformed, huge, not UTF-8 or no regular file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from capplan.adapters.ninja_log import read_ninja_log
from capplan.core.planning.buildlog import (
    build_figures,
    measured_cost,
    parse_ninja_log,
    unit_growth,
)
from capplan.errors import DataError, ExitCode

REPO = Path(__file__).resolve().parents[2]
BUILDS = REPO / "bench" / "data" / "builds"
HEADER = "# ninja log v7\n"


def _log(*lines: str) -> str:
    return HEADER + "".join(line + "\n" for line in lines)


def test_an_edge_with_several_outputs_is_one_edge_and_a_rebuild_replaces_its_line() -> None:
    text = _log(
        "0\t1000\t1\ta.cu.o\taa",
        "0\t4000\t1\tb.cpp.o\tbb",
        "4000\t4500\t1\tlib.so.1\tcc",
        "4000\t4500\t1\tlib.so\tcc",  # one link, two outputs: one edge
        "0\t9000\t1\ta.cu.o\tdd",  # a.cu.o rebuilt: its later line counts
    )
    edges = parse_ninja_log(text)
    assert [(e.start_ms, e.end_ms, e.outputs) for e in edges] == [
        (0, 4000, ("b.cpp.o",)),
        (4000, 4500, ("lib.so", "lib.so.1")),
        (0, 9000, ("a.cu.o",)),
    ]
    f = build_figures(edges)
    assert (f.edges, f.wall_s, f.cpu_s, f.cuda_units, f.cuda_s, f.host_s) == (
        3,
        9.0,
        13.5,
        1,
        9.0,
        4.5,
    )
    assert (f.longest_unit, f.longest_unit_s) == ("a.cu.o", 9.0)


def test_growth_pairs_units_by_name_and_the_model_extrapolates_linearly() -> None:
    one = parse_ninja_log(
        _log("0\t10000\t1\ta.cu.o\t1", "0\t30000\t1\tb.cu.o\t2", "0\t6000\t1\th.o\t3")
    )
    # Two targets: a grew 2x, b 1.5x; c only in the second build (left out).
    two = parse_ninja_log(
        _log("0\t20000\t1\ta.cu.o\t1", "0\t45000\t1\tb.cu.o\t2", "0\t5\t1\tc.cu.o\t4")
    )
    g = unit_growth(one, two)
    assert (g.pairs, g.weighted, g.median) == (2, 65 / 40, 1.75)
    model = measured_cost(build_figures(one), g, 2, 1)
    p = 25 / 40  # each target adds 62.5% of a unit's one-target time
    assert model.minutes(1) == pytest.approx((6 + 40) / 60)
    assert model.minutes(9) == pytest.approx((6 + 40 * (1 - p + 9 * p)) / 60)
    # The longest unit (b, 30 s) grows the same way and no core count splits it.
    assert model.longest(9) == pytest.approx(30 * (1 - p + 9 * p) / 60)
    with pytest.raises(DataError, match="share no CUDA unit"):
        unit_growth(one, parse_ninja_log(_log("0\t1\t1\tz.cu.o\t9")))


def test_the_real_builds() -> None:
    one = read_ninja_log(BUILDS / "llama-cpp-b1-sm86-16core.ninja_log")
    f = build_figures(one)
    # shared/data/builds/README.md: 225.4 s wall, 144 CUDA units summing to 2,903 s, the
    # slowest 75.2 s (its 393 edges and 3,513 CPU-s count the 7 symlink outputs of the
    # libraries' link edges apart, and leave out 6.6 s: ours are 392 and 3,519.6).
    assert (round(f.wall_s, 1), f.cuda_units, round(f.cuda_s), round(f.longest_unit_s, 1)) == (
        225.4,
        144,
        2903,
        75.2,
    )
    assert f.edges == 392 and round(f.parallelism, 1) == 15.6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1: '' is not a ninja log header"),
        ("# ninja log v3\n", "line 1: '# ninja log v3' is not a ninja log header"),
        ("hello\n", "is not a ninja log header"),
        (_log("1\t2\t3\tout"), "line 2: 4 tab-separated fields, not 5"),
        (_log("1\t2\t3\tout\th\textra"), "line 2: 6 tab-separated fields, not 5"),
        (_log("0\t1\t1\ta\th", "x\t2\t3\tout\th"), "line 3: start 'x' or end '2' is no ms"),
        (_log("-1\t2\t3\tout\th"), "start '-1' or end '2' is no ms"),
        (_log("1" * 40 + "\t2\t3\tout\th"), "is no ms"),
        (_log("5\t2\t3\tout\th"), "line 2: ends (2 ms) before it starts (5 ms)"),
        (_log("1\t2\t3\t\th"), "line 2: no output path"),
        (_log("1\t2\t3\t" + "o" * 70_000 + "\th"), "line 2: a line of 70,0"),
        (_log("1\t2\t3\tout\x1b[2J\th", "x"), "line 3: 1 tab-separated fields"),
        (HEADER, "the ninja log has no build steps"),
    ],
)
def test_a_malformed_log_is_one_line(text: str, message: str) -> None:
    with pytest.raises(DataError) as caught:
        build_figures(parse_ninja_log(text, "build/.ninja_log"))
    line = caught.value.one_line()
    assert message in line and "\n" not in line and "\x1b" not in line
    assert caught.value.exit_code == ExitCode.DATA


def test_files_that_are_no_ninja_log(tmp_path: Path) -> None:
    latin = tmp_path / "latin1.ninja_log"
    latin.write_bytes(HEADER.encode() + b"0\t1\t1\tcaf\xe9.o\th\n")
    with pytest.raises(DataError, match=r"line 2: byte 24 is not UTF-8"):
        read_ninja_log(latin)
    big = tmp_path / "big.ninja_log"
    big.write_bytes(HEADER.encode() + b"0\t1\t1\ta.o\th\n" * 100)
    with pytest.raises(DataError, match=r"larger than 1 KiB, the most capplan reads here"):
        read_ninja_log(big, limit=1024)
    with pytest.raises(DataError, match=r"no such ninja log: .*missing"):
        read_ninja_log(tmp_path / "missing")
    with pytest.raises(DataError, match=r"cannot read ninja log .*: a folder"):
        read_ninja_log(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match=r"FIFO"):
        read_ninja_log(fifo)  # returns at once: no writer is waited for


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "planner" / "src")}
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "bench_costs.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_bench_reads_the_logs_and_refuses_a_bad_one(tmp_path: Path) -> None:
    one = str(BUILDS / "llama-cpp-b1-sm86-16core.ninja_log")
    two = str(BUILDS / "llama-cpp-b2-sm80-sm86-16core-partial.ninja_log")
    done = _bench("--ninja-log", one, "--ninja-log", two, "--targets", "1", "2")
    assert done.returncode == 0, done.stderr
    # Measured 3.76 min against the model's 3.67 on 16 cores; the paired units' growth.
    assert "| 3.76 |" in done.stdout and "| 3.67 | -2.3% |" in done.stdout
    assert "2 targets over 1: 1.78x (time-weighted), median 1.56x" in done.stdout
    assert "partial (111 of 144 units)" in done.stdout
    bad = tmp_path / "bad.ninja_log"
    bad.write_bytes(HEADER.encode() + b"0\t1\n\xff\n")
    failed = _bench("--ninja-log", str(bad))
    assert failed.returncode == ExitCode.DATA
    assert failed.stderr.count("\n") == 1 and "Traceback" not in failed.stderr
    assert failed.stderr.startswith("bench_costs.py: error: ninja log ")
