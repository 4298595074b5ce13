"""Build minutes that come from a measurement (issues 34, 40): llama-cpp's cost in the knowledge
base is what the ninja logs of two real builds give (bench/data/builds, read by capplan's
ninja-log reader and analysis, not typed in), its one-target prediction is within 15% of the
real build's 3.76 min, and the plan still predicts the fat-to-single ratio the compiler showed
in the nvcc sample (bench/data/costs-<package>.json, 9 targets over 1) within 15%."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from capplan.adapters.kb import load_kb
from capplan.adapters.ninja_log import read_ninja_log
from capplan.core.planning.buildlog import build_figures, measured_cost, unit_growth
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import build_matrix
from capplan.core.planning.planner import make_plan

REPO = Path(__file__).resolve().parents[2]
MEASURED = sorted((REPO / "bench" / "data").glob("costs-*.json"))
BUILDS = REPO / "bench" / "data" / "builds"
ONE = BUILDS / "llama-cpp-b1-sm86-16core.ninja_log"
TWO = BUILDS / "llama-cpp-b2-sm80-sm86-16core-partial.ninja_log"
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
def test_the_nvcc_sample_agrees_with_the_real_builds(path: Path) -> None:
    data = json.loads(path.read_text())
    model = _fit(data)
    cost = load_kb().packages[data["package"]].cost
    assert cost.basis == "measured" and path.name in cost.source
    assert data["command"].startswith("python3 bench/bench_costs.py")
    # The nvcc sample gives the peak per compile (its minutes gave way to the real builds').
    assert cost.peak_mb_per_compile == round(max(model["peak_mb"].values()))
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


def test_llama_cpp_cost_is_what_the_real_builds_give() -> None:
    one, two = read_ninja_log(ONE), read_ninja_log(TWO)
    first = build_figures(one)
    growth = unit_growth(one, two)
    # The figures of shared/data/builds/README.md and issue 40.
    assert (first.cuda_units, growth.pairs) == (144, 111)
    assert round(first.wall_s / 60, 2) == 3.76
    assert (round(growth.weighted, 2), round(growth.median, 2)) == (1.78, 1.56)
    assert first.longest_unit.endswith("mmq-instance-nvfp4.cu.o")
    model = measured_cost(first, growth, 2, 16)
    cost = load_kb().packages["llama-cpp"].cost
    assert (cost.reference_cores, cost.basis) == (16, "measured")
    assert ONE.name in cost.source and TWO.name in cost.source
    assert (
        cost.base_minutes,
        cost.per_target_minutes,
        cost.longest_unit_minutes,
        cost.longest_unit_per_target_minutes,
    ) == (
        round(model.base_minutes, 2),
        round(model.per_target_minutes, 2),
        round(model.longest_base_minutes, 2),
        round(model.longest_per_target_minutes, 2),
    )
    # The one-target build through capplan's own plan, on its 16-core machine: within 15% of
    # the real 3.76 min (issue 40's bar; the model before said 2.0).
    config = config_from_mapping(
        {"fleet": {"gpus": ["RTX 3090"]}, "packages": {"llama-cpp": {}},
         "policy": {"system": "x86_64-linux", "cuda": ["13.0"], "runner_cores": 16,
                    "runner_memory_gb": 125}},
        origin="test",
    )  # fmt: skip
    from capplan.core.planning.memory import RunnerSize
    from capplan.core.planning.runners import RunnerSizes, job_costs

    plan = make_plan(load_kb(), config)
    sizes = RunnerSizes(RunnerSize(16, 125 * 1024), 14 * 1024, RunnerSize(16, 125 * 1024), 1e6)
    job = job_costs(load_kb(), plan, sizes)["llama-cpp-sm86"]
    measured = first.wall_s / 60
    assert abs(job.minutes - measured) / measured <= 0.15, (job.minutes, measured)
    # Two targets: the model's CUDA part grows as the paired units did (by construction of the
    # fit), and the whole build less, since its host part does not grow.
    cuda_two = (model.minutes(2) * 16 * 60 - first.host_s) / first.cuda_s
    assert cuda_two == pytest.approx(growth.weighted, rel=1e-9)
    assert model.minutes(2) / model.minutes(1) < growth.weighted
