"""The cost basis reads each package's knowledge-base cost source: ``measured:`` (a fit from
bench/bench_costs.py) or anything else, an estimate; the bottom line names the estimates."""

from __future__ import annotations

from dataclasses import replace

from capplan.adapters.kb import load_kb
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.costbasis import CostBasis, cost_bases, cost_line, is_measured
from capplan.core.planning.planner import make_plan

CONFIG = {
    "fleet": {"gpus": ["RTX 3090"]},
    "packages": {"llama-cpp": {}, "magma": {}},
    "policy": {"system": "x86_64-linux"},
}


def test_the_basis_follows_the_source() -> None:
    kb = load_kb()
    plan = make_plan(kb, config_from_mapping(CONFIG, origin="test"))
    measured = {b.package for b in cost_bases(kb, plan) if b.measured}
    assert measured == {"llama-cpp"}
    # The same plan with llama-cpp's cost back to an estimate: nothing is measured.
    info = kb.packages["llama-cpp"]
    estimate = replace(info, cost=replace(info.cost, source="estimate: 8 + 6 per target"))
    kb2 = replace(kb, packages={**kb.packages, "llama-cpp": estimate})
    assert not any(b.measured for b in cost_bases(kb2, plan))


def test_every_cost_source_says_measured_or_estimate() -> None:
    kb = load_kb()
    sources = {f"packages.{n}": p.cost.source for n, p in kb.packages.items()}
    assert kb.amd is not None
    sources.update({f"amd builds.{n}": b.cost.source for n, b in kb.amd.builds.items()})
    sources.update({f"amd stack.{n}": s.cost.source for n, s in kb.amd.stack_libraries.items()})
    bad = {
        k: s[:40] for k, s in sources.items() if not (is_measured(s) or s.startswith("estimate"))
    }
    assert bad == {}


def test_cost_line_names_per_target_estimates_and_counts_the_rest() -> None:
    def b(package: str, measured: bool, independent: bool, vendor: str = "nvidia") -> CostBasis:
        return CostBasis(package, vendor, measured, "x", independent)

    assert cost_line(()) is None
    assert cost_line((b("cublas", False, True),)) == (
        "build minutes: estimates for 1 capability-independent package"
    )
    line = cost_line(
        (
            b("cublas", False, True),
            b("llama-cpp", True, False),
            b("torch", False, False, "amd"),
            b("torch", False, False),
        )
    )
    assert line == (
        "build minutes: measured for llama-cpp (bench/bench_costs.py); "
        "estimates for torch (amd), torch (nvidia) and 1 capability-independent package"
    )
