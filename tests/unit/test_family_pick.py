"""One Pick type and ``pick(plan, machine)`` on every family (issue 32, core/families/base.py):
``capplan detect`` asks the registry's families instead of three pickers with three return
types, and each family's answer is its own picker's, field for field."""

from __future__ import annotations

from dataclasses import replace

from capplan.adapters.cpu_archspec import load_cpu_model
from capplan.adapters.kb import load_kb
from capplan.core.families.base import Machine, Pick, RunLevel
from capplan.core.families.cpu.planning import pick_cpu_variants
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.select import driver_support, pick_variant
from capplan.core.families.registry import cpu_family, gpu_families
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.select import amd_plans_by_system, pick_amd_on_machine
from capplan.core.families.rocm.target import AmdTarget
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.plan import Plan
from capplan.core.planning.planner import make_plan

KB = load_kb()
FAMILIES = {f.name: f for f in gpu_families(KB)}
CPU_MODEL = load_cpu_model()


def _plan(data: dict[str, object]) -> Plan:
    return make_plan(KB, config_from_mapping(data, origin="test"), cpu=CPU_MODEL)


def _by_package(picks: tuple[Pick, ...]) -> dict[str, Pick]:
    assert all(isinstance(p, Pick) for p in picks)
    return {p.package: p for p in picks}


def test_cuda_pick_is_pick_variant_with_the_driver_in_detail() -> None:
    # cupy (13.0) serves the A100; a Pascal GPU in the fleet adds cupy-cu129.
    data = {
        "fleet": {"gpus": ["A100", "GTX 1080 Ti"]},
        "packages": {"cupy": {}, "torch": {}},
        "policy": {"cuda": ["13.0", "12.9"]},
    }
    plan = _plan(data)
    a100 = Capability(8, 0)
    for driver in ("550.54.14", "580.65.06", "450.51.06", None):
        machine = Machine(plan.system, a100, driver)
        picks = _by_package(FAMILIES["cuda"].pick(plan, machine))
        assert sorted(picks) == list(plan.packages)
        for package, pick in picks.items():
            old = pick_variant(plan, package, a100, KB, driver=driver_support(KB, driver))
            assert pick.variant is (old.variant if old.runnable else None)
            assert (pick.level, pick.reason) == (old.verdict.level, old.verdict.reason)
            assert pick.named is (old.variant or old.blocked)
            assert pick.detail == {"driver_ok": old.driver_ok, "needs_driver": old.needs_driver}
    # An old driver: nothing to use, the answer names the variant a newer driver would run.
    old_driver = _by_package(FAMILIES["cuda"].pick(plan, Machine(plan.system, a100, "450.51.06")))
    torch = old_driver["torch"]
    assert torch.variant is None and torch.level is RunLevel.CANNOT_RUN
    assert torch.named is not None and torch.detail["needs_driver"] is not None
    # An unknown capability has no answers, but its device fields still say what the driver runs.
    assert FAMILIES["cuda"].pick(plan, Machine(plan.system, None, "550.54.14")) == ()
    fields = FAMILIES["cuda"].device_fields(None, "550.54.14")
    assert fields["capability"] is None and "overlay" not in fields
    assert fields["max_cuda_minor_compat"] is not None


def test_cuda_pick_keeps_to_the_machines_system() -> None:
    data = {
        "fleet": {"gpus": ["A100", "H100"], "systems": {"H100": "aarch64-linux"}},
        "packages": {"torch": {}},
        "policy": {"systems": ["x86_64-linux", "aarch64-linux"]},
    }
    plan = _plan(data)
    cuda = FAMILIES["cuda"]
    here = _by_package(cuda.pick(plan, Machine("x86_64-linux", Capability(8, 0))))
    there = _by_package(cuda.pick(plan, Machine("aarch64-linux", Capability(9, 0))))
    assert here["torch"].variant is not None and here["torch"].variant.name == "torch-sm80"
    assert there["torch"].variant is not None
    assert there["torch"].variant.name == "torch-sm90-aarch64"
    # An A100 on an aarch64 machine is not offered the x86_64 build made for the fleet's A100.
    elsewhere = _by_package(cuda.pick(plan, Machine("aarch64-linux", Capability(8, 0))))
    assert (
        elsewhere["torch"].variant is None or elsewhere["torch"].variant.system == "aarch64-linux"
    )


def test_rocm_pick_is_pick_amd_on_machine_with_the_configs_vendors() -> None:
    data = {
        "fleet": {"gpus": ["MI300X"], "systems": {"MI300X": "aarch64-linux"}},
        "packages": {"torch": {}, "nccl": {}, "magma": {"vendors": ["nvidia"]}},
        "policy": {"systems": ["aarch64-linux", "x86_64-linux"]},
    }
    plan = _plan(data)
    vendors = {"magma": ("nvidia",)}
    gfx942 = AmdTarget.parse("gfx942")
    assert KB.part(AmdKnowledgeBase) is not None
    for system in ("x86_64-linux", "aarch64-linux"):
        picks = _by_package(FAMILIES["rocm"].pick(plan, Machine(system, gfx942, None, vendors)))
        assert sorted(picks) == list(plan.packages)
        for package, pick in picks.items():
            old = pick_amd_on_machine(
                amd_plans_by_system(plan, system), package, gfx942, system=system,
                rocm_build=package in KB.part(AmdKnowledgeBase).builds, vendors=vendors.get(package),
            )  # fmt: skip
            assert (pick.variant, pick.level, pick.reason) == (old.variant, old.level, old.reason)
            assert pick.named is None and pick.detail == {}
    here = _by_package(FAMILIES["rocm"].pick(plan, Machine("x86_64-linux", gfx942, None, vendors)))
    assert "leaves out amd" in here["magma"].reason
    assert "torch-gfx942 is built for aarch64-linux" in here["torch"].reason
    fields = FAMILIES["rocm"].device_fields(gfx942, None)
    assert fields == {"target": "gfx942", "overlay": 'gpuTargets = [ "gfx942" ];'}


def test_cpu_pick_is_pick_cpu_variants_with_a_run_level() -> None:
    plan = _plan({"fleet": {"cpus": ["x86-64-v3", "sapphirerapids"]}, "packages": {"gromacs": {}}})
    family = cpu_family(CPU_MODEL)
    levels = {}
    for cpu in ("sapphirerapids", "zen4", "haswell", "x86-64-v2"):
        picks = family.pick(plan, Machine("x86_64-linux", cpu))
        old = pick_cpu_variants(plan.variants, "x86_64-linux", cpu, CPU_MODEL)
        assert [(p.package, p.variant, p.reason) for p in picks] == [
            (p.package, p.variant, p.reason) for p in old
        ]
        levels[cpu] = [p.level for p in picks]
    assert levels["sapphirerapids"] == [RunLevel.NATIVE]  # built for it
    assert levels["zen4"] == [RunLevel.COMPATIBLE]  # runs x86-64-v3 code
    assert levels["x86-64-v2"] == [RunLevel.CANNOT_RUN]
    # A CPU of another system runs none of this plan's builds: no package to answer.
    assert family.pick(plan, Machine("aarch64-linux", "neoverse_v2")) == ()


def test_cuda_pick_over_every_variant_of_the_system_is_doctors_pick() -> None:
    # doctor judges the plan by system only (Machine.own_kind_only False): the answer is
    # pick_variant's on the system's variants, Jetson and SBSA redistributables alike.
    data = {
        "fleet": {"gpus": ["A100", "Jetson AGX Orin", "GH200"]},
        "packages": {"cupy": {}, "torch": {}},
        "policy": {"cuda": ["13.0", "12.9"], "systems": ["x86_64-linux", "aarch64-linux"]},
    }
    plan = _plan(data)
    for system in plan.systems:
        mine = replace(plan, variants=tuple(v for v in plan.variants if v.system == system))
        for cap in (Capability(8, 0), Capability(8, 7), Capability(9, 0), Capability(6, 1)):
            for driver in ("580.65.06", "450.51.06", None):
                machine = Machine(system, cap, driver, own_kind_only=False)
                picks = _by_package(FAMILIES["cuda"].pick(plan, machine))
                for package, pick in picks.items():
                    old = pick_variant(mine, package, cap, KB, driver=driver_support(KB, driver))
                    assert pick.variant is (old.variant if old.runnable else None)
                    assert (pick.level, pick.reason) == (old.verdict.level, old.verdict.reason)
                    assert pick.named is (old.variant or old.blocked)
                    assert pick.detail["needs_driver"] == old.needs_driver
