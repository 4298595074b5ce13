"""The generated workflow's plan job, run for real: its own command (read back from the YAML)
against a loopback binary cache that `nix copy` filled with half of the plan's outputs."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from nixhelpers import SYSTEM, NixRunner, copy_to_binary_cache, serve_binary_cache
from tests.integration.test_ci_github import read_rows

from capplan.cli.main import cli

yaml = pytest.importorskip("yaml", reason="PyYAML (dev extra) parses the generated workflow")

MAX_JOBS = "8"  # the default plan's jobs: several shards in the first stages
IF = re.compile(
    r"\$\{\{ !cancelled\(\) && !failure\(\) && "
    r"fromJSON\(needs\.plan\.outputs\.(\w+)\)\.include\[0\] != null \}\}"
)


def invoke(repo: NixRunner, args: list[str]) -> Result:
    old = Path.cwd()
    os.chdir(repo.root)
    try:
        # One system: the stand-in builds here only for this machine's system, and the test
        # caches whole stages (CAPPLAN_SYSTEM narrows the default plan's two systems).
        return CliRunner().invoke(cli, args, env={"CAPPLAN_SYSTEM": SYSTEM}, catch_exceptions=False)
    finally:
        os.chdir(old)


def shards(repo: NixRunner) -> dict[str, Any]:
    result = invoke(repo, ["matrix", "--format", "github", "--shards", "--max-jobs", MAX_JOBS])
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.fixture(scope="module")
def half(nix_repo: NixRunner) -> list[str]:
    """All of stage 0, the first shard of stage 1, then later jobs up to half the plan."""
    data = shards(nix_repo)
    # Only this machine's system can be built here (the plan also has aarch64-linux jobs).
    here = {r["name"] for m in data["matrices"].values() for r in m["include"]
            if r["system"] == SYSTEM}  # fmt: skip
    everything = [name for s in data["shards"] for name in s["jobs"] if name in here]
    chosen = [n for s in data["shards"] if s["key"] in ("stage0_shard0", "stage0_shard1",
                                                        "stage1_shard0") for n in s["jobs"]
              if n in here]  # fmt: skip
    chosen += [n for n in everything if n not in chosen][: len(everything) // 2 - len(chosen)]
    assert len(chosen) == len(everything) // 2
    return chosen


@pytest.fixture(scope="module")
def cache(
    nix_repo: NixRunner, half: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    outs = nix_repo.build([f"legacyPackages.{SYSTEM}.{name}" for name in half])
    root = tmp_path_factory.mktemp("ci-cache") / "c"
    assert len(copy_to_binary_cache(outs.values(), root)) >= len(half)
    with serve_binary_cache(root) as url:
        yield url


def test_plan_job_against_a_cache_holding_half_the_outputs(
    nix_repo: NixRunner, half: list[str], cache: str
) -> None:
    generated = invoke(
        nix_repo, ["ci", "github", "--cache", "c", "--cache-url", cache, "--max-jobs", MAX_JOBS]
    )
    assert generated.exit_code == 0, generated.stderr
    doc = yaml.safe_load(generated.stdout)
    if shutil.which("actionlint"):
        lint = subprocess.run(
            ["actionlint", "-no-color", "-"], input=generated.stdout, capture_output=True,
            text=True, check=False,
        )  # fmt: skip
        assert lint.returncode == 0 and lint.stdout == "", lint.stdout
    plan = doc["jobs"]["plan"]
    (plan_step,) = [s for s in plan["steps"] if s.get("id") == "plan"]

    # The plan step's own command line, as the runner's shell would split it.
    argv = shlex.split(plan_step["run"].replace("\\\n", " "))
    assert argv[:4] == ["nix", "run", ".#capplan", "--"] and argv[-2:] == [">>", "$GITHUB_OUTPUT"]
    args = [*argv[4:-2], "--override-input", "nixpkgs", f"path:{nix_repo.standin}"]
    result = invoke(nix_repo, args)
    assert result.exit_code == 0, result.stderr

    # $GITHUB_OUTPUT: name=value lines; each value one line of JSON.
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines())
    for name, expression in plan["outputs"].items():
        assert expression == f"${{{{ steps.plan.outputs.{name} }}}}"
        assert name in outputs, name
    matrices = {k: json.loads(v) for k, v in outputs.items() if k.startswith("stage")}
    built = [row["name"] for m in matrices.values() for row in m["include"]]
    assert not set(built) & set(half)  # the cached jobs are gone
    total = sum(len(s["jobs"]) for s in shards(nix_repo)["shards"])
    assert int(outputs["jobs"]) == len(built) == total - len(half)
    for name in half:
        assert f"skipped {name}: every output is in {cache}" in result.stderr
    # The rows file the build jobs read: one line per job left to build, nothing cached.
    rows = read_rows(nix_repo.root / argv[argv.index("--rows") + 1])
    assert sorted(rows) == sorted(built)

    # The build jobs' `if:` against these outputs: empty shards are skipped, the rest run.
    runs = {}
    for key, body in doc["jobs"].items():
        if key in ("plan", "record", "summary"):
            continue
        match = IF.fullmatch(body["if"])
        assert match and match.group(1) == key
        runs[key] = json.loads(outputs[key])["include"][:1] != []
    assert {k for k, run in runs.items() if not run} == {
        "stage0_shard0", "stage0_shard1", "stage1_shard0",
    }  # fmt: skip
    for key in ("stage0_shard0", "stage0_shard1", "stage1_shard0"):
        assert matrices[key] == {"include": []}
    assert runs["stage1_shard1"] and runs["stage3_shard0"]

    # A build job's step, `nix build -L ".#$ATTR"` with ATTR from its row, builds.
    (step,) = [s for s in doc["jobs"]["stage1_shard1"]["steps"] if s["name"] == "Build"]
    assert step["env"]["ATTR"] == "${{ steps.row.outputs.attr }}"
    assert 'nix build -L --option cores "$cores" ".#$ATTR"' in step["run"]
    row = rows[matrices["stage1_shard1"]["include"][0]["name"]]
    nix_repo.flake(["build"], f".#{row['attr']}", "--no-link", "-L")
