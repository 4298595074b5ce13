"""Benchmark: the size of `capplan report`'s page and how long writing it takes (issue 51).

Two plans: the embedded default plan, and an organisation's 4,200-job plan (300 CUDA packages
over 14 GPU generations, the knowledge base tests/integration/test_ci_github_scale.py builds,
named by CAPPLAN_KB_DIR). For each it prints the page's bytes and the seconds of the whole
command (`capplan report --output`, a fresh process: start-up, planning, the matrix, drawing,
the atomic write), the best of a few runs, beside the same plan's `capplan matrix --format
json` as the reference measured in the same run (the text the report is a view of), and the
Markdown of `matrix --format summary` against GitHub's 1 MiB. The issue's bounds: the default
page at most 1 MB, the 4,200-job page at most 10 MB, each written in at most 2 s. Asserts
nothing.

    python3 bench/bench_report.py
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KB = ROOT / "planner" / "src" / "capplan" / "kb"
GPUS = ["5.0", "5.2", "6.0", "6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3",
        "12.0", "12.1"]  # fmt: skip
RUNS = 3


def organisation(folder: Path, packages: int = 300) -> dict[str, str]:
    """A knowledge base with ``packages`` more CUDA packages and a capplan.toml building them."""
    kb = folder / "kb"
    kb.mkdir()
    for path in KB.iterdir():
        if path.is_file():
            shutil.copy(path, kb / path.name)
    data = json.loads((KB / "packages.json").read_text())
    rng = random.Random(34)
    for i in range(packages):
        depends = {f"org-{rng.randrange(i):03d}" for _ in range(rng.randint(0, 2))} if i else set()
        data["packages"][f"org-{i:03d}"] = {
            "attr": f"python3Packages.org-{i:03d}", "kind": "capability-dependent",
            "depends": sorted(depends), "ptx": "forward-compat",
            "limits": {"allow_from": None, "allow": None, "exclude": [], "min": None,
                       "max": None, "suffixes": ["", "a", "f"], "cuda": None, "source": "bench"},
            "cost": {"base_minutes": 5, "per_target_minutes": 3, "base_size_mb": 10,
                     "per_target_size_mb": 5, "source": "bench"},
            "big_parallel": False, "note": "", "source": "bench",
        }  # fmt: skip
    (kb / "packages.json").write_text(json.dumps(data))
    (folder / "capplan.toml").write_text(
        f"[fleet]\ngpus = {json.dumps(GPUS)}\n"
        + "".join(f"[packages.org-{i:03d}]\n" for i in range(packages))
        + '[policy]\nsystem = "x86_64-linux"\n'
    )
    return {"CAPPLAN_KB_DIR": str(kb)}


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, bytes]:
    best, out = float("inf"), b""
    for _ in range(RUNS):
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "capplan", *argv],
            cwd=cwd,
            env={**os.environ, **env},
            capture_output=True,
            check=True,
        )
        best = min(best, time.perf_counter() - start)
        out = proc.stdout
    return best, out


# In one process: planning and the matrix (what `matrix` does too), then what the report
# adds: gathering, drawing and the atomic write.
PHASES = """
import json, sys, time
from pathlib import Path
from capplan.adapters.files import atomic_write_text
from capplan.cli.matrix import report_data
from capplan.cli.planning import plan_with_settings, planned_costs
from capplan.core.report.html import render_html
t0 = time.perf_counter()
planned = plan_with_settings(None)
costs = planned_costs(planned)
t1 = time.perf_counter()
data = report_data(planned, costs, {}, None, asked_cache=False)
atomic_write_text(Path(sys.argv[1]), render_html(data))
t2 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1]))
"""


def phases(cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    best = (float("inf"), float("inf"))
    for _ in range(RUNS):
        proc = subprocess.run(
            [sys.executable, "-c", PHASES, str(cwd / "phases.html")],
            cwd=cwd,
            env={**os.environ, **env},
            capture_output=True,
            check=True,
        )
        plan_s, draw_s = json.loads(proc.stdout)
        best = min(best, (plan_s, draw_s), key=sum)
    return best


def measure(name: str, cwd: Path, env: dict[str, str]) -> None:
    page = cwd / "report.html"
    plan_s, draw_s = phases(cwd, env)
    report_s, _ = timed(["report", "--output", str(page)], cwd, env)
    json_s, text = timed(["matrix", "--format", "json"], cwd, env)
    _, summary = timed(["matrix", "--format", "summary"], cwd, env)
    jobs = len(json.loads(text)["jobs"])
    size = page.stat().st_size
    print(
        f"{name:<22} {jobs:>6,} {size:>12,} {report_s:>9.2f} {json_s:>9.2f} "
        f"{report_s / json_s:>6.2f} {plan_s:>7.2f} {draw_s:>7.2f} {len(summary):>10,}"
    )


def main() -> None:
    print(f"best of {RUNS} runs, each a fresh `python3 -m capplan` process")
    print(
        f"{'plan':<22} {'jobs':>6} {'page bytes':>12} {'report s':>9} {'json s':>9} "
        f"{'ratio':>6} {'plan s':>7} {'draw s':>7} {'summary B':>10}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        default = Path(tmp) / "default"
        default.mkdir()
        shutil.copy(ROOT / "capplan.toml", default / "capplan.toml")
        measure("default plan", default, {})
        org = Path(tmp) / "org"
        org.mkdir()
        measure("300 packages x 14 GPUs", org, organisation(org))
    print("bounds (issue 51): page <= 1,000,000 B (default), <= 10,000,000 B (4,200 jobs);")
    print("written in <= 2 s; summary <= 1,048,576 B (GitHub's per-step limit)")


if __name__ == "__main__":
    main()
