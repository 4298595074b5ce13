"""Each job's minutes on the runner it is scheduled on (issue 40): the knowledge base's minutes
scale from their reference machine's cores to the runner's, memory caps the compiles at once,
the longest compile unit is a floor no core count lowers, and a job that cannot finish on its
runner (timeout past the limit, outputs past the disk) says so and names the runner it needs."""

from __future__ import annotations

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import build_matrix
from capplan.core.planning.memory import RunnerSize
from capplan.core.planning.planner import make_plan
from capplan.core.planning.runners import Runner, RunnerSizes, job_costs, on_runner
from capplan.core.planning.summary import runner_warnings

BIG = {"big-parallel": ("self-hosted", "big-parallel")}


def _plan(packages: list[str], gpus: list[str] | None = None) -> object:
    config = config_from_mapping(
        {"fleet": {"gpus": gpus or ["RTX 3090"]}, "packages": {p: {} for p in packages},
         "policy": {"system": "x86_64-linux", "cuda": ["12.9"]}},
        origin="test",
    )  # fmt: skip
    return make_plan(load_kb(), config)


def _sizes(
    cores: int = 4, memory_gb: float = 16, disk_gb: float = 14, big: int = 16
) -> RunnerSizes:
    return RunnerSizes(
        RunnerSize(cores, memory_gb * 1024), disk_gb * 1024, RunnerSize(big, 64 * 1024), 200 * 1024
    )


def _runner(cores: int, labels: tuple[str, ...] = ("ubuntu-latest",)) -> Runner:
    return Runner("standard", labels, cores, 1e9, 1e9)


@pytest.mark.parametrize(
    ("cores", "expected"),
    [(16, 90.0), (4, 360.0), (8, 180.0), (64, 22.5), (1, 1440.0)],
)
def test_minutes_scale_by_cores_from_the_reference(cores: int, expected: float) -> None:
    minutes, parallel, _ = on_runner(90, 16, _runner(cores, ("self-hosted",)))
    assert (minutes, parallel) == (expected, cores)


def test_the_longest_unit_is_a_floor() -> None:
    assert on_runner(22.44, 16, _runner(256), critical=9.03)[0] == 9.03
    assert on_runner(22.44, 16, _runner(16), critical=9.03)[0] == 22.44
    # llama-cpp's measured longest unit, through the plan: 9 targets on 1,024 cores.
    plan = _plan(["llama-cpp"], ["7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "12.0", "12.1"])
    cost = load_kb().packages["llama-cpp"].cost
    longest = cost.longest_unit(1)
    assert longest == pytest.approx(0.28 + 0.97)
    costs = job_costs(load_kb(), plan, _sizes(cores=1024, memory_gb=1024))  # type: ignore[arg-type]
    job = costs["llama-cpp-sm86"]
    assert job.minutes == job.critical_minutes == round(longest, 2)


def test_memory_caps_the_compiles_at_once() -> None:
    runner = Runner("standard", ("ubuntu-latest",), 8, 2048, 1e9)
    minutes, parallel, problem = on_runner(3.67, 16, runner, peak_mb=570)
    assert (parallel, minutes, problem) == (3, round(3.67 * 16 / 3, 2), None)


def test_a_prebuilt_redistributable_does_not_scale() -> None:
    costs = job_costs(load_kb(), _plan(["torch"]), _sizes(cores=2))  # type: ignore[arg-type]
    assert costs["cublas"].minutes == 2.0  # fetched and patched on any runner alike
    assert costs["magma-sm86"].minutes == 30 * 16 / 2


def test_torch_on_the_hosted_runner_cannot_finish_and_says_what_it_needs() -> None:
    plan = _plan(["torch"])
    costs = job_costs(load_kb(), plan, _sizes())  # type: ignore[arg-type]
    torch = costs["torch-sm86"]
    # 90 min on the 16-core reference, four times that on GitHub's 4-core ubuntu-latest: with
    # the workflow's margin (x1.5 + 30 = 570 min) past the hosted runner's 360.
    assert (torch.minutes, torch.cores, torch.runner.labels) == (360.0, 4, ("ubuntu-latest",))
    assert torch.needs_big and torch.problem is not None
    assert "570 with the timeout's margin, past its 360-min limit" in torch.problem
    (kind, text), *more = runner_warnings(costs)
    assert (
        kind == "runner"
        and more == []
        and text.startswith("torch-sm86 cannot finish: about 360 min on")
    )
    assert text.endswith('it needs a big-parallel runner ([policy.runners_os] "big-parallel")')
    # The matrix states the job's minutes for that runner, and marks it.
    job = {j["name"]: j for j in build_matrix(plan, 4, costs).jobs()}["torch-sm86"]  # type: ignore[arg-type]
    assert (job["estimated_minutes"], job["runner_cores"]) == (360.0, 4)
    assert job["cannot_finish"] == torch.problem
    # With a big-parallel runner it goes there, and finishes: the reference's 90 minutes.
    placed = job_costs(load_kb(), plan, _sizes(), BIG)["torch-sm86"]  # type: ignore[arg-type]
    assert (placed.minutes, placed.cores, placed.runner.kind) == (90.0, 16, "big-parallel")
    assert placed.problem is None and runner_warnings({"torch-sm86": placed}) == []
    # A big-parallel runner too small for it: named as such.
    small = job_costs(load_kb(), plan, _sizes(big=1), {"big-parallel": ("big",)})  # type: ignore[arg-type]
    (_, text), *_ = runner_warnings(small)
    assert "past its 360-min limit" in text and "bigger big-parallel runner" in text


def test_a_job_whose_outputs_exceed_the_disk() -> None:
    # torch-sm86's outputs: 600 + 110 MB (kb/packages.json); 64 cores finish it in time.
    costs = job_costs(load_kb(), _plan(["torch"]), _sizes(cores=64, disk_gb=0.5))  # type: ignore[arg-type]
    problem = costs["torch-sm86"].problem
    assert problem is not None and "its outputs alone take 0.7 GB" in problem
    assert "more than the 0.5 GB free on ubuntu-latest (64 cores)" in problem
    assert costs["magma-sm86"].problem is None  # smaller outputs
    # A big-parallel runner has room: it goes there.
    moved = job_costs(load_kb(), _plan(["torch"]), _sizes(disk_gb=0.5), BIG)  # type: ignore[arg-type]
    assert moved["torch-sm86"].runner.kind == "big-parallel" and moved["torch-sm86"].problem is None


def test_a_self_hosted_runner_has_five_days() -> None:
    runner = _runner(4, ("self-hosted", "linux"))
    assert runner.limit_minutes == 5 * 24 * 60
    assert on_runner(90, 16, runner)[2] is None
    assert on_runner(90, 16, _runner(4))[2] is not None
