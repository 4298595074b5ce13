"""The cost basis is each package's knowledge-base ``basis`` field (issue 40: a structured
field, not a prefix of the source text), with the machine its minutes are stated for; the
bottom line names the estimates."""

from __future__ import annotations

from dataclasses import replace

from capplan.adapters.kb import load_kb
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.costbasis import CostBasis, cost_bases, cost_line
from capplan.core.planning.planner import make_plan

CONFIG = {
    "fleet": {"gpus": ["RTX 3090"]},
    "packages": {"llama-cpp": {}, "magma": {}},
    "policy": {"system": "x86_64-linux"},
}


def test_the_basis_follows_the_field_not_the_text() -> None:
    kb = load_kb()
    plan = make_plan(kb, config_from_mapping(CONFIG, origin="test"))
    bases = {b.package: b for b in cost_bases(kb, plan)}
    assert {p for p, b in bases.items() if b.measured} == {"llama-cpp"}
    llama = bases["llama-cpp"].to_json()
    assert llama["basis"] == "measured"
    assert llama["reference"] == {
        "cores": 16,
        "cpu": "Intel Xeon (Ice Lake server class), 125 GB",
    }
    assert bases["magma"].to_json()["reference"] == {"cores": 16, "cpu": None}
    # A prebuilt redistributable is fetched, not compiled: its minutes hold on any runner.
    assert bases["cublas"].to_json()["reference"] == {"cores": None, "cpu": None}
    assert bases["cublas"].reference == "any runner (prebuilt)"
    # The same plan with llama-cpp's basis an estimate: nothing is measured, whatever the
    # source's text says.
    info = kb.packages["llama-cpp"]
    estimate = replace(info, cost=replace(info.cost, basis="estimate"))
    kb2 = replace(kb, packages={**kb.packages, "llama-cpp": estimate})
    assert info.cost.source.startswith("measured")
    assert not any(b.measured for b in cost_bases(kb2, plan))
    # And a source that begins "measured:" makes no measurement of an estimate.
    magma = kb.packages["magma"]
    worded = replace(magma, cost=replace(magma.cost, source="measured: not really"))
    kb3 = replace(kb, packages={**kb.packages, "magma": worded})
    assert {b.package for b in cost_bases(kb3, plan) if b.measured} == {"llama-cpp"}


def test_every_cost_source_agrees_with_its_basis() -> None:
    kb = load_kb()
    costs = {f"packages.{n}": p.cost for n, p in kb.packages.items()}
    assert kb.part(AmdKnowledgeBase) is not None
    costs.update({f"amd builds.{n}": b.cost for n, b in kb.part(AmdKnowledgeBase).builds.items()})
    costs.update(
        {f"amd stack.{n}": s.cost for n, s in kb.part(AmdKnowledgeBase).stack_libraries.items()}
    )
    bad = {k: c.source[:40] for k, c in costs.items() if not c.source.startswith(c.basis)}
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
