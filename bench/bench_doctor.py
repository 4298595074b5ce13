"""Benchmark: `capplan doctor` on a ~3 GB environment against `capplan inspect` on the same tree.

Target (issue 22): an environment checked at least as fast as ``capplan inspect`` reads it, and at
least 1 GB/s. The environment is a site-packages with torch 2.14.1 and NVIDIA's cu13 wheels
(cublas, cuda-runtime, curand, nvrtc, nccl, cudnn) from /opt/pypi*/files: only the libraries and
dist-info RECORDs are unpacked, once, into /tmp/capplan-bench/doctor-env (about 3.2 GB). Give
``--env DIR`` to use another tree.

Each command runs as a fresh process (page cache warm after a first untimed run); min and median
wall time of ``--repeat`` runs are printed with GB/s and the doctor/inspect ratio. ``doctor`` reads
files with worker processes (one per CPU, at most 8); ``doctor -j1`` reads them in one process, as
inspect does.
Usage: ``python bench/bench_doctor.py [--env DIR] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

WORK = Path("/tmp/capplan-bench/doctor-env")
CAPPLAN_SRC = Path(__file__).resolve().parents[1] / "planner" / "src"
WHEELS = [
    "/opt/pypi-more/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "/opt/pypi-more/files/nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl",
    "/opt/pypi/files/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64."
    "manylinux_2_17_x86_64.whl",
    "/opt/pypi-more/files/nvidia_curand-10.4.0.35-py3-none-manylinux_2_27_x86_64.whl",
    "/opt/pypi-more/files/nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux2010_x86_64."
    "manylinux_2_12_x86_64.whl",
    "/opt/pypi-more/files/nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl",
    "/opt/pypi-more/files/nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
]
_WANTED = re.compile(r"(\.so(\.[0-9]+)*$)|(\.dist-info/(RECORD|METADATA)$)")


def build_env() -> Path:
    site = WORK / "site-packages"
    done = WORK / ".done"
    if done.is_file():
        return site
    missing = [w for w in WHEELS if not Path(w).is_file()]
    if missing:
        sys.exit(f"wheels missing: {', '.join(missing)} (or give --env DIR)")
    for wheel in WHEELS:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if _WANTED.search(info.filename):
                    archive.extract(info, site)
    done.write_text("ok\n")
    return site


def tree_bytes(root: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def timed(args: list[str], repeat: int, ok: tuple[int, ...]) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(CAPPLAN_SRC), "CAPPLAN_NVML": "0"}
    command = [sys.executable, "-m", "capplan", *args]
    times = []
    for i in range(repeat + 1):
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode not in ok:
            sys.exit(f"{' '.join(args)} exited {done.returncode}: {done.stderr.decode()[-400:]}")
        if i:  # the first run warms the page cache
            times.append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", type=Path, help="the environment to check")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    env = args.env or build_env()
    size = tree_bytes(env)
    doctor = ["doctor", str(env), "--json", "--device", "A100", "--device", "GTX 1080",
              "--driver", "580.65.06"]  # fmt: skip
    rows = {
        "inspect": timed(["inspect", "--json", str(env)], args.repeat, (0, 12)),
        "doctor": timed(doctor, args.repeat, (0, 16)),
        "doctor -j1": timed([*doctor, "--jobs", "1"], args.repeat, (0, 16)),
    }
    print(f"environment: {env} ({size / 1e9:.2f} GB), {args.repeat} runs each, fresh processes")
    for name, times in rows.items():
        low, mid = min(times), statistics.median(times)
        print(
            f"{name:10} min {low:6.2f} s  median {mid:6.2f} s  "
            f"{size / 1e9 / low:5.2f} GB/s (best)  {size / 1e9 / mid:5.2f} GB/s (median)"
        )
    ratio = statistics.median(rows["doctor"]) / statistics.median(rows["inspect"])
    print(f"doctor / inspect (median): {ratio:.2f}x")


if __name__ == "__main__":
    main()
