"""The job summaries at an organisation's scale (issue 51): 300 packages over 14 GPU
generations, 4,200 build jobs (tests/integration/test_ci_github_scale.py's knowledge base).
GitHub shows at most 1 MiB of a step's $GITHUB_STEP_SUMMARY: the plan job's Markdown and the
final job's results (every variant, run by the workflow's own command line) stay under it and
say where they summarised."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from tests.integration.test_ci_github_scale import organisation

from capplan.core.report.markdown import GITHUB_SUMMARY_LIMIT_BYTES


def test_both_summaries_of_4200_jobs_stay_under_1_mib(tmp_path: Path) -> None:
    capplan = organisation(tmp_path, 300)
    plan = capplan("matrix", "--format", "summary")
    assert plan.exit_code == 0, plan.stderr
    assert len(plan.stdout.encode()) < GITHUB_SUMMARY_LIMIT_BYTES
    assert "300 packages: how many of them run each way" in plan.stdout
    assert "4,200 planned jobs" in plan.stdout or "4200 build jobs" in plan.stdout

    generated = capplan("ci", "github", "--cache", "c")
    assert generated.exit_code == 0, generated.stderr
    doc = yaml.safe_load(generated.stdout)
    (step,) = [s for s in doc["jobs"]["summary"]["steps"] if "ci results" in s.get("run", "")]
    argv = shlex.split(step["run"].splitlines()[1].removesuffix("\\"))
    assert argv[:4] == ["nix", "run", ".#capplan", "--"]
    argv = argv[4:]
    rows = tmp_path / "rows.tsv"
    out = capplan(
        "matrix", "--format", "github-output", "--offline", "--rows", str(rows),
        "--max-jobs", argv[argv.index("--max-jobs") + 1],
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    argv[argv.index("--rows") + 1] = str(rows)
    argv[argv.index("--failed") + 1] = str(tmp_path / "none")
    # Every shard built: the results as the workflow's variable hands them over.
    results = " ".join(f"{key}=success" for key in doc["jobs"]["summary"]["needs"])
    argv[argv.index("$RESULTS")] = results
    done = capplan(*argv)
    assert done.exit_code == 0, done.stderr
    assert len(done.stdout.encode()) < GITHUB_SUMMARY_LIMIT_BYTES
    assert "Summarised: 4,200 variants" in done.stdout
    assert "✅ 4,200 built" in done.stdout
