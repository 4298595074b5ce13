"""Benchmark: ``capplan build``'s own overhead per job, against ``nix build`` of the same set.

A synthetic plan of 500 trivial derivations (``/bin/sh -c 'echo ... > $out'``; each one from the
26th on needs the one 25 before it, so there are 25 chains of 20 and the queue has work to do).
Each round instantiates two fresh sets (new salts, so nothing is built yet) and builds

- set A with one ``nix build --no-link --keep-going --max-jobs N`` of all 500 (the reference:
  Nix alone, one process, its own order), and
- set B with capplan build's loop (cli/build_loop.BuildRun: as slots free, the best ready jobs
  by critical path; jobs estimated under a minute share the free slots' nix builds; events as
  JSON lines),

alternating which goes first. The overhead per job is (B - A) / 500, paired within the round.
Goal (issue 50): at most 20 ms per job.

Run: ``python bench/bench_build.py [--jobs 500] [--max-jobs 4] [--rounds 2]``. Needs nix on
PATH (Debian's nix-bin); substituters are switched off for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from capplan.cli.build_loop import BuildRun
from capplan.cli.build_view import BuildView
from capplan.core.planning.build import BuildJob, BuildProgress, BuildSummary

EXPR = """
{ n, salt, chain }:
let
  mk = i: derivation ({
    name = "bench-${toString i}";
    system = builtins.currentSystem;
    builder = "/bin/sh";
    args = [ "-c" "echo ${salt} ${toString i} > $out" ];
  } // (if i >= chain then { dep = mk (i - chain); } else { }));
in builtins.genList mk n
"""


def instantiate(folder: Path, n: int, chain: int) -> list[str]:
    salt = uuid.uuid4().hex
    expr = folder / "bench.nix"
    expr.write_text(EXPR)
    out = subprocess.run(
        ["nix-instantiate", str(expr), "--argstr", "salt", salt, "--arg", "n", str(n),
         "--arg", "chain", str(chain)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert len(out) == n, out[:3]
    return out


def nix_version() -> tuple[int, int]:
    from capplan.adapters.nix_build import nix_version as version

    return version()


def one_call(drvs: list[str], max_jobs: int, version: tuple[int, int]) -> float:
    installables = drvs if version < (2, 13) else [d + "^*" for d in drvs]
    begin = time.perf_counter()
    subprocess.run(
        ["nix", "--extra-experimental-features", "nix-command", "build", "--no-link",
         "--keep-going", "--max-jobs", str(max_jobs), *installables],
        check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - begin


def capplan_loop(
    drvs: list[str], max_jobs: int, chain: int, version: tuple[int, int], minutes: float
) -> float:
    jobs = [
        BuildJob(
            f"bench-{i}",
            "x86_64-linux",
            (f"bench-{i - chain}",) if i >= chain else (),
            minutes,
            (),
            drv,
            (),
        )
        for i, drv in enumerate(drvs)
    ]
    progress = BuildProgress({j.name: j for j in jobs}, max_jobs)
    summary = BuildSummary()
    sink = io.StringIO()
    begin = time.perf_counter()
    with contextlib.redirect_stdout(sink), BuildView(progress, as_json=True) as view:
        BuildRun(
            jobs, progress=progress, view=view, summary=summary, version=version,
            builders=None, max_jobs=max_jobs, slots=max_jobs, push_target=None,
            failures_file=None, keep_going=True,
        ).run()  # fmt: skip
    took = time.perf_counter() - begin
    assert len(summary.built) == len(jobs), summary.failed[:3]
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--max-jobs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--chain", type=int, default=25)
    parser.add_argument(
        "--minutes",
        type=float,
        default=0.01,
        help="each job's estimate: below 1, ready jobs share nix builds (build_loop); 1 or "
        "more gives each its own nix build, the per-process cost this measures then",
    )
    args = parser.parse_args()
    os.environ["NIX_CONFIG"] = "substituters =\n" + os.environ.get("NIX_CONFIG", "")
    version = nix_version()
    print(
        f"nix {version[0]}.{version[1]}, {args.jobs} trivial derivations, --max-jobs "
        f"{args.max_jobs}, {args.rounds} paired rounds, estimates {args.minutes:g} min"
    )
    overheads = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            a = instantiate(Path(tmp), args.jobs, args.chain)
            b = instantiate(Path(tmp), args.jobs, args.chain)
            if r % 2 == 0:
                nix_s = one_call(a, args.max_jobs, version)
                cap_s = capplan_loop(b, args.max_jobs, args.chain, version, args.minutes)
            else:
                cap_s = capplan_loop(b, args.max_jobs, args.chain, version, args.minutes)
                nix_s = one_call(a, args.max_jobs, version)
            per_job = (cap_s - nix_s) / args.jobs * 1000
            overheads.append(per_job)
            each = 1000 / args.jobs
            print(
                f"round {r + 1}: nix build, one call {nix_s:.2f} s ({nix_s * each:.1f} ms/job); "
                f"capplan build loop {cap_s:.2f} s ({cap_s * each:.1f} ms/job); "
                f"overhead {per_job:+.1f} ms/job"
            )
    print(f"capplan's overhead per job: median {statistics.median(overheads):+.1f} ms "
          f"(goal <= 20 ms)")  # fmt: skip
    sys.stdout.flush()


if __name__ == "__main__":
    main()
