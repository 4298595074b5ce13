"""Peak memory per compile decides how many compiles a runner holds at once (issue 34):
``min(cores, floor(memory / peak))``, a job held below the runner's cores needs big-parallel,
and a runner that cannot hold one compile is refused with the memory it needs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import build_matrix
from capplan.core.planning.memory import RunnerSize, compile_fit
from capplan.core.planning.planner import make_plan
from capplan.core.planning.runners import RunnerSizes, job_costs
from capplan.errors import ConfigError

CONFIG = {
    "fleet": {"gpus": ["RTX 3090"]},
    "packages": {"llama-cpp": {}, "magma": {}},
    "policy": {"system": "x86_64-linux"},
}


@pytest.mark.parametrize(
    ("cores", "memory_mb", "peak", "expected"),
    [
        (4, 16 * 1024, 570, 4),  # GitHub's public ubuntu-latest: cores bound
        (16, 4 * 1024, 570, 7),  # memory bound: 4096 / 570 = 7.2
        (2, 7 * 1024, 570, 2),
        (8, 1140, 570, 2),  # exactly two
        (8, 1139, 570, 1),
        (8, 569, 570, 0),  # not one
    ],
)
def test_compiles_at_once(cores: int, memory_mb: float, peak: float, expected: int) -> None:
    assert compile_fit(RunnerSize(cores, memory_mb), peak) == expected


def test_the_measured_peak_holds_a_small_runner_to_its_memory() -> None:
    kb = load_kb()
    peak = kb.packages["llama-cpp"].cost.peak_mb_per_compile
    # The largest peak of one nvcc process in the stored measurement, rounded up.
    data = json.loads(
        (Path(__file__).resolve().parents[2] / "bench/data/costs-llama-cpp.json").read_text()
    )
    assert peak == math.ceil(max(run["peak_mb"] for run in data["runs"]))
    plan = make_plan(kb, config_from_mapping(CONFIG, origin="test"))
    costs = job_costs(kb, plan, _sizes(8, 2048))
    # magma's peak is not measured: its jobs keep every core.
    assert {name for name, c in costs.items() if c.peak_mb is not None} == {"llama-cpp-sm86"}
    assert (costs["llama-cpp-sm86"].parallel, costs["llama-cpp-sm86"].memory_bound) == (3, True)
    assert (costs["magma-sm86"].parallel, costs["magma-sm86"].memory_bound) == (8, False)
    jobs = {j["name"]: j for j in build_matrix(plan, 4, costs).jobs()}
    llama = jobs["llama-cpp-sm86"]
    assert llama["parallel_compiles"] == 3 and llama["peak_mb_per_compile"] == peak
    # Three compiles at once: the 16-core builder's minutes times 16/3, in the job and in the
    # schedule (issue 40: minutes scale from the reference machine's cores).
    minutes = plan.variant("llama-cpp-sm86").minutes  # type: ignore[union-attr]
    assert llama["estimated_minutes"] == round(minutes * 16 / 3, 2)
    assert llama["runner_cores"] == 8
    unbound = build_matrix(plan, 4).summary()["total_minutes"]
    bound = build_matrix(plan, 4, costs).summary()["total_minutes"]
    magma = plan.variant("magma-sm86").minutes  # type: ignore[union-attr]
    assert bound == pytest.approx(unbound + minutes * 13 / 3 + magma, abs=0.02)
    assert "big-parallel" in llama["required_system_features"]
    assert "parallel_compiles" not in jobs["magma-sm86"]
    # A runner with the memory for every core: no big-parallel.
    roomy = job_costs(kb, plan, _sizes(4, 16 * 1024))
    assert roomy["llama-cpp-sm86"].parallel == 4 and not roomy["llama-cpp-sm86"].memory_bound
    row = {j["name"]: j for j in build_matrix(plan, 4, roomy).jobs()}["llama-cpp-sm86"]
    assert row["required_system_features"] == []


def _sizes(cores: int, memory_mb: float) -> RunnerSizes:
    big = RunnerSize(16, 64 * 1024)
    return RunnerSizes(RunnerSize(cores, memory_mb), 14 * 1024, big, 200 * 1024)


def test_a_runner_too_small_for_one_compile_is_refused() -> None:
    kb = load_kb()
    plan = make_plan(kb, config_from_mapping(CONFIG, origin="test"))
    # Without a big-parallel runner the job stays on the small one: refused, the key named.
    with pytest.raises(ConfigError, match=r"llama-cpp-sm86: .*\(\[policy\] runner_memory_gb\)"):
        job_costs(kb, plan, _sizes(4, 512))
    # With one ([policy.runners_os] "big-parallel"), the job goes there and fits.
    moved = job_costs(kb, plan, _sizes(4, 512), {"big-parallel": ("self-hosted", "big")})
    assert moved["llama-cpp-sm86"].runner.kind == "big-parallel"
    assert moved["llama-cpp-sm86"].parallel == 16 and moved["llama-cpp-sm86"].problem is None
