"""[policy] runner_cores and runner_memory_gb through the CLI (issue 34): matrix --json holds
a job to the compiles its runner's memory allows and asks for big-parallel, --format github
routes it to the big-parallel runners, where its compiles and minutes are those of that runner
(issue 40), and a runner too small for one compile is exit 5."""

from __future__ import annotations

import json
from pathlib import Path

BASE = '[fleet]\ngpus = ["RTX 3090"]\n[packages.llama-cpp]\n[policy]\n'


def test_small_runner_memory_caps_compiles(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        BASE + "runner_cores = 4\nrunner_memory_gb = 1.5\n"
        '[policy.runners_os]\n"big-parallel" = ["self-hosted", "big"]\n'
    )
    result = capplan_in("matrix", "--json")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    job = {j["name"]: j for j in json.loads(result.stdout)["jobs"]}["llama-cpp-sm86"]
    # 1536 MB / 570 MB holds the 4-core runner to 2 compiles: the job goes to the big-parallel
    # runner ([policy] big_parallel_cores 16, big_parallel_memory_gb 64 by default), whose 16
    # cores it uses: the knowledge base's 16-core minutes, as they are.
    assert (job["parallel_compiles"], job["runner_cores"]) == (16, 16)
    assert job["estimated_minutes"] == 3.67
    assert job["required_system_features"] == ["big-parallel"]
    # Without big-parallel runners it stays on the small one: 2 compiles, 16/2 the minutes.
    (tmp_path / "capplan.toml").write_text(BASE + "runner_cores = 4\nrunner_memory_gb = 1.5\n")
    job = {
        j["name"]: j
        for j in json.loads(capplan_in("matrix", "--json").stdout)["jobs"]  # type: ignore[operator]
    }["llama-cpp-sm86"]
    assert (job["parallel_compiles"], job["runner_cores"]) == (2, 4)
    assert job["estimated_minutes"] == round(3.67 * 16 / 2, 2)
    (tmp_path / "capplan.toml").write_text(
        BASE + "runner_cores = 4\nrunner_memory_gb = 1.5\n"
        '[policy.runners_os]\n"big-parallel" = ["self-hosted", "big"]\n'
    )
    rows = json.loads(capplan_in("matrix", "--format", "github").stdout)  # type: ignore[operator]
    row = {r["name"]: r for r in rows["include"]}["llama-cpp-sm86"]
    assert row["os"] == ["self-hosted", "big", "X64"]


def test_default_runner_keeps_every_core(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(BASE)
    job = {
        j["name"]: j
        for j in json.loads(capplan_in("matrix", "--json").stdout)["jobs"]  # type: ignore[operator]
    }["llama-cpp-sm86"]
    assert (job["parallel_compiles"], job["required_system_features"]) == (4, [])


def test_a_runner_too_small_for_one_compile_is_exit_5(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(BASE + "runner_memory_gb = 0.5\n")
    result = capplan_in("matrix")  # type: ignore[operator]
    assert result.exit_code == 5
    assert "one compile of llama-cpp peaks at 570 MB, more than the runner's 0.5 GB" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def test_runner_memory_must_be_positive(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(BASE + "runner_memory_gb = 0\n")
    result = capplan_in("matrix")  # type: ignore[operator]
    assert result.exit_code == 5, result.stderr
    # The key is known (an unknown key is exit 5 too, with "did you mean"): its value is wrong.
    assert "invalid value for 'policy.runner_memory_gb' (got 0)" in result.stderr
    assert "greater than 0" in result.stderr and "Traceback" not in result.stderr
