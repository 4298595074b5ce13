"""`capplan matrix --cache URL --skip-cached` end to end: real flake outputs, a binary cache that
`nix copy` wrote, served over HTTP on 127.0.0.1 by tests/data/cache_server.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from nixhelpers import NixRunner, copy_to_binary_cache, serve_binary_cache

from capplan.cli.main import cli


@pytest.fixture(scope="module")
def cached(nix_repo: NixRunner, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    outs = nix_repo.build(
        ["legacyPackages.x86_64-linux.cudnn", "legacyPackages.x86_64-linux.nccl-sm80"]
    )
    root = tmp_path_factory.mktemp("cache") / "c"
    hashes = copy_to_binary_cache(outs.values(), root)
    return {"root": root, "hashes": hashes}


@pytest.fixture(scope="module")
def server(cached: dict[str, object]) -> Iterator[str]:
    root = cached["root"]
    assert isinstance(root, Path)
    with serve_binary_cache(root) as url:
        yield url


def matrix(repo: NixRunner, *args: str) -> Result:
    old = Path.cwd()
    os.chdir(repo.root)
    try:
        return CliRunner().invoke(
            cli,
            ["matrix", "--format", "json", "--override-input", "nixpkgs",
             f"path:{repo.standin}", *args],
            catch_exceptions=False,
        )  # fmt: skip
    finally:
        os.chdir(old)


def test_jobs_a_cache_holds_are_dropped(
    nix_repo: NixRunner, server: str, cached: dict[str, object]
) -> None:
    result = matrix(nix_repo, "--cache", server, "--skip-cached")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    skipped = set(data["summary"]["skipped_cached"])
    assert {"cudnn", "nccl-sm80"} <= skipped
    names = {job["name"] for job in data["jobs"]}
    assert not names & skipped
    assert "torch-sm80" in names and "nccl-sm86" in names
    for job in data["jobs"]:
        assert not set(job["needs"]) & skipped  # built already: no edge to wait on
    assert "skipped nccl-sm80" in result.stderr


def test_a_dead_cache_never_fakes_a_hit(nix_repo: NixRunner, cached: dict[str, object]) -> None:
    result = matrix(nix_repo, "--cache", "http://127.0.0.1:9", "--skip-cached")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["summary"]["skipped_cached"] == []
    assert "127.0.0.1:9" in result.stderr  # the warning names the cache


def test_offline_skips_the_check(nix_repo: NixRunner, server: str) -> None:
    result = matrix(nix_repo, "--cache", server, "--skip-cached", "--offline")
    assert json.loads(result.stdout)["summary"]["skipped_cached"] == []


def test_nix_eval_jobs_file_instead_of_nix_eval(
    nix_repo: NixRunner, server: str, tmp_path: Path
) -> None:
    out = nix_repo.build(["legacyPackages.x86_64-linux.cudnn"])["legacyPackages.x86_64-linux.cudnn"]
    jobs = tmp_path / "jobs.jsonl"
    line = {"attr": "cudnn", "attrPath": ["cudnn"], "name": "cudnn", "system": "x86_64-linux",
            "drvPath": "/nix/store/00000000000000000000000000000000-cudnn.drv",
            "outputs": {"out": str(out)}}  # fmt: skip
    jobs.write_text(json.dumps(line) + "\n")
    result = matrix(nix_repo, "--cache", server, "--skip-cached", "--jobs", str(jobs))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["skipped_cached"] == ["cudnn"]


def test_nix_eval_jobs_file_of_several_systems(
    nix_repo: NixRunner, server: str, tmp_path: Path
) -> None:
    """nix-eval-jobs over `.#packages` prints `<system>.<variant>`, over `.#hydraJobs`
    `<variant>.<system>`: both name the plan's variants; only what the cache holds is skipped."""
    x86 = nix_repo.build(["legacyPackages.x86_64-linux.cudnn"])["legacyPackages.x86_64-linux.cudnn"]
    arm = nix_repo.out_path("legacyPackages.aarch64-linux.cudnn-aarch64")
    jetson = nix_repo.out_path("legacyPackages.aarch64-linux.torch-sm87-aarch64")
    lines = [
        ("x86_64-linux.cudnn", "x86_64-linux", str(x86)),
        ("aarch64-linux.cudnn-aarch64", "aarch64-linux", arm),
        ("torch-sm87-aarch64.aarch64-linux", "aarch64-linux", jetson),
    ]
    jobs = tmp_path / "jobs.jsonl"
    drv = "/nix/store/00000000000000000000000000000000-x.drv"
    records = [
        {"attr": attr, "attrPath": attr.split("."), "name": "x", "system": system,
         "drvPath": drv, "outputs": {"out": out}}
        for attr, system, out in lines
    ]  # fmt: skip
    jobs.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = matrix(nix_repo, "--cache", server, "--skip-cached", "--jobs", str(jobs))
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["summary"]["skipped_cached"] == ["cudnn"]
    names = {job["name"]: job["system"] for job in data["jobs"]}
    assert names["cudnn-aarch64"] == "aarch64-linux"
    assert names["torch-sm87-aarch64"] == "aarch64-linux"


def _run(repo: NixRunner, *args: str) -> Result:
    old = Path.cwd()
    os.chdir(repo.root)
    try:
        return CliRunner().invoke(
            cli, [*args, "--override-input", "nixpkgs", f"path:{repo.standin}"],
            catch_exceptions=False,
        )  # fmt: skip
    finally:
        os.chdir(old)


def test_the_report_and_the_summary_show_what_the_cache_holds(
    nix_repo: NixRunner, server: str, tmp_path: Path
) -> None:
    """Issue 51: the page's cache section and the summary's counts are the matrix's own."""
    page = tmp_path / "report.html"
    result = _run(nix_repo, "report", "--cache", server, "--skip-cached", "--output", str(page))
    assert result.exit_code == 0, result.stderr
    text = page.read_text()
    assert '<section id="cache">' in text
    for name in ("cudnn", "nccl-sm80"):
        assert f"<td>{name}</td><td>{server}</td>" in text  # the cached jobs, by cache
    # The Gantt chart schedules what is left, as `matrix --skip-cached` does.
    left = matrix(nix_repo, "--cache", server, "--skip-cached")
    data = json.loads(left.stdout)
    assert f"on {data['summary']['runners']} runners the schedule takes " in text
    assert f"{data['summary']['makespan_minutes']:g} min" in text
    assert "<title>nccl-sm80: stage" not in text and "<title>nccl-sm86: stage" in text
    summary = _run(nix_repo, "matrix", "--format", "summary", "--cache", server, "--skip-cached")
    assert summary.exit_code == 0, summary.stderr
    cached = len(data["summary"]["skipped_cached"])
    assert f"{len(data['jobs'])} to build, {cached} cached" in summary.stdout
