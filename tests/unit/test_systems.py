"""Fleets across systems (issue 12): where GPUs live, per-system plans, names, Jetson vs SBSA
redistributables, the pre-SBSA fat split, runner pools and labels, bad input."""

from __future__ import annotations

from typing import Any

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.keys import cuda_spec
from capplan.core.families.cuda.redist import is_pre_sbsa_jetson, uses_jetson_redist
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.systems import system_suffix, variant_of_attr
from capplan.core.planning.config import Config, config_from_mapping
from capplan.core.planning.matrix import build_matrix, github_matrices, plan_json
from capplan.core.planning.plan import Plan
from capplan.core.planning.planner import make_plan
from capplan.core.planning.workflow import runner_labels
from capplan.errors import ConfigError, InvalidInputError

KB = load_kb()
BOTH = ["x86_64-linux", "aarch64-linux"]
DONE_FLEET = ["A100", "GH200", "Jetson AGX Orin", "GB10"]


def config(
    gpus: list[str],
    packages: dict[str, Any] | None = None,
    fleet: dict[str, Any] | None = None,
    **policy: Any,
) -> Config:
    return config_from_mapping(
        {
            "fleet": {"gpus": gpus, **(fleet or {})},
            "packages": packages or {"torch": {}},
            "policy": policy,
        },
        origin="test",
    )


def torch_by_system(plan: Plan) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for v in plan.variants_of("torch"):
        found.setdefault(v.system, []).extend(str(c) for c in cuda_spec(v).capabilities)
    return found


def test_done_when_fleet_plans_torch_per_system() -> None:
    plan = make_plan(KB, config(DONE_FLEET, systems=BOTH))
    assert plan.systems == tuple(BOTH)
    assert torch_by_system(plan) == {
        "x86_64-linux": ["8.0"],
        "aarch64-linux": ["8.7", "9.0", "12.1"],
    }
    # The first system's names are plain; the other's end in the CPU name.
    names = {v.name for v in plan.variants_of("torch")}
    assert names == {
        "torch-sm80",
        "torch-sm87-aarch64",
        "torch-sm90-aarch64",
        "torch-sm121-aarch64",
    }
    assert plan.unserved == ()
    # Every job needs only jobs of its own system.
    for v in plan.variants:
        for need in v.needs:
            assert plan.variant(need).system == v.system  # type: ignore[union-attr]


def test_jetson_and_sbsa_never_share_redistributables() -> None:
    plan = make_plan(KB, config(DONE_FLEET, systems=BOTH))
    jetson = plan.variant("torch-sm87-aarch64")
    grace = plan.variant("torch-sm90-aarch64")
    x86 = plan.variant("torch-sm80")
    assert jetson is not None and grace is not None and x86 is not None
    assert "cudnn-jetson-aarch64" in jetson.needs and "cudnn-aarch64" not in jetson.needs
    assert "cudnn-aarch64" in grace.needs and "cudnn-jetson-aarch64" not in grace.needs
    assert "cudnn" in x86.needs
    cudnn_jetson = plan.variant("cudnn-jetson-aarch64")
    assert cudnn_jetson is not None and cudnn_jetson.independent and cuda_spec(cudnn_jetson).jetson
    # Evaluated with the Jetson capability, so nixpkgs picks the linux-aarch64 archives.
    assert plan_json(plan)["variants"]["cudnn-jetson-aarch64"]["capabilities"] == ["8.7"]
    assert plan_json(plan)["variants"]["cudnn-aarch64"]["capabilities"] == []
    # nccl refuses pre-Thor Jetson; torch then builds without it (useSystemNccl), so the
    # Jetson torch has no nccl job while the Grace one does.
    assert not any(n.startswith("nccl") for n in jetson.needs)
    assert "nccl-sm90-aarch64" in grace.needs


def test_plan_json_and_variants_carry_systems() -> None:
    plan = make_plan(KB, config(DONE_FLEET, systems=BOTH))
    data = plan_json(plan)
    assert data["version"] == 1 and data["system"] == "x86_64-linux" and data["systems"] == BOTH
    assert data["variants"]["torch-sm87-aarch64"]["system"] == "aarch64-linux"
    assert data["variants"]["torch-sm80"]["system"] == "x86_64-linux"


def test_github_matrix_puts_aarch64_jobs_on_arm_runners() -> None:
    plan = make_plan(KB, config(DONE_FLEET, systems=BOTH))
    rows = github_matrices(build_matrix(plan, 2))[0]["include"]
    by_name = {r["name"]: r for r in rows}
    assert by_name["torch-sm87-aarch64"]["os"] == ["ubuntu-24.04-arm"]
    assert (
        by_name["torch-sm87-aarch64"]["attr"] == "legacyPackages.aarch64-linux.torch-sm87-aarch64"
    )
    assert by_name["torch-sm80"]["os"] == ["ubuntu-latest"]
    assert {r["os"][0] for r in rows if r["system"] == "aarch64-linux"} == {"ubuntu-24.04-arm"}
    custom = github_matrices(build_matrix(plan, 2), runners_os={"aarch64-linux": ["self", "arm"]})
    assert {tuple(r["os"]) for r in custom[0]["include"] if r["system"] == "aarch64-linux"} == {
        ("self", "arm")
    }


def test_schedule_keeps_one_runner_pool_per_system() -> None:
    plan = make_plan(KB, config(DONE_FLEET, systems=BOTH))
    matrix = build_matrix(plan, {"x86_64-linux": 1, "aarch64-linux": 3})
    summary = matrix.summary()
    pools = summary["pools"]
    assert pools["x86_64-linux"]["runners"] == 1 and pools["aarch64-linux"]["runners"] == 3
    x86_minutes = sum(v.minutes for v in plan.variants if v.system == "x86_64-linux")
    # One x86 runner: its pool's lower bound is all of its work, and runs back to back.
    assert pools["x86_64-linux"]["lower_bound_minutes"] == pytest.approx(x86_minutes)
    assert pools["x86_64-linux"]["makespan_minutes"] == pytest.approx(x86_minutes)
    assert summary["runners"] == 4
    assert summary["lower_bound_minutes"] == max(p["lower_bound_minutes"] for p in pools.values())
    for job in matrix.jobs():
        limit = pools[job["system"]]["runners"]
        assert 0 <= job["runner"] < limit


def test_gpu_on_an_unplanned_system_is_unserved_with_the_reason() -> None:
    plan = make_plan(KB, config(["A100", "GH200"], system="x86_64-linux"))
    reasons = {(d.package, d.subject): d.reason for d in plan.unserved}
    assert "not in policy.systems" in reasons[("torch", "GH200")]
    assert "aarch64-linux" in reasons[("torch", "GH200")]
    assert torch_by_system(plan) == {"x86_64-linux": ["8.0"]}


def test_fleet_systems_moves_a_discrete_card_to_aarch64() -> None:
    plan = make_plan(
        KB, config(["H100", "A100"], fleet={"systems": {"H100": "aarch64-linux"}}, systems=BOTH)
    )
    assert torch_by_system(plan) == {"x86_64-linux": ["8.0"], "aarch64-linux": ["9.0"]}
    assert plan.variant("torch-sm90-aarch64") is not None


def test_aarch64_alone_has_unsuffixed_names() -> None:
    plan = make_plan(KB, config(["Jetson AGX Orin"], system="aarch64-linux"))
    assert [v.name for v in plan.variants_of("torch")] == ["torch-sm87"]
    assert plan.variant("cudnn-jetson") is not None


def test_independent_package_gets_a_jetson_and_an_sbsa_job() -> None:
    plan = make_plan(
        KB, config(["Jetson AGX Orin", "GH200"], packages={"cudnn": {}}, system="aarch64-linux")
    )
    serves = {v.name: [s.gpu for s in v.serves] for v in plan.variants}
    assert serves == {"cudnn": ["GH200"], "cudnn-jetson": ["Jetson AGX Orin"]}


def test_fat_build_splits_pre_sbsa_jetson_on_cuda_12() -> None:
    plan = make_plan(
        KB,
        config(
            ["Jetson AGX Orin", "GH200", "GB10"],
            packages={"magma": {}},
            systems=BOTH,
            fat="fleet",
            cuda=["12.9"],
        ),
    )
    fat = {v.name: [str(c) for c in cuda_spec(v).capabilities] for v in plan.variants if v.fat}
    assert fat == {"magma-fat-aarch64": ["9.0", "12.1"], "magma-fat-jetson-aarch64": ["8.7"]}
    assert any(d.action == "split" for d in plan.decisions)


def test_fat_build_mixes_orin_on_cuda_13() -> None:
    plan = make_plan(
        KB,
        config(
            ["Jetson AGX Orin", "GH200"],
            packages={"magma": {}},
            system="aarch64-linux",
            fat="fleet",
            cuda=["13.0"],
        ),
    )
    fat = [[str(c) for c in cuda_spec(v).capabilities] for v in plan.variants if v.fat]
    assert fat == [["8.7", "9.0"]]
    assert not any(cuda_spec(v).jetson for v in plan.variants)


def test_pre_sbsa_rule() -> None:
    cuda12, cuda13 = CudaVersion(12, 9), CudaVersion(13, 0)
    orin, thor = Capability.parse("8.7"), Capability.parse("11.0")
    assert is_pre_sbsa_jetson(orin, True, cuda12)
    assert not is_pre_sbsa_jetson(orin, True, cuda13)
    assert not is_pre_sbsa_jetson(thor, True, cuda13)
    assert not is_pre_sbsa_jetson(Capability.parse("9.0"), False, cuda12)
    assert uses_jetson_redist("aarch64-linux", cuda12, [(orin, True)])
    assert not uses_jetson_redist("x86_64-linux", cuda12, [(orin, True)])


def test_names_labels_and_job_attrs() -> None:
    assert system_suffix("x86_64-linux", "x86_64-linux") == ""
    assert system_suffix("aarch64-linux", "x86_64-linux") == "-aarch64"
    assert system_suffix("x86_64-linux", "aarch64-linux") == "-x86_64"
    assert runner_labels("x86_64-linux", False) == ("ubuntu-latest",)
    assert runner_labels("aarch64-linux", False) == ("ubuntu-24.04-arm",)
    assert runner_labels("aarch64-linux", False, {"aarch64-linux": ["arm64"]}) == ("arm64",)
    for attr in (
        "torch-sm87-aarch64",
        "aarch64-linux.torch-sm87-aarch64",
        "torch-sm87-aarch64.aarch64-linux",
        "packages.aarch64-linux.torch-sm87-aarch64",
        "hydraJobs.torch-sm87-aarch64.aarch64-linux",
    ):
        assert variant_of_attr(attr) == "torch-sm87-aarch64"


@pytest.mark.parametrize(
    ("policy", "fleet", "error", "words"),
    [
        ({"systems": ["riscv64-linux"]}, {}, ConfigError, "unknown system 'riscv64-linux'"),
        ({"systems": ["x86_64-linxu"]}, {}, ConfigError, "did you mean 'x86_64-linux'"),
        ({"system": "aarch64-linus"}, {}, ConfigError, "did you mean 'aarch64-linux'"),
        ({"system": "x86_64-linux", "systems": BOTH}, {}, ConfigError, "both system and systems"),
        ({"systems": []}, {}, ConfigError, "systems is empty"),
        ({"runners": {"arm64-linux": 2}}, {}, ConfigError, "unknown system 'arm64-linux'"),
        ({}, {"systems": {"A100": "riscv64-linux"}}, ConfigError, "unknown system"),
        (
            {"systems": BOTH},
            {"systems": {"V100": "aarch64-linux"}},
            InvalidInputError,
            "fleet.systems names 'V100', which is not in fleet.gpus",
        ),
        (
            {},
            {"systems": {"A100": "aarch64-linux"}},
            InvalidInputError,
            "which is not in policy.systems",
        ),
        (
            {"systems": BOTH},
            {"systems": {"Jetson AGX Orin": "x86_64-linux"}},
            InvalidInputError,
            "is a Jetson module that runs aarch64-linux only",
        ),
        ({"systems": BOTH}, {"systems": {"GH200": "x86_64-linux"}}, InvalidInputError, "Grace"),
    ],
)
def test_bad_systems_input(
    policy: dict[str, Any], fleet: dict[str, Any], error: type[Exception], words: str
) -> None:
    gpus = ["A100", "Jetson AGX Orin", "GH200"]
    with pytest.raises(error) as info:
        make_plan(KB, config(gpus, fleet=fleet, **policy))
    assert words in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_code in (4, 5)  # type: ignore[attr-defined]


def test_unrelated_system_gets_no_did_you_mean() -> None:
    with pytest.raises(ConfigError) as info:
        config(["A100"], systems=["riscv64-linux"])
    assert "did you mean" not in str(info.value)
    assert "x86_64-linux and aarch64-linux only" in str(info.value)


def test_named_fat_group_is_built_per_system_with_its_own_members() -> None:
    plan = make_plan(
        KB,
        config(
            ["A100", "L4", "GH200", "GB10"],
            packages={"magma": {}},
            systems=BOTH,
            fat={"dc": ["A100", "L4", "GH200", "GB10"]},
        ),
    )
    fat = {v.name: [str(c) for c in cuda_spec(v).capabilities] for v in plan.variants if v.fat}
    assert fat == {"magma-fat-dc": ["8.0", "8.9"], "magma-fat-dc-aarch64": ["9.0", "12.1"]}


def test_capplan_system_replaces_the_files_systems(tmp_path: Any) -> None:
    from capplan.adapters.config import load_config

    path = tmp_path / "capplan.toml"
    path.write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\n[policy]\n'
        'systems = ["x86_64-linux", "aarch64-linux"]\n'
        '[policy.runners]\n"x86_64-linux" = 8\n"aarch64-linux" = 2\n'
    )
    both, _ = load_config(path, cwd=tmp_path, environ={})
    assert both.policy.planned_systems == tuple(BOTH)
    assert both.policy.runners_for("aarch64-linux") == 2
    one, _ = load_config(path, cwd=tmp_path, environ={"CAPPLAN_SYSTEM": "aarch64-linux"})
    assert one.policy.planned_systems == ("aarch64-linux",)


def test_baselines_count_each_planned_system() -> None:
    one = make_plan(KB, config(["A100"], system="x86_64-linux")).baselines
    two = make_plan(KB, config(["A100", "GH200"], systems=BOTH)).baselines
    assert two.nixpkgs_default_jobs == 2 * one.nixpkgs_default_jobs
    assert two.naive_jobs == 2 * one.naive_jobs  # one capability on each system
