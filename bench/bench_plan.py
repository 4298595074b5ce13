"""Benchmark: plan + matrix for a synthetic package universe (issue "Planner", Performance).

A synthetic knowledge base of N packages with a realistic dependency shape (10% capability-
independent base libraries; every other package builds against 1-3 earlier ones) is planned
for a fleet of 14 GPU capabilities plus one extra arch-specific target (15 capabilities),
with half the packages pinned to CUDA 12.8 and half on 12.9 (2 CUDA versions), then turned
into a scheduled matrix on 64 runners and rendered as the JSON text `capplan matrix --format
json` prints. The two-system row (``2000:2``) plans the same universe for x86_64-linux and
aarch64-linux: 9.0, 10.0 and 12.1 move to aarch64 (Grace, GB10) beside a Jetson Orin (8.7), so
rules run per system, aarch64 gets Jetson and SBSA redistributable jobs, and the schedule keeps
one runner pool per system. The mixed-vendor row (``2000:1:amd``) adds three AMD GPUs (MI300X,
RX 7900 XTX, Strix Halo: gfx942, gfx1100, gfx1151) and a ROCm build (gpuTargets, linking
rocBLAS and hipBLASLt) for every capability-dependent package, so the AMD rules run beside the
CUDA ones for the same universe. Each size runs in a fresh process so peak RSS is honest; the
pipeline runs several times there and the table shows the best and the median run (this
machine's CPU time varies by tens of percent from run to run; the best run is the least
disturbed one). With both 2,000 and 20,000 in the run, a reference row follows: a loop with
nothing superlinear in it over the same job counts (one dict per job, lookups in shuffled order),
whose ratio is what this machine's memory system alone makes of 10x the data. Prints a table;
asserts nothing.

    python3 bench/bench_plan.py            # 200, 2,000 and 20,000 packages, and 2,000 on 2 systems
    python3 bench/bench_plan.py 2000       # one size
    python3 bench/bench_plan.py 2000:2     # 2,000 packages on two systems
    python3 bench/bench_plan.py 2000:1:amd # 2,000 packages, NVIDIA and AMD GPUs
"""

from __future__ import annotations

import dataclasses
import gc
import json
import random
import resource
import statistics
import subprocess
import sys
import time

FLEET = ["5.0", "5.2", "6.0", "6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3",
         "12.0", "12.1"]  # fmt: skip
RUNNERS = 64


ARM = ["9.0", "10.0", "12.1"]  # the two-system row puts these on aarch64-linux, plus Jetson 8.7
AMD_FLEET = ["MI300X", "RX 7900 XTX", "Strix Halo"]  # the mixed fleet, beside 14 NVIDIA


def synthetic(n: int, systems: int = 1, amd: bool = False) -> tuple[object, object]:
    from capplan.adapters.kb import load_kb
    from capplan.core.families.cuda.kb import CudaPackageInfo, Limits
    from capplan.core.families.rocm.kb import AmdKnowledgeBase, RocmBuild, RocmCost
    from capplan.core.model.kb import Cost
    from capplan.core.planning.config import config_from_mapping

    kb = load_kb()
    rng = random.Random(n)
    packages: dict[str, CudaPackageInfo] = {}
    limits = Limits(source="synthetic")
    base = max(1, n // 10)
    for i in range(n):
        name = f"pkg{i:05d}"
        independent = i < base
        depends = (
            ()
            if i == 0
            else tuple(sorted({f"pkg{rng.randrange(0, i):05d}" for _ in range(rng.randint(1, 3))}))
        )
        if independent:
            depends = tuple(d for d in depends if int(d[3:]) < base)
        packages[name] = CudaPackageInfo(
            attr=f"synthetic.{name}",
            kind="capability-independent" if independent else "capability-dependent",
            depends=depends,
            ptx="forward-compat",
            limits=limits,
            cost=Cost(
                base_minutes=rng.uniform(2, 60),
                per_target_minutes=0 if independent else rng.uniform(1, 20),
                base_size_mb=rng.uniform(1, 200),
                per_target_size_mb=0 if independent else rng.uniform(1, 50),
                source="synthetic",
            ),
            source="synthetic",
        )
    kb = dataclasses.replace(kb, packages=packages)
    amd_part = kb.part(AmdKnowledgeBase)
    if amd and amd_part is not None:
        builds = {
            name: RocmBuild(
                attr=info.attr,
                how="gpu-targets",
                override=name,
                targets=None,
                depends=(),
                links=("rocblas", "hipblaslt"),
                big_parallel=False,
                cost=RocmCost(
                    base_minutes=info.cost.base_minutes,
                    per_target_minutes=info.cost.per_target_minutes,
                    base_size_mb=info.cost.base_size_mb,
                    per_target_size_mb=info.cost.per_target_size_mb,
                    source="synthetic",
                ),
                source="synthetic",
            )
            for name, info in packages.items()
            if info.kind == "capability-dependent"
        }
        parts = [
            dataclasses.replace(amd_part, builds=builds) if p is amd_part else p for p in kb.parts
        ]
        kb = dataclasses.replace(kb, parts=tuple(parts))
    fleet: dict[str, object] = {"gpus": FLEET + (AMD_FLEET if amd else [])}
    policy: dict[str, object] = {"cuda": ["12.9", "12.8"], "runners": RUNNERS}
    if systems == 2:
        fleet = {"gpus": [*FLEET, "8.7"], "systems": {c: "aarch64-linux" for c in ARM}}
        policy["systems"] = ["x86_64-linux", "aarch64-linux"]
    config = config_from_mapping(
        {
            "fleet": fleet,
            "packages": {
                name: ({"cuda": "12.8"} if j % 2 else {}) | {"extra": ["9.0a"]}
                for j, name in enumerate(packages)
                if packages[name].kind == "capability-dependent"
            },
            "policy": policy,
        },
        origin="synthetic",
    )
    return kb, config


def run_one(n: int, repeats: int, systems: int = 1, amd: bool = False) -> dict[str, object]:
    from capplan.cli.output import to_json_text
    from capplan.core.planning.matrix import build_matrix
    from capplan.core.planning.planner import make_plan

    kb, config = synthetic(n, systems, amd)
    runs: list[dict[str, float]] = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        plan = make_plan(kb, config)  # type: ignore[arg-type]
        planned = time.perf_counter()
        matrix = build_matrix(plan, RUNNERS)
        text = to_json_text(matrix.to_json())
        done = time.perf_counter()
        runs.append(
            {"plan_s": planned - start, "matrix_s": done - planned, "total_s": done - start}
        )
        jobs, ratio = len(plan.variants), max(p.ratio for p in matrix.pools.values())
        # A variant's CUDA release: its CudaSpec's since issue 42, the Variant's before (the
        # benchmark runs on trees before and after). No name outlives the run: a variable
        # holding this run's variants kept them alive through the next run's peak.
        cudas = {
            str(c)
            for c in (
                getattr(v, "cuda", None) or getattr(v.spec, "version", None) for v in plan.variants
            )
            if c is not None
        }
        amd_jobs = sum(1 for v in plan.variants if v.vendor == "amd")
        del plan, matrix, text  # one run's objects at a time: peak RSS is one run's
    best = min(runs, key=lambda r: r["total_s"])
    return {
        "packages": n,
        "systems": systems,
        "vendors": "nvidia+amd" if amd else "nvidia",
        "jobs": jobs,
        "amd_jobs": amd_jobs,
        "cuda_versions": len(cudas),
        **best,
        "median_total_s": statistics.median(r["total_s"] for r in runs),
        "runs": len(runs),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "makespan_over_lb": ratio,
    }


def reference_loop(jobs: int, repeats: int = 3) -> float:
    """Best seconds of a plainly linear pass over ``jobs`` records: build one dict per job, index
    them by name, then follow each job's edge in a shuffled order (as planning and scheduling
    visit jobs). No algorithm here grows faster than the work, so its 10x-jobs ratio is what this
    machine's memory system alone makes of 10x the data."""
    gc.disable()
    try:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            rows = [
                {"name": f"job-{i}", "needs": (f"job-{(i * 7) % jobs}",), "cost": i * 0.5}
                for i in range(jobs)
            ]
            by_name = {r["name"]: r for r in rows}
            order = list(range(jobs))
            random.Random(1).shuffle(order)
            total = 0.0
            for i in order:
                for need in rows[i]["needs"]:
                    total += by_name[need]["cost"]
            best = min(best, time.perf_counter() - start)
            del rows, by_name, order
        return best
    finally:
        gc.enable()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--reference":
        print(json.dumps(reference_loop(int(sys.argv[2]))))
        return
    if len(sys.argv) > 5 and sys.argv[1] == "--one":
        args = sys.argv[2:]
        print(json.dumps(run_one(int(args[0]), int(args[1]), int(args[2]), args[3] == "amd")))
        return
    sizes = sys.argv[1:] or ["200", "2000", "20000", "2000:2", "2000:1:amd"]
    print(
        f"{'packages':>9} {'sys':>3} {'vendors':>10} {'jobs':>7} {'AMD':>5} {'CUDA':>4} "
        f"{'plan s':>7} {'matrix s':>8} "
        f"{'total s':>7} "
        f"{'median s':>8} {'runs':>4} {'peak RSS MB':>11} {'makespan/LB':>11}"
    )
    totals: dict[str, tuple[float, float]] = {}  # size -> (best, median) total seconds
    for size in sizes:
        n_text, _, rest = size.partition(":")
        systems, _, vendors = rest.partition(":")
        n = int(n_text)
        repeats = str(5 if n <= 2000 else 3)  # several at every size: the ratio compares like
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(n), repeats, systems or "1", vendors or "-"],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout)
        totals[size] = (r["total_s"], r["median_total_s"])
        print(
            f"{r['packages']:>9} {r['systems']:>3} {r['vendors']:>10} {r['jobs']:>7} "
            f"{r['amd_jobs']:>5} {r['cuda_versions']:>4} "
            f"{r['plan_s']:>7.2f} "
            f"{r['matrix_s']:>8.2f} {r['total_s']:>7.2f} {r['median_total_s']:>8.2f} "
            f"{r['runs']:>4} {r['peak_rss_mb']:>11.0f} "
            f"{r['makespan_over_lb']:>11.4f}"
        )
    if "2000" in totals and "20000" in totals:
        (best2, med2), (best20, med20) = totals["2000"], totals["20000"]
        print(
            f"scaling, one system: 20,000 / 2,000 packages = {best20 / best2:.2f}x (best runs), "
            f"{med20 / med2:.2f}x (medians); goal at most 10.5x"
        )
        # The same job counts through a loop with nothing superlinear in it, each in a fresh
        # process: the floor this machine puts under the ratio above.
        small, large = (
            float(
                subprocess.run(
                    [sys.executable, __file__, "--reference", str(jobs)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            for jobs in (38_859, 388_262)
        )
        print(
            f"reference, a linear loop over the same job counts (one dict per job, shuffled "
            f"lookups): {large / small:.2f}x ({small:.3f} s -> {large:.3f} s)"
        )
    print("plan: make_plan; matrix: build_matrix + the JSON text of `capplan matrix --format json`")
    print(
        "targets (2,000 packages, one or two systems, NVIDIA or both vendors): total < 2 s, "
        "peak RSS < 500 MB, makespan within 5% of LB (two systems: the worse pool's)"
    )


if __name__ == "__main__":
    main()
