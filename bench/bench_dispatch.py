"""Benchmark: what the dispatch selector adds to every start of a dispatch package.

Target (issue "Fat from thin"): under 20 ms over a plain ``python3 -c pass``. Each run is a fresh
process, timed from fork to exit; best and median of ``--repeat`` runs.

Rows:
- ``python3 -c pass`` (the baseline: what starting the chosen environment costs anyway);
- the dispatch output built by the same builder pkgs/dispatch.nix runs (pkgs/dispatch_builder.py:
  a ``#!python3 -IS`` wrapper importing the compiled selector and table, with the knowledge
  base's real PCI table), which detects and then execs the chosen environment's ``bin/python3``
  (here the same interpreter), with the GPU from: ``CAPPLAN_CAPABILITY``; a fake sysfs tree (one
  RTX 3090) with ``CAPPLAN_NVML=0``; the default order (on a machine with a loaded driver the real
  NVML, elsewhere the same sysfs tree: NVML is skipped when /proc/driver/nvidia is absent) with
  the per-boot cache off, so NVML is asked at every start; and the default, NVML's inventory
  read back from the per-boot cache.

Usage: ``python bench/bench_dispatch.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "planner" / "src"
sys.path.insert(0, str(SRC))

from capplan.adapters.kb import load_kb  # noqa: E402
from capplan.core.families.registry import dispatcher  # noqa: E402
from capplan.core.planning.config import config_from_mapping  # noqa: E402
from capplan.core.planning.planner import make_plan  # noqa: E402

SELECTOR = SRC / "capplan" / "runtime" / "selector.py"
BUILDER = Path(__file__).resolve().parents[1] / "pkgs" / "dispatch_builder.py"


def _setup(work: Path) -> tuple[Path, Path]:
    kb = load_kb()
    config = config_from_mapping(
        {
            "fleet": {"gpus": ["A100", "RTX 3090", "L4", "H100", "RTX 5090"]},
            "packages": {"torch": {}},
        },
        origin="bench",
    )
    plan = make_plan(kb, config)
    table = dispatcher(kb).table(plan, "torch", fallback="error")
    for variant in table["variants"]:
        env = work / "envs" / variant["name"] / "bin"
        env.mkdir(parents=True)
        (env / "python3").symlink_to(sys.executable)
        variant["path"] = str(env.parent)
    # The dispatch output exactly as pkgs/dispatch.nix builds it: the same builder script.
    out = work / "out"
    subprocess.run(
        [sys.executable, "-IS", str(BUILDER)],
        env={
            "out": str(out),
            "interpreter": sys.executable,
            "selector": str(SELECTOR),
            "table": json.dumps(table),
            "programs": json.dumps(["python3"]),
        },
        check=True,
    )
    wrapper = out / "bin" / "python3"
    sysfs = work / "sys" / "bus" / "pci" / "devices" / "0000:01:00.0"
    sysfs.mkdir(parents=True)
    (sysfs / "vendor").write_text("0x10de\n")
    (sysfs / "device").write_text("0x2204\n")
    (sysfs / "class").write_text("0x030000\n")
    return wrapper, work / "sys"


def _time(argv: list[str], env: dict[str, str], repeat: int) -> list[float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        runs.append(time.perf_counter() - start)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="capplan-dispatch-bench-") as tmp:
        wrapper, sysfs = _setup(Path(tmp))
        target = Path(tmp) / "envs" / "torch-sm86" / "bin" / "python3"
        runtime = Path(tmp) / "run"
        runtime.mkdir(mode=0o700)
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        rows = [
            # The baseline starts the very file the wrapper execs (a venv's python behaves
            # differently when started through another path).
            ("python3 -c pass (baseline)", [str(target), "-c", "pass"], base),
            (
                "dispatch, CAPPLAN_CAPABILITY=8.6",
                [str(wrapper), "-c", "pass"],
                {**base, "CAPPLAN_CAPABILITY": "8.6"},
            ),
            (
                "dispatch, sysfs (RTX 3090), CAPPLAN_NVML=0",
                [str(wrapper), "-c", "pass"],
                {**base, "CAPPLAN_SYSFS_ROOT": str(sysfs), "CAPPLAN_NVML": "0"},
            ),
            (
                # NVML where a driver is loaded (/proc/driver/nvidia), else the fake sysfs tree;
                # asked at every start.
                "dispatch, NVML else sysfs, cache off",
                [str(wrapper), "-c", "pass"],
                {**base, "CAPPLAN_SYSFS_ROOT": str(sysfs), "CAPPLAN_DISPATCH_CACHE": "0"},
            ),
            (
                # The default: NVML's answer kept for the boot (the first run writes it).
                "dispatch, default (NVML cached for the boot)",
                [str(wrapper), "-c", "pass"],
                {**base, "CAPPLAN_SYSFS_ROOT": str(sysfs), "XDG_RUNTIME_DIR": str(runtime)},
            ),
        ]
        results = []
        for label, argv, env in rows:
            _time(argv, env, 3)  # warm the page cache
            runs = _time(argv, env, args.repeat)
            results.append((label, min(runs), statistics.median(runs)))
    base_best, base_median = results[0][1], results[0][2]
    print(f"{'run':46} {'best ms':>8} {'median ms':>10} {'overhead (median) ms':>21}")
    for label, best, median in results:
        overhead = "" if label.startswith("python3") else f"{(median - base_median) * 1000:.1f}"
        print(f"{label:46} {best * 1000:8.1f} {median * 1000:10.1f} {overhead:>21}")
    print(f"(baseline best {base_best * 1000:.1f} ms; {args.repeat} runs per row, fresh processes)")


if __name__ == "__main__":
    main()
