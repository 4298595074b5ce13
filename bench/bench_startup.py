"""Benchmark: how long the commands that do not plan take to answer, above the interpreter's
floor (issue 20, item 4; issue 42: paired with the floor, run by run).

Each command runs as a new process (``python3 -m capplan ...``) right after the floor,
``python3 -c 'import click'`` (the interpreter, its site files and click, which every command
imports first), so floor and command see the same machine load: A B A B, never all A then all
B. When a "before" tree is given, its run of the command joins each round (floor, then after and
before, taking turns at going first).
Prints, per command, the median of the floor, of the command, and the median of the paired
differences (command - floor of the same round), which one slow run cannot move much; then
the goals: ``gpus "RTX 3090"`` at most +100 ms and ``inspect libtorch_cuda.so`` at most +60 ms
above the floor. Asserts nothing: tests/integration/test_imports.py checks *what* these
commands import, this script how long they take.

Byte-code caches as a user has them: each tree is compiled first (``python3 -m compileall``)
and the timed processes run without ``PYTHONDONTWRITEBYTECODE`` (this workplace sets it, so
without this every start would compile every module again).

    python3 bench/bench_startup.py                          # the capplan on PYTHONPATH, 11 runs
    python3 bench/bench_startup.py --before /tmp/before/planner/src --runs 15

A "before" tree of an earlier commit: ``mkdir -p /tmp/before && git archive 002bacb planner/src |
tar -x -C /tmp/before``. The inspected file is libtorch_cuda.so (503 MB) from the torch 2.14.1
wheel (``--wheel``, else /opt/pypi-more/files or /tmp/torchwheel), extracted once to
/tmp/capplan-bench/ as bench/bench_inspect.py does; without a wheel that row is left out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

WORK = Path("/tmp/capplan-bench")
TORCH_MEMBER = "torch/lib/libtorch_cuda.so"
WHEEL_FOLDERS = (Path("/opt/pypi-more/files"), Path("/tmp/torchwheel"))
INSPECTED = "libtorch_cuda.so"  # stands for the extracted library in COMMANDS

COMMANDS: list[list[str]] = [
    ["--version"],
    ["--help"],
    ["gpus", "RTX 3090"],
    ["caps"],
    ["explain", "8.6", "--device", "RTX 4090"],
    ["detect"],  # no GPU here: it answers before it would plan
    ["inspect", INSPECTED],
    ["verify", "/bin/true", "--expect", "8.6"],
]
# Milliseconds above the floor (issue 42's done-when).
GOALS: dict[str, float] = {"gpus RTX 3090": 100.0, f"inspect {INSPECTED}": 60.0}
FLOOR = [sys.executable, "-c", "import click"]
AFTER = str(Path(__file__).resolve().parents[1] / "planner" / "src")


def _env(src: str | None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("CAPPLAN_CONFIG", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # read the .pyc files compileall wrote
    if src is not None:
        env["PYTHONPATH"] = src
    return env


def once(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Wall time and CPU time (user + system, from the child's rusage) of one run: on a
    shared machine the wall time carries the other users' load, the CPU time much less."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = 0  # reaped by wait4: Popen must not wait for it again
    return wall, usage.ru_utime + usage.ru_stime


def _absolute(path: str) -> str:
    return os.pathsep.join(os.path.abspath(p) for p in path.split(os.pathsep) if p)


def _compile(src: str) -> None:
    for folder in src.split(os.pathsep):
        subprocess.run([sys.executable, "-m", "compileall", "-q", folder], check=False)


def torch_library(explicit: Path | None) -> Path | None:
    """libtorch_cuda.so from the torch wheel, extracted once (None without a wheel)."""
    target = WORK / "libtorch_cuda.so"
    if target.is_file():
        return target
    wheels = [explicit] if explicit else [w for f in WHEEL_FOLDERS for w in f.glob("torch-*.whl")]
    for wheel in sorted(w for w in wheels if w is not None):
        with zipfile.ZipFile(wheel) as zf:
            if TORCH_MEMBER not in zf.namelist():
                continue
            WORK.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            with zf.open(TORCH_MEMBER) as src, tmp.open("wb") as dst:
                shutil.copyfileobj(src, dst, 16 << 20)
            os.replace(tmp, target)
            return target
    return None


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def _plus(seconds: float) -> str:
    return f"{seconds * 1000:+.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--after", default=os.environ.get("PYTHONPATH") or AFTER)
    parser.add_argument("--before", default=None, help="planner/src of an earlier tree")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--wheel", type=Path, default=None, help="a torch CUDA wheel")
    opts = parser.parse_args()
    # The commands run in a temporary folder: a relative PYTHONPATH (planner/src) would find no
    # capplan there and measure whichever one is installed instead.
    trees = {"after": _absolute(opts.after)}
    if opts.before:
        trees["before"] = _absolute(opts.before)
    for src in trees.values():
        _compile(src)
    envs = {name: _env(src) for name, src in trees.items()}
    floor_env = _env(None)
    library = torch_library(opts.wheel)
    if library is None:
        print("no torch wheel with libtorch_cuda.so: the inspect row is left out", file=sys.stderr)
    Runs = list[tuple[float, float]]
    rows: list[tuple[str, Runs, dict[str, Runs]]] = []
    with tempfile.TemporaryDirectory() as cwd:  # no capplan.toml above: the embedded plan
        for args in COMMANDS:
            if INSPECTED in args and library is None:
                continue
            label = " ".join(args)
            argv = [sys.executable, "-m", "capplan"]
            argv += [str(library) if a == INSPECTED else a for a in args]
            floors: Runs = []
            timed: dict[str, Runs] = {name: [] for name in trees}
            for round_ in range(opts.runs):
                floors.append(once(FLOOR, floor_env, cwd))
                # The trees take turns at running right after the floor (whatever warms the
                # caches for the second run favours each tree in half of the rounds).
                order = list(envs.items())
                for name, env in reversed(order) if round_ % 2 else order:
                    timed[name].append(once(argv, env, cwd))
            rows.append((label, floors, timed))
    head = f"{'capplan ...':<34} {'floor':>5} {'after':>5} {'+ms':>4} {'+cpu':>4}"
    if "before" in trees:
        head += f" {'before':>6} {'+ms':>4} {'+cpu':>4}"
    print(head + f" {'goal':>5}")
    verdicts: list[str] = []
    for label, floors, timed in rows:
        line = f"{label:<34} {_ms(statistics.median(w for w, _ in floors)):>5}"
        plus: dict[str, float] = {}
        for name in trees:
            runs = timed[name]
            plus[name] = _paired(runs, floors, 0)
            cpu = _paired(runs, floors, 1)
            width = 5 if name == "after" else 6
            line += f" {_ms(statistics.median(w for w, _ in runs)):>{width}}"
            line += f" {_plus(plus[name]):>4} {_plus(cpu):>4}"
        goal = GOALS.get(label)
        line += f" {'' if goal is None else f'+{goal:.0f}':>5}"
        print(line)
        if goal is not None:
            met = plus["after"] * 1000 <= goal
            before = f" (before: {_plus(plus['before'])})" if "before" in plus else ""
            verdicts.append(
                f"  {label}: {_plus(plus['after'])} ms above the floor{before}, goal "
                f"+{goal:.0f}: " + ("met" if met else "NOT met")
            )
    print(
        f"{opts.runs} paired runs each (floor = python3 -c 'import click', then each tree); "
        "median ms of wall time; +ms / +cpu = median of (command - floor of the same round), "
        "wall and CPU time (user + system)"
    )
    print("goals (issue 42), on the wall time:")
    print("\n".join(verdicts))


def _paired(runs: list[tuple[float, float]], floors: list[tuple[float, float]], i: int) -> float:
    """The median of the differences run by run (command minus the floor run just before)."""
    return statistics.median(r[i] - f[i] for r, f in zip(runs, floors, strict=True))


if __name__ == "__main__":
    main()
