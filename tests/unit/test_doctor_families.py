"""doctor's GPUs are built and judged by their families (core/families/<f>/doctor.py), reached
through the registry: the command and core/binaries/doctor.py import no family (issue 42)."""

from __future__ import annotations

from capplan.adapters.kb import load_kb
from capplan.core.binaries.doctor import Library, diagnose
from capplan.core.binaries.variants import InstalledVariant, judge_variant
from capplan.core.families import registry
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.doctor import NvidiaGpu, driver_facts, nvidia_driver, nvidia_gpu
from capplan.core.families.cuda.drivers import version_key
from capplan.core.families.rocm.doctor import AmdGpu
from capplan.core.families.rocm.target import AmdTarget

KB = load_kb()


def test_device_spellings_go_to_the_family_that_knows_them() -> None:
    amd = registry.doctor_gpu(KB, "gfx942")
    assert isinstance(amd, AmdGpu) and amd.vendor == "amd"
    assert amd.device == AmdTarget.parse("gfx942")
    nvidia = registry.doctor_gpu(KB, "8.6")
    assert isinstance(nvidia, NvidiaGpu) and nvidia.vendor == "nvidia"
    assert nvidia == nvidia_gpu(None, Capability.parse("8.6"), KB)


def test_detected_devices_go_to_their_vendors_family() -> None:
    cap = Capability.parse("8.0")
    nvidia = registry.detected_gpu("nvidia", "NVIDIA A100-SXM4-80GB", cap, KB)
    assert isinstance(nvidia, NvidiaGpu) and nvidia.device == cap
    assert nvidia.label == "NVIDIA A100-SXM4-80GB (8.0)"
    amd = registry.detected_gpu("amd", "AMD Instinct MI300X", AmdTarget.parse("gfx942"), KB)
    assert isinstance(amd, AmdGpu) and amd.label == "AMD Instinct MI300X (gfx942)"


def test_the_driver_is_the_cuda_familys() -> None:
    assert registry.doctor_driver(KB, "580.65.06") == driver_facts(KB, "580.65.06")
    assert registry.doctor_driver(KB, None).key is None
    assert registry.doctor_driver(KB, "580.65.06").key == version_key("580.65.06")
    assert nvidia_driver("5x", {}, {}).key is None  # unreadable: driver checks skipped
    assert registry.is_driver_version("535.104.05") and not registry.is_driver_version("0")


def test_every_family_writes_the_same_json_fields() -> None:
    nvidia = registry.doctor_gpu(KB, "8.6").to_json()
    amd = registry.doctor_gpu(KB, "gfx942").to_json()
    assert list(nvidia) == list(amd)
    assert (amd["capability"], amd["target"], amd["arch"], amd["jetson"], amd["cuda"]) == (
        None, "gfx942", None, False, None,
    )  # fmt: skip
    assert (nvidia["capability"], nvidia["target"]) == ("8.6", None)


def test_each_gpu_judges_its_own_vendors_code() -> None:
    gpus = [registry.doctor_gpu(KB, "8.6"), registry.doctor_gpu(KB, "gfx942")]
    cuda = Library("c.so", "k", sass=(Capability.parse("8.6"),))
    rocm = Library("r.so", "k", amd=(AmdTarget.parse("gfx942"),))
    report = diagnose([cuda, rocm], {}, gpus, registry.doctor_driver(KB, None))
    assert [c.level for c in report.cells["c.so"]] == ["native", "other-vendor"]
    assert [c.level for c in report.cells["r.so"]] == ["other-vendor", "native"]
    wheel = InstalledVariant("torch", "2.9", "x", "rocm", {"amd": {"gfx_arch": ("gfx942",)}})
    verdicts = judge_variant(wheel, gpus)
    assert [v.covered for v in verdicts] == [None, True]
    assert verdicts[0].reason == "states nothing about nvidia GPUs"
