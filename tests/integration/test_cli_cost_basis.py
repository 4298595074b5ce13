"""Which build minutes are measured and which estimated (issue 34, the cost side): `plan` and
`matrix` say it in their bottom line, naming each package whose per-target cost is still a
knowledge-base estimate, and `--json` carries the basis per package (plan, matrix summary)
and per job (matrix)."""

from __future__ import annotations

import json
from pathlib import Path

LLAMA_MAGMA = '[fleet]\ngpus = ["RTX 3090", "A100"]\n[packages.llama-cpp]\n[packages.magma]\n'
MAGMA = '[fleet]\ngpus = ["RTX 3090", "A100"]\n[packages.magma]\n'


def _head(stdout: str) -> str:
    lines = stdout.splitlines()
    end = next(i for i, line in enumerate(lines) if "warning" in line)
    return " ".join(" ".join(lines[: end + 1]).split())


def test_plan_names_measured_and_estimated_costs(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(LLAMA_MAGMA)
    result = capplan_in("plan")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    head = _head(result.stdout)
    # cublas, cuda_cudart and cusparse: prebuilt, one build each, counted rather than named.
    assert (
        "build minutes: measured for llama-cpp (bench/bench_costs.py); estimates for magma "
        "and 3 capability-independent packages" in head
    )
    data = json.loads(capplan_in("plan", "--json").stdout)  # type: ignore[operator]
    basis = {b["package"]: b for b in data["cost_basis"]}
    assert basis["llama-cpp"]["basis"] == "measured"
    assert "costs-llama-cpp.json" in basis["llama-cpp"]["source"]
    assert basis["magma"]["basis"] == "estimate"
    assert basis["magma"]["source"].startswith("estimate")
    assert basis["cublas"]["basis"] == "estimate"


def test_a_plan_without_measurements_says_every_cost_is_estimated(
    capplan_in: object, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(MAGMA)
    result = capplan_in("matrix")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    head = _head(result.stdout)
    assert "build minutes: estimates for magma and 3 capability-independent packages" in head
    assert "measured for" not in head


def test_matrix_json_marks_each_job(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(LLAMA_MAGMA)
    head = _head(capplan_in("matrix").stdout)  # type: ignore[operator]
    assert "measured for llama-cpp" in head and "estimates for magma" in head
    data = json.loads(capplan_in("matrix", "--json").stdout)  # type: ignore[operator]
    marks = {job["name"]: job["cost_basis"] for job in data["jobs"]}
    assert {n: m for n, m in marks.items() if n.startswith("llama-cpp")} == {
        "llama-cpp-sm80": "measured",
        "llama-cpp-sm86": "measured",
    }
    assert {m for n, m in marks.items() if not n.startswith("llama-cpp")} == {"estimate"}
    summary = {b["package"]: b["basis"] for b in data["summary"]["cost_basis"]}
    assert summary == {
        "cublas": "estimate",
        "cuda_cudart": "estimate",
        "cusparse": "estimate",
        "llama-cpp": "measured",
        "magma": "estimate",
    }
