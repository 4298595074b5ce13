"""`capplan build` on real Nix (2.8, and 2.18.9 under scripts/nix218) against the stand-in:
the whole plan built and pushed, a rerun that builds nothing, a planted failure recorded with its
dependants blocked, --skip-cached against a half-filled loopback cache, SIGINT mid-build.

Each session salts the stand-in's derivations (buildhelpers.planted_copy), so the first build
really builds; later tests share its outputs and build only what they change.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from buildhelpers import build_env, by_event, planted_copy, run_build
from nixhelpers import SYSTEM, NixRunner, serve_binary_cache

SALT = uuid.uuid4().hex[:12]
PLAIN = f'{{ pname, record }}: "# {SALT}\\n"'
MAGMA_86 = 'pname == "magma" && (record.cudaCapabilities or [ ]) == [ "8.6" ]'
FAILING = (
    f'{{ pname, record }}: "# {SALT}\\n" + (if {MAGMA_86} then '
    '"echo planted failure of magma 8.6 >&2; exit 1\\n" else "")'
)
SLEEP = f"37.{int(SALT[:6], 16) % 1000:03d}"  # a marker ps shows: this session's sleep
SLOW = f'{{ pname, record }}: "# {SALT}\\n" + (if pname == "torch" then "/bin/sleep {SLEEP}\\n" else "")'


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> NixRunner:
    if subprocess.run(["which", "nix"], capture_output=True).returncode != 0:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    return planted_copy(tmp_path_factory.mktemp("build-repo"), PLAIN)


def _matrix(repo: NixRunner) -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "capplan", "matrix", "--json"],
        cwd=repo.root, env=build_env(), capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {job["name"]: job for job in json.loads(out)["jobs"]}


@pytest.fixture(scope="module")
def jobs(repo: NixRunner) -> dict[str, dict[str, Any]]:
    return _matrix(repo)


@pytest.fixture(scope="module")
def first(
    repo: NixRunner, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], Path]:
    cache = tmp_path_factory.mktemp("cache")
    proc, events = run_build(repo, "--push", f"file://{cache}")
    return proc, events, cache


def _narinfos(cache: Path) -> set[str]:
    return {p.name.removesuffix(".narinfo") for p in cache.glob("*.narinfo")}


def _hash(path: str) -> str:
    return Path(path).name.split("-", 1)[0]


def test_the_whole_plan_is_built_in_order_and_pushed(
    first: tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], Path],
    jobs: dict[str, dict[str, Any]],
) -> None:
    proc, events, cache = first
    assert proc.returncode == 0, [e for e in events if e["event"] == "failed"]
    here = {n for n, j in jobs.items() if j["system"] == SYSTEM}
    elsewhere = set(jobs) - here
    assert set(by_event(events, "built")) == here
    # No aarch64 builder: each of those jobs is named up front, once, and never started.
    assert set(by_event(events, "unbuildable")) == elsewhere
    assert not set(by_event(events, "started")) & elsewhere
    assert set(by_event(events, "pushed")) == here
    started = by_event(events, "started")
    built_at = {e["job"]: i for i, e in enumerate(events) if e["event"] == "built"}
    start_at = {e["job"]: i for i, e in enumerate(events) if e["event"] == "started"}
    for name in here:  # dependencies first
        assert all(built_at[need] < start_at[name] for need in jobs[name]["needs"]), name
    # One local slot: among ready jobs the longest critical path goes first. cublas leads to
    # magma, torch and torchvision (280 min of chain); cutensor only to cupy (162 min).
    assert started.index("cublas") < started.index("cutensor")
    assert started.index("magma-sm80") < started.index("cupy")
    summary = events[-1]
    assert summary["event"] == "summary" and summary["exit_code"] == 0
    assert summary["estimated_minutes"] > 0
    # Every output of every built job is in the cache, as its own narinfo.
    outputs = {e["job"]: e["derivation"] for e in events if e["event"] == "started"}
    assert len(outputs) == len(here)
    assert len(_narinfos(cache)) >= len(here)


def test_a_rerun_builds_nothing(
    repo: NixRunner,
    first: tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], Path],
    jobs: dict[str, dict[str, Any]],
) -> None:
    proc, events = run_build(repo)
    assert proc.returncode == 0, proc.stderr
    assert by_event(events, "started") == []
    assert set(by_event(events, "present")) == set(by_event(first[1], "built"))
    assert events[-1]["built"] == []


def test_a_planted_failure_is_recorded_and_blocks_its_dependants(
    first: tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], Path],
    tmp_path: Path,
) -> None:
    failing = planted_copy(tmp_path / "repo", FAILING)
    record = tmp_path / "failures.json"
    proc, events = run_build(failing, "--keep-going", "--failures", str(record))
    assert proc.returncode == 19, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("capplan: error: 1 job(s) failed")
    assert by_event(events, "failed") == ["magma-sm86"]
    # Only the changed derivations build: magma 8.6 (fails) and, with --keep-going, nothing else.
    assert set(by_event(events, "blocked")) == {"torch-sm86", "torchvision-sm86"}
    assert not {"torch-sm86", "torchvision-sm86"} & set(by_event(events, "started"))
    failed = next(e for e in events if e["event"] == "failed")
    assert failed["blocks"] == ["torch-sm86", "torchvision-sm86"]
    data = json.loads(record.read_text())
    ((drv, entry),) = data["failures"].items()
    assert drv == failed["derivation"]
    assert entry["attr"] == "magma-sm86" and entry["system"] == SYSTEM
    assert any("planted failure of magma 8.6" in line for line in entry["log_tail"])
    # The next run knows it: the failure and what needs it are left out, nothing is tried.
    proc, events = run_build(failing, "--failures", str(record))
    assert proc.returncode == 0, proc.stderr
    assert by_event(events, "started") == []
    assert events[-1]["known_failures"] == ["magma-sm86"]
    assert by_event(events, "known-failure") == ["magma-sm86"]
    assert {"torch-sm86", "torchvision-sm86"} <= set(events[-1]["blocked"])
    assert "skipped magma-sm86: known failure" in proc.stderr


@pytest.fixture()
def half_cached(
    tmp_path: Path, jobs: dict[str, dict[str, Any]]
) -> Iterator[tuple[NixRunner, list[str], str]]:
    """A freshly salted copy whose first half of jobs (in dependency order, so the half is
    closed under needs) was built, pushed to a binary cache and deleted from the store."""
    fresh = planted_copy(tmp_path / "repo", f'{{ pname, record }}: "# {SALT}-half\\n"')
    order = [n for n, j in jobs.items() if j["system"] == SYSTEM]
    half = order[: len(order) // 2]
    assert all(need in half for name in half for need in jobs[name]["needs"])
    cache = tmp_path / "cache"
    args = [a for name in half for a in ("--only", name)]
    proc, events = run_build(fresh, *args, "--push", f"file://{cache}")
    assert proc.returncode == 0, proc.stderr
    assert set(by_event(events, "pushed")) == set(half)
    outs = subprocess.run(
        ["nix-store", "--query", "--outputs", *[e["derivation"] for e in events if e["event"] == "started"]],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    # With what was built on them (a stand-in dependency that is no job of the plan).
    gone = subprocess.run(
        ["nix-store", "--query", "--referrers-closure", *outs],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    subprocess.run(["nix-store", "--delete", *gone], capture_output=True, text=True, check=True)
    with serve_binary_cache(cache) as url:
        yield fresh, half, url


def test_skip_cached_builds_only_what_the_cache_lacks(
    half_cached: tuple[NixRunner, list[str], str], jobs: dict[str, dict[str, Any]]
) -> None:
    fresh, half, url = half_cached
    here = {n for n, j in jobs.items() if j["system"] == SYSTEM}
    # Nix fetches what the kept jobs build against from the same cache (unsigned: a test cache).
    env = build_env(f"substituters = {url}\nrequire-sigs = false")
    proc, events = run_build(fresh, "--skip-cached", "--cache", url, env=env)
    assert proc.returncode == 0, proc.stderr
    assert set(by_event(events, "cached")) == set(half)
    assert set(by_event(events, "started")) == here - set(half)
    assert set(by_event(events, "built")) == here - set(half)


def test_sigint_mid_build_stops_nix_and_records_nothing_half(
    first: tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], Path],
    tmp_path: Path,
) -> None:
    slow = planted_copy(tmp_path / "repo", SLOW)
    record = tmp_path / "failures.json"
    cache = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-m", "capplan", "build", "--json", "--keep-going",
         "--failures", str(record), "--push", f"file://{cache}",
         "--override-input", "nixpkgs", f"path:{slow.standin}"],
        cwd=slow.root, env=build_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    events: list[dict[str, Any]] = []
    try:
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["event"] == "started" and events[-1]["job"].startswith("torch-"):
                break
        else:
            pytest.fail("no torch build started: " + (proc.stderr.read() if proc.stderr else ""))
        deadline = time.monotonic() + 30
        while not _sleeping() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _sleeping(), "the slow builder never started"
        proc.send_signal(signal.SIGINT)
        rest, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    events += [json.loads(line) for line in rest.splitlines() if line.strip()]
    assert proc.returncode == 130, stderr
    torch = next(
        e["job"] for e in events if e["event"] == "started" and e["job"].startswith("torch-")
    )
    summary = events[-1]
    assert summary["event"] == "summary" and summary["interrupted"] == [torch]
    assert torch not in summary["failed"] and torch not in summary["pushed"]
    assert not record.exists() or torch not in record.read_text()
    # Nix stopped its builder: no sleep of this session is left.
    assert not _sleeping()
    out = subprocess.run(
        ["nix-store", "--query", "--outputs", next(e["derivation"] for e in events if e.get("job") == torch and e["event"] == "started")],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert not {_hash(o) for o in out} & _narinfos(cache)
    assert not any(os.path.exists(o) for o in out)


def _sleeping() -> bool:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    return any(line.strip() == f"/bin/sleep {SLEEP}" for line in ps.stdout.splitlines())


def test_a_push_that_fails_is_exit_19_and_keeps_the_build(
    first: tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], Path],
    repo: NixRunner,
    tmp_path: Path,
) -> None:
    # Built but not in the cache: capplan build's job is filling the cache, so a run whose
    # push never lands must not end as a success (a cron job would never hear of it).
    target = tmp_path / "not-a-folder"
    target.write_text("a file where the cache should be")
    proc, events = run_build(repo, "--push", f"file://{target}", "--only", "cupy")
    assert proc.returncode == 19, proc.stderr
    failed = by_event(events, "push-failed")  # cupy and the jobs it needs
    assert "cupy" in failed
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("capplan: error: ")]
    assert f"{len(failed)} job(s) built but not pushed to file://" in line
    assert line.endswith("(the builds stay in the local store; fix the target and run capplan "
                         "build again, which pushes them)")  # fmt: skip
    assert "cupy" in by_event(events, "present") + by_event(events, "built")
    assert not by_event(events, "failed")
