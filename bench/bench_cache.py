"""Benchmark: narinfo lookups against a local binary cache that adds latency to every request.

Starts a cache server (a separate process) over a directory of synthetic narinfos, with
``--latency`` seconds added per request (20 ms by default, roughly a nearby CDN), then runs
capplan.adapters.binary_cache.query_caches:

- sequentially (concurrency 1) over a smaller sample (the per-lookup cost does not depend on
  the count, and 2,000 sequential lookups would only take 40+ s to say the same);
- at concurrency 32 over the full count;
- in fresh child processes at two counts, reporting each one's peak RSS, to show memory stays
  flat as the number of lookups grows.

The server is bench/narinfo_server.py by default: asyncio, one thread, narinfos held in
memory, so on a 2-core machine it leaves the client (the thing measured) a core of its own,
as a remote cache would. ``--server threaded`` uses the tests' fault-injecting server
(tests/data/cache_server.py: a thread and a full http.server parse per request) instead.

Goal (issue 6): >= 800 lookups/s at concurrency 32 and >= 25x the sequential rate.
Run: ``python bench/bench_cache.py [--lookups 2000] [--sequential 200] [--latency 0.02]
[--server asyncio|threaded]``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from capplan.adapters.binary_cache import query_caches
from capplan.core.caches.narinfo import nix32_encode

SERVERS = {
    "asyncio": Path(__file__).resolve().parent / "narinfo_server.py",
    "threaded": Path(__file__).resolve().parents[1] / "tests" / "data" / "cache_server.py",
}


def make_cache(root: Path, count: int, seed: int = 1) -> list[str]:
    """Write ``count`` valid (unsigned) narinfos; return their store paths."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        hash_part = nix32_encode(rng.randbytes(20))
        path = f"/nix/store/{hash_part}-bench-pkg-{i}"
        nar_hash = nix32_encode(hashlib.sha256(path.encode()).digest())
        refs = " ".join(
            f"{nix32_encode(rng.randbytes(20))}-dep-{j}" for j in range(rng.randrange(0, 8))
        )
        (root / f"{hash_part}.narinfo").write_text(
            f"StorePath: {path}\nURL: nar/{nar_hash}.nar.zst\nCompression: zstd\n"
            f"FileHash: sha256:{nar_hash}\nFileSize: {rng.randrange(1, 10**8)}\n"
            f"NarHash: sha256:{nar_hash}\nNarSize: {rng.randrange(1, 10**9)}\n"
            f"References: {refs}\nDeriver: {hash_part}-bench-pkg-{i}.drv\n"
            f"Sig: bench-1:{base64.b64encode(rng.randbytes(64)).decode()}\n"
        )
        paths.append(path)
    (root / "nix-cache-info").write_text("StoreDir: /nix/store\nWantMassQuery: 1\nPriority: 40\n")
    return paths


def start_server(
    root: Path, latency: float, kind: str = "asyncio"
) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS[kind]), "--root", str(root), "--latency", str(latency)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}"


def timed(paths: list[str], url: str, concurrency: int) -> tuple[float, int]:
    start = time.perf_counter()
    result = query_caches(paths, [url], concurrency=concurrency, timeout=10.0)
    elapsed = time.perf_counter() - start
    if result.warnings:
        raise SystemExit(f"benchmark run had failures: {result.warnings}")
    return elapsed, len(result.present)


def child(url: str, count: int, root: Path) -> None:
    """Run ``count`` lookups at concurrency 32 in this process; print peak RSS in KiB."""
    paths = make_cache_paths(root)[:count]
    result = query_caches(paths, [url], concurrency=32, timeout=10.0)
    assert len(result.present) == count and not result.warnings
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def make_cache_paths(root: Path) -> list[str]:
    paths = []
    for narinfo in sorted(root.glob("*.narinfo")):
        for line in narinfo.read_text().splitlines():
            if line.startswith("StorePath: "):
                paths.append(line[len("StorePath: ") :])
    return paths


def peak_rss_kib(url: str, count: int, root: Path) -> int:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            url,
            "--child-count",
            str(count),
            "--root",
            str(root),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--sequential", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.020)
    parser.add_argument("--server", choices=sorted(SERVERS), default="asyncio")
    parser.add_argument("--memory-counts", default="500,2000")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the median is shown")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.child_count, args.root)
        return

    counts = [int(c) for c in args.memory_counts.split(",")]
    with tempfile.TemporaryDirectory(prefix="capplan-bench-") as tmp:
        root = Path(tmp) / "cache"
        paths = make_cache(root, max([args.lookups, args.sequential, *counts]))
        proc, url = start_server(root, args.latency, args.server)
        try:
            timed(paths[:50], url, args.concurrency)  # warm up the server's threads
            seq_runs = [timed(paths[: args.sequential], url, 1) for _ in range(args.repeat)]
            par_runs = [
                timed(paths[: args.lookups], url, args.concurrency) for _ in range(args.repeat)
            ]
            rss = {n: peak_rss_kib(url, n, root) for n in counts}
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    # Median of the runs: these machines are shared, so single runs are noisy.
    seq_s, seq_n = sorted(seq_runs)[len(seq_runs) // 2]
    par_s, par_n = sorted(par_runs)[len(par_runs) // 2]
    seq_rate, par_rate = seq_n / seq_s, par_n / par_s
    par_all = ", ".join(f"{n / sec:.0f}" for sec, n in par_runs)
    speedup = par_rate / seq_rate
    print(
        f"narinfo lookups, {args.latency * 1000:g} ms added latency per request, "
        f"{args.server} server on 127.0.0.1 (Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs)"
    )
    print()
    print(f"| {'run':<28} | {'lookups':>7} | {'seconds':>7} | {'lookups/s':>9} |")
    print(f"|{'-' * 30}|{'-' * 9}|{'-' * 9}|{'-' * 11}|")
    print(f"| {'concurrency 1 (sequential)':<28} | {seq_n:>7} | {seq_s:>7.2f} | {seq_rate:>9.1f} |")
    label = f"concurrency {args.concurrency}"
    print(f"| {label:<28} | {par_n:>7} | {par_s:>7.2f} | {par_rate:>9.1f} |")
    print()
    print(f"median of {args.repeat} runs each; concurrency {args.concurrency} runs: {par_all}/s")
    print(
        f"speed-up: {speedup:.1f}x (goal >= 25x); rate at {args.concurrency}: "
        f"{par_rate:.0f}/s (goal >= 800/s)"
    )
    print()
    print(f"| {'lookups (child process)':<28} | {'peak RSS MiB':>12} |")
    print(f"|{'-' * 30}|{'-' * 14}|")
    for n, kib in rss.items():
        print(f"| {n:<28} | {kib / 1024:>12.1f} |")
    first, last = rss[counts[0]], rss[counts[-1]]
    print()
    print(f"RSS growth from {counts[0]} to {counts[-1]} lookups: {(last - first) / 1024:+.1f} MiB")


if __name__ == "__main__":
    main()
