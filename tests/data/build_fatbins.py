"""Build small real CUDA binaries with nvcc for the inspector tests.

Each artifact is compiled from one tiny kernel with the nvcc flags listed in ``ARTIFACTS``; the
``expect`` of each is what those flags ask nvcc for (SASS for every ``code=sm_XY``, PTX for every
``code=compute_XY``, LTO-IR for ``code=lto_XY``), written down from the flags, not from the
inspector. nvcc runs are few and run two at a time: each takes 1-3 s.

Usage: ``python tests/data/build_fatbins.py OUT_DIR`` (or ``build_all(out_dir)`` from a fixture).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ARTIFACTS", "NVCC", "Artifact", "build_all", "find_nvcc"]

NVCC = Path(os.environ.get("CAPPLAN_NVCC", "/usr/local/cuda/bin/nvcc"))

KERNEL = """\
__global__ void scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0f + 1.0f;
}
extern "C" void launch(float *x, int n) { scale<<<(n + 255) / 256, 256>>>(x, n); }
"""


@dataclass(frozen=True)
class Artifact:
    name: str
    flags: tuple[str, ...]
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    lto: tuple[str, ...] = ()
    compression: tuple[str, ...] = ()  # every kind that must appear; () = not checked
    sections: tuple[str, ...] = field(default=(".nv_fatbin",))
    shared: bool = False


def _gencode(arch: str, code: str) -> tuple[str, str]:
    return ("-gencode", f"arch={arch},code={code}")


ARTIFACTS: tuple[Artifact, ...] = (
    # A nixpkgs-style fat build: SASS for two capabilities, PTX for the last (cudaForwardCompat).
    Artifact(
        "multi.o",
        (
            *_gencode("compute_86", "sm_86"),
            *_gencode("compute_90", "[sm_90,compute_90]"),
        ),
        sass=("sm_86", "sm_90"),
        ptx=("compute_90",),
    ),
    # Arch- and family-specific targets; the suffix lives only in the entry flags.
    Artifact(
        "suffix.o",
        (
            *_gencode("compute_90a", "sm_90a"),
            *_gencode("compute_100f", "sm_100f"),
            *_gencode("compute_120f", "[sm_120f,compute_120f]"),
        ),
        sass=("sm_90a", "sm_100f", "sm_120f"),
        ptx=("compute_120f",),
    ),
    Artifact("ptxonly.o", _gencode("compute_75", "compute_75"), ptx=("compute_75",)),
    # Relocatable device code goes to __nv_relfatbin.
    Artifact(
        "rdc.o",
        ("-rdc=true", *_gencode("compute_89", "sm_89")),
        sass=("sm_89",),
        sections=("__nv_relfatbin",),
    ),
    Artifact(
        "lto.o",
        ("-rdc=true", *_gencode("compute_90", "lto_90")),
        lto=("lto_90",),
        sections=("__nv_relfatbin",),
    ),
    # --compress-mode=size compresses with zstd, speed with LZ4 (flags 0x8000 / 0x2000).
    Artifact(
        "size.o",
        ("--compress-mode=size", *_gencode("compute_80", "sm_80")),
        sass=("sm_80",),
        compression=("zstd",),
    ),
    Artifact(
        "speed.o",
        (
            "--compress-mode=speed",
            "-Xfatbin=-compress-all",
            *_gencode("compute_86", "[sm_86,compute_86]"),
        ),
        sass=("sm_86",),
        ptx=("compute_86",),
        compression=("lz4",),
    ),
    Artifact(
        "nocompress.o",
        ("--no-compress", *_gencode("compute_75", "[sm_75,compute_75]")),
        sass=("sm_75",),
        ptx=("compute_75",),
        compression=("none",),
    ),
    # nvcc-linked shared libraries carry a second container of stub cubins per arch.
    Artifact(
        "libscale.so",
        (
            "-shared",
            "-Xcompiler",
            "-fPIC",
            *_gencode("compute_86", "sm_86"),
            *_gencode("compute_120a", "sm_120a"),
        ),
        sass=("sm_86", "sm_120a"),
        shared=True,
    ),
    # A PTX-only shared library: nvcc 13 puts an empty fatbin container (a 16-byte header that
    # declares no entries) into .nv_fatbin before the real one. Valid, not corrupt (issue 38).
    Artifact(
        "libptx.so",
        ("-shared", "-Xcompiler", "-fPIC", *_gencode("compute_80", "compute_80")),
        ptx=("compute_80",),
        shared=True,
    ),
)


def find_nvcc() -> Path | None:
    if NVCC.is_file() and os.access(NVCC, os.X_OK):
        return NVCC
    found = shutil.which("nvcc")
    return Path(found) if found else None


def _compile(nvcc: Path, source: Path, out_dir: Path, artifact: Artifact) -> None:
    out = out_dir / artifact.name
    mode = [] if artifact.shared else ["-c"]
    cmd = [str(nvcc), *mode, str(source), "-o", str(out), *artifact.flags]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"nvcc failed for {artifact.name}: {' '.join(cmd)}\n{result.stderr}")


def build_all(out_dir: Path, nvcc: Path | None = None) -> dict[str, Path]:
    """Compile every artifact (plus the static archive libscale.a) into ``out_dir``."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError(f"nvcc not found at {NVCC} or on PATH")
    out_dir.mkdir(parents=True, exist_ok=True)
    source = out_dir / "scale.cu"
    source.write_text(KERNEL)
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda a: _compile(nvcc, source, out_dir, a), ARTIFACTS))
    paths = {a.name: out_dir / a.name for a in ARTIFACTS}
    archive = out_dir / "libscale.a"
    ar = shutil.which("ar")
    if ar is not None:
        members = [str(paths["multi.o"]), str(paths["rdc.o"])]
        subprocess.run([ar, "rcs", str(archive), *members], check=True, capture_output=True)
        paths["libscale.a"] = archive
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_fatbins.py OUT_DIR")
    built = build_all(Path(sys.argv[1]))
    for name, path in sorted(built.items()):
        print(f"{name}\t{path}")
