"""capplan build's loop on real Nix with jobs estimated under a minute, which share `nix build`
processes: a failing member of a shared build is told apart from the others by the outputs the
store lacks afterwards, and only what needs it is blocked. And a push that keeps failing is
retried, reported, and loses no build."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from capplan.adapters.nix_build import nix_version
from capplan.cli.build_loop import PUSH_ATTEMPTS, BuildRun
from capplan.cli.build_view import BuildView
from capplan.core.planning.build import BuildJob, BuildProgress, BuildSummary

# Six trivial derivations; bad-2 fails; needs-bad needs it, needs-ok needs ok-0.
EXPR = """
{ salt }:
let
  mk = name: script: derivation {
    inherit name;
    system = builtins.currentSystem;
    builder = "/bin/sh";
    args = [ "-c" "echo ${salt} ${name}; ${script}" ];
  };
in {
  ok-0 = mk "ok-0" "echo 0 > $out";
  ok-1 = mk "ok-1" "echo 1 > $out";
  bad-2 = mk "bad-2" "echo planted batch failure >&2; exit 1";
  ok-3 = mk "ok-3" "echo 3 > $out";
  needs-bad = mk "needs-bad" "echo x > $out";
  needs-ok = mk "needs-ok" "echo y > $out";
}
"""
NEEDS = {"needs-bad": ("bad-2",), "needs-ok": ("ok-0",)}


@pytest.fixture()
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[BuildJob]:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    monkeypatch.setenv("NIX_CONFIG", "substituters =")
    (tmp_path / "jobs.nix").write_text(EXPR)
    out: list[BuildJob] = []
    for name in ("ok-0", "ok-1", "bad-2", "ok-3", "needs-bad", "needs-ok"):
        drv = subprocess.run(
            ["nix-instantiate", str(tmp_path / "jobs.nix"), "-A", name,
             "--argstr", "salt", uuid.uuid4().hex],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        outputs = subprocess.run(
            ["nix-store", "-q", "--outputs", drv], capture_output=True, text=True, check=True
        ).stdout.split()
        out.append(
            BuildJob(name, "x86_64-linux", NEEDS.get(name, ()), 0.01, (), drv, tuple(outputs))
        )
    return out


def _run(jobs: list[BuildJob], push: str | None = None) -> tuple[BuildSummary, str]:
    progress = BuildProgress({j.name: j for j in jobs}, 2)
    summary = BuildSummary()
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), BuildView(progress, as_json=True) as view:
        BuildRun(
            jobs, progress=progress, view=view, summary=summary, version=nix_version(),
            builders=None, max_jobs=2, slots=2, push_target=push, failures_file=None,
            keep_going=True,
        ).run()  # fmt: skip
    return summary, sink.getvalue()


def test_a_failure_in_a_shared_build_is_told_apart(jobs: list[BuildJob]) -> None:
    summary, events = _run(jobs)
    assert summary.failed == ["bad-2"]
    assert summary.blocked == ["needs-bad"]
    assert sorted(summary.built) == ["needs-ok", "ok-0", "ok-1", "ok-3"]
    started = [json.loads(line) for line in events.splitlines() if '"started"' in line]
    shared: dict[int, list[str]] = {}
    for e in started:
        shared.setdefault(e["nix_build"], []).append(e["job"])
    # Four ready jobs, two slots: two nix builds of two derivations each, bad-2 in one of them.
    assert sorted(len(v) for v in shared.values())[-2:] == [2, 2]
    assert any("bad-2" in v and len(v) == 2 for v in shared.values())
    assert "planted batch failure" in events


def test_a_failing_push_is_retried_then_reported_and_the_build_kept(
    jobs: list[BuildJob], tmp_path: Path
) -> None:
    ok = [j for j in jobs if j.name == "ok-1"]
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache should be")
    summary, events = _run(ok, push=f"file://{blocked}")
    assert summary.built == ["ok-1"] and summary.push_failed == ["ok-1"]
    assert events.count('"event": "push-retry"') == PUSH_ATTEMPTS - 1
    assert all(Path(p).exists() for p in ok[0].outputs)
