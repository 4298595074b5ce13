"""Build minutes that come from a measurement (issue 34): the knowledge base's cost of each
measured package is the fit of its stored measurement (bench/data/costs-<package>.json, written
by bench/bench_costs.py), its source says so and names the command, and capplan's plan predicts
the fat-to-single ratio the compiler showed (9 targets over 1) within 15%."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import build_matrix
from capplan.core.planning.planner import make_plan

REPO = Path(__file__).resolve().parents[2]
MEASURED = sorted((REPO / "bench" / "data").glob("costs-*.json"))
NINE = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"]


def _fit(data: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench_costs
    finally:
        sys.path.pop(0)
    data = {**data, "sizes": {int(k): v for k, v in data["sizes"].items()}}
    return bench_costs.fit(data, 16)


@pytest.mark.parametrize("path", MEASURED, ids=[p.stem for p in MEASURED])
def test_measured_costs_are_the_fit_of_their_measurement(path: Path) -> None:
    data = json.loads(path.read_text())
    model = _fit(data)
    cost = load_kb().packages[data["package"]].cost
    assert cost.source.startswith("measured:") and path.name in cost.source
    assert data["command"].startswith("python3 bench/bench_costs.py")
    assert (cost.base_minutes, cost.per_target_minutes) == (
        round(model["base_minutes"], 2),
        round(model["per_target_minutes"], 2),
    )
    # capplan's own prediction, through the planner: the fat build for nine GPUs against one
    # of its single-target builds.
    config = config_from_mapping(
        {"fleet": {"gpus": NINE}, "packages": {data["package"]: {}},
         "policy": {"system": "x86_64-linux", "cuda": ["13.0"], "fat": "fleet"}},
        origin="test",
    )  # fmt: skip
    jobs = {j["name"]: j for j in build_matrix(make_plan(load_kb(), config), 4).jobs()}
    fat = jobs[f"{data['package']}-fat"]
    single = jobs[f"{data['package']}-sm86"]
    assert len(fat["capabilities"]) == 9
    predicted = fat["estimated_minutes"] / single["estimated_minutes"]
    measured = model["total_cpu_s"][9] / model["total_cpu_s"][1]
    assert abs(predicted - measured) / measured <= 0.15, (predicted, measured)


def test_there_is_a_measurement() -> None:
    assert [p.name for p in MEASURED] == ["costs-llama-cpp.json"]
