"""AMD planning (core/families/rocm/planning.py, issue 16): ROCm variants beside CUDA ones in one plan.

Each test states a rule of ../shared/ROCM.md and checks the plan the real knowledge base gives.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.adapters.kb import load_kb
from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.fleet import cuda_part
from capplan.core.families.cuda.keys import cuda_spec, cuda_version
from capplan.core.families.rocm.fleet import rocm_part
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.keys import rocm_spec
from capplan.core.families.rocm.planning import _build_target
from capplan.core.families.rocm.select import (
    amd_plans_by_system,
    pick_amd_on_machine,
    pick_amd_variant,
)
from capplan.core.families.rocm.target import AmdTarget
from capplan.core.planning.config import Config, config_from_mapping
from capplan.core.planning.matrix import plan_json
from capplan.core.planning.plan import Plan
from capplan.core.planning.planner import make_plan
from capplan.errors import CapplanError, ConfigError, InvalidInputError, NothingToDo

KB = load_kb()
assert KB.part(AmdKnowledgeBase) is not None
AMD = KB.part(AmdKnowledgeBase)
MIXED = ["A100", "MI300X", "Radeon RX 7900 XTX", "Strix Halo"]


def config(gpus: list[str], packages: dict[str, Any] | None = None, **policy: Any) -> Config:
    return config_from_mapping(
        {"fleet": {"gpus": gpus}, "packages": packages or {"torch": {}}, "policy": policy},
        origin="test",
    )


def names(plan: Plan, package: str) -> list[str]:
    return [v.name for v in plan.variants_of(package)]


def serving(plan: Plan, package: str, gpu: str) -> list[tuple[str, RunLevel]]:
    return [(v.name, s.level) for v in plan.variants_of(package) for s in v.serves if s.gpu == gpu]


def decisions(plan: Plan, action: str) -> dict[tuple[str, str], str]:
    return {(d.package, d.subject): d.reason for d in plan.decisions if d.action == action}


# -- done when: a mixed fleet -----------------------------------------------------------------
def test_mixed_fleet_plans_one_variant_per_gpu_and_vendor() -> None:
    plan = make_plan(KB, config(MIXED))
    assert names(plan, "torch") == ["torch-sm80", "torch-gfx942", "torch-gfx1100", "torch-gfx1151"]
    assert serving(plan, "torch", "MI300X") == [("torch-gfx942", RunLevel.NATIVE)]
    assert serving(plan, "torch", "Strix Halo") == [("torch-gfx1151", RunLevel.NATIVE)]
    amd = plan.variant("torch-gfx942")
    assert amd is not None and amd.vendor == "amd" and cuda_version(amd) is None
    assert cuda_spec(amd).capabilities == () and rocm_spec(amd) is not None
    assert rocm_spec(amd).targets == (AmdTarget.parse("gfx942"),)
    assert rocm_spec(amd).scope == "package" and rocm_spec(amd).scope_attr is None
    assert rocm_spec(amd).overrides == (("torch", ("gfx942",)),)
    cuda = plan.variant("torch-sm80")
    assert cuda is not None and cuda.vendor == "nvidia" and rocm_spec(cuda) is None
    assert [g.label for g in rocm_part(plan).fleet] == MIXED[1:]
    assert [g.label for g in cuda_part(plan).fleet] == ["A100"]


def test_plan_json_carries_the_rocm_package_set() -> None:
    data = plan_json(make_plan(KB, config(MIXED, {"torch": {}, "torchvision": {}})))
    torch = data["variants"]["torch-gfx1100"]
    assert torch["cuda"] is None and torch["vendor"] == "amd"
    assert torch["rocm"] == {
        "scope": "package",
        "scope_attr": None,
        "targets": ["gfx1100"],
        "overrides": {"torch": ["gfx1100"]},
    }
    # torchvision shares torch's instance (same rocm set), so it links that very torch.
    assert data["variants"]["torchvision-gfx1100"]["rocm"] == torch["rocm"]
    assert "vendor" not in data["variants"]["torch-sm80"]


def test_magma_hip_is_excluded_for_gfx942_with_its_reason() -> None:
    plan = make_plan(KB, config(MIXED, {"torch": {}, "magma": {}}))
    unserved = {(d.package, d.subject): d.reason for d in plan.unserved}
    reason = unserved[("magma", "MI300X")]
    assert "magma-hip" in reason and "gfx942" in reason
    assert "No supported GPU targets specified" in reason
    assert names(plan, "magma") == ["magma-sm80"]
    # torch still serves the MI300X, and says its cached magma-hip has no gfx942 code.
    excluded = decisions(plan, "excluded")[("torch", "magma-hip:gfx942")]
    assert "from the cache" in excluded and "gfx906" in excluded and "gfx942" in excluded
    assert serving(plan, "torch", "MI300X") == [("torch-gfx942", RunLevel.NATIVE)]


def test_magma_for_an_accepted_target_narrows_the_shared_instance() -> None:
    plan = make_plan(KB, config(["RX 6800"], {"torch": {}, "magma": {}}))
    magma = plan.variant("magma-gfx1030")
    torch = plan.variant("torch-gfx1030")
    assert magma is not None and torch is not None and rocm_spec(magma) is not None
    assert magma.attr == "magma-hip"
    # magma's package.nix compares gpuTargets with its list as given: "1030", no gfx prefix.
    assert dict(rocm_spec(magma).overrides) == {"magma-hip": ("1030",), "torch": ("gfx1030",)}
    assert rocm_spec(torch) == rocm_spec(magma)  # one instance: torch links magma-gfx1030
    assert torch.needs == ("magma-gfx1030",)


def test_llama_cpp_and_ollama_build_for_both_vendors_with_rocm_gpu_targets() -> None:
    plan = make_plan(KB, config(["A100", "MI300X"], {"llama-cpp": {}, "ollama": {}}))
    assert names(plan, "llama-cpp") == ["llama-cpp-sm80", "llama-cpp-gfx942"]
    assert names(plan, "ollama") == ["ollama-sm80", "ollama-gfx942"]
    data = plan_json(plan)["variants"]["ollama-gfx942"]["rocm"]
    # Their package.nix files take rocmGpuTargets, not gpuTargets.
    assert data["arguments"] == {"llama-cpp": "rocmGpuTargets", "ollama": "rocmGpuTargets"}
    assert data["overrides"] == {"llama-cpp": ["gfx942"], "ollama": ["gfx942"]}
    assert (
        "arguments"
        not in plan_json(make_plan(KB, config(["MI300X"])))["variants"]["torch-gfx942"]["rocm"]
    )


# -- rocm_scope --------------------------------------------------------------------------------
def test_stack_scope_rebuilds_the_target_dependent_libraries() -> None:
    package = make_plan(KB, config(["MI300X"]))
    stack = make_plan(KB, config(["MI300X"], rocm_scope="stack"))
    torch = stack.variant("torch-gfx942")
    assert torch is not None and rocm_spec(torch) is not None
    assert rocm_spec(torch).scope == "stack" and rocm_spec(torch).scope_attr == "gfx942"
    assert set(torch.needs) == {
        "composable_kernel-gfx942",
        "hipblaslt-gfx942",
        "magma-hip-gfx942",
        "miopen-gfx942",
        "rocblas-gfx942",
    }
    for name in torch.needs:
        dep = stack.variant(name)
        assert dep is not None and rocm_spec(dep) == rocm_spec(torch)
    assert package.variant("torch-gfx942").needs == ()  # type: ignore[union-attr]
    # The cost model shows the difference.
    assert stack.baselines.plan_minutes > package.baselines.plan_minutes
    assert stack.baselines.plan_jobs == package.baselines.plan_jobs + 5
    reason = decisions(stack, "stack")[("magma-hip", "magma-hip-gfx942")]
    assert "reads clr.gpuTargets" in reason


def test_stack_scope_refuses_composable_kernel_without_a_gfx9_target() -> None:
    plan = make_plan(KB, config(["RX 7900 XTX"], rocm_scope="stack"))
    assert plan.variant("composable_kernel-gfx1100") is None
    refused = decisions(plan, "refused")[("torch", "composable_kernel:gfx1100")]
    assert "meta.broken without a gfx9 target" in refused
    assert plan.variant("rocblas-gfx1100") is not None


def test_stack_scope_builds_composable_kernel_for_every_gfx9_target() -> None:
    # MI50 (gfx906) has no MFMA, so torch vendors CK's headers, but ROCm 7.x MIOpen links the
    # scope's composable_kernel whatever the targets (withComposableKernel ? true): a gfx906
    # stack builds CK, and the plan has its job and cost.
    plan = make_plan(KB, config(["MI50"], rocm_scope="stack"))
    torch = plan.variant("torch-gfx906")
    assert torch is not None and rocm_spec(torch) is not None and rocm_spec(torch).scope == "stack"
    ck = plan.variant("composable_kernel-gfx906")
    assert ck is not None and ck.minutes > 0
    assert {"composable_kernel-gfx906", "miopen-gfx906", "rocblas-gfx906"} <= set(torch.needs)
    assert rocm_spec(torch).scope_overrides == ()
    assert "links composable_kernel-gfx906" in decisions(plan, "holds")[("miopen", "miopen-gfx906")]


def test_stack_scope_without_gfx9_builds_miopen_without_composable_kernel() -> None:
    stack = make_plan(KB, config(["RX 7900 XTX", "MI300X"], rocm_scope="stack"))
    torch = stack.variant("torch-gfx1100")
    assert torch is not None and rocm_spec(torch) is not None
    assert rocm_spec(torch).scope_overrides == (("miopen", (("withComposableKernel", False),)),)
    # The same scope change for every variant of the target (one instance), none for gfx942.
    assert rocm_spec(stack.variant("miopen-gfx1100")) == rocm_spec(torch)  # type: ignore[union-attr]
    assert rocm_spec(stack.variant("torch-gfx942")).scope_overrides == ()  # type: ignore[union-attr]
    held = decisions(stack, "holds")[("miopen", "miopen-gfx1100")]
    assert "withComposableKernel = false" in held and "absent" in held
    refused = decisions(stack, "refused")[("torch", "composable_kernel:gfx1100")]
    assert "withComposableKernel = false" in refused and "miopen/default.nix" in refused
    rocm = plan_json(stack)["variants"]["torch-gfx1100"]["rocm"]
    assert rocm["scope_overrides"] == {"miopen": {"withComposableKernel": False}}
    assert "scope_overrides" not in plan_json(stack)["variants"]["torch-gfx942"]["rocm"]
    # "package" scope: the default scope's MIOpen (with CK, from the cache), nothing changed.
    package = make_plan(KB, config(["RX 7900 XTX"]))
    assert rocm_spec(package.variant("torch-gfx1100")).scope_overrides == ()  # type: ignore[union-attr]


def test_onnxruntime_follows_the_scope() -> None:
    gpus = ["MI300X", "RX 7900 XTX", "RX 6700 XT"]
    stack = make_plan(KB, config(gpus, {"onnxruntime": {}}, rocm_scope="stack"))
    assert sorted(names(stack, "onnxruntime")) == [
        "onnxruntime-gfx1100",
        "onnxruntime-gfx942",
        "onnxruntime-rocm",
    ]
    one = stack.variant("onnxruntime-gfx942")
    assert one is not None and rocm_spec(one) is not None and one.big_parallel
    assert rocm_spec(one).scope_attr == "gfx942" and not one.independent
    assert {"miopen-gfx942", "composable_kernel-gfx942"} <= set(one.needs)
    # gfx1031 has no per-target scope: the shared default build serves it.
    assert serving(stack, "onnxruntime", "RX 6700 XT")[0][0] == "onnxruntime-rocm"
    assert serving(stack, "onnxruntime", "MI300X") == [("onnxruntime-gfx942", RunLevel.NATIVE)]
    # Cost grows with the targets it is built for.
    shared = stack.variant("onnxruntime-rocm")
    assert shared is not None and shared.minutes > one.minutes
    package = make_plan(KB, config(gpus, {"onnxruntime": {}}))
    assert names(package, "onnxruntime") == ["onnxruntime-rocm"]
    assert "gfx1201" in decisions(package, "holds")[("onnxruntime", "onnxruntime-rocm")]


def test_torchvision_holds_no_hip_code() -> None:
    plan = make_plan(KB, config(["MI300X"], {"torch": {}, "torchvision": {}}))
    one = plan.variant("torchvision-gfx942")
    assert one is not None and one.needs == ("torch-gfx942",)
    assert one.minutes == AMD.builds["torchvision"].cost.base_minutes
    assert "holds no HIP code" in decisions(plan, "holds")[("torchvision", "torchvision-gfx942")]


def test_magma_gap_is_said_per_variant_in_both_scopes() -> None:
    for scope in ("package", "stack"):
        plan = make_plan(KB, config(["MI300X", "RX 6800"], {"torch": {}}, rocm_scope=scope))
        gaps = decisions(plan, "gap")
        reason = gaps[("torch", "torch-gfx942: magma-hip")]
        assert "no gfx942 code" in reason and "linear algebra" in reason and "MI300X" in reason
        # gfx1030 is in magma's list: no gap for it.
        assert ("torch", "torch-gfx1030: magma-hip") not in gaps
    # "package" scope: what the cache's libraries hold is said once each.
    held = decisions(make_plan(KB, config(["MI300X"], {"torch": {}})), "holds")
    assert "gfx942" in held[("rocblas", "rocblas (cache)")]
    assert "gfx942" not in held[("magma-hip", "magma-hip (cache)")]


def test_stack_scope_falls_back_where_nixpkgs_has_no_per_target_scope() -> None:
    plan = make_plan(KB, config(["RX 6700 XT"], rocm_scope="stack"))
    torch = plan.variant("torch-gfx1031")
    assert torch is not None and rocm_spec(torch) is not None
    assert rocm_spec(torch).scope == "package" and rocm_spec(torch).scope_attr is None
    assert "rocmPackages.gfx1031" in decisions(plan, "scope")[("torch", "gfx1031")]


# -- rule 2: substitutes, generic targets --------------------------------------------------------
def test_a_fixed_list_uses_an_isa_compatible_target() -> None:
    # miopen lists gfx1030 and gfx1031, not gfx1032: gfx1030 code loads on gfx1032.
    build = dataclasses.replace(AMD, builds={}).packages  # the lists themselves
    assert AmdTarget.parse("gfx1032") not in (build["miopen"].accepts or ())
    as_build = dataclasses.replace(AMD.builds["magma"], targets="miopen")
    target, level, reason = _build_target(AMD, "x", as_build, AmdTarget.parse("gfx1032"))
    assert target == AmdTarget.parse("gfx1030") and level.value == "compatible"
    assert "ISA compatibility" in reason
    none = _build_target(AMD, "x", as_build, AmdTarget.parse("gfx1103"))
    assert none[0] is None and "excludes gfx1103" in none[2]


def test_share_compatible_builds_a_generic_target_for_a_family() -> None:
    fleet = ["RX 7900 XTX", "RX 7800 XT", "MI300X"]
    exact = make_plan(KB, config(fleet))
    assert names(exact, "torch") == ["torch-gfx942", "torch-gfx1100", "torch-gfx1101"]
    shared = make_plan(KB, config(fleet, share="compatible"))
    assert names(shared, "torch") == ["torch-gfx942", "torch-gfx11-generic"]
    assert serving(shared, "torch", "RX 7800 XT") == [("torch-gfx11-generic", RunLevel.COMPATIBLE)]
    assert serving(shared, "torch", "MI300X") == [("torch-gfx942", RunLevel.NATIVE)]
    assert shared.baselines.exact_jobs == len(exact.variants)


def test_a_package_reading_only_the_default_list_is_one_shared_build() -> None:
    plan = make_plan(KB, config(["MI300X", "RX 6700 XT", "Radeon 680M"], {"onnxruntime": {}}))
    job = plan.variant("onnxruntime-rocm")
    assert job is not None and job.independent and rocm_spec(job) is not None
    assert rocm_spec(job).targets == ()
    levels = {s.gpu: s.level for s in job.serves}
    assert levels == {"MI300X": RunLevel.NATIVE, "RX 6700 XT": RunLevel.COMPATIBLE}
    unserved = {(d.package, d.subject): d.reason for d in plan.unserved}
    assert "clr.gpuTargets" in unserved[("onnxruntime", "Radeon 680M")]


def test_cuda_only_packages_leave_amd_gpus_unserved_with_the_reason() -> None:
    plan = make_plan(KB, config(["A100", "MI300X"], {"cupy": {}}))
    unserved = {(d.package, d.subject): d.reason for d in plan.unserved}
    assert "CUDA-only" in unserved[("cupy", "MI300X")]
    assert all(v.vendor == "nvidia" for v in plan.variants)


# -- vendors, extra, exclude, systems ----------------------------------------------------------
def test_vendors_pick_what_each_package_is_built_for() -> None:
    plan = make_plan(KB, config(MIXED, {"torch": {"vendors": ["amd"]}}))
    assert names(plan, "torch") == ["torch-gfx942", "torch-gfx1100", "torch-gfx1151"]
    plan = make_plan(KB, config(MIXED, {"torch": {"vendors": ["nvidia"]}}))
    assert names(plan, "torch") == ["torch-sm80"]
    assert ("torch", "amd") in decisions(plan, "skipped")


def test_extra_and_exclude_take_gfx_targets() -> None:
    plan = make_plan(KB, config(["A100"], {"torch": {"extra": ["gfx90a", "8.6"]}}))
    assert names(plan, "torch") == ["torch-sm80", "torch-sm86", "torch-gfx90a"]
    plan = make_plan(KB, config(MIXED, {"torch": {"exclude": ["gfx1100"]}}))
    assert "torch-gfx1100" not in names(plan, "torch")
    unserved = {(d.package, d.subject): d.reason for d in plan.unserved}
    assert "excludes gfx1100" in unserved[("torch", "Radeon RX 7900 XTX")]
    # Only gfx targets in extra, no fleet: still something to build.
    plan = make_plan(KB, config([], {"torch": {"extra": ["gfx942"]}}))
    assert names(plan, "torch") == ["torch-gfx942"]


def test_an_exclusion_of_the_parent_holds_for_an_inherited_build() -> None:
    packages = {"torch": {"exclude": ["gfx1100"]}, "torchvision": {}}
    plan = make_plan(KB, config(MIXED, packages))
    assert "torchvision-gfx1100" not in names(plan, "torchvision")
    unserved = {(d.package, d.subject): d.reason for d in plan.unserved}
    assert "excludes gfx1100 for torch" in unserved[("torchvision", "Radeon RX 7900 XTX")]


def test_an_amd_gpu_on_an_unplanned_system_is_unserved_with_the_reason() -> None:
    plan = make_plan(KB, config(["GH200", "MI300X"], system="aarch64-linux"))
    assert names(plan, "torch") == ["torch-sm90"]
    unserved = {(d.package, d.subject): d.reason for d in plan.unserved}
    assert "x86_64-linux" in unserved[("torch", "MI300X")]


def test_rocm_jobs_are_x86_64_unless_a_system_is_given() -> None:
    systems = ["aarch64-linux", "x86_64-linux"]
    plan = make_plan(KB, config(["GH200", "MI300X"], systems=systems))
    assert plan.variant("torch-gfx942-x86_64") is not None
    gpus = {"gpus": ["MI300X"], "systems": {"MI300X": "aarch64-linux"}}
    data = {"fleet": gpus, "packages": {"torch": {}}, "policy": {"systems": systems}}
    plan = make_plan(KB, config_from_mapping(data, origin="test"))
    torch = plan.variant("torch-gfx942")
    assert torch is not None and torch.system == "aarch64-linux"


def test_a_loose_name_of_one_target_resolves() -> None:
    plan = make_plan(KB, config(["7900"]))  # XTX, XT, GRE and PRO W7900: all gfx1100
    assert names(plan, "torch") == ["torch-gfx1100"]


def test_pick_amd_variant_for_detect() -> None:
    plan = make_plan(KB, config(["RX 6800", "MI300X"]))
    pick = pick_amd_variant(plan, "torch", AmdTarget.parse("gfx1031"))
    assert pick.variant is not None and pick.variant.name == "torch-gfx1030"
    assert pick.level is RunLevel.COMPATIBLE
    pick = pick_amd_variant(plan, "torch", AmdTarget.parse("gfx942:sramecc+:xnack-"))
    assert pick.variant is not None and pick.variant.name == "torch-gfx942"
    pick = pick_amd_variant(plan, "torch", AmdTarget.parse("gfx1100"))
    assert pick.variant is None and 'add "gfx1100" to fleet.gpus' in pick.reason


def test_pick_amd_on_machine_gives_this_gpus_own_reason() -> None:
    gpus = {"gpus": ["MI300X"], "systems": {"MI300X": "aarch64-linux"}}
    data = {
        "fleet": gpus,
        "packages": {"torch": {}, "nccl": {}, "magma": {"vendors": ["nvidia"]}},
        "policy": {"systems": ["aarch64-linux", "x86_64-linux"]},
    }
    plan = make_plan(KB, config_from_mapping(data, origin="test"))
    here = amd_plans_by_system(plan, "x86_64-linux")
    gfx942 = AmdTarget.parse("gfx942")

    def reason(package: str, vendors: list[str] | None = None) -> str:
        pick = pick_amd_on_machine(
            here, package, gfx942, system="x86_64-linux",
            rocm_build=package in AMD.builds, vendors=vendors,
        )  # fmt: skip
        assert pick.variant is None
        return pick.reason

    assert "nccl is CUDA-only" in reason("nccl")
    assert "leaves out amd" in reason("magma", ["nvidia"])
    assert "torch-gfx942 is built for aarch64-linux" in reason("torch")
    there = amd_plans_by_system(plan, "aarch64-linux")
    pick = pick_amd_on_machine(
        there, "torch", gfx942, system="aarch64-linux", rocm_build=True, vendors=None
    )
    assert pick.variant is not None and pick.variant.name == "torch-gfx942"


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gpus", "packages", "policy", "error", "words"),
    [
        (["gfx9999"], None, {}, InvalidInputError, "gfx9999"),
        (["gfx942:xnack*"], None, {}, InvalidInputError, "xnack"),
        (["gfx11-generic"], None, {}, InvalidInputError, "generic"),
        (["MI300Y"], None, {}, InvalidInputError, "MI300X"),
        (["RX 7"], None, {}, InvalidInputError, "ambiguous"),
        (["MI300X"], {"cupy": {"extra": ["gfx942"]}}, {}, InvalidInputError, "CUDA-only"),
        (["MI300X"], {"cupy": {"vendors": ["amd"]}}, {}, InvalidInputError, "CUDA-only"),
        (["MI300X"], {"torch": {"vendors": []}}, {}, InvalidInputError, "empty"),
        (["MI300X"], {"torch": {"vendors": ["intel"]}}, {}, ConfigError, "vendors"),
        (
            ["A100"],
            {"torch": {"vendors": ["amd"], "extra": ["8.6"]}},
            {},
            InvalidInputError,
            "nvidia",
        ),
        (["MI300X"], {"torch": {"exclude": ["gfx9999"]}}, {}, InvalidInputError, "gfx9999"),
        (["MI300X"], None, {"rocm_scope": "foo"}, ConfigError, "rocm_scope"),
        ([], {"torch": {"exclude": ["gfx942"]}}, {}, NothingToDo, "empty"),
    ],
)
def test_bad_amd_input_is_one_clear_error(
    gpus: list[str],
    packages: dict[str, Any] | None,
    policy: dict[str, Any],
    error: type[CapplanError],
    words: str,
) -> None:
    with pytest.raises(error) as raised:
        make_plan(KB, config(gpus, packages, **policy))
    assert words in raised.value.one_line()


_AMD_NAMES = [g.name for g in AMD.gpus] + [str(t.target) for t in AMD.targets]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([*_AMD_NAMES, "A100", "RTX 3090", "L4"]), min_size=1, max_size=6),
    st.sampled_from(["package", "stack"]),
    st.sampled_from(["exact", "compatible"]),
)
def test_any_fleet_plans_deterministically_and_serves_or_explains(
    gpus: list[str], scope: str, share: str
) -> None:
    cfg = config(
        sorted(set(gpus)),
        {"torch": {}, "magma": {}, "onnxruntime": {}},
        rocm_scope=scope,
        share=share,
    )
    try:
        plan = make_plan(KB, cfg)
    except InvalidInputError as error:  # a name shared by several models: ambiguous, exit 4
        assert "ambiguous" in error.one_line()
        return
    assert plan_json(plan) == plan_json(make_plan(KB, cfg))
    names_ = [v.name for v in plan.variants]
    assert len(set(names_)) == len(names_)
    for gpu in rocm_part(plan).fleet:
        for package in ("torch", "magma", "onnxruntime"):
            served = serving(plan, package, gpu.label)
            unserved = [d for d in plan.unserved if (d.package, d.subject) == (package, gpu.label)]
            assert len(served) + len(unserved) >= 1, (package, gpu.label)
    for v in plan.variants:
        for need in v.needs:
            dep = plan.variant(need)
            assert dep is not None and dep.system == v.system
            if rocm_spec(v) is not None:
                assert rocm_spec(dep) == rocm_spec(
                    v
                )  # dependencies share the variant's ROCm instance
