"""Benchmark: ``capplan cache why`` end to end (issue 49). Prints figures; asserts nothing.

1. The stand-in's torch against the fleet's torch-sm86, with one difference deep in the closure
   (a modified stand-in whose cuda_nvcc is 12.9.1: torch -> nccl -> cuda_nvcc), on real Nix
   (whatever `nix` is on PATH; run it under scripts/nix218 for 2.18). Beside it, what reading
   both whole closures costs (`nix derivation show -r`, which the lazy walk avoids) and
   nix-diff's time on the same pair where it is installed (Debian's nix-diff).
2. A synthetic pair of 5,000-derivation graphs (tests/data/fake_nix.py's ``wide``: every
   derivation differs through its inputs, the one real difference at the bottom) through a
   fake `nix` on PATH: the walk reads all of them.

Goals: (1) <= 2 s; (2) <= 5 s and 200 MB peak RSS.
Run: ``python bench/bench_cache_why.py [--runs 5] [--count 5000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "data"))
sys.path.insert(0, str(REPO / "tests" / "nix"))
import fake_nix  # noqa: E402
from nixhelpers import NIX_OPTIONS, copy_tree  # noqa: E402

CPU_SECONDS: list[float] = []
PLANNED = (
    '{ system = "x86_64-linux"; config = { allowUnfree = true; cudaSupport = true; '
    'rocmSupport = false; cudaCapabilities = [ "8.6" ]; cudaForwardCompat = false; }; }'
)


def _run_capplan(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """One capplan run in a fresh interpreter: wall seconds and that process's peak RSS (the
    CPU seconds of it and every nix it ran are added to CPU_SECONDS: on a shared machine wall
    time waits for other work, CPU time does not)."""
    code = (
        "import resource, sys\n"
        "sys.argv = ['capplan', *sys.argv[1:]]\n"
        "from capplan.cli.main import cli\n"
        "try:\n    cli(prog_name='capplan')\n"
        "finally:\n"
        "    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "    sys.stderr.write('\\nRSS %d\\n' % peak)\n"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_SECONDS.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    rss = [line for line in proc.stderr.splitlines() if line.startswith("RSS ")]
    if proc.returncode not in (0, 18) or not rss:
        raise SystemExit(f"capplan {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return seconds, int(rss[-1].split()[1]) / 1024, proc.stdout


def _nix(args: list[str], cwd: Path) -> str:
    return subprocess.run(["nix", *NIX_OPTIONS, *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def standin(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        copy_tree(root)
        standin = root / "tests" / "nixpkgs"
        other = Path(tmp) / "nixpkgs-next"
        shutil.copytree(standin, other)
        recipe = other / "cuda-packages.nix"
        old = 'cuda_nvcc = redist "cuda_nvcc" cudaMajorMinorVersion "CUDA-Redist";'
        text = recipe.read_text()
        assert old in text, "the stand-in's cuda_nvcc line moved: update the bench"
        recipe.write_text(
            text.replace(old, old.replace("cudaMajorMinorVersion", '"${cudaMajorMinorVersion}.1"'))
        )
        yours = json.loads(_nix(["eval", "--impure", "--json", "--expr",
                                 f"(import {other} {PLANNED}).python3Packages.torch.drvPath"],
                                root))  # fmt: skip
        planned = _nix(["eval", "--raw", ".#legacyPackages.x86_64-linux.torch-sm86.drvPath",
                        "--override-input", "nixpkgs", f"path:{standin}", "--no-write-lock-file"],
                       root)  # fmt: skip
        args = ["cache", "why", yours, "--gpu", "RTX 3090", "--override-input", "nixpkgs",
                f"path:{standin}", "--json"]  # fmt: skip
        env = {**os.environ, "NIX_CONFIG": "substituters =\nextra-system-features = big-parallel"}
        times, rss, out = [], 0.0, ""
        CPU_SECONDS.clear()
        for _ in range(runs):
            seconds, peak, out = _run_capplan(args, root, env)
            times.append(seconds)
            rss = max(rss, peak)
        package = json.loads(out)["packages"][0]
        cause = package["causes"][0]
        full = []
        for _ in range(runs):
            start = time.perf_counter()
            _nix(["show-derivation", "-r", yours, planned], root)
            full.append(time.perf_counter() - start)
        print("## cache why on the stand-in's torch (difference at torch -> nccl -> cuda_nvcc)")
        print()
        print(
            f"cause found: {cause['kind']} at {cause['derivation']} "
            f"via {' -> '.join(cause['trail'])}"
        )
        print(f"walk: {package['walk']}")
        print()
        print("| run | median wall s | median CPU s | peak RSS MiB |")
        print("|---|---|---|---|")
        print(
            f"| capplan cache why (end to end, {runs} runs) | {statistics.median(times):.2f} "
            f"| {statistics.median(CPU_SECONDS):.2f} | {rss:.0f} |"
        )
        print(
            f"| nix show-derivation -r of both (reference) | {statistics.median(full):.2f} "
            "| - | - |"
        )
        nix_diff = shutil.which("nix-diff")
        if nix_diff:
            diffs = []
            for _ in range(runs):
                start = time.perf_counter()
                subprocess.run([nix_diff, yours, planned], capture_output=True, check=False)
                diffs.append(time.perf_counter() - start)
            print(f"| nix-diff (Debian) | {statistics.median(diffs):.2f} | - | - |")
        else:
            print(
                "| nix-diff | not installed (apt-cache policy nix-diff finds no candidate "
                "here) | - | - |"
            )
        print()


def synthetic(count: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        yours, y_top = fake_nix.wide(count, "yours")
        planned, p_top = fake_nix.wide(count, "planned")
        graph = folder / "graph.json"
        p_body = planned[p_top]
        outputs = [o["path"] for o in p_body["outputs"].values()]  # type: ignore[union-attr]
        variants = {"torch-sm86": {"drv": p_top, "outputs": outputs}}
        data = {"version": "2.18.9", "drvs": {**yours, **planned}, "drvPath": y_top}
        graph.write_text(json.dumps({**data, "variants": variants}))
        env = {**os.environ, **fake_nix.install(folder / "bin", graph)}
        args = ["cache", "why", ".#torch", "--gpu", "RTX 3090", "--json"]
        times, rss, out = [], 0.0, ""
        CPU_SECONDS.clear()
        for _ in range(runs):
            seconds, peak, out = _run_capplan(args, folder, env)
            times.append(seconds)
            rss = max(rss, peak)
        package = json.loads(out)["packages"][0]
        print(f"## cache why on two synthetic graphs of {len(yours)} derivations each (fake nix)")
        print()
        print(f"walk: {package['walk']}; first cause: {package['causes'][0]['derivation']}")
        print()
        print("| run | median wall s | median CPU s | peak RSS MiB |")
        print("|---|---|---|---|")
        print(
            f"| capplan cache why ({runs} runs) | {statistics.median(times):.2f} "
            f"| {statistics.median(CPU_SECONDS):.2f} | {rss:.0f} |"
        )
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=5000)
    args = parser.parse_args()
    if shutil.which("nix"):
        standin(args.runs)
    else:
        print("no nix on PATH: the stand-in part is skipped")
    synthetic(args.count, args.runs)


if __name__ == "__main__":
    main()
