"""Planning rules: serving every GPU, CUDA choice, sharing, fat builds, graph, costs."""

from __future__ import annotations

import dataclasses
import json
from itertools import combinations
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.adapters.kb import load_kb
from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import sass_runs_on
from capplan.core.families.cuda.cover import min_cover
from capplan.core.families.cuda.fleet import cuda_part
from capplan.core.families.cuda.kb import CudaPackageInfo, nvidia
from capplan.core.families.cuda.keys import cuda_spec, cuda_version
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.config import Config, config_from_mapping
from capplan.core.planning.matrix import build_matrix, plan_dict, plan_json
from capplan.core.planning.plan import Plan
from capplan.core.planning.planner import make_plan
from capplan.errors import (
    ConfigError,
    GraphError,
    InfeasibleError,
    InvalidInputError,
    NothingToDo,
)

KB = load_kb()


def config(gpus: list[str], packages: dict[str, Any] | None = None, **policy: Any) -> Config:
    return config_from_mapping(
        {"fleet": {"gpus": gpus}, "packages": packages or {"torch": {}}, "policy": policy},
        origin="test",
    )


def with_package(kb: KnowledgeBase, name: str, **changes: Any) -> KnowledgeBase:
    pkg = kb.package(name)
    limits = changes.pop("limits", None)
    if limits is not None:
        changes["limits"] = dataclasses.replace(pkg.limits, **limits)
    return dataclasses.replace(
        kb, packages={**kb.packages, name: dataclasses.replace(pkg, **changes)}
    )


def serving(plan: Plan, package: str, gpu: str) -> list[tuple[str, RunLevel]]:
    return [(v.name, s.level) for v in plan.variants_of(package) for s in v.serves if s.gpu == gpu]


def test_exact_capability_is_preferred() -> None:
    plan = make_plan(KB, config(["A100", "RTX 3090", "8.9"]))
    assert serving(plan, "torch", "A100") == [("torch-sm80", RunLevel.NATIVE)]
    assert serving(plan, "torch", "RTX 3090") == [("torch-sm86", RunLevel.NATIVE)]
    torch86 = plan.variant("torch-sm86")
    assert torch86 is not None
    assert cuda_spec(torch86).capabilities == (Capability(8, 6),) and cuda_spec(torch86).ptx == ()
    assert str(cuda_version(torch86)) == "12.9" and cuda_spec(torch86).cuda_set is None


def test_no_gpu_is_dropped_silently_and_jetson_is_reported() -> None:
    plan = make_plan(KB, config(["A100", "Jetson Orin"], {"torch": {}, "nccl": {}}))
    for package in ("torch", "nccl"):
        for gpu in cuda_part(plan).fleet:
            served = serving(plan, package, gpu.label)
            unserved = [d for d in plan.unserved if d.package == package and d.subject == gpu.label]
            assert bool(served) != bool(unserved), (package, gpu.label)
    jetson = [d for d in plan.unserved if d.subject == "Jetson Orin"]
    assert jetson and all("aarch64-linux" in d.reason for d in jetson)


def test_torch_1_13_limit_serves_h100_through_ptx() -> None:
    kb = with_package(KB, "torch", limits={"allow_from": "torch@1.13", "suffixes": ("",)})
    kb = with_package(kb, "torchvision", limits={"allow_from": "torch@1.13", "suffixes": ("",)})
    plan = make_plan(kb, config(["H100", "RTX 3090"], {"torch": {}}))
    assert serving(plan, "torch", "H100") == [("torch-sm86", RunLevel.PTX_JIT)]
    assert serving(plan, "torch", "RTX 3090") == [("torch-sm86", RunLevel.NATIVE)]
    variant = plan.variant("torch-sm86")
    assert variant is not None and cuda_spec(variant).ptx == (Capability(8, 6),)
    assert cuda_spec(variant).gpu_targets == (
        "8.6+PTX",
    )  # torch only embeds PTX through gpuTargets
    ptx = [d for d in plan.decisions if d.subject == "H100"]
    assert ptx and ptx[0].action == "ptx" and "JIT" in ptx[0].reason


def test_same_major_substitute_when_exact_is_not_allowed() -> None:
    kb = with_package(KB, "nccl", limits={"exclude": (Capability(8, 9),)})
    plan = make_plan(kb, config(["L4", "A100"], {"nccl": {}}))
    # the newest buildable capability whose SASS runs on 8.9 is 8.6, not the fleet's 8.0
    assert serving(plan, "nccl", "L4") == [("nccl-sm86", RunLevel.COMPATIBLE)]
    assert any(d.action == "substituted" and d.subject == "L4" for d in plan.decisions)


def test_pascal_on_a_cuda_13_policy_lands_on_12_x() -> None:
    plan = make_plan(KB, config(["GTX 1080 Ti", "A100"], {"nccl": {}}, cuda=["13.0", "12.9"]))
    pascal = plan.variant("nccl-sm61-cu129")
    assert pascal is not None and str(cuda_version(pascal)) == "12.9"
    assert cuda_spec(pascal).cuda_set is None  # 12.9 is nixpkgs' default package set
    assert plan.variant("nccl-sm80") is not None  # 13.0, the policy's first: no suffix
    cuda = [d for d in plan.decisions if d.action == "cuda"]
    assert cuda and "13.0" in cuda[0].reason and "6.1" in cuda[0].reason


def test_non_default_cuda_goes_through_its_package_set() -> None:
    plan = make_plan(KB, config(["A100"], {"nccl": {"cuda": "12.6"}}))
    variant = plan.variant("nccl-sm80-cu126")
    assert variant is not None and cuda_spec(variant).cuda_set == "cudaPackages_12_6"


def test_capability_no_allowed_cuda_supports_is_an_error() -> None:
    with pytest.raises(InfeasibleError, match="GTX 1080 Ti"):
        make_plan(KB, config(["GTX 1080 Ti"], {"nccl": {}}, cuda=["13.0"]))


def test_package_that_excludes_every_fleet_capability() -> None:
    # CUDA 13.0 dropped Pascal, and nothing older builds under it to JIT from.
    plan_config = config(["GTX 1080 Ti", "P100"], {"nccl": {"cuda": "13.0"}})
    with pytest.raises(InfeasibleError) as info:
        make_plan(KB, plan_config)
    assert "GTX 1080 Ti" in info.value.message and "P100" in info.value.message
    assert "nccl" in info.value.message


def test_empty_fleet_is_nothing_to_do() -> None:
    with pytest.raises(NothingToDo):
        make_plan(KB, config([]))


def test_extra_capability_gets_its_own_cuda() -> None:
    # 6.1 is gone from CUDA 13: the extra lands on 12.9 whatever CUDA the fleet's GPUs used.
    plan = make_plan(KB, config(["A100"], {"nccl": {"extra": ["6.1"]}}, cuda=["13.0", "12.9"]))
    extra = plan.variant("nccl-sm61-cu129")
    assert extra is not None and str(cuda_version(extra)) == "12.9"
    assert plan.variant("nccl-sm61") is None  # never a CUDA 13.0 build of 6.1
    build_matrix(plan, 2)


def test_extras_alone_are_a_plan_without_a_fleet() -> None:
    plan = make_plan(KB, config([], {"nccl": {"extra": ["8.6"]}}))
    assert [v.name for v in plan.variants if not v.independent] == ["nccl-sm86"]


def test_buildable_sets_agree_with_the_reasons() -> None:
    """The planner answers "can P build for C under CUDA X" from precomputed sets and only
    walks the checks one by one for the reason; both must say the same for every triple."""
    from capplan.core.families.cuda.inputs import resolve_cuda_policy
    from capplan.core.families.cuda.rules import Rules

    kb = with_package(KB, "torch", limits={"allow_from": "torch@1.13", "suffixes": ("",)})
    kb = with_package(kb, "nccl", limits={"exclude": (Capability(8, 9),), "max": Capability(9, 0)})
    cfg = config(["A100"], {"torch": {"exclude": ["8.0"]}, "magma": {"exclude": ["7.5"]}})
    cudas = resolve_cuda_policy(kb, ["13.0", "12.9", "12.6", "13.3"])
    for system in ("x86_64-linux", "aarch64-linux"):
        rules = Rules(kb, cfg, system, cudas)
        for package in sorted(kb.packages):
            for info in nvidia(kb).capabilities:
                for cuda in cudas:
                    cap = info.capability
                    if cap in rules.ok(package, cuda):
                        assert rules.why_not(package, cap, cuda) is None
                        with pytest.raises(AssertionError, match="no reason"):
                            rules._why_not(package, cap, cuda)
                    else:
                        assert rules.why_not(package, cap, cuda), (package, cap, cuda)


@pytest.mark.parametrize("bad", ["RTX 9999 Ultra", "sm_999x"])
def test_unknown_gpu_is_invalid_input(bad: str) -> None:
    with pytest.raises(InvalidInputError):
        make_plan(KB, config([bad]))


def test_unknown_package_says_did_you_mean() -> None:
    with pytest.raises(InvalidInputError, match="did you mean 'torch'"):
        make_plan(KB, config(["A100"], {"trorch": {}}))


def test_unknown_config_key_says_did_you_mean() -> None:
    with pytest.raises(ConfigError, match="did you mean 'share'"):
        config_from_mapping({"policy": {"shar": "exact"}}, origin="capplan.toml")
    with pytest.raises(ConfigError, match="did you mean 'exclude'"):
        config_from_mapping({"packages": {"torch": {"exlude": []}}}, origin="capplan.toml")


def test_dependency_cycle_and_unknown_dependency_are_graph_errors() -> None:
    cyclic = with_package(KB, "magma", depends=("torch",))
    with pytest.raises(GraphError, match="cycle"):
        make_plan(cyclic, config(["A100"]))
    dangling = with_package(KB, "nccl", depends=("libfoo",))
    with pytest.raises(GraphError, match="libfoo"):
        make_plan(dangling, config(["A100"]))


def test_dependencies_become_per_variant_and_shared_jobs() -> None:
    plan = make_plan(KB, config(["RTX 3090"], {"torchvision": {}}))
    torchvision = plan.variant("torchvision-sm86")
    torch = plan.variant("torch-sm86")
    assert torchvision is not None and torch is not None
    assert "torch-sm86" in torchvision.needs
    assert {"magma-sm86", "nccl-sm86", "cudnn"} <= set(torch.needs)
    cudnn = plan.variant("cudnn")
    assert cudnn is not None and cudnn.independent and cuda_spec(cudnn).capabilities == ()
    build_matrix(plan, 2)  # the graph is consistent


def test_share_compatible_builds_fewer_variants_and_reports_the_saving() -> None:
    exact = make_plan(KB, config(["A100", "RTX 3090", "L4", "H100"], {"nccl": {}}))
    shared = make_plan(
        KB, config(["A100", "RTX 3090", "L4", "H100"], {"nccl": {}}, share="compatible")
    )
    exact_names = [v.name for v in exact.variants_of("nccl")]
    shared_names = [v.name for v in shared.variants_of("nccl")]
    assert exact_names == ["nccl-sm80", "nccl-sm86", "nccl-sm89", "nccl-sm90"]
    assert shared_names == ["nccl-sm80", "nccl-sm90"]
    assert shared.baselines.exact_jobs == len(exact.variants)
    assert serving(shared, "nccl", "L4") == [("nccl-sm80", RunLevel.COMPATIBLE)]
    assert serving(shared, "nccl", "A100") == [("nccl-sm80", RunLevel.NATIVE)]


def test_fat_build_has_ptx_only_on_the_highest_capability() -> None:
    plan = make_plan(
        KB,
        config(["A100", "RTX 3090", "H100"], {"torch": {}, "nccl": {}}, fat="fleet", ptx="newest"),
    )
    fat = plan.variant("torch-fat")
    assert fat is not None and fat.fat
    assert [str(c) for c in cuda_spec(fat).capabilities] == ["8.0", "8.6", "9.0"]
    assert cuda_spec(fat).ptx == (Capability(9, 0),)
    assert cuda_spec(fat).gpu_targets == ("8.0", "8.6", "9.0+PTX")
    nccl = plan.variant("nccl-fat")
    # One nixpkgs instance for the whole fat build: nccl-fat is torch-fat's nccl.
    assert (
        nccl is not None
        and cuda_spec(nccl).forward_compat
        and cuda_spec(nccl).gpu_targets == cuda_spec(fat).gpu_targets
    )
    assert cuda_spec(fat).forward_compat
    assert {s.gpu for s in fat.serves} == {"A100", "RTX 3090", "H100"}


def test_ptx_variants_of_one_capability_share_one_instance() -> None:
    # Issue 11: torch gets PTX through gpuTargets, nccl through cudaForwardCompat; both settings
    # belong to ONE nixpkgs instance, so torch-sm86's nccl is the nccl-sm86 job.
    plan = make_plan(
        KB, config(["RTX 3090"], {"torch": {}, "torchvision": {}, "nccl": {}}, ptx="newest")
    )
    names = ("torch-sm86", "torchvision-sm86", "nccl-sm86", "magma-sm86")
    found = {n: plan.variant(n) for n in names}
    variants = {n: v for n, v in found.items() if v is not None}
    assert set(variants) == set(names)
    assert {(cuda_spec(v).forward_compat, cuda_spec(v).gpu_targets) for v in variants.values()} == {
        (True, ("8.6+PTX",))
    }
    assert cuda_spec(variants["torch-sm86"]).ptx == (Capability(8, 6),)
    assert cuda_spec(variants["nccl-sm86"]).ptx == (Capability(8, 6),)
    # torchvision inherits the PTX torch; its own kernels follow torch.cudaCapabilities.
    assert cuda_spec(variants["torchvision-sm86"]).ptx == ()
    assert any(
        d.action == "no-ptx"
        and d.subject == "torchvision-sm86"
        and "inherit" not in d.reason
        and "PTX torch" in d.reason
        for d in plan.decisions
    )
    overlay = plan_json(plan)["variants"]
    assert {
        json.dumps([overlay[n][k] for k in ("capabilities", "forward_compat", "gpu_targets")])
        for n in names
    } == {json.dumps([["8.6"], True, ["8.6+PTX"]])}


def test_without_ptx_the_instance_has_no_forward_compat() -> None:
    plan = make_plan(KB, config(["RTX 3090"], {"torch": {}, "nccl": {}}))
    for name in ("torch-sm86", "nccl-sm86"):
        v = plan.variant(name)
        assert (
            v is not None
            and not cuda_spec(v).forward_compat
            and cuda_spec(v).gpu_targets == ()
            and cuda_spec(v).ptx == ()
        )


def test_named_fat_groups() -> None:
    plan = make_plan(KB, config(["A100", "H100", "RTX 3090"], fat={"dc": ["A100", "H100"]}))
    group = plan.variant("torch-fat-dc")
    assert group is not None and [str(c) for c in cuda_spec(group).capabilities] == ["8.0", "9.0"]


def test_costs_follow_the_kb_and_baselines() -> None:
    plan = make_plan(KB, config(["A100", "RTX 3090"], {"nccl": {}}, fat="fleet"))
    pkg = KB.package("nccl")
    single = plan.variant("nccl-sm80")
    fat = plan.variant("nccl-fat")
    assert single is not None and fat is not None
    assert single.minutes == pytest.approx(pkg.cost.base_minutes + pkg.cost.per_target_minutes)
    assert fat.minutes == pytest.approx(pkg.cost.base_minutes + 2 * pkg.cost.per_target_minutes)
    b = plan.baselines
    assert b.plan_minutes == pytest.approx(sum(v.minutes for v in plan.variants))
    defaults = len(nvidia(KB).defaults(CudaVersion(12, 9)))
    closure = [KB.package(n) for n in ("nccl", *KB.package("nccl").depends)]
    closure_minutes = sum(
        p.cost.base_minutes
        + (p.cost.per_target_minutes * defaults if p.capability_dependent else 0)
        for p in closure
    )
    assert b.nixpkgs_default_minutes == pytest.approx(closure_minutes)


def test_output_is_deterministic() -> None:
    a = make_plan(KB, config(["L4", "A100", "RTX 3090"], {"torch": {}, "cupy": {}}))
    b = make_plan(KB, config(["RTX 3090", "A100", "L4"], {"cupy": {}, "torch": {}}))
    assert json.dumps(plan_json(a), sort_keys=True) == json.dumps(plan_json(b), sort_keys=True)
    assert [v.name for v in a.variants] == [v.name for v in b.variants]
    assert plan_dict(a)["variants"] == plan_dict(a)["variants"]


# -- the set cover is optimal: compare with brute force over every subset ----------------------
fleet_caps = st.lists(
    st.sampled_from(
        [c.capability for c in nvidia(KB).capabilities if not c.capability.suffix and not c.jetson]
    ),
    min_size=1,
    max_size=7,
    unique=True,
)
pools = st.lists(
    st.sampled_from([c.capability for c in nvidia(KB).capabilities if c.capability.suffix != "a"]),
    min_size=1,
    max_size=9,
    unique=True,
)


@settings(max_examples=150, deadline=None)
@given(fleet_caps, pools)
def test_set_cover_is_minimum(devices: list[Capability], pool: list[Capability]) -> None:
    options = {c: frozenset(d for d in devices if sass_runs_on(c, d)) for c in pool}
    options = {c: cov for c, cov in options.items() if cov}
    coverable = [d for d in devices if any(d in cov for cov in options.values())]
    if not coverable:
        return
    chosen = min_cover(coverable, options)
    assert set(coverable) <= set().union(*(options[c] for c in chosen))
    brute = next(
        size
        for size in range(1, len(options) + 1)
        for combo in combinations(options, size)
        if set(coverable) <= set().union(*(options[c] for c in combo))
    )
    assert len(chosen) == brute


def test_packages_info_is_what_the_planner_reads() -> None:
    assert isinstance(KB.package("torch"), CudaPackageInfo)


def test_torch_is_never_planned_on_a_cuda_major_nixpkgs_torch_refuses() -> None:
    # nixpkgs' torch recipe is meta.broken ("Unsupported CUDA version") on CUDA majors other
    # than 11 and 12 (kb/packages.json torch limits.cuda): on a 13.0-first policy torch and
    # torchvision fall back to 12.9 (with the nccl they link) while nccl alone takes 13.0.
    plan = make_plan(
        KB, config(["A100"], {"torch": {}, "torchvision": {}, "nccl": {}}, cuda=["13.0", "12.9"])
    )
    for package in ("torch", "torchvision"):
        variants = plan.variants_of(package)
        assert variants and {str(cuda_version(v)) for v in variants} == {"12.9"}, package
    nccl = plan.variant("nccl-sm80")  # nccl asked for itself builds with the preferred 13.0
    assert nccl is not None and str(cuda_version(nccl)) == "13.0"
    why = [d.reason for d in plan.decisions if d.package == "torch" and d.action == "cuda"]
    assert why and "torch does not build with CUDA 13.0" in why[0]


def test_torch_pinned_to_cuda_13_is_infeasible() -> None:
    with pytest.raises(InfeasibleError) as info:
        make_plan(KB, config(["A100"], {"torch": {"cuda": "13.0"}}))
    assert "torch" in info.value.message and "CUDA 13.0" in info.value.message
