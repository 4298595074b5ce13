"""Benchmark: what doctor's driver check (issue 48) adds to a doctor scan.

The check opens every ELF file doctor read once more for its PT_INTERP, RUNPATH and DT_NEEDED
(a few bounded reads each) and resolves the loader's folders for the Nix-built ones. The tree is
links to the first ``--files`` libraries of /usr/lib/x86_64-linux-gnu (the host's own: none is
Nix-built, so this is the cost every doctor run pays), read by doctor's scanner in one process
(``jobs=1``) and then by the check; min and median of ``--repeat`` runs each, and the ratio.
Usage: ``python bench/bench_driver_reach.py [--files N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "planner" / "src"))

from capplan.adapters.environment import Source, scan_sources
from capplan.adapters.host_driver import driver_reach

LIBS = Path("/usr/lib/x86_64-linux-gnu")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    names = sorted(n for n in os.listdir(LIBS) if ".so" in n and (LIBS / n).is_file())
    with tempfile.TemporaryDirectory(prefix="capplan-reach-") as tmp:
        for name in names[: args.files]:
            os.symlink(LIBS / name, Path(tmp) / name)
        source = [Source(Path(tmp), "dir")]
        scans: list[float] = []
        checks: list[float] = []
        for _ in range(args.repeat + 1):  # the first run warms the page cache, untimed
            start = time.perf_counter()
            scan = scan_sources(source, jobs=1)
            scanned = time.perf_counter() - start
            files = [(lib.path, lib.path, lib.static_cudart) for lib in scan.libraries]
            start = time.perf_counter()
            driver_reach(files, os.environ)
            checked = time.perf_counter() - start
            scans.append(scanned)
            checks.append(checked)
        scans, checks = scans[1:], checks[1:]
    print(f"{len(scan.libraries)} ELF files, {scan.bytes / 1e6:.0f} MB")
    print(f"doctor scan (jobs=1): min {min(scans) * 1e3:.1f} ms, median "
          f"{statistics.median(scans) * 1e3:.1f} ms")  # fmt: skip
    print(f"driver check:         min {min(checks) * 1e3:.1f} ms, median "
          f"{statistics.median(checks) * 1e3:.1f} ms")  # fmt: skip
    print(f"check / scan (median): {statistics.median(checks) / statistics.median(scans):.3f}")


if __name__ == "__main__":
    main()
