"""Benchmark: how long the commands that do not plan take to answer (issue 20, item 4).

Each command runs as a new process (``python3 -m capplan ...``) several times, interleaved with
the same command from a "before" tree when one is given, so both see the same machine load.
Prints min and median wall time per command, the ratio of the medians (before / after), and
the interpreter's own floor (``python3 -c pass``, which on this machine already imports
certifi through a site .pth file). Asserts nothing: tests/integration/test_imports.py checks
*what* these commands import, this script how long they take.

    python3 bench/bench_startup.py                          # the capplan on PYTHONPATH, 9 runs
    python3 bench/bench_startup.py --before /tmp/before/planner/src --runs 15

A "before" tree of an earlier commit: ``mkdir -p /tmp/before && git archive fe3f265 planner/src |
tar -x -C /tmp/before``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS: list[list[str]] = [
    ["--version"],
    ["--help"],
    ["gpus", "RTX 3090"],
    ["caps"],
    ["explain", "8.6", "--device", "RTX 4090"],
    ["detect"],  # no GPU here: it answers before it would plan
    ["inspect", "/bin/true"],
    ["verify", "/bin/true", "--expect", "8.6"],
]
AFTER = str(Path(__file__).resolve().parents[1] / "planner" / "src")


def once(src: str | None, args: list[str], cwd: str) -> float:
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("CAPPLAN_CONFIG", None)
    if src is not None:
        env["PYTHONPATH"] = src
    argv = [sys.executable, "-m", "capplan", *args] if args else [sys.executable, "-c", "pass"]
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _absolute(path: str) -> str:
    return os.pathsep.join(os.path.abspath(p) for p in path.split(os.pathsep) if p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--after", default=os.environ.get("PYTHONPATH") or AFTER)
    parser.add_argument("--before", default=None, help="planner/src of an earlier tree")
    parser.add_argument("--runs", type=int, default=9)
    opts = parser.parse_args()
    # The commands run in a temporary folder: a relative PYTHONPATH (planner/src) would find no
    # capplan there and measure whichever one is installed instead.
    opts.after = _absolute(opts.after)
    opts.before = _absolute(opts.before) if opts.before else None
    rows: list[tuple[str, list[float], list[float]]] = []
    with tempfile.TemporaryDirectory() as cwd:  # no capplan.toml above: the embedded plan
        for args in [[], *COMMANDS]:
            after: list[float] = []
            before: list[float] = []
            for _ in range(opts.runs):
                if opts.before is not None:
                    before.append(once(opts.before, args, cwd))
                after.append(once(opts.after, args, cwd))
            label = "python3 -c pass" if not args else "capplan " + " ".join(args)
            rows.append((label, after, before))
    head = f"{'command':<42} {'min ms':>7} {'median ms':>9}"
    if opts.before is not None:
        head += f" {'before min':>10} {'before median':>13} {'ratio':>6}"
    print(head)
    for label, after, before in rows:
        line = f"{label:<42} {min(after) * 1000:>7.0f} {statistics.median(after) * 1000:>9.0f}"
        if before:
            ratio = statistics.median(before) / statistics.median(after)
            line += (
                f" {min(before) * 1000:>10.0f} {statistics.median(before) * 1000:>13.0f}"
                f" {ratio:>5.2f}x"
            )
        print(line)
    print(f"{opts.runs} runs each, interleaved; ratio = before median / after median")
    print("goal (issue 20): gpus, caps, explain, detect at most 150 ms median")


if __name__ == "__main__":
    main()
