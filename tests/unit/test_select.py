"""``detect``'s choice (core/families/cuda/select.py): each GPU its own reason, the driver table, Jetson
platforms, and agreement with the plan on every fleet GPU and package (issue 10, items 1-4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capplan.adapters.config import load_config
from capplan.adapters.kb import load_kb
from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.fleet import cuda_part
from capplan.core.families.cuda.keys import cuda_version
from capplan.core.families.cuda.select import driver_support, pick_variant
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.planning.config import Config, config_from_mapping
from capplan.core.planning.plan import Plan
from capplan.core.planning.planner import make_plan

KB = load_kb()
REPO = Path(__file__).resolve().parents[2]


def config(gpus: list[str], packages: dict[str, Any] | None = None, **policy: Any) -> Config:
    return config_from_mapping(
        {"fleet": {"gpus": gpus}, "packages": packages or {"torch": {}}, "policy": policy},
        origin="test",
    )


def default_plan(system: str | None = None) -> Plan:
    """The embedded default plan; ``system`` narrows its systems (as CAPPLAN_SYSTEM does)."""
    environ = {"CAPPLAN_SYSTEM": system} if system else {}
    cfg, _ = load_config(REPO / "capplan.toml", cwd=REPO, environ=environ)
    return make_plan(KB, cfg)


@pytest.mark.parametrize("gpu", ["7.0", "10.0", "6.1"])  # V100, B200, GTX 1080 Ti
def test_each_gpu_gets_its_own_reason(gpu: str) -> None:
    plan = default_plan()  # holds an unserved Jetson (8.7) for every package
    pick = pick_variant(plan, "torch", Capability.parse(gpu), KB)
    assert pick.variant is None and pick.verdict.level is RunLevel.CANNOT_RUN
    assert "Jetson" not in pick.verdict.reason and "8.7" not in pick.verdict.reason
    assert f'add "{gpu}" to fleet.gpus' in pick.verdict.reason
    assert f"runs on {gpu}" in pick.verdict.reason


def test_a_fleet_gpu_keeps_its_own_unserved_reason() -> None:
    plan = default_plan("x86_64-linux")
    orin = next(g for g in cuda_part(plan).fleet if g.jetson)
    pick = pick_variant(plan, "torch", orin.capability, KB)
    assert pick.verdict.level is RunLevel.CANNOT_RUN and "aarch64-linux" in pick.verdict.reason


def test_driver_too_old_is_never_runnable() -> None:
    plan = make_plan(KB, config(["A100"], {"torch": {}, "cupy": {}}))
    driver = driver_support(KB, "450.51.06")  # the CUDA 11.0 GA driver
    assert driver.max_cuda() == CudaVersion(11, 0)
    assert not driver.runs(CudaVersion(12, 9))
    for package in ("torch", "cupy"):
        pick = pick_variant(plan, package, Capability(8, 0), KB, driver=driver)
        assert not pick.runnable and pick.driver_ok is False
        assert pick.verdict.level is RunLevel.CANNOT_RUN
        assert pick.needs_driver == "525.60.13"  # CUDA 12.x minor-version compatibility
        assert "needs driver >= 525.60.13" in pick.verdict.reason
        # Issue 38: within a major there is no ceiling (450.51.06 runs any 11.x).
        assert "driver 450.51.06 runs any CUDA 11.x" in pick.verdict.reason
        assert pick.blocked is not None


def test_a_variant_on_a_cuda_the_driver_runs_wins() -> None:
    # cupy (13.0) serves the A100; a Pascal GPU in the fleet adds cupy-cu129.
    plan = make_plan(KB, config(["A100", "GTX 1080 Ti"], {"cupy": {}}, cuda=["13.0", "12.9"]))
    driver = driver_support(KB, "550.54.14")  # runs 12.x, not 13.x
    pick = pick_variant(plan, "cupy", Capability(8, 0), KB, driver=driver)
    assert pick.runnable and pick.variant is not None and pick.variant.name == "cupy-cu129"
    assert pick.driver_ok is True
    new = pick_variant(plan, "cupy", Capability(8, 0), KB, driver=driver_support(KB, "580.65.06"))
    assert new.variant is not None and new.variant.name == "cupy"


def test_unknown_or_garbage_driver_is_unknown_not_an_error() -> None:
    plan = make_plan(KB, config(["A100"]))
    for text in (None, "", "garbage\x00"):
        pick = pick_variant(plan, "torch", Capability(8, 0), KB, driver=driver_support(KB, text))
        assert pick.runnable and pick.driver_ok is None


def test_shared_packages_are_planned_per_needed_cuda() -> None:
    plan = make_plan(
        KB, config(["GTX 1080 Ti", "V100", "A100"], {"cupy": {}}, cuda=["13.0", "12.9"])
    )
    cupy = plan.variant("cupy")
    old = plan.variant("cupy-cu129")
    assert cupy is not None and old is not None
    assert cuda_version(cupy) == CudaVersion(13, 0) and cuda_version(old) == CudaVersion(12, 9)
    assert [s.gpu for s in cupy.serves] == ["A100"]
    assert sorted(s.gpu for s in old.serves) == ["GTX 1080 Ti", "V100"]
    pick = pick_variant(plan, "cupy", Capability(6, 1), KB)
    assert pick.variant is not None and pick.variant.name == "cupy-cu129"
    # a CUDA 13 build never claims a GPU CUDA 13 dropped
    only13 = make_plan(KB, config(["A100"], {"cupy": {}}, cuda=["13.0", "12.9"]))
    assert [v.name for v in only13.variants_of("cupy")] == ["cupy"]
    gone = pick_variant(only13, "cupy", Capability(6, 1), KB)
    assert gone.variant is None and "dropped 6.1" in gone.verdict.reason


def test_shared_redistributables_follow_the_cuda_they_serve() -> None:
    plan = make_plan(KB, config(["GTX 1080 Ti", "A100"], {"cudnn": {}}, cuda=["13.0", "12.9"]))
    assert {"cudnn", "cudnn-cu129"} <= set(plan.identifiers())


def test_jetson_on_an_x86_plan_gets_nothing_from_detect() -> None:
    plan = default_plan("x86_64-linux")
    pick = pick_variant(plan, "cupy", Capability(8, 7), KB)
    assert pick.variant is None and "aarch64-linux" in pick.verdict.reason


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"cuda": ["13.0", "12.9"]},
        {"share": "compatible"},
        {"fat": "fleet", "ptx": "newest"},
    ],
)
def test_detect_and_plan_agree_on_every_fleet_gpu_and_package(cfg: dict[str, Any]) -> None:
    gpus = [
        "GTX 1080 Ti",
        "V100",
        "A100",
        "RTX 3090",
        "RTX 4090",
        "H100",
        "RTX 5090",
        "Jetson Orin",
    ]
    packages = {p: {} for p in ("torch", "cupy", "nccl", "magma", "onnxruntime", "cudnn")}
    policy = {"cuda": ["12.9", "13.0", "12.8", "12.6"], **cfg}
    plan = make_plan(KB, config(gpus, packages, **policy))
    unserved = {(d.package, d.subject) for d in plan.unserved}
    for gpu in cuda_part(plan).fleet:
        for package in plan.packages:
            pick = pick_variant(plan, package, gpu.capability, KB)
            serving = {
                v.name for v in plan.variants_of(package) for s in v.serves if s.gpu == gpu.label
            }
            if (package, gpu.label) in unserved:
                assert not pick.runnable, (package, gpu.label, pick)
            else:
                assert pick.runnable and pick.variant is not None, (package, gpu.label, pick)
                assert pick.variant.name in serving, (package, gpu.label, pick.variant.name)


def test_a_gpu_no_allowed_cuda_supports_is_told_so() -> None:
    plan = default_plan()  # CUDA 12.6..13.0: Kepler 3.5 is gone since CUDA 12
    pick = pick_variant(plan, "torch", Capability(3, 5), KB)
    assert pick.variant is None and "no CUDA version in policy.cuda" in pick.verdict.reason
    assert "Jetson" not in pick.verdict.reason
