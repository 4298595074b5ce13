"""Benchmark: inspect a ~500 MB CUDA shared library, as a whole fresh process, against cuobjdump.

Target (issue 5): about 500 MB with about 500 fatbin containers in under 0.5 s and under 200 MB
peak RSS for the whole process. Each tool runs in a fresh process; wall time and the child's own
peak RSS (``os.wait4`` rusage) are measured, best/median of ``--repeat`` runs, page cache warm.

The file, in order of preference:
1. ``--file PATH``;
2. libtorch_cuda.so from a torch CUDA wheel (``--wheel PATH``, or the one
   ``pip download torch==2.14.1 --no-deps -d /tmp/torchwheel`` leaves), extracted once to
   /tmp/capplan-bench/ (the wheel itself is also inspected in memory, as a second row);
3. otherwise a synthetic ELF: a small real ELF plus a 330 MB section of 500 containers and
   170 MB of other data (objcopy --add-section), built once in /tmp/capplan-bench/.

NVIDIA's cuobjdump (``pip install nvidia-cuda-cuobjdump``) runs on the same file in the same run
with ``--list-elf --list-ptx``. Usage: ``python bench/bench_inspect.py [--file F] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

WORK = Path("/tmp/capplan-bench")
TORCH_MEMBER = "torch/lib/libtorch_cuda.so"
CAPPLAN_SRC = Path(__file__).resolve().parents[1] / "planner" / "src"

ADAPTER_SNIPPET = """
import sys, time
from pathlib import Path
from capplan.adapters.fatbin import inspect_paths
from capplan.core.families.cuda.binary import cuda_code
start = time.perf_counter()
reports = inspect_paths([Path(sys.argv[1])])
read = time.perf_counter() - start
codes = cuda_code(reports)
print(sum(c.containers for c in codes), len({s for c in codes for s in c.sass}), read)
"""

CLI_SNIPPET = """
import sys
from capplan.cli.inspect import inspect
inspect.main(["--json", *sys.argv[1:]], prog_name="capplan inspect", standalone_mode=True)
"""


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MiB, exit code, stdout) of one fresh child process.

    Peak RSS comes from /usr/bin/time (GNU time) when present: a child's ru_maxrss also counts
    the pages of whatever forked it (Linux charges the pre-exec address space to the child), so
    it must be forked from a small process, not from this one.
    """
    gnu_time = Path("/usr/bin/time")
    report = WORK / "time.out"
    prefix = [str(gnu_time), "-f", "%M", "-o", str(report)] if gnu_time.exists() else []
    start = time.perf_counter()
    proc = subprocess.run([*prefix, *cmd], capture_output=True, env=env, check=False)
    wall = time.perf_counter() - start
    if prefix:
        rss_kib = float(report.read_text().split()[-1])
    else:
        rss_kib = float(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return wall, rss_kib / 1024, proc.returncode, proc.stdout.decode(errors="replace")


def find_cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    for entry in sys.path:
        candidate = Path(entry) / "nvidia" / "cu13" / "bin" / "cuobjdump"
        if candidate.is_file():
            return str(candidate)
    return None


def torch_wheel(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    folder = Path("/tmp/torchwheel")
    if not any(folder.glob("torch-*.whl")):
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "torch==2.14.1",
            "--no-deps",
            "-d",
        ]
        subprocess.run([*cmd, str(folder)], capture_output=True, check=False)
    wheels = sorted(folder.glob("torch-*.whl"))
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            if TORCH_MEMBER in zf.namelist():
                return wheel
    return None


def extract_member(wheel: Path) -> Path:
    target = WORK / "libtorch_cuda.so"
    if not target.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        with (
            zipfile.ZipFile(wheel) as zf,
            zf.open(TORCH_MEMBER) as src,
            tmp.open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 16 << 20)
        os.replace(tmp, target)
    return target


def _synthetic_container(rng: random.Random, archs: list[tuple[int, int]]) -> bytes:
    entries = b""
    for arch, suffix_flag in archs:
        payload = rng.randbytes(94_000)
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, 2, 0x0101, 64, len(payload))
        struct.pack_into("<I", head, 0x1C, arch)
        struct.pack_into("<Q", head, 0x28, 0x8011 | suffix_flag)  # zstd, as torch's are
        entries += bytes(head) + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entries)) + entries


def synthetic_library() -> Path:
    """A ~500 MB ELF with 500 containers, for machines without a torch CUDA wheel."""
    target = WORK / "libsynthetic_cuda.so"
    if target.exists():
        return target
    WORK.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    archs = [(75, 0), (80, 0), (86, 0), (90, 0), (90, 0x100000), (100, 0), (120, 0)]
    fatbins = WORK / "fatbins.bin"
    with fatbins.open("wb") as out:
        for _ in range(500):
            out.write(_synthetic_container(rng, archs))
    other = WORK / "other.bin"
    with other.open("wb") as out:
        for _ in range(170):
            out.write(rng.randbytes(1 << 20))
    base = shutil.which("python3") or sys.executable
    subprocess.run(
        [
            "objcopy",
            f"--add-section=.nv_fatbin.bench={fatbins}",
            f"--add-section=.ldata.bench={other}",
            str(Path(base).resolve()),
            str(target),
        ],
        check=True,
    )
    fatbins.unlink()
    other.unlink()
    return target


def row(label: str, runs: list[tuple[float, float, int, str]]) -> str:
    walls = [r[0] for r in runs]
    rss = max(r[1] for r in runs)
    codes = sorted({r[2] for r in runs})
    return (
        f"| {label:<46} | {min(walls):8.3f} | {statistics.median(walls):8.3f} "
        f"| {rss:9.1f} | {','.join(map(str, codes)):>4} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, help="shared library to inspect")
    parser.add_argument("--wheel", type=Path, help="torch CUDA wheel holding libtorch_cuda.so")
    parser.add_argument("--synthetic", action="store_true", help="use the synthetic library")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cuobjdump-repeat", type=int, default=1)
    args = parser.parse_args()

    wheel = None
    if args.file is not None:
        target = args.file
    elif args.synthetic:
        target = synthetic_library()
    else:
        wheel = torch_wheel(args.wheel)
        target = extract_member(wheel) if wheel else synthetic_library()

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CAPPLAN_SRC), env.get("PYTHONPATH")]))
    # Let the children cache bytecode as an installed package would (the warm-up run writes it).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    WORK.mkdir(parents=True, exist_ok=True)
    # Warm the page cache so every tool reads the same cached file (in a child: keep this
    # process small, see measure()).
    subprocess.run(["cat", str(target)], stdout=subprocess.DEVNULL, check=True)
    measure([sys.executable, "-c", ADAPTER_SNIPPET, str(target)], env)
    measure([sys.executable, "-c", CLI_SNIPPET, str(target)], env)
    measure([sys.executable, "-m", "capplan", "inspect", "--json", str(target)], env)

    size_mb = target.stat().st_size / 1e6
    print(f"file: {target} ({size_mb:.1f} MB)")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (timings are noisy under load)")
    baseline = [measure([sys.executable, "-c", "pass"], env) for _ in range(args.repeat)]
    ours = [
        measure([sys.executable, "-c", ADAPTER_SNIPPET, str(target)], env)
        for _ in range(args.repeat)
    ]
    cli = [
        measure([sys.executable, "-c", CLI_SNIPPET, str(target)], env) for _ in range(args.repeat)
    ]
    full_cmd = [sys.executable, "-m", "capplan", "inspect", "--json", str(target)]
    full = [measure(full_cmd, env) for _ in range(args.repeat)]
    containers, sass_count, _ = ours[0][3].split()
    print(f"capplan: {containers} containers, {sass_count} distinct SASS targets")
    reads = [float(r[3].split()[2]) * 1000 for r in ours]
    print(
        f"capplan's read alone (inspect_paths' first call in each fresh process, imports "
        f"excluded): {min(reads):.1f} ms best, {statistics.median(reads):.1f} ms median"
    )

    rows = [
        row("python -c pass (interpreter start-up)", baseline),
        row("capplan adapter (inspect_paths), fresh process", ours),
        row("inspect command alone (click), fresh process", cli),
    ]
    if all(r[2] == 0 for r in full):
        rows.append(row("python -m capplan inspect --json (whole CLI)", full))
    else:
        print("python -m capplan inspect: not available yet (command not registered?)")
    tool = find_cuobjdump()
    if tool:
        theirs = [
            measure([tool, "--list-elf", "--list-ptx", str(target)], env)
            for _ in range(args.cuobjdump_repeat)
        ]
        listed = [line for line in theirs[0][3].splitlines() if " file " in line]
        print(f"cuobjdump: {len(listed)} ELF/PTX entries listed ({tool})")
        rows.append(row("cuobjdump --list-elf --list-ptx", theirs))
    else:
        print("cuobjdump: not found (pip install nvidia-cuda-cuobjdump)")
    if wheel is not None:
        in_wheel = [
            measure([sys.executable, "-c", ADAPTER_SNIPPET, str(wheel)], env) for _ in range(1)
        ]
        rows.append(row("capplan adapter on the whole wheel (in memory)", in_wheel))

    if tool:
        # Ratios from this one run: cuobjdump against the whole capplan CLI (and the adapter).
        theirs_walls = [w for w, _, _, _ in theirs]
        for label, runs in (("whole CLI", full), ("adapter", ours)):
            walls = [w for w, _, _, _ in runs]
            print(
                f"cuobjdump / capplan {label}: {min(theirs_walls) / min(walls):.1f}x (min), "
                f"{statistics.median(theirs_walls) / statistics.median(walls):.1f}x (median); "
                f"capplan peak {max(r[1] for r in runs):.1f} MiB"
            )
    print()
    print(f"| {'run':<46} | {'best s':>8} | {'median s':>8} | {'peak MiB':>9} | {'rc':>4} |")
    print(f"|{'-' * 48}|{'-' * 10}|{'-' * 10}|{'-' * 11}|{'-' * 6}|")
    for line in rows:
        print(line)


if __name__ == "__main__":
    main()
