"""The generated workflow at an organisation's scale (issue 34): 300 packages over 14 GPU
generations, 4,200 build jobs, planned from a knowledge base named by CAPPLAN_KB_DIR.

The plan job's own command (read back from the workflow) runs offline and what it would append to
$GITHUB_OUTPUT is measured as GitHub counts it (UTF-16, 1 MB per job); every matrix holds at most
256 jobs; each build job's row step (the workflow's own bash) finds its values in the rows file
the plan job uploads. A plan that one GitHub run cannot hold is refused with one line naming
the engines that can build it.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Cli
from tests.integration.test_ci_github import (
    actionlint,  # noqa: F401 (a fixture)
    assert_structure,
    one_line_error,
    plan_job_argv,
    plan_jobs,
    read_rows,
    workflow_of,
)

from capplan.errors import ExitCode

KB = Path(__file__).resolve().parents[2] / "planner" / "src" / "capplan" / "kb"
GPUS = ["5.0", "5.2", "6.0", "6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3",
        "12.0", "12.1"]  # fmt: skip
LIMIT = 1_000_000  # bytes of job outputs, counted in UTF-16 (docs.github.com)


def organisation(folder: Path, packages: int) -> Cli:
    """A folder with a knowledge base of ``packages`` more CUDA packages (each depending on up
    to two earlier ones) and a capplan.toml building all of them for 14 GPU generations."""
    kb = folder / "kb"
    kb.mkdir()
    for path in KB.iterdir():
        if path.is_file():
            shutil.copy(path, kb / path.name)
    data = json.loads((KB / "packages.json").read_text())
    rng = random.Random(34)
    for i in range(packages):
        depends = {f"org-{rng.randrange(i):03d}" for _ in range(rng.randint(0, 2))} if i else set()
        data["packages"][f"org-{i:03d}"] = {
            "attr": f"python3Packages.org-{i:03d}",
            "kind": "capability-dependent",
            "depends": sorted(depends),
            "ptx": "forward-compat",
            "limits": {"allow_from": None, "allow": None, "exclude": [], "min": None,
                       "max": None, "suffixes": ["", "a", "f"], "cuda": None, "source": "test"},
            "cost": {"base_minutes": 5, "per_target_minutes": 3, "base_size_mb": 10,
                     "per_target_size_mb": 5, "source": "test"},
            "big_parallel": False,
            "note": "",
            "source": "test",
        }  # fmt: skip
    (kb / "packages.json").write_text(json.dumps(data))
    (folder / "capplan.toml").write_text(
        f"[fleet]\ngpus = {json.dumps(GPUS)}\n"
        + "".join(f"[packages.org-{i:03d}]\n" for i in range(packages))
        + '[policy]\nsystem = "x86_64-linux"\n'
    )
    run = Cli(folder)

    def in_folder(*args: str, env: dict[str, str] | None = None) -> Any:
        return run(*args, env={"CAPPLAN_KB_DIR": str(kb), **(env or {})})

    return in_folder  # type: ignore[return-value]


def test_the_plan_job_of_4200_jobs_keeps_its_outputs_under_1_mb(
    tmp_path: Path,
    actionlint: Callable[[str], str],  # noqa: F811 (the fixture imported above)
) -> None:
    capplan = organisation(tmp_path, 300)
    generated = capplan("ci", "github", "--cache", "c")
    assert generated.exit_code == 0, generated.stderr
    assert actionlint(generated.stdout) == ""
    doc = workflow_of(generated)

    rows_path = tmp_path / "rows.tsv"
    out = capplan(*plan_job_argv(doc, rows_path), "--offline")
    assert out.exit_code == 0, out.stderr
    # What reaches $GITHUB_OUTPUT, as GitHub counts it.
    size = len(out.stdout.encode("utf-16-le"))
    assert size < LIMIT, size
    jobs = plan_jobs(capplan)
    assert len(jobs) >= 4000
    matrices = assert_structure(doc, out.stdout, rows_path, jobs)
    assert max(len(m["include"]) for m in matrices.values()) <= 256
    assert sum(len(m["include"]) for m in matrices.values()) == len(jobs)
    assert out.stdout.splitlines()[-2] == f"jobs={len(jobs)}"

    # A build job's row step, run by bash from the workflow's own text against the rows file
    # where download-artifact puts it.
    build = next(body for key, body in doc["jobs"].items() if key.startswith("stage"))
    (download,) = [s for s in build["steps"] if s.get("uses", "").startswith("actions/download")]
    (step,) = [s for s in build["steps"] if s.get("id") == "row"]
    folder = tmp_path / download["with"]["path"]
    folder.mkdir()
    shutil.copy(rows_path, folder / "capplan-rows.tsv")
    rows = read_rows(rows_path)
    name = "org-299-sm120"
    assert name in rows
    output, proc = _row_step(step, tmp_path, name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert output == (
        f"attr={jobs[name]['attr']}\nsystem=x86_64-linux\ndrv=\ngccarch=\ncpu_features=\npeak_mb=\n"
    )
    output, proc = _row_step(step, tmp_path, "org-299-sm12")  # a prefix is not a name
    assert proc.returncode == 1 and output == ""
    assert proc.stdout.startswith("::error::job org-299-sm12 is not in capplan-rows.tsv")


def _row_step(step: dict[str, Any], cwd: Path, name: str) -> tuple[str, Any]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found (GitHub's ubuntu runners run steps with bash)")
    assert step["env"] == {"NAME": "${{ matrix.name }}"}
    out = cwd / "github_output"
    out.write_text("")
    proc = subprocess.run(
        [bash, "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", step["run"]],
        cwd=cwd, env={"PATH": "/usr/bin:/bin", "NAME": name, "GITHUB_OUTPUT": str(out)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.read_text(), proc


def test_a_plan_one_github_run_cannot_hold_is_refused_with_the_engines_named(
    tmp_path: Path,
) -> None:
    capplan = organisation(tmp_path, 600)  # 8,400 jobs: about 1.15 MB of outputs
    err = one_line_error(capplan("ci", "github", "--cache", "c"), ExitCode.INFEASIBLE)
    assert "does not fit one GitHub Actions run" in err
    assert "outputs for 8400 jobs take" in err and "Hydra or buildbot-nix" in err
    # The plan job refuses it too (a workflow generated for a smaller plan, say), before
    # GitHub would, and writes no rows.
    out = capplan("matrix", "--format", "github-output", "--offline", "--rows", "rows.tsv")
    assert "GitHub allows a job" in one_line_error(out, ExitCode.INFEASIBLE)
    assert not (tmp_path / "rows.tsv").exists()
