"""Acceptance on a real GPU (issue 38): does `capplan doctor` predict what the driver does?

Builds one small kernel each of the ways doctor must judge (SASS, PTX only, ``a`` and ``f``
targets, ``--compress-mode=size|speed|none``, fat with and without PTX, a library with no kernel,
a kernel that only returns), loads each with ctypes on the GPU in front of it and launches the
kernel through the CUDA runtime (cudaMalloc, launch, cudaDeviceSynchronize), then asks
``capplan doctor`` (this GPU's capability, this driver) and ``capplan inspect`` about the same
file, and prints where the prediction and the driver disagree.

Each library runs in its own process, so a failed launch cannot spoil the next one. Without a
GPU (no libcuda.so.1, cuInit fails, no device) it prints why and exits 0 without building
anything. Exit 1 when doctor and the driver disagree anywhere, 0 otherwise.

Usage: ``python bench/gpu_truth.py [--nvcc PATH] [--keep DIR] [--predict-only CAP:DRIVER]``
(``--predict-only 9.0:580.159.04`` builds and asks doctor and inspect on a machine without a GPU:
a check of the script, not of the driver).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "planner" / "src"

KERNEL = """\
#include <cuda_runtime.h>
__global__ void scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0f + 1.0f;
}
extern "C" int run(void) {
  float *d = 0;
  cudaError_t e = cudaMalloc(&d, 1024 * sizeof(float));
  if (e != cudaSuccess) return (int)e;
  scale<<<4, 256>>>(d, 1024);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  cudaFree(d);
  return (int)e;
}
extern "C" const char *name(int e) { return cudaGetErrorName((cudaError_t)e); }
"""
NO_KERNEL = """\
#include <cuda_runtime.h>
__device__ int counter[4];
extern "C" int run(void) { return (int)cudaFree(0); }
extern "C" const char *name(int e) { return cudaGetErrorName((cudaError_t)e); }
"""
EMPTY_KERNEL = """\
#include <cuda_runtime.h>
__global__ void nop() {}
extern "C" int run(void) {
  nop<<<1, 1>>>();
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return (int)e;
}
extern "C" const char *name(int e) { return cudaGetErrorName((cudaError_t)e); }
"""


def _g(arch: str, code: str) -> list[str]:
    return ["-gencode", f"arch={arch},code={code}"]


def builds(major: int, minor: int) -> dict[str, tuple[str, list[str]]]:
    """The ways to build, for the GPU of capability major.minor (its own a/f targets)."""
    own = f"{major}{minor}"
    family = f"{major}0"
    out: dict[str, tuple[str, list[str]]] = {
        "sass-own": (KERNEL, _g(f"compute_{own}", f"sm_{own}")),
        "sass-75": (KERNEL, _g("compute_75", "sm_75")),
        "sass-80": (KERNEL, _g("compute_80", "sm_80")),
        "sass-120": (KERNEL, _g("compute_120", "sm_120")),
        "ptx-75": (KERNEL, _g("compute_75", "compute_75")),
        "ptx-own": (KERNEL, _g(f"compute_{own}", f"compute_{own}")),
        "ptx-120": (KERNEL, _g("compute_120", "compute_120")),
        "fat-ptx": (
            KERNEL,
            [
                *_g("compute_75", "sm_75"),
                *_g("compute_80", "sm_80"),
                *_g("compute_90", "[sm_90,compute_90]"),
            ],
        ),
        "fat-noptx": (
            KERNEL,
            [*_g("compute_75", "sm_75"), *_g("compute_80", "sm_80"), *_g("compute_90", "sm_90")],
        ),
        "size": (KERNEL, ["--compress-mode=size", *_g(f"compute_{own}", f"sm_{own}")]),
        "speed": (
            KERNEL,
            [
                "--compress-mode=speed",
                "-Xfatbin=-compress-all",
                *_g(f"compute_{own}", f"[sm_{own},compute_{own}]"),
            ],
        ),
        "none": (KERNEL, ["--compress-mode=none", *_g(f"compute_{own}", f"sm_{own}")]),
        "no-kernel": (NO_KERNEL, _g(f"compute_{own}", f"sm_{own}")),
        "empty-ptx": (EMPTY_KERNEL, _g("compute_75", "compute_75")),
    }
    if major >= 9:  # arch-specific targets exist from 9.0 on, family ones from 10.0 on
        out["sass-own-a"] = (KERNEL, _g(f"compute_{own}a", f"sm_{own}a"))
    if major >= 10:
        out["sass-family-f"] = (KERNEL, _g(f"compute_{family}f", f"sm_{family}f"))
    return out


def gpu() -> tuple[str, int, int, str] | str:
    """(name, major, minor, driver version) of device 0, or why there is none."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        return f"no NVIDIA driver library (libcuda.so.1: {error})"
    if cuda.cuInit(0) != 0:
        return "cuInit failed: no usable NVIDIA GPU or driver"
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "the driver sees no GPU"
    device = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(device), 0)
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # COMPUTE_CAPABILITY_MAJOR
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # COMPUTE_CAPABILITY_MINOR
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, device)
    return name.value.decode(), major.value, minor.value, driver_version()


def driver_version() -> str:
    """The kernel module's version (580.159.04), as nvidia-smi prints it."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        text = ""
    for word in text.split():
        parts = word.split(".")
        if len(parts) in (2, 3) and all(p.isdigit() for p in parts) and int(parts[0]) >= 300:
            return word
    smi = shutil.which("nvidia-smi")
    if smi:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.split()[0]
    return ""


_RUN = (
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "lib.name.restype = ctypes.c_char_p\n"
    "code = lib.run()\n"
    "print(code, lib.name(code).decode())\n"
)


def on_gpu(lib: Path) -> str:
    """'runs', or the CUDA error the driver gave (a library the loader refuses says so)."""
    done = subprocess.run([sys.executable, "-c", _RUN, str(lib)], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    if done.returncode != 0:
        return f"fails (process: {done.stderr.strip().splitlines()[-1:]})"
    code, name = done.stdout.split(maxsplit=1)
    return "runs" if code == "0" else f"fails ({name.strip()})"


def capplan(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, "-m", "capplan", *args], capture_output=True,
                          text=True, env=env, timeout=600, check=False)  # fmt: skip


def doctor_says(lib: Path, cap: str, driver: str) -> tuple[str, str]:
    args = ["doctor", str(lib), "--device", cap, "--json"]
    done = capplan(*args, *(["--driver", driver] if driver else []))
    if done.returncode not in (0, 16):
        return "error", done.stderr.strip()[-200:]
    data = json.loads(done.stdout)
    if not data["packages"]:
        return "runs", "no GPU code (not listed)"
    verdict = data["packages"][0]["libraries"][0]["verdicts"][0]
    said = "fails" if verdict["level"] == "cannot-run" else "runs"
    return said, f"{verdict['level']} {verdict.get('cause') or ''}: {verdict['reason'][:120]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--nvcc", default=os.environ.get("CAPPLAN_NVCC", "/usr/local/cuda/bin/nvcc")
    )
    parser.add_argument("--keep", type=Path, help="build into DIR and keep it")
    parser.add_argument(
        "--predict-only",
        metavar="CAP:DRIVER",
        help="no GPU: build for capability CAP and ask doctor and inspect about driver DRIVER "
        "(9.0:580.159.04), without running anything (checks the script itself)",
    )
    args = parser.parse_args()
    found = gpu()
    if args.predict_only:
        cap_text, _, version = args.predict_only.partition(":")
        major_text, _, minor_text = cap_text.partition(".")
        found = ("(not run)", int(major_text), int(minor_text), version)
    if isinstance(found, str):
        print(f"gpu_truth: skipped: {found}")
        return 0
    name, major, minor, driver = found
    nvcc = args.nvcc if Path(args.nvcc).is_file() else shutil.which("nvcc")
    if not nvcc:
        print(f"gpu_truth: skipped: no nvcc at {args.nvcc} or on PATH")
        return 0
    cap = f"{major}.{minor}"
    print(f"GPU {name} ({cap}), driver {driver or 'unknown'}, nvcc {nvcc}")
    out = args.keep or Path(tempfile.mkdtemp(prefix="gpu-truth-"))
    out.mkdir(parents=True, exist_ok=True)
    disagree = 0
    print(f"{'build':<14} {'driver':<34} {'doctor':<6} {'inspect':<8} agree  (doctor's verdict)")
    for label, (source, flags) in builds(major, minor).items():
        cu = out / f"{label}.cu"
        cu.write_text(source)
        lib = out / f"lib{label}.so"
        made = subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", *flags, "-o", str(lib),
                               str(cu)], capture_output=True, text=True, check=False)  # fmt: skip
        if made.returncode != 0:
            print(f"{label:<14} nvcc refused: {made.stderr.strip().splitlines()[-1:]}")
            continue
        truth = "not run" if args.predict_only else on_gpu(lib)
        said, why = doctor_says(lib, cap, driver)
        inspected = capplan("inspect", str(lib)).returncode
        agree = (args.predict_only or truth.split()[0] == said) and inspected == 0
        disagree += not agree
        shown = "ok" if inspected == 0 else f"exit {inspected}"
        print(
            f"{label:<14} {truth:<34} {said:<6} {shown:<8} {'yes' if agree else 'NO':<5}  ({why})"
        )
    print(f"gpu_truth: {disagree} disagreement(s)" + ("" if args.keep else f"; built in {out}"))
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
