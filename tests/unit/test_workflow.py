"""core/planning/workflow.py: matrix rows, the stage-and-shard layout, validation, the YAML renderer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.core.planning.workflow import (
    BUILD,
    GITHUB_HOSTED_LIMIT_MINUTES,
    WorkflowSettings,
    build_workflow,
    check_cache_name,
    check_cache_url,
    check_label,
    check_ref_name,
    check_relative_path,
    github_output_lines,
    github_rows,
    layout_text,
    output_bytes,
    over_hosted_limit,
    over_run_limits,
    render_yaml,
    rows_text,
    runner_labels,
    shard_layout,
    shard_matrices,
    timeout_minutes,
    without_cached,
)
from capplan.errors import CapplanError, ExitCode, InvalidInputError

yaml = pytest.importorskip("yaml", reason="PyYAML (dev extra) parses the rendered workflows")


def job(name: str, stage: int, needs: list[str] = [], minutes: float = 10.0,  # noqa: B006
        system: str = "x86_64-linux", big: bool = False) -> dict[str, Any]:  # fmt: skip
    return {
        "name": name, "system": system, "attr": f"packages.{system}.{name}",
        "capabilities": [], "cuda": "12.9", "stage": stage, "needs": needs,
        "estimated_minutes": minutes,
        "required_system_features": ["big-parallel"] if big else [],
    }  # fmt: skip


# --------------------------------------------------------------------------- runners, timeouts


def test_cpu_level_rows_go_only_to_runners_declared_for_their_gccarch_feature() -> None:
    """A job requiring gccarch-<arch> (a CPU-level build) runs where [policy.runners_os]
    declares that feature (`<system>/gccarch-<arch>` first), big-parallel or not; with none
    declared it is refused rather than sent to the system's default runner."""
    cpu = job("gromacs-sapphirerapids", 0, big=True) | {
        "required_system_features": ["big-parallel", "gccarch-sapphirerapids"],
        "cpu_features": ["avx512f", "sse4_1"],
    }
    table = {
        "big-parallel": ["big"],
        "gccarch-sapphirerapids": ["spr"],
        "x86_64-linux": ["x86"],
    }
    (row,) = github_rows([cpu], table)
    assert row["os"] == ["spr"]
    assert (row["gccarch"], row["cpu_features"]) == ("sapphirerapids", "avx512f sse4_1")
    table["x86_64-linux/gccarch-sapphirerapids"] = ["spr-x86"]
    assert github_rows([cpu], table)[0]["os"] == ["spr-x86"]
    plain = github_rows([job("torch-sm86", 0, big=True)], table)[0]
    assert plain["os"] == ["big"] and "gccarch" not in plain
    with pytest.raises(CapplanError) as caught:
        github_rows([cpu], {"big-parallel": ["big"], "x86_64-linux": ["x86"]})
    assert caught.value.exit_code is ExitCode.CONFIG
    assert "gccarch-sapphirerapids" in caught.value.message
    bad = cpu | {"cpu_features": ["avx512f; rm -rf /"]}
    with pytest.raises(InvalidInputError):
        github_rows([bad], table)


def test_runner_labels_by_system_and_big_parallel() -> None:
    assert runner_labels("x86_64-linux", False) == ("ubuntu-latest",)
    assert runner_labels("aarch64-linux", False) == ("ubuntu-24.04-arm",)
    assert runner_labels("x86_64-linux", True) == ("ubuntu-latest",)  # nothing configured
    table = {"big-parallel": ["self-hosted", "big-parallel"], "aarch64-linux": ["arm-box"]}
    # A self-hosted list naming no architecture gets the job's (issue 46).
    assert runner_labels("x86_64-linux", True, table) == ("self-hosted", "big-parallel", "X64")
    assert runner_labels("aarch64-linux", True, table) == ("self-hosted", "big-parallel", "ARM64")
    assert runner_labels("x86_64-linux", False, table) == ("ubuntu-latest",)
    assert runner_labels("aarch64-linux", False, table) == ("arm-box",)
    table["aarch64-linux/big-parallel"] = ["arm-big"]
    assert runner_labels("aarch64-linux", True, table) == ("arm-big",)
    assert runner_labels("x86_64-linux", True, table) == ("self-hosted", "big-parallel", "X64")
    # A list that names an architecture (any case) is kept as written.
    table["aarch64-linux/big-parallel"] = ["self-hosted", "arm64", "big"]
    assert runner_labels("aarch64-linux", True, table) == ("self-hosted", "arm64", "big")


def test_rows_carry_each_jobs_system_and_labels() -> None:
    """Two systems in one matrix (what a multi-system plan will give): each row's os follows
    its own system; big-parallel rows get the configured labels."""
    jobs = [job("a", 0), job("b", 0, system="aarch64-linux"), job("t", 1, ["a"], big=True)]
    rows = github_rows(jobs, {"big-parallel": ["self-hosted", "big-parallel"]})
    assert [r["os"] for r in rows] == [
        ["ubuntu-latest"], ["ubuntu-24.04-arm"], ["self-hosted", "big-parallel", "X64"],
    ]  # fmt: skip
    assert {"name", "system", "os", "attr", "timeout_minutes", "needs", "stage"} <= set(rows[0])


def test_timeouts_have_a_margin_and_respect_the_runner_limit() -> None:
    assert timeout_minutes(90, ["ubuntu-latest"]) == (165, 165)
    assert timeout_minutes(300, ["ubuntu-latest"]) == (GITHUB_HOSTED_LIMIT_MINUTES, 480)
    assert timeout_minutes(300, ["self-hosted", "big-parallel"]) == (480, 480)
    rows = github_rows([job("small", 0, minutes=60), job("huge", 0, minutes=400)])
    assert [r["name"] for r in over_hosted_limit(rows)] == ["huge"]
    rows = github_rows([job("huge", 0, minutes=400, big=True)], {"big-parallel": ["self-hosted"]})
    assert over_hosted_limit(rows) == []


# --------------------------------------------------------------------------------------- layout


def test_shards_are_balanced_per_stage_and_keep_order() -> None:
    rows = [job(f"s0-{i}", 0) for i in range(9)] + [job("s1", 1, ["s0-0"])]
    layout = shard_layout(rows, 4)
    assert [(s.key, len(s.jobs)) for s in layout] == [
        ("stage0_shard0", 3), ("stage0_shard1", 3), ("stage0_shard2", 3), ("stage1_shard0", 1),
    ]  # fmt: skip
    assert [n for s in layout if s.stage == 0 for n in s.jobs] == [f"s0-{i}" for i in range(9)]
    assert layout_text(layout) == "3,1"
    assert layout_text(shard_layout(rows, 256)) == "1,1"
    assert shard_layout([], 8) == () and layout_text(()) == ""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=80), st.integers(1, 12))
def test_layout_properties(stages: list[int], max_jobs: int) -> None:
    rows = [job(f"j{i}", s) for i, s in enumerate(sorted(stages))]
    layout = shard_layout(rows, max_jobs)
    assert sorted(n for s in layout for n in s.jobs) == sorted(r["name"] for r in rows)
    for shard in layout:
        assert 1 <= len(shard.jobs) <= max_jobs
        sizes = [len(s.jobs) for s in layout if s.stage == shard.stage]
        assert max(sizes) - min(sizes) <= 1
        assert len(sizes) == -(-sum(sizes) // max_jobs)  # as few shards as the cap allows


def test_cached_jobs_leave_their_shard_and_their_edges() -> None:
    rows = github_rows([job("a", 0), job("b", 0), job("c", 1, ["a", "b"])])
    layout = shard_layout(rows, 1)
    kept = without_cached(rows, {"a", "b"})
    matrices = shard_matrices(layout, kept)
    assert matrices["stage0_shard0"] == {"include": []}
    assert matrices["stage0_shard1"] == {"include": []}
    assert [r["name"] for r in matrices["stage1_shard0"]["include"]] == ["c"]
    assert matrices["stage1_shard0"]["include"][0]["needs"] == []
    lines = github_output_lines(layout, kept, json.dumps).splitlines()
    assert lines[0] == 'stage0_shard0={"include": []}'
    assert json.loads(lines[2].split("=", 1)[1]) == {
        "include": [{"name": "c", "os": ["ubuntu-latest"], "timeout_minutes": 45}]
    }  # only what runs-on, timeout-minutes and the job's name read; the rest is in the rows
    assert lines[-2:] == ["jobs=1", "layout=2,1"]
    assert all("\n" not in line for line in lines)


def test_rows_file_has_every_value_the_outputs_leave_out() -> None:
    rows = github_rows([job("a", 0), job("c", 1, ["a"])])
    rows[1]["drv"] = "/nix/store/0000-c.drv"
    assert rows_text(rows).splitlines() == [
        "# name\tattr\tsystem\tdrv\tgccarch\tcpu_features\tpeak_mb",
        "a\tpackages.x86_64-linux.a\tx86_64-linux\t\t\t\t",
        "c\tpackages.x86_64-linux.c\tx86_64-linux\t/nix/store/0000-c.drv\t\t\t",
    ]
    for bad in ("a\tb", "a\nb", "a\x00"):
        with pytest.raises(InvalidInputError, match=r"cannot be written to capplan-rows\.tsv"):
            rows_text([{**rows[0], "attr": bad}])


def test_output_size_is_counted_in_utf16() -> None:
    assert output_bytes("jobs=1\n") == 14 and output_bytes("é") == 2 and output_bytes("😀") == 4


def test_run_limits_name_what_one_run_cannot_hold() -> None:
    rows = github_rows([job(f"j{i}", 0) for i in range(3)])
    layout = shard_layout(rows, 256)
    assert over_run_limits(layout, rows, "", json.dumps) == []
    # Long names: the plan job's outputs outgrow 1 MB (counted as GitHub does, in UTF-16).
    big = github_rows([job(f"{'x' * 400}{i}", 0) for i in range(1300)])
    (problem,) = over_run_limits(shard_layout(big, 256), big, "", json.dumps)
    assert "outputs for 1300 jobs take" in problem and "1,000,000" in problem
    (problem,) = over_run_limits(layout, rows, "x" * 500_001, json.dumps)
    assert "workflow file takes 500,001 bytes" in problem
    slow = [{**r, "stage": i, "estimated_minutes": 20_000} for i, r in enumerate(rows)]
    (problem,) = over_run_limits(shard_layout(slow, 256), slow, "", json.dumps)
    assert "at least 60,000 min" in problem and "35 days" in problem


# ----------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("name", ["my cache", "$(reboot)", "Caps", "-lead", "trail-", "a_b", ""])
def test_bad_cache_names(name: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        check_cache_name(name)
    assert error.value.exit_code == ExitCode.INVALID_INPUT


def test_good_values_pass_through() -> None:
    assert check_cache_name("my-cuda-cache") == "my-cuda-cache"
    assert check_cache_url("https://example.org/cache/") == "https://example.org/cache"
    assert check_cache_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert check_label("ubuntu-24.04-arm") == "ubuntu-24.04-arm"
    assert check_ref_name("release/2.x") == "release/2.x"
    assert check_relative_path("ci/capplan.toml") == "ci/capplan.toml"


@pytest.mark.parametrize(
    ("check", "value"),
    [
        (check_cache_url, "ftp://x"), (check_cache_url, "https://x/$(id)"),
        (check_cache_url, "https://x y"), (check_cache_url, "https://x/../y"),
        (check_label, "self hosted"), (check_label, "a;b"), (check_ref_name, "a b"),
        (check_ref_name, "x/../y"), (check_relative_path, "/etc/capplan.toml"),
        (check_relative_path, "../capplan.toml"), (check_relative_path, "a b.toml"),
    ],
)  # fmt: skip
def test_bad_values_are_refused(check: Any, value: str) -> None:
    with pytest.raises(CapplanError):
        check(value)


# ------------------------------------------------------------------------------------- workflow


def _workflow(rows: list[dict[str, Any]], max_jobs: int = 256, **kw: Any) -> dict[str, Any]:
    layout = shard_layout(rows, max_jobs)
    doc = build_workflow(WorkflowSettings(cache="c", max_jobs=max_jobs, **kw), layout)
    parsed: dict[str, Any] = yaml.safe_load(render_yaml(doc, ["header"]))
    assert parsed == doc  # the renderer is faithful
    return parsed


def test_each_stage_needs_every_shard_of_the_one_before() -> None:
    rows = github_rows(
        [job(f"a{i}", 0) for i in range(5)] + [job(f"b{i}", 1, ["a0"]) for i in range(3)]
        + [job("c", 2, ["b0", "b1"])]
    )  # fmt: skip
    doc = _workflow(rows, max_jobs=2)
    jobs = doc["jobs"]
    assert list(jobs) == ["plan", "stage0_shard0", "stage0_shard1", "stage0_shard2",
                          "stage1_shard0", "stage1_shard1", "stage2_shard0", "record",
                          "summary"]  # fmt: skip
    # The record job waits for every build job, and runs whatever they did.
    assert jobs["record"]["needs"] == ["plan", *list(jobs)[1:-2]]
    assert jobs["record"]["if"] == "${{ !cancelled() && needs.plan.result == 'success' }}"
    assert jobs["stage0_shard1"]["needs"] == ["plan"]
    assert jobs["stage1_shard0"]["needs"] == ["plan", "stage0_shard0", "stage0_shard1",
                                              "stage0_shard2"]  # fmt: skip
    assert jobs["stage2_shard0"]["needs"] == ["plan", "stage1_shard0", "stage1_shard1"]
    for key, body in jobs.items():
        if key in ("plan", "record", "summary"):
            continue
        output = f"needs.plan.outputs.{key}"
        assert output.removeprefix("needs.plan.outputs.") in jobs["plan"]["outputs"]
        assert body["strategy"] == {"fail-fast": False, "matrix": f"${{{{ fromJSON({output}) }}}}"}
        assert body["if"].startswith("${{ !cancelled() && !failure() && ")
        assert f"fromJSON({output}).include[0] != null" in body["if"]
    (step,) = [s for s in jobs["plan"]["steps"] if s.get("id") == "plan"]
    assert "--expect-shards 3,2,1" in step["run"] and "--max-jobs 2" in step["run"]
    assert "--rows capplan-rows.tsv" in step["run"]
    upload = jobs["plan"]["steps"][-2]  # the rows, for the build jobs
    assert upload["with"] == {"name": "capplan-rows", "path": "capplan-rows.tsv",
                              "retention-days": 1}  # fmt: skip
    # The plan's Markdown goes to the plan job's summary; the summary job runs always, after
    # every build job, and hands `ci results` each one's result.
    assert "--summary capplan-summary.md" in step["run"]
    assert jobs["plan"]["steps"][-1]["run"] == 'cat capplan-summary.md >> "$GITHUB_STEP_SUMMARY"\n'
    summary = jobs["summary"]
    assert summary["if"] == "${{ always() }}"
    assert summary["needs"] == ["plan", *list(jobs)[1:-2]]
    (results,) = [s for s in summary["steps"] if "ci results" in s.get("run", "")]
    assert results["env"]["RESULTS"] == " ".join(
        f"{key}=${{{{ needs.{key}.result }}}}" for key in summary["needs"]
    )
    assert "--max-jobs 2" in results["run"] and '>> "$GITHUB_STEP_SUMMARY"' in results["run"]


def test_a_plan_without_jobs_gives_a_workflow_that_only_plans() -> None:
    doc = _workflow([])
    assert list(doc["jobs"]) == ["plan"]
    assert list(doc["jobs"]["plan"]["outputs"]) == ["jobs"]
    (plan,) = [s for s in doc["jobs"]["plan"]["steps"] if s.get("id") == "plan"]
    assert "--expect-shards none" in plan["run"]


def test_workflow_values_are_validated_before_they_are_written() -> None:
    for bad in (
        {"cache": "bad name"}, {"cache": "c", "branch": "$(x)"},
        {"cache": "c", "cache_url": "https://x/`id`"}, {"cache": "c", "config": "/abs.toml"},
        {"cache": "c", "plan_runner": ("a b",)}, {"cache": "c", "max_jobs": 300},
    ):  # fmt: skip
        with pytest.raises(InvalidInputError):
            build_workflow(WorkflowSettings(**bad), ())


def test_triggers_and_pinned_actions() -> None:
    doc = _workflow(github_rows([job("a", 0)]), branch="trunk")
    retry = {"description": "Build known failures again (the failure record)",
             "type": "boolean", "default": False}  # fmt: skip
    assert doc["on"] == {"push": {"branches": ["trunk"]},
                         "schedule": [{"cron": "17 4 * * 1"}],
                         "workflow_dispatch": {"inputs": {"retry_failed": retry}}}  # fmt: skip
    uses = [s["uses"] for j in doc["jobs"].values() for s in j["steps"] if "uses" in s]
    assert set(uses) == {
        "actions/checkout@v7", "cachix/install-nix-action@v31", "cachix/cachix-action@v17",
        "actions/cache/restore@v6", "actions/cache/save@v6", "actions/upload-artifact@v7",
        "actions/download-artifact@v8",
    }  # fmt: skip
    build = doc["jobs"]["stage0_shard0"]
    download, row = build["steps"][1:3]
    assert download["with"] == {"name": "capplan-rows", "path": "capplan-rows"}
    assert row["id"] == "row" and row["env"] == {"NAME": "${{ matrix.name }}"}
    cachix = build["steps"][5]
    assert cachix["with"] == {"name": "c", "authToken": "${{ secrets.CACHIX_AUTH_TOKEN }}"}
    assert build["steps"][6]["env"] == {
        "ATTR": "${{ steps.row.outputs.attr }}",
        "PEAK_MB": "${{ steps.row.outputs.peak_mb }}",
    }
    assert build["steps"][6]["run"] == BUILD
    assert build["runs-on"] == "${{ matrix.os }}"
    assert build["timeout-minutes"] == "${{ matrix.timeout_minutes }}"


# ------------------------------------------------------------------------------------- renderer

_TEXT = st.text(
    st.characters(min_codepoint=32, max_codepoint=126)
    | st.sampled_from(["é", "\t", "\n", "\r", "\u2028"]),
    max_size=20,
)
_SCALARS = st.one_of(st.booleans(), st.integers(-(10**6), 10**6), _TEXT,
                     st.sampled_from(["on", "no", "null", "12.9", "- x", "a: b", "#c", "'q'"]))  # fmt: skip
_KEYS = st.one_of(_TEXT.filter(bool), st.sampled_from(["on", "if", "runs-on", "yes"]))
_DOCS = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _DOCS, min_size=1, max_size=4))
def test_renderer_round_trips_through_a_real_yaml_parser(doc: dict[str, Any]) -> None:
    assert yaml.safe_load(render_yaml(doc)) == doc


def test_multiline_strings_are_literal_blocks() -> None:
    text = render_yaml({"run": "a \\\n  b\n", "x": [{"run": "one\n"}]})
    assert "run: |\n  a \\\n    b\n" in text
    assert yaml.safe_load(text) == {"run": "a \\\n  b\n", "x": [{"run": "one\n"}]}


def _run_build(tmp_path: Path, peak: str, available_kb: int, cores: int) -> tuple[int, str]:
    """The build step's own script under bash, with stand-ins for nix (prints its arguments) and
    nproc, and a meminfo file in place of /proc/meminfo."""
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nix").write_text('#!/bin/sh\necho "nix $*"\n')
    (bin_dir / "nproc").write_text(f"#!/bin/sh\necho {cores}\n")
    for tool in ("nix", "nproc"):
        (bin_dir / tool).chmod(0o755)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: 99999999 kB\nMemAvailable: {available_kb} kB\n")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "ATTR": "legacyPackages.x86_64-linux.llama-cpp-sm86",
        "PEAK_MB": peak,
        "MEMINFO": str(meminfo),
    }
    done = subprocess.run(
        [bash, "-e", "-c", BUILD],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_the_build_step_runs_as_many_compiles_as_the_runners_memory_holds(
    tmp_path: Path,
) -> None:
    """Issue 34: the row's measured peak per compile and the runner's available memory set
    Nix's cores at the start of the build job, capped by the runner's cores."""
    code, out = _run_build(tmp_path, "570", 2048 * 1024, 4)  # 2 GB: 3 compiles of 570 MB
    assert code == 0, out
    assert "nix build -L --option cores 3 .#legacyPackages.x86_64-linux.llama-cpp-sm86" in out
    code, out = _run_build(tmp_path, "570", 64 * 1024 * 1024, 4)  # plenty: the 4 cores
    assert "--option cores 4 " in out
    code, out = _run_build(tmp_path, "", 1024, 4)  # no measured peak: every core
    assert code == 0 and "--option cores 0 " in out
    code, out = _run_build(tmp_path, "570", 300 * 1024, 4)  # not one compile fits
    assert code == 1 and "nix build" not in out
    assert out.startswith("::error::legacyPackages.x86_64-linux.llama-cpp-sm86: one compile")


def test_a_measured_peak_reaches_the_row_and_the_rows_file() -> None:
    measured = job("llama-cpp-sm86", 0) | {"peak_mb_per_compile": 570, "parallel_compiles": 4}
    rows = github_rows([measured, job("magma-sm86", 0)])
    assert rows[0]["peak_mb"] == 570 and "peak_mb" not in rows[1]
    lines = rows_text(rows).splitlines()
    assert lines[1].split("\t")[-1] == "570" and lines[2].split("\t")[-1] == ""
