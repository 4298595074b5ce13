"""The generated workflow's failure memory, run for real, in the order GitHub runs it.

The `run:` steps come from the workflow YAML that `capplan ci github` writes, and run in bash as
the runner would: the plan step (real capplan, real `nix eval` of the derivations against the
stand-in nixpkgs, a loopback binary cache), one build step whose `nix build` fails (the one fake
part: a failing build), that job's record step, the record job's merge step, then the plan step
again. The `uses:` steps (cache restore and save, artifact upload and download) are GitHub's
own; the test moves the files where they would put them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nixhelpers import NIX_OPTIONS, SYSTEM, NixRunner, serve_binary_cache

yaml = pytest.importorskip("yaml", reason="PyYAML (dev extra) parses the generated workflow")

SRC = Path(__file__).resolve().parents[2] / "planner" / "src"
FAIL = "magma-sm86"  # in the committed plan; torch-sm86 and torchvision-sm86 build on it
USERS = {"torch-sm86", "torchvision-sm86"}

# `nix` as the workflow's steps call it: `nix run .#capplan -- ...` runs this checkout's
# capplan, `nix build` fails for $FAKE_FAIL_ATTR (and succeeds for any other attr without
# building), and every other call (capplan's own `nix eval`) goes to the real nix with the
# stand-in nixpkgs, offline.
SHIM = """#!{python}
import os, sys
args = sys.argv[1:]
if args[:3] == ["run", ".#capplan", "--"]:
    os.execv(sys.executable, [sys.executable, "-m", "capplan", *args[3:]])
if args[:1] == ["build"]:
    target = [a for a in args if a.startswith(".#")][0][2:]
    if target == os.environ["FAKE_FAIL_ATTR"]:
        for i in range(60):
            print(f"magma> [{{i}}/900] Building CUDA object magma_sgemm_{{i}}.cu.o", flush=True)
        print("magma> nvcc error   : 'ptxas' died due to signal 9 (Kill signal)", flush=True)
        print(f"error: builder for '/nix/store/...-magma.drv' failed with exit code 2", flush=True)
        sys.exit(1)
    sys.exit(0)
os.execv({nix!r}, [{nix!r}, *args, *{options!r}, "--override-input", "nixpkgs", {standin!r}])
"""


@pytest.fixture(scope="module")
def empty_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("empty-cache")
    (root / "nix-cache-info").write_text("StoreDir: /nix/store\nWantMassQuery: 1\nPriority: 30\n")
    with serve_binary_cache(root) as url:
        yield url


def _steps(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The steps the test runs, by name, from the plan job, a build job and the record job."""
    jobs = doc["jobs"]
    build_job = next(body for key, body in jobs.items() if key.startswith("stage"))
    chosen = {}
    for job in (jobs["plan"], build_job, jobs["record"]):
        for step in job["steps"]:
            chosen[step["name"]] = step
    return chosen


def _env(step: dict[str, Any], values: dict[str, str]) -> dict[str, str]:
    """The step's `env:` with each `${{ ... }}` replaced by what GitHub would give it."""
    out = {}
    for name, expression in step.get("env", {}).items():
        assert expression in values, (name, expression)
        out[name] = values[expression]
    return out


def _bash(run: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # GitHub's default for `run:` on Linux: bash --noprofile --norc -eo pipefail {0}.
    assert "${{" not in run  # values reach the script through env, never spliced into it
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", run],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip


def test_a_failed_build_is_recorded_and_left_out_of_the_next_plan(
    nix_repo: NixRunner, empty_cache: str, tmp_path: Path
) -> None:
    real_nix = shutil.which("nix")
    assert real_nix is not None
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "nix"
    shim.write_text(SHIM.format(python=sys.executable, nix=real_nix, options=list(NIX_OPTIONS),
                                standin=f"path:{nix_repo.standin}"))  # fmt: skip
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    base_env = {
        **os.environ,
        "PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(SRC),
        "CAPPLAN_SYSTEM": SYSTEM,  # the stand-in evaluates this machine's system only
        "NO_COLOR": "1",
    }
    generated = subprocess.run(
        [sys.executable, "-m", "capplan", "ci", "github", "--cache", "c", "--cache-url",
         empty_cache],
        cwd=nix_repo.root, env=base_env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    steps = _steps(yaml.safe_load(generated.stdout))
    plan_step = steps["Plan what the cache lacks"]

    def plan(retry: str = "false") -> tuple[dict[str, list[dict[str, Any]]], str]:
        out = tmp_path / "github_output"
        out.write_text("")
        env = _env(plan_step, {"${{ inputs.retry_failed == true }}": retry})
        result = _bash(
            plan_step["run"], nix_repo.root, {**base_env, **env, "GITHUB_OUTPUT": str(out)}
        )
        assert result.returncode == 0, result.stderr
        lines = dict(line.split("=", 1) for line in out.read_text().splitlines())
        shards = {k: json.loads(v)["include"] for k, v in lines.items() if k.startswith("stage")}
        return shards, result.stderr

    record = nix_repo.root / "capplan-failures.json"
    record.unlink(missing_ok=True)  # the cache restore found nothing: the first run
    first, stderr = plan()
    rows = {row["name"]: row for rows in first.values() for row in rows}
    assert "no failure record at capplan-failures.json yet" in stderr
    assert {FAIL} | USERS <= set(rows)

    # The failing job: it downloads the plan's rows and reads its own (download-artifact puts
    # the file in the folder named by `path`), then its build step fails and its record step
    # writes its own record.
    download = steps["Download the plan's rows"]["with"]
    assert download["name"] == steps["Upload the plan's rows"]["with"]["name"]
    (nix_repo.root / download["path"]).mkdir(exist_ok=True)
    shutil.move(nix_repo.root / steps["Upload the plan's rows"]["with"]["path"],
                nix_repo.root / download["path"] / "capplan-rows.tsv")  # fmt: skip
    read = steps["Read this job's row"]
    row_out = tmp_path / "row_output"
    row_out.write_text("")
    found = _bash(read["run"], nix_repo.root,
                  {**base_env, **_env(read, {"${{ matrix.name }}": FAIL}),
                   "GITHUB_OUTPUT": str(row_out)})  # fmt: skip
    assert found.returncode == 0, found.stdout + found.stderr
    row = {"name": FAIL, **dict(line.split("=", 1) for line in row_out.read_text().splitlines())}
    assert row["drv"].endswith(".drv") and row["system"] == SYSTEM
    matrix = {"${{ matrix.name }}": FAIL} | {
        f"${{{{ steps.row.outputs.{key} }}}}": row[key]
        for key in ("attr", "drv", "system", "peak_mb")
    }
    build = steps["Build"]
    failed = _bash(build["run"], nix_repo.root,
                   {**base_env, **_env(build, matrix), "FAKE_FAIL_ATTR": row["attr"]})  # fmt: skip
    assert failed.returncode == 1 and "signal 9" in failed.stdout  # tee shows the log live
    assert (
        steps["Record the failure"]["if"] == "${{ failure() && steps.build.outcome == 'failure' }}"
    )
    recorded = _bash(steps["Record the failure"]["run"], nix_repo.root,
                     {**base_env, **_env(steps["Record the failure"], matrix)})  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    own = nix_repo.root / f"capplan-failure-{FAIL}.json"
    upload = steps["Upload the failure"]["with"]
    assert upload["path"] == "capplan-failure-${{ matrix.name }}.json"
    # A job that builds: no record.
    ok = _bash(build["run"], nix_repo.root, {**base_env, "ATTR": "cublas", "FAKE_FAIL_ATTR": "-"})
    assert ok.returncode == 0 and not (nix_repo.root / "capplan-failure-cublas.json").exists()

    # The record job: download-artifact puts every job's file in one folder; merge, save.
    download = steps["Download this run's failures"]["with"]
    assert download["pattern"] == "capplan-failure-*" and download["merge-multiple"] is True
    folder = nix_repo.root / download["path"]
    folder.mkdir(exist_ok=True)
    shutil.move(own, folder / own.name)
    merged = _bash(steps["Merge them into the record"]["run"], nix_repo.root, base_env)
    assert merged.returncode == 0, merged.stderr
    assert steps["Save the failure record"]["with"]["path"] == record.name
    entries = json.loads(record.read_text())["failures"]
    assert list(entries) == [row["drv"]]
    entry = entries[row["drv"]]
    assert entry["attr"] == FAIL and entry["system"] == SYSTEM and entry["count"] == 1
    assert (
        entry["log_tail"][-2] == "magma> nvcc error   : 'ptxas' died due to signal 9 (Kill signal)"
    )
    # The derivation the plan evaluated is the one Nix builds for the attribute.
    assert row["drv"] == nix_repo.flake(["eval"], f".#{row['attr']}.drvPath", "--raw").stdout

    # The next run: the failure and what needs it are gone, and the plan says so.
    second, stderr = plan()
    left = {row["name"] for rows in second.values() for row in rows}
    assert set(rows) - left == {FAIL} | USERS
    assert f"skipped {FAIL}: known failure of {row['drv']}" in stderr
    assert "skipped torch-sm86: needs magma-sm86, a known failure" in stderr
    # A dispatched run with retry_failed builds them again.
    retried, stderr = plan(retry="true")
    assert {r["name"] for rows in retried.values() for r in rows} == set(rows)
    assert f"retrying {FAIL}" in stderr
