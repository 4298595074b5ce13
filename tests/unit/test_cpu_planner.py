"""The CPU family in the planner (core/families/cpu/planning.py, issue 23 items 3 and 8): fleets that mix
CPU levels, packages that dispatch at run time beside packages that compile for one level,
each decision with its reason, the plan.json contract, costs, and bad fleet.cpus values.

The targets are archspec's (adapters/cpu_archspec.py); the package entries are test entries of
both kinds, so the rules are tested apart from what the CPU knowledge base says of a package.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("archspec", reason="archspec (the CPU target database) is not installed")

from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.adapters.cpu_archspec import ArchspecCpuModel, OverrideRule
from capplan.adapters.kb import load_kb
from capplan.core.families.base import RunLevel
from capplan.core.families.cpu.fleet import cpu_part
from capplan.core.families.cpu.keys import cpu_spec
from capplan.core.families.cpu.planning import CpuFamily, CpuPackagePolicy, is_cpu_side
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import plan_dict, plan_json
from capplan.core.planning.plan import Plan
from capplan.core.planning.planner import make_plan
from capplan.errors import CapplanError, ConfigError, ExitCode, InvalidInputError

KB = load_kb()

# Test entries of both kinds (the rules, not the knowledge base, are under test here).
POLICIES = {
    "gromacs": CpuPackagePolicy(
        "gromacs", "gromacs", "compile-time", "override", "one SIMD level", "test", False, 40, 60
    ),
    "numpy": CpuPackagePolicy(
        "numpy",
        "python3Packages.numpy",
        "runtime-dispatch",
        "cflags",
        "SIMD dispatch",
        "test",
        True,
        8,
        30,
    ),
    "openblas": CpuPackagePolicy(
        "openblas", "openblas", "compile-time", "cflags", "one kernel set", "test", True, 20, 40
    ),
    "torch": CpuPackagePolicy(
        "torch", "python3Packages.torch", "compile-time", "cflags", "test", "test", True, 1, 1
    ),
}
OVERRIDES = {
    "gromacs": [
        OverrideRule(frozenset({"avx512f"}), "cpuAcceleration", "AVX_512"),
        OverrideRule(frozenset({"avx2", "fma"}), "cpuAcceleration", "AVX2_256"),
        OverrideRule(frozenset({"sse4_1"}), "cpuAcceleration", "SSE4.1"),
    ]
}
MODEL = ArchspecCpuModel(POLICIES, OVERRIDES)
MIXED = ["x86-64-v3", "sapphirerapids"]


def _plan(cpus: list[str], packages: dict[str, Any], **extra: Any) -> Plan:
    data: dict[str, Any] = {"fleet": {"cpus": cpus, **extra.pop("fleet", {})}}
    data["packages"] = packages
    data.update(extra)
    return make_plan(KB, config_from_mapping(data, origin="test"), cpu=MODEL)


def _decisions(plan: Plan, package: str) -> dict[str, tuple[str, str]]:
    return {d.subject: (d.action, d.reason) for d in plan.decisions if d.package == package}


def test_mixed_fleet_builds_per_level_only_for_compile_time_packages() -> None:
    plan = _plan(MIXED, {"gromacs": {}, "numpy": {}, "openblas": {}})
    names = {v.name: v for v in plan.variants}
    # gromacs compiles for one level: a build per fleet target, each serving its machines.
    assert {n for n in names if n.startswith("gromacs")} == {
        "gromacs-x86-64-v3",
        "gromacs-sapphirerapids",
    }
    v3 = names["gromacs-x86-64-v3"]
    assert cpu_spec(v3) is not None and cpu_spec(v3).target == "x86-64-v3"
    assert [(s.gpu, s.level) for s in v3.serves] == [("x86-64-v3", RunLevel.NATIVE)]
    assert [s.gpu for s in names["gromacs-sapphirerapids"].serves] == ["sapphirerapids"]
    action, reason = _decisions(plan, "gromacs")["gromacs-x86-64-v3"]
    assert action == "cpu-level" and "compiles for one CPU level" in reason
    assert "2 CPU targets" in reason
    # numpy dispatches at run time: one generic build for both, with that reason.
    assert [n for n in names if n.startswith("numpy")] == ["numpy"]
    assert cpu_spec(names["numpy"]) is None
    assert {s.gpu for s in names["numpy"].serves} == set(MIXED)
    action, reason = _decisions(plan, "numpy")["numpy"]
    assert action == "generic" and "at run time" in reason
    # Every CPU-side build is found by the family's own predicate.
    assert all(is_cpu_side(v) for v in plan.variants)


def test_per_level_builds_get_their_targets_through_the_package_mechanism() -> None:
    plan = _plan(MIXED, {"gromacs": {}, "openblas": {}})
    data = plan_json(plan)["variants"]
    assert data["gromacs-x86-64-v3"]["cpu"] == {
        "target": "x86-64-v3",
        "arch": "x86_64",
        "mechanism": "override",
        "override": {"cpuAcceleration": "AVX2_256"},
        "cflags": [],
        "gccarch": "x86-64-v3",
    }
    assert data["gromacs-sapphirerapids"]["cpu"]["override"] == {"cpuAcceleration": "AVX_512"}
    assert data["gromacs-sapphirerapids"]["cpu"]["gccarch"] == "sapphirerapids"
    blas = data["openblas-x86-64-v3"]["cpu"]
    assert blas["mechanism"] == "cflags" and "-march=x86-64-v3" in blas["cflags"]
    assert blas["override"] == {}


def test_hwcaps_only_for_shared_libraries_and_psabi_levels() -> None:
    plan = _plan(["x86-64-v2", "x86-64-v3", "x86-64-v4"], {"gromacs": {}, "openblas": {}})
    data = plan_json(plan)["variants"]
    assert data["openblas-hwcaps"]["cpu"] == {
        "hwcaps": {
            "x86-64-v2": "openblas-x86-64-v2",
            "x86-64-v3": "openblas-x86-64-v3",
            "x86-64-v4": "openblas-x86-64-v4",
        }
    }
    assert data["openblas-hwcaps"]["attr"] == ["openblas"]
    hwcaps = plan.variant("openblas-hwcaps")
    assert hwcaps is not None and set(hwcaps.needs) == {
        "openblas-x86-64-v2",
        "openblas-x86-64-v3",
        "openblas-x86-64-v4",
    }
    # gromacs' CPU code is in executables: no -hwcaps, and the decision says why.
    assert "gromacs-hwcaps" not in data
    action, reason = _decisions(plan, "gromacs")["gromacs-hwcaps"]
    assert action == "no-hwcaps" and "executables" in reason


def test_hwcaps_serves_a_microarchitecture_with_the_level_it_runs() -> None:
    plan = _plan(MIXED, {"openblas": {}})
    hwcaps = plan.variant("openblas-hwcaps")
    assert hwcaps is not None and cpu_spec(hwcaps) is not None
    assert dict(cpu_spec(hwcaps).hwcaps) == {"x86-64-v3": "openblas-x86-64-v3"}
    serves = {s.gpu: (s.level, s.reason) for s in hwcaps.serves}
    assert serves["x86-64-v3"][0] is RunLevel.NATIVE
    # A Sapphire Rapids machine loads the v3 directory (it has no sapphirerapids one).
    assert serves["sapphirerapids"] == (
        RunLevel.COMPATIBLE,
        "glibc loads lib/glibc-hwcaps/x86-64-v3",
    )


def test_one_target_one_build_and_the_baseline_is_generic() -> None:
    # Two spellings of one target are one CPU listed twice (issue 31: it planned two fleet
    # entries): refused as a repeat, as "A100" and "a100" are.
    with pytest.raises(ConfigError, match="cpus lists 'x86-64-v3' twice"):
        _plan(["x86-64-v3", "X86_64_V3"], {"gromacs": {}})
    plan = _plan(["X86_64_V3"], {"gromacs": {}})
    assert [v.name for v in plan.variants] == ["gromacs-x86-64-v3"]
    plan = _plan(["x86-64"], {"gromacs": {}})
    assert [(v.name, cpu_spec(v)) for v in plan.variants] == [("gromacs", None)]
    assert "baseline" in _decisions(plan, "gromacs")["gromacs"][1]


def test_cpu_generic_opts_a_package_out() -> None:
    plan = _plan(MIXED, {"gromacs": {"cpu": "generic"}})
    assert [(v.name, cpu_spec(v)) for v in plan.variants] == [("gromacs", None)]
    assert _decisions(plan, "gromacs")["gromacs"] == (
        "generic",
        'packages.gromacs.cpu = "generic": one generic build',
    )
    # The generic build of a compile-time package runs on the levels without their features.
    levels = {s.gpu: s.level for s in plan.variants[0].serves}
    assert levels == {"x86-64-v3": RunLevel.COMPATIBLE, "sapphirerapids": RunLevel.COMPATIBLE}


def test_gpu_packages_keep_generic_cpu_code_with_the_reason() -> None:
    plan = _plan(MIXED, {"torch": {}, "gromacs": {}}, fleet={"gpus": ["A100"]})
    torch = [v for v in plan.variants if v.package == "torch"]
    assert torch and all(cpu_spec(v) is None and not is_cpu_side(v) for v in torch)
    action, reason = _decisions(plan, "torch")["cpu"]
    assert action == "generic" and "CPU-side packages only" in reason
    # gromacs is CPU-side in the same plan.
    assert plan.variant("gromacs-sapphirerapids") is not None
    # Every variant of the plan has a cpu key in plan.json and in plan --json.
    assert all("cpu" in v for v in plan_json(plan)["variants"].values())
    assert all("cpu" in v for v in plan_dict(plan)["variants"])
    assert plan_json(plan)["variants"]["torch-sm80"]["cpu"] is None


def test_costs_against_one_generic_build_and_every_level() -> None:
    plan = _plan(MIXED, {"gromacs": {}, "numpy": {}}, fleet={"count": {"sapphirerapids": 8}})
    costs = plan.cpu_costs
    assert costs is not None
    assert costs.plan_jobs == len(plan.variants) == 3
    assert costs.plan_minutes == round(sum(v.minutes for v in plan.variants), 2)
    assert (costs.generic_jobs, costs.generic_minutes) == (2, 40 + 8)
    assert (costs.every_level_jobs, costs.every_level_minutes) == (4, 2 * 40 + 2 * 8)
    assert costs.every_level_size_mb == 2 * 60 + 2 * 30
    assert plan_dict(plan)["costs"]["cpu"]["every_level"]["jobs"] == 4
    # The fleet in one order (sapphirerapids before x86-64-v3), whatever the file's.
    assert [(e.label, e.count) for e in cpu_part(plan).fleet] == [
        ("sapphirerapids", 8),
        ("x86-64-v3", 1),
    ]
    # The reference strategies take the CPU-side builds in too.
    assert plan.baselines.nixpkgs_default_jobs == 2
    assert plan.baselines.naive_jobs == 4


def test_no_cpu_plan_has_no_cpu_costs() -> None:
    plan = make_plan(KB, config_from_mapping({"fleet": {"gpus": ["A100"]}, "packages": {"torch": {}}}, origin="t"), cpu=MODEL)  # fmt: skip
    assert plan.cpu_costs is None and plan_dict(plan)["costs"]["cpu"] is None


def test_arm_cpu_on_an_unplanned_system_is_unserved() -> None:
    plan = _plan(["x86-64-v3", "neoverse_v2"], {"gromacs": {}})
    unserved = {(d.package, d.subject): d.reason for d in plan.unserved}
    assert "aarch64" in unserved[("gromacs", "neoverse_v2")]
    assert "policy.systems" in unserved[("gromacs", "neoverse_v2")]
    both = _plan(
        ["x86-64-v3", "neoverse_v2"],
        {"gromacs": {}},
        policy={"systems": ["x86_64-linux", "aarch64-linux"]},
    )
    assert {v.name for v in both.variants} == {"gromacs-x86-64-v3", "gromacs-neoverse-v2-aarch64"}


def test_runs_on_follows_archspec_and_names_missing_features() -> None:
    family = CpuFamily(MODEL)
    assert family.runs_on("sapphirerapids", ["x86-64-v3"]).level is RunLevel.COMPATIBLE
    assert family.runs_on("x86-64-v3", ["x86-64-v3"]).level is RunLevel.NATIVE
    answer = family.runs_on("x86-64-v3", ["x86-64-v4"])
    assert answer.level is RunLevel.CANNOT_RUN and "avx512f" in answer.reason
    assert family.parse(" X86_64_V3 ") == "x86-64-v3"


def test_compatibility_is_decided_by_instruction_set_features() -> None:
    """archspec files Zen and the Intel cores on different branches of its tree, so by the tree
    alone a Zen runs no Intel-microarchitecture build; nixpkgs' lib/systems/architectures.nix
    lists skylake (and so haswell, sandybridge...) among znver1's inferiors. capplan decides by
    the features a build's code may use: both directions are tested."""
    import archspec.cpu  # type: ignore[import-untyped]

    targets = archspec.cpu.TARGETS
    # Not archspec's tree: sandybridge is no ancestor of zen4 ...
    assert targets["sandybridge"] not in targets["zen4"].ancestors
    # ... but a Zen 4 has every feature sandybridge code may use: it runs it.
    assert MODEL.why_not("zen4", "sandybridge") is None
    assert CpuFamily(MODEL).runs_on("zen4", ["sandybridge"]).level is RunLevel.COMPATIBLE
    # Not nixpkgs' inferiors: skylake code may use ADX and RDRAND, which archspec's Zen entries
    # lack, so a Zen 4 does not run it (the reason names them).
    why = MODEL.why_not("zen4", "skylake")
    assert why is not None and "adx" in why and "rdrand" in why
    # The other way: Sapphire Rapids lacks AMD's SSE4a and CLZERO, so no Zen 4 code on it,
    # although it has every x86-64-v4 feature Zen 4 code needs from that level.
    why = MODEL.why_not("sapphirerapids", "zen4")
    assert why is not None and "sse4a" in why and "clzero" in why
    assert MODEL.why_not("zen4", "x86-64-v4") is None
    assert MODEL.why_not("sapphirerapids", "x86-64-v4") is None
    # Across architectures never, whatever the features.
    assert MODEL.why_not("neoverse_v2", "x86-64") is not None


def test_every_per_level_build_names_its_gccarch_feature() -> None:
    """make-derivation.nix requires `gccarch-<gcc.arch>` of a set built with gcc.arch: the
    plan gives each CPU-level variant GCC's name of its target, none to generic builds."""
    plan = _plan([*MIXED, "zen4"], {"gromacs": {}, "openblas": {}, "numpy": {}})
    data = plan_json(plan)["variants"]
    got = {n: v["cpu"]["gccarch"] for n, v in data.items() if v["cpu"] and "target" in v["cpu"]}
    assert got == {
        "gromacs-x86-64-v3": "x86-64-v3",
        "gromacs-sapphirerapids": "sapphirerapids",
        "gromacs-zen4": "znver4",
        "openblas-x86-64-v3": "x86-64-v3",
        "openblas-sapphirerapids": "sapphirerapids",
        "openblas-zen4": "znver4",
    }
    assert data["numpy"]["cpu"] is None


@pytest.mark.parametrize("bad", ["x86-64-v5", "saphirerapids", "", "gfx942", "8.6"])
def test_unknown_cpu_is_a_config_error_with_the_accepted_names(bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _plan(["x86-64-v3", bad], {"gromacs": {}})
    assert caught.value.exit_code == ExitCode.CONFIG
    assert "fleet.cpus" in caught.value.message
    assert "x86-64-v4" in (caught.value.hint or "")
    assert "ppc64le" not in (caught.value.hint or "")  # capplan plans x86-64 and Arm only


def test_typo_gets_did_you_mean() -> None:
    with pytest.raises(ConfigError) as caught:
        _plan(["saphirerapids"], {"gromacs": {}})
    assert (caught.value.hint or "").startswith("did you mean 'sapphirerapids'")


def test_cpu_of_another_architecture_is_refused() -> None:
    assert MODEL.arch(MODEL.parse("power9le")) == "ppc64le"  # archspec knows it
    with pytest.raises(ConfigError, match="ppc64le"):
        _plan(["power9le"], {"gromacs": {}})


def test_bad_cpu_policy_and_count() -> None:
    with pytest.raises(ConfigError, match=r"packages\.gromacs\.cpu"):
        _plan(MIXED, {"gromacs": {"cpu": "native"}})
    with pytest.raises(InvalidInputError, match=r"fleet\.gpus or fleet\.cpus"):
        _plan(MIXED, {"gromacs": {}}, fleet={"count": {"zen4": 2}})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=20), min_size=1, max_size=3))
def test_any_cpus_value_plans_or_fails_cleanly(cpus: list[str]) -> None:
    try:
        plan = _plan(cpus, {"gromacs": {}, "numpy": {}})
    except CapplanError as error:
        assert error.exit_code in (ExitCode.CONFIG, ExitCode.NOTHING_TO_DO)
        return
    # Every entry resolved to a target archspec knows, and every variant is CPU-side.
    assert len(cpu_part(plan).fleet) == len(cpus)
    assert all(is_cpu_side(v) for v in plan.variants)


@settings(max_examples=30, deadline=None)
@given(
    st.one_of(
        st.integers(),
        st.none(),
        st.lists(st.integers(), min_size=1, max_size=2),
        st.text(max_size=5),
    )
)
def test_cpus_of_the_wrong_type_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError):
        config_from_mapping({"fleet": {"cpus": value}}, origin="test")
