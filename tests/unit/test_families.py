"""The target-family interface (core/families/base.py, core/families/{cuda,rocm}/family.py):
CUDA and ROCm answer the same questions through one interface, and agree with their own modules."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.families import base
from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.binary import CudaCode
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import device_verdict, how_runs
from capplan.core.families.cuda.family import CudaFamily
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.registry import (
    family_for_text,
    gpu_families,
    gpu_verifiers,
    planning_families,
)
from capplan.core.families.rocm.binary import AmdCode
from capplan.core.families.rocm.family import RocmFamily
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.target import AmdTarget, amd_how_runs
from capplan.core.planning.config import config_from_mapping
from capplan.errors import InvalidInputError

KB = load_kb()
CUDA = CudaFamily(KB)
ROCM = RocmFamily(KB)


def test_each_spelling_goes_to_one_family_cuda_last() -> None:
    families = gpu_families(KB)
    assert [f.name for f in families] == ["rocm", "cuda"]
    assert family_for_text(families, " GFX942 ").name == "rocm"
    assert family_for_text(families, "sm_86").name == "cuda"
    # A bad spelling is an error of the family that claims it.
    assert family_for_text(families, "gfx9999").name == "rocm"
    with pytest.raises(InvalidInputError, match="unknown AMD GPU target"):
        ROCM.parse("gfx9999")
    with pytest.raises(InvalidInputError):
        CUDA.parse("sm_8")


def test_parse_order_and_label() -> None:
    caps = [CUDA.parse(t) for t in ("9.0a", "8.6", "sm_80")]
    assert [CUDA.label(c) for c in sorted(caps, key=CUDA.sort_key)] == ["sm80", "sm86", "sm90a"]
    gfx = [ROCM.parse(t) for t in ("gfx1100", "gfx11-generic", "gfx942")]
    assert [ROCM.label(t) for t in sorted(gfx, key=ROCM.sort_key)] == [
        "gfx942",
        "gfx11-generic",
        "gfx1100",
    ]


@pytest.mark.parametrize(
    ("device", "built"), [("8.6", ["8.0"]), ("8.6", ["8.6"]), ("9.0", ["8.6"]), ("8.7", ["8.6"])]
)
def test_cuda_runs_on_is_compat(device: str, built: list[str]) -> None:
    d = Capability.parse(device)
    b = [Capability.parse(x) for x in built]
    answer = CUDA.runs_on(d, b)
    jetson = nvidia(KB).capability(d).jetson
    expected = how_runs(d, b, (), jetson=jetson)
    assert (answer.level, answer.reason) == (expected.level, expected.reason)
    assert answer.runs == (expected.level is not RunLevel.CANNOT_RUN)


def test_rocm_runs_on_maps_amd_levels() -> None:
    exact = ROCM.runs_on(AmdTarget.parse("gfx942"), [AmdTarget.parse("gfx942")])
    assert exact.level is RunLevel.NATIVE
    compatible = ROCM.runs_on(AmdTarget.parse("gfx1101"), [AmdTarget.parse("gfx11-generic")])
    assert compatible.level is RunLevel.COMPATIBLE
    no = ROCM.runs_on(AmdTarget.parse("gfx1100"), [AmdTarget.parse("gfx942")])
    assert not no.runs
    assert no.reason == amd_how_runs(AmdTarget.parse("gfx1100"), [AmdTarget.parse("gfx942")]).reason


def test_package_limits_from_each_knowledge_base() -> None:
    # kb/packages.json: torch takes no family-specific capabilities; nccl excludes Jetson 8.7;
    # tensorrt needs 7.5 or newer.
    assert CUDA.package_limit("torch", Capability.parse("8.6")) is None
    assert "family-specific" in (CUDA.package_limit("torch", Capability.parse("10.0f")) or "")
    assert "excludes 8.7" in (CUDA.package_limit("nccl", Capability.parse("8.7")) or "")
    assert ">= 7.5" in (CUDA.package_limit("tensorrt", Capability.parse("7.0")) or "")
    assert CUDA.package_limit("tensorrt", Capability.parse("8.0")) is None
    # magma-hip's own list leaves out gfx942 (ROCM.md); a CUDA-only package says so.
    assert ROCM.package_limit("torch", AmdTarget.parse("gfx942")) is None
    assert "CUDA-only" in (ROCM.package_limit("nccl", AmdTarget.parse("gfx942")) or "")


def test_each_gpu_belongs_to_one_family() -> None:
    # explain asks the other families first; the fallback (CUDA) owns every other spelling.
    assert ROCM.owns_device("MI300X") and ROCM.owns_device("gfx1100")
    assert not ROCM.owns_device("RTX 4090") and not ROCM.owns_device("8.6")
    assert CUDA.owns_device("RTX 4090")
    with pytest.raises(InvalidInputError, match="unknown GPU or capability"):
        ROCM.owns_device("Voodoo 5")


def test_explain_answers_with_the_familys_own_rules() -> None:
    rocm = ROCM.explain("gfx942,gfx90a", "MI300X")
    assert rocm.device == "gfx942"
    assert rocm.fields["vendor"] == "amd" and rocm.fields["capability"] is None
    verdict = amd_how_runs(
        AmdTarget.parse("gfx942"), [AmdTarget.parse("gfx90a"), AmdTarget.parse("gfx942")]
    )
    assert (rocm.fields["level"], rocm.fields["via"]) == (verdict.level.value, "gfx942")
    assert rocm.fields["targets"] == ["gfx90a", "gfx942"]  # the family's order

    cuda = CUDA.explain("8.0,9.0+PTX", "RTX 4090")
    device = Capability.parse("8.9")
    expected = device_verdict(
        device, [Capability.parse("8.0"), Capability.parse("9.0")], [Capability.parse("9.0")], KB
    )
    assert cuda.device == "8.9" and cuda.fields["capability"] == "8.9"
    assert (cuda.fields["level"], cuda.fields["reason"]) == (expected.level.value, expected.reason)
    assert expected.level is RunLevel.COMPATIBLE  # same-major SASS, before the 9.0 PTX
    assert CUDA.explain("8.6", "A100").fields["level"] == RunLevel.CANNOT_RUN.value


# The planner's phases that only some families have (core/families/base.py): the planner asks
# a phase of the families that implement it, so no family answers one with a stub.
PHASES = {
    "cuda": {"PreparesPolicy", "ClaimsFleet", "KnowsPackages", "ChecksTargets", "ChecksPackage",
             "ValidatesFleet", "ReportsUnplanned"},
    "rocm": {"ClaimsFleet", "ChecksVendors", "ChecksTargets", "ReportsUnplanned"},
    "cpu": {"PreparesPolicy", "KnowsPackages"},
}  # fmt: skip


def test_rocm_leaves_names_it_does_not_know_and_the_fallback_refuses_them() -> None:
    # ROCm's fleet claim says no to a name no vendor knows (a family after it in the registry
    # may know it); the fallback, CUDA, refuses it at the same entry with both vendors'
    # "did you mean", and ROCm still refuses a bad gfx target or an ambiguous AMD name itself.
    gpus = ["MI300X", "A100", "Voodoo 5", "gfx9999"]
    config = config_from_mapping({"fleet": {"gpus": gpus}, "packages": {"torch": {}}}, origin="t")
    rocm, cuda = (
        next(f for f in planning_families(KB, config) if f.family.name == name)
        for name in ("rocm", "cuda")
    )
    assert isinstance(rocm, base.ClaimsFleet) and isinstance(cuda, base.ClaimsFleet)
    assert rocm.claims_gpu("MI300X") and not rocm.claims_gpu("A100")
    assert not rocm.claims_gpu("Voodoo 5")
    assert cuda.claims_gpu("A100")
    with pytest.raises(InvalidInputError, match="unknown GPU or capability 'Voodoo 5'"):
        cuda.claims_gpu("Voodoo 5")
    with pytest.raises(InvalidInputError, match="generic build target"):
        rocm.claims_gpu("gfx9-generic")
    with pytest.raises(InvalidInputError, match="ambiguous"):
        rocm.claims_gpu("MI2")


def test_each_family_has_only_the_planning_phases_it_does() -> None:
    config = config_from_mapping(
        {"fleet": {"gpus": ["A100"]}, "packages": {"torch": {}}}, origin="t"
    )
    names = {
        "PreparesPolicy", "ClaimsFleet", "KnowsPackages", "ChecksVendors", "ChecksTargets",
        "ChecksPackage", "ValidatesFleet", "ReportsUnplanned",
    }  # fmt: skip
    found = {
        f.family.name: {n for n in names if isinstance(f, getattr(base, n))}
        for f in planning_families(KB, config)
    }
    assert found == PHASES


def test_verify_asks_each_gpu_family_its_own_part() -> None:
    # capplan verify picks a family through the registry; each judges its own code.
    rocm, cuda = gpu_verifiers(lambda: KB, lambda: KB, lambda: KB.part(AmdKnowledgeBase))  # type: ignore[arg-type,return-value]
    assert (rocm.code, cuda.code) == ("AMD", "CUDA") and cuda.fallback and not rocm.fallback
    assert rocm.claims(" GFX942 ") and not rocm.claims("8.6")
    assert cuda.target_spelling("sm_86") == "a CUDA capability"
    assert rocm.target_spelling("8.6") is None
    assert rocm.lookup("mi300x") == (AmdTarget.parse("gfx942"), False)
    cap, jetson = cuda.lookup("Jetson Orin")
    assert (str(cap), jetson) == ("8.7", True)
    assert cuda.describe(cap) == "an NVIDIA GPU (8.7)"
    wanted = cuda.expected("8.6,9.0+PTX", ["8.6", "9.0+PTX"])
    assert (
        rocm.owns(AmdTarget.parse("gfx942")) and not rocm.owns(wanted[0]) and cuda.owns(wanted[0])
    )
    # A report as the walker gives it: one code per family's binary reader.
    report = SimpleNamespace(
        path="lib.so", problems=(), code=(CudaCode(sass=(Capability.parse("8.6"),)), AmdCode())
    )
    got = cuda.verify(wanted, [report], Capability.parse("8.9"), False)
    assert not got.ok and not got.markup  # plain text: a path holding [...] as it is
    assert got.failures == ("missing SASS sm_90", "missing PTX compute_90")
    assert got.lines[-1].startswith("on 8.9: compatible: SASS sm_86")
    amd = rocm.verify(rocm.expected("gfx942", ["gfx942"]), [report], None, False)
    assert not amd.ok and not amd.markup and amd.fields["extra_cuda"] == ["sm_86"]
