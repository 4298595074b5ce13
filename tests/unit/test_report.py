"""core/report/: what the report and the summaries show is the plan's and the matrix's own
data (coverage from each variant's ``serves``, the critical path a chain of needs as long as
the schedule's), every value escaped (HTML and Markdown, hostile names included), the page
holds nothing to fetch or run, and the output is deterministic."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.conftest import Cli

from capplan.cli.planning import plan_with_settings, planned_matrix
from capplan.core.model.runs import RunLevel
from capplan.core.report.data import LEVELS, critical_jobs, gather
from capplan.core.report.escape import html_text, md_text
from capplan.core.report.html import render_html
from capplan.core.report.markdown import (
    MAX_VARIANTS,
    Outcome,
    outcomes,
    plan_summary,
    results_summary,
)

COMPATIBLE = """\
[fleet]
gpus = ["A100", "L4", "RTX 3090", "MI300X"]
[packages.torch]
[packages.cupy]
[policy]
share = "compatible"
ptx = "newest"
[policy.runners_os]
"big-parallel" = ["self-hosted", "big-parallel"]
"""
_RANK = {"native": 0, "compatible": 1, "ptx-jit": 2, "unserved": 3}


def _planned(folder: Path, config: str | None) -> Any:
    if config is None:
        return plan_with_settings(None)
    path = folder / "capplan.toml"
    path.write_text(config)
    return plan_with_settings(path)


@pytest.fixture(params=[None, COMPATIBLE], ids=["default", "compatible"])
def report(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    planned = _planned(tmp_path, request.param)
    return gather(planned.plan, planned_matrix(planned))


def test_each_cell_is_the_best_serve_the_plan_records(report: Any) -> None:
    plan, cov = report.plan, report.coverage
    assert [d[0] for d in cov.devices] == [e.label for p in plan.parts for e in p.fleet]
    assert cov.packages == plan.packages
    best: dict[tuple[str, str], int] = {}
    for v in plan.variants:
        for s in v.serves:
            key = (s.gpu, v.package)
            best[key] = min(best.get(key, 9), s.level.rank)
    unserved = {(d.subject, d.package) for d in plan.unserved}
    for i, (label, _, _) in enumerate(cov.devices):
        for j, package in enumerate(cov.packages):
            cell = cov.cells[i][j]
            if cell.variant is not None:
                variant = plan.variant(cell.variant)
                (serve,) = [s for s in variant.serves if s.gpu == label]
                assert variant.package == package
                assert serve.reason == cell.reason and _RANK[cell.level] == serve.level.rank
                assert serve.level.rank == best[(label, package)]  # no better variant exists
            elif (label, package) in unserved:
                assert cell.level == "unserved" and cell.reason
            else:
                assert cell.level == "none" and (label, package) not in best


def test_a_compatible_plan_has_same_major_cells(tmp_path: Path) -> None:
    planned = _planned(tmp_path, COMPATIBLE)
    cov = gather(planned.plan, planned_matrix(planned)).coverage
    levels = {c.level for row in cov.cells for c in row}
    assert "compatible" in levels and "native" in levels
    served = [s for v in planned.plan.variants for s in v.serves]
    assert any(s.level is RunLevel.COMPATIBLE for s in served)


def test_the_critical_path_is_a_chain_as_long_as_the_schedule_says(report: Any) -> None:
    matrix = report.matrix
    minutes = [matrix.costs[n].minutes for n in matrix.graph.order]
    chain = critical_jobs(matrix, minutes)
    by_pool: dict[str, list[str]] = {}
    for name in matrix.graph.order:  # topological order
        if name in chain:
            by_pool.setdefault(matrix.plan.variant(name).system, []).append(name)
    index = {n: i for i, n in enumerate(matrix.graph.order)}
    for system, names in by_pool.items():
        for earlier, later in itertools.pairwise(names):
            assert earlier in matrix.graph.needs[index[later]], (earlier, later)
        total = sum(minutes[index[n]] for n in names)
        assert total == pytest.approx(matrix.pools[system].critical_path, abs=0.01)
    bars = [b for lane in report.lanes for b in lane.bars]
    assert sorted(b.job for b in bars) == sorted(matrix.graph.order)
    assert {b.job for b in bars if b.critical} == chain


def test_the_page_fetches_nothing_runs_nothing_and_is_deterministic(report: Any) -> None:
    page = render_html(report)
    assert page == render_html(report)
    assert "default-src 'none'" in page  # the policy: no fetch, no script, even if injected
    assert "<script" not in page.lower()
    assert re.search(r"\s(src|srcset|action)=", page) is None
    assert re.findall(r'href="([^"]*)"', page) == ["#coverage", "#schedule", "#costs"]
    assert "url(" not in page and "@import" not in page
    for level in ("native", "unserved") if report.plan.unserved else ("native",):
        assert LEVELS[level].colour in page and LEVELS[level].symbol in page
    for variant in report.plan.variants:
        assert f">{variant.name}<" in page  # the schedule table names every job


def test_the_summary_says_the_same_counts_as_the_matrix(report: Any) -> None:
    text = plan_summary(report)
    summary = report.matrix.summary()
    assert f"{summary['jobs']} build jobs" in text
    stage_rows = [ln for ln in text.splitlines() if re.fullmatch(r"\| \d+ \| .*", ln)]
    assert len(stage_rows) == summary["stages"]
    assert sum(int(r.split("|")[2].replace(",", "")) for r in stage_rows) == summary["jobs"]


@given(st.text(max_size=200))
def test_html_text_leaves_no_markup_and_no_control_character(value: str) -> None:
    out = html_text(value)
    assert not set(out) & set("<>\"'")
    assert re.search("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", out) is None
    assert "&" not in re.sub(r"&(lt|gt|amp|quot|#x27);", "", out)


@given(st.text(max_size=200))
def test_md_text_leaves_nothing_markdown_reads(value: str) -> None:
    out = md_text(value)
    assert "\n" not in out and "\r" not in out and "<" not in out and ">" not in out
    assert re.search("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", out) is None
    # Every special character is escaped: each backslash begins a pair.
    plain = re.sub(r"\\.", "", out)
    assert not set(plain) & set("\\`*_{}[]#!|~$")


def test_results_per_variant_and_past_the_cap() -> None:
    jobs = [("a", "p"), ("b", "p"), ("c", "q"), ("d", "q"), ("e", "q")]
    shard = {"a": "s0", "b": "s0", "c": "s1", "d": "s2", "e": "s2"}
    found = outcomes(
        jobs, shard, {"a", "b", "c", "d"}, {"s0": "success", "s1": "failure", "s2": "skipped"},
        {"b"},
    )  # fmt: skip
    assert [o.result for o in found] == ["built", "failed", "unknown", "not run", "not scheduled"]
    assert outcomes(jobs, shard, None, {}, set())[0].result == "not run"
    text = results_summary(found)
    assert "| a | p | ✅ built |" in text and "| b | p | ❌ failed |" in text
    many = [Outcome(f"j{i}", f"p{i % 7}", "built" if i % 3 else "failed", "") for i in range(4200)]
    big = results_summary(many)
    assert f"more than the {MAX_VARIANTS}" in big and "Summarised" in big
    assert "| p0 |" in big and len(big.encode()) < 64 * 1024


def test_hostile_names_are_escaped_in_markdown() -> None:
    name = 'x<script>alert(1)</script>|*_`\u202e"\n'
    text = results_summary([Outcome(name, name, "failed", "")])
    assert "<script" not in text and "\u202e" not in text
    (row,) = [ln for ln in text.splitlines() if "failed |" in ln and ln.startswith("| x")]
    assert len(re.findall(r"(?<!\\)\|", row)) == 4  # three cells, whatever the name holds
    assert "\\u202e" in row and "\\n" in row


def test_matrix_summary_and_ci_results_on_the_cli(capplan_in: Cli, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(COMPATIBLE)
    out = capplan_in("matrix", "--format", "summary")
    assert out.exit_code == 0, out.stderr
    assert out.stdout.startswith("## capplan: the plan\n") and "### Coverage" in out.stdout
    rows = tmp_path / "rows.tsv"
    summary = tmp_path / "summary.md"
    written = capplan_in(
        "matrix", "--format", "github-output", "--offline", "--rows", str(rows),
        "--summary", str(summary),
    )  # fmt: skip
    assert written.exit_code == 0, written.stderr
    assert summary.read_text() == out.stdout
    failed = tmp_path / "failed"
    failed.mkdir()
    name = next(line.split("\t")[0] for line in rows.read_text().splitlines()[1:])
    added = capplan_in(
        "failures", "add", str(failed / "one.json"), "--drv", "/nix/store/" + "a" * 32 + "-x.drv",
        "--system", "x86_64-linux", "--attr", f"x86_64-linux.{name}",
    )  # fmt: skip
    assert added.exit_code == 0, added.stderr
    shards = " ".join(f"stage{i}_shard0=success" for i in range(8))
    res = capplan_in(
        "ci", "results", "--rows", str(rows), "--failed", str(failed), "--results", shards
    )
    assert res.exit_code == 0, res.stderr
    assert f"| {md_text(name)} |" in res.stdout and "❌ failed" in res.stdout
    assert "❌ 1 failed" in res.stdout and "❔ 0 unknown" in res.stdout
    bad = capplan_in("ci", "results", "--rows", str(rows), "--failed", str(failed),
                     "--results", "stage0=$(id)")  # fmt: skip
    assert bad.exit_code == 4 and bad.stderr.startswith("capplan: error: --results")
    usage = capplan_in("matrix", "--summary", str(summary))
    assert usage.exit_code == 2
