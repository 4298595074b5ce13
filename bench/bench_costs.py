"""Benchmark: what nvcc really spends on a package's CUDA sources for 1, 2, 4 and 9 targets
(issue 34, the cost side), against the knowledge base's model of that cost.

The sources are llama.cpp's ggml-cuda backend from the llama-cpp-python sdist (`pip download
--no-binary :all: --no-deps llama-cpp-python`: 189 translation units, 68 kernels and 121
template instances); cuBLAS' headers, which ggml-cuda includes, come from the nvidia-cublas
wheel (`pip download --no-deps --only-binary :all: "nvidia-cublas>=13,<14"`, its
nvidia/cu13/include). A sample of translation units (the heaviest instance kinds, mmq and
flash attention, and kernels picked by a fixed seed) is compiled with nvcc 13 as ggml's CMake
compiles them (-O3 -use_fast_math -extended-lambda -std=c++17, one -gencode per target), each
size in turn and the order rotated every repeat, so this machine's changing load falls on every
size alike. Each nvcc process is measured by wait4: CPU time (user + system, its cicc, ptxas and
host compiler included), wall time, peak memory and the object's size. CPU time is the figure
the model is fitted to: it moves far less with other load than wall time does.

The sample is scaled to the package by counting translation units: each kind's mean times the
number of units of that kind. The model is the knowledge base's: `base + per_target x targets`
(least squares over the sizes); the table prints measured against predicted for each size and
the fat-to-single ratio (9 targets over 1) both ways. Minutes are CPU minutes divided by the
builder's cores (--cores, default 16, the knowledge base's reference builder), as a build that
keeps every core busy takes them. Prints; asserts nothing.

    python3 bench/bench_costs.py --src DIR/vendor/llama.cpp --cublas-include DIR/include
    python3 bench/bench_costs.py --from bench/data/costs-llama-cpp.json   # refit, no compile

A real build's ninja log (issue 40) is the other measurement: ``--ninja-log FILE`` (one build,
its target count ``--targets N``, default 1) prints the log's wall and CPU minutes, host and
CUDA parts and longest unit against capplan's prediction for the package (``--package``,
default llama-cpp) on that many cores (``--cores``); a second ``--ninja-log`` of the same
sources for more targets pairs the CUDA units by output name, prints their growth and the
cost model the two logs give (the knowledge base's llama-cpp entry), with its extrapolation:

    python3 bench/bench_costs.py --ninja-log bench/data/builds/llama-cpp-b1-sm86-16core.ninja_log \
        --ninja-log bench/data/builds/llama-cpp-b2-sm80-sm86-16core-partial.ninja_log --targets 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = {
    1: ["8.6"],
    2: ["8.0", "8.6"],
    4: ["7.5", "8.0", "8.6", "8.9"],
    9: ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "12.0", "12.1"],
}
FLAGS = ["-std=c++17", "-O3", "-use_fast_math", "-extended-lambda", "-DNDEBUG"]


def units(src: Path) -> dict[str, list[Path]]:
    """ggml-cuda's translation units by kind: kernels, and template instances by family."""
    cuda = src / "ggml" / "src" / "ggml-cuda"
    kinds: dict[str, list[Path]] = {"kernel": sorted(cuda.glob("*.cu"))}
    for path in sorted((cuda / "template-instances").glob("*.cu")):
        family = path.name.split("-instance")[0]
        kinds.setdefault(f"instance:{family}", []).append(path)
    return kinds


def sample(kinds: dict[str, list[Path]], kernels: int, seed: int) -> dict[str, list[Path]]:
    """One unit of each instance family (the first by name) and ``kernels`` kernels."""
    rng = random.Random(seed)
    chosen = {kind: paths[:1] for kind, paths in kinds.items() if kind != "kernel"}
    chosen["kernel"] = sorted(rng.sample(kinds["kernel"], kernels))
    return chosen


def gencode(capability: str) -> list[str]:
    arch = capability.replace(".", "")
    return ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]


def compile_one(
    nvcc: str, src: Path, include: Path, unit: Path, targets: list[str]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "unit.o"
        argv = [nvcc, "-c", str(unit), "-o", str(obj), *FLAGS,
                f"-I{src / 'ggml' / 'include'}", f"-I{src / 'ggml' / 'src'}",
                f"-I{src / 'ggml' / 'src' / 'ggml-cuda'}", f"-I{include}",
                *[flag for t in targets for flag in gencode(t)]]  # fmt: skip
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        error = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.returncode != 0:
            raise SystemExit(f"nvcc failed on {unit.name}: {shlex.join(argv)}\n{error[-2000:]}")
        return {
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "wall_s": round(wall, 3),
            "peak_mb": round(usage.ru_maxrss / 1024, 1),
            "object_bytes": obj.stat().st_size,
        }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    src, include = Path(args.src), Path(args.cublas_include)
    kinds = units(src)
    chosen = sample(kinds, args.kernels, args.seed)
    version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True, check=True)
    runs: list[dict[str, Any]] = []
    order = list(SIZES)
    for repeat in range(args.repeats):
        rotated = order[repeat % len(order) :] + order[: repeat % len(order)]
        for size in rotated:
            for kind, paths in chosen.items():
                for unit in paths:
                    result = compile_one(args.nvcc, src, include, unit, SIZES[size])
                    runs.append({"repeat": repeat, "size": size, "kind": kind,
                                 "unit": unit.name, **result})  # fmt: skip
                    print(f"  {size} targets {unit.name}: {result['cpu_s']:.1f} s CPU, "
                          f"{result['peak_mb']:.0f} MB", file=sys.stderr, flush=True)  # fmt: skip
    return {
        "package": "llama-cpp",
        "source": "llama-cpp-python sdist (pip download --no-binary :all: --no-deps "
        "llama-cpp-python), vendor/llama.cpp/ggml/src/ggml-cuda",
        "nvcc": version.stdout.strip().splitlines()[-1],
        "flags": FLAGS,
        "sizes": SIZES,
        "units": {kind: len(paths) for kind, paths in kinds.items()},
        "sample": {kind: [p.name for p in paths] for kind, paths in chosen.items()},
        "command": "python3 bench/bench_costs.py " + " ".join(sys.argv[1:]),
        "runs": runs,
    }


def fit(data: dict[str, Any], cores: int) -> dict[str, Any]:
    """Scale the sample to the package and fit base + per_target x targets (CPU seconds)."""
    per: dict[tuple[str, int], list[float]] = {}
    peak: dict[int, float] = {}
    for run in data["runs"]:
        # One mean per unit and size first (repeats), then the kind's mean over its units.
        per.setdefault((run["kind"] + "|" + run["unit"], run["size"]), []).append(run["cpu_s"])
        peak[run["size"]] = max(peak.get(run["size"], 0.0), run["peak_mb"])
    sizes = sorted({int(s) for s in data["sizes"]})
    total: dict[int, float] = {}
    for size in sizes:
        by_kind: dict[str, list[float]] = {}
        for (key, s), values in per.items():
            if s == size:
                by_kind.setdefault(key.split("|")[0], []).append(statistics.mean(values))
        # Instance families were sampled one unit each: the family's count scales its mean;
        # a family not in the sample takes the mean of the instance families that were.
        instance_means = [statistics.mean(v) for k, v in by_kind.items() if k != "kernel"]
        seconds = 0.0
        for kind, count in data["units"].items():
            mean = (
                statistics.mean(by_kind[kind])
                if kind in by_kind
                else statistics.mean(instance_means)
            )
            seconds += count * mean
        total[size] = seconds
    n = len(sizes)
    mean_x = sum(sizes) / n
    mean_y = sum(total.values()) / n
    slope = sum((x - mean_x) * (total[x] - mean_y) for x in sizes) / sum(
        (x - mean_x) ** 2 for x in sizes
    )
    base = mean_y - slope * mean_x
    return {
        "total_cpu_s": total,
        "base_cpu_s": base,
        "per_target_cpu_s": slope,
        "base_minutes": base / cores / 60,
        "per_target_minutes": slope / cores / 60,
        "peak_mb": peak,
        "cores": cores,
    }


def report(data: dict[str, Any], model: dict[str, Any], kb: tuple[float, float] | None) -> None:
    units_total = sum(data["units"].values())
    sampled = sum(len(v) for v in data["sample"].values())
    print(f"{data['package']}: {sampled} of {units_total} translation units compiled with "
          f"{data['nvcc']}; {len(data['runs'])} nvcc runs")  # fmt: skip
    base, per = model["base_cpu_s"] / 60, model["per_target_cpu_s"] / 60
    print(f"fit (CPU): base {base:.1f} min + {per:.1f} min per target; on {model['cores']} "
          f"cores {model['base_minutes']:.2f} + {model['per_target_minutes']:.2f} min per "
          "target")  # fmt: skip
    cores = model["cores"]
    print(f"| targets | measured CPU min | measured min on {cores} cores | fitted | error | "
          "knowledge base before | largest nvcc peak MB |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, seconds in sorted(model["total_cpu_s"].items()):
        fitted = model["base_cpu_s"] + model["per_target_cpu_s"] * size
        before = "" if kb is None else f"{kb[0] + kb[1] * size:g} min"
        error = (fitted - seconds) / seconds
        print(f"| {size} | {seconds / 60:.1f} | {seconds / 60 / cores:.2f} | "
              f"{fitted / 60 / cores:.2f} | {error:+.1%} | {before} | "
              f"{model['peak_mb'][size]:.0f} |")  # fmt: skip
    totals = model["total_cpu_s"]
    measured = totals[9] / totals[1]
    predicted = (model["base_cpu_s"] + 9 * model["per_target_cpu_s"]) / (
        model["base_cpu_s"] + model["per_target_cpu_s"]
    )
    line = f"fat-to-single (9 over 1): measured {measured:.2f}, fitted model {predicted:.2f} " \
           f"({(predicted - measured) / measured:+.1%})"  # fmt: skip
    if kb is not None:
        before = (kb[0] + 9 * kb[1]) / (kb[0] + kb[1])
        line += f", knowledge base before {before:.2f} ({(before - measured) / measured:+.1%})"
    print(line)


def ninja_report(logs: list[str], targets: list[int], package: str, cores: int) -> int:
    """Measured against predicted for each ninja log; the model two logs give. Returns the
    exit status: a bad log is one line on stderr and its capplan exit code (6), no traceback."""
    from capplan.adapters.kb import load_kb
    from capplan.adapters.ninja_log import read_ninja_log
    from capplan.core.planning.buildlog import build_figures, measured_cost, unit_growth
    from capplan.errors import CapplanError

    try:
        edges = [read_ninja_log(Path(path)) for path in logs]
        figures = [build_figures(e) for e in edges]
        growth = unit_growth(edges[0], edges[1]) if len(edges) > 1 else None
    except CapplanError as exc:
        print(f"bench_costs.py: error: {exc.one_line()}", file=sys.stderr)
        return int(exc.exit_code)
    cost = load_kb().packages[package].cost
    print(f"{package}'s knowledge base: {cost.base_minutes:g} + {cost.per_target_minutes:g} min "
          f"per target on {cost.reference_cores} cores ({cost.basis}); longest unit "
          f"{cost.longest_unit_minutes} + {cost.longest_unit_per_target_minutes} min per "
          "target")  # fmt: skip
    print("| log | targets | edges | CUDA units | wall min | CPU min | host CPU min | CUDA CPU min "
          f"| parallelism | longest unit s | predicted min on {cores} cores | error |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path, n, f in zip(logs, targets, figures, strict=False):
        predicted = max(
            (cost.base_minutes + n * cost.per_target_minutes) * cost.reference_cores / cores,
            cost.longest_unit(n) or 0.0,
        )
        wall = f.wall_s / 60
        # A build stopped early (fewer CUDA units than the first) is no whole build to compare.
        partial = f.cuda_units < figures[0].cuda_units
        error = (
            f"partial ({f.cuda_units} of {figures[0].cuda_units} units)"
            if partial
            else (f"{(predicted - wall) / wall:+.1%}")
        )
        print(f"| {Path(path).name} | {n} | {f.edges} | {f.cuda_units} | {wall:.2f} | "
              f"{f.cpu_s / 60:.1f} | {f.host_s / 60:.1f} | {f.cuda_s / 60:.1f} | "
              f"{f.parallelism:.1f} | {f.longest_unit_s:.1f} | {predicted:.2f} | "
              f"{error} |")  # fmt: skip
    if growth is None:
        return 0
    k = targets[1]
    model = measured_cost(figures[0], growth, k, cores)
    p = growth.per_target_share(k)
    print(f"paired CUDA units: {growth.pairs}; {k} targets over 1: {growth.weighted:.2f}x "
          f"(time-weighted), median {growth.median:.2f}x; each target adds {p:.3f} of a unit's "
          "one-target time")  # fmt: skip
    print(f"model on {cores} cores: base {model.base_minutes:.2f} + {model.per_target_minutes:.2f}"
          f" min per target; longest unit {model.longest_base_minutes:.2f} + "
          f"{model.longest_per_target_minutes:.2f} min per target")  # fmt: skip
    print(f"| targets | CUDA CPU min | model min on {cores} cores | longest unit min |")
    print("|---:|---:|---:|---:|")
    for n in (1, 2, 4, 9):
        cuda = figures[0].cuda_s * (1 - p + p * n) / 60
        print(f"| {n} | {cuda:.1f} | {model.minutes(n):.2f} | {model.longest(n):.2f} |")
    print(f"9 targets over 1: {model.minutes(9) / model.minutes(1):.2f} (whole build), "
          f"{1 - p + 9 * p:.2f} (CUDA units)")  # fmt: skip
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", help="llama.cpp's root (vendor/llama.cpp in the sdist)")
    parser.add_argument("--cublas-include", help="the nvidia-cublas wheel's include folder")
    parser.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    parser.add_argument("--kernels", type=int, default=3, help="kernels in the sample")
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cores", type=int, default=16)
    parser.add_argument("--out", help="write the measurement here (JSON)")
    parser.add_argument("--from", dest="from_", help="refit a stored measurement")
    parser.add_argument("--ninja-log", action="append", default=[], metavar="FILE",
                        help="a real build's .ninja_log (twice: 1 target, then more)")  # fmt: skip
    parser.add_argument("--targets", nargs="+", type=int, default=[], metavar="N",
                        help="each --ninja-log's target count (default 1, 2)")  # fmt: skip
    parser.add_argument("--package", default="llama-cpp", help="the package the logs built")
    parser.add_argument("--kb-before", nargs=2, type=float, metavar=("BASE", "PER_TARGET"),
                        help="the knowledge base's minutes before, for the table")  # fmt: skip
    args = parser.parse_args()
    if args.ninja_log:
        if len(args.ninja_log) > 2:
            parser.error("give at most two --ninja-log files (1 target, then more)")
        targets = args.targets or [1, 2][: len(args.ninja_log)]
        if len(targets) != len(args.ninja_log) or min(targets) < 1:
            parser.error("give one --targets count (>= 1) per --ninja-log")
        if len(targets) == 2 and (targets[0] != 1 or targets[1] < 2):
            parser.error("the first --ninja-log is the 1-target build, the second has more")
        raise SystemExit(ninja_report(args.ninja_log, targets, args.package, args.cores))
    if args.from_:
        data = json.loads(Path(args.from_).read_text())
    else:
        if not (args.src and args.cublas_include):
            parser.error("give --src and --cublas-include, or --from FILE")
        data = measure(args)
        if args.out:
            Path(args.out).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    data["sizes"] = {int(k): v for k, v in data["sizes"].items()}
    model = fit(data, args.cores)
    report(data, model, tuple(args.kb_before) if args.kb_before else None)


if __name__ == "__main__":
    main()
