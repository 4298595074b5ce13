"""Detection sources beyond nvidia-smi: NVML (a fake pynvml injected; no GPU here), sysfs (fake
trees under CAPPLAN_SYSFS_ROOT, garbage included), the order of sources, and the H100 capture."""

from __future__ import annotations

import importlib
import json
import types
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import unprivileged

from capplan.adapters.detect.nvidia import (
    DetectedGpu,
    detect_gpus,
    parse_nvidia_smi_csv,
    read_nvml,
    read_sysfs,
)
from capplan.adapters.kb import load_kb
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.kb import nvidia
from capplan.errors import NoGpuError

KB = load_kb()
CAPTURE = Path(__file__).resolve().parents[1] / "data" / "h100-capture"

# --- fake sysfs trees -------------------------------------------------------------------------


def _function(
    root: Path, bus: str, vendor: str | bytes, device: str | bytes, cls: str | bytes
) -> Path:
    node = root / "bus" / "pci" / "devices" / bus
    node.mkdir(parents=True, exist_ok=True)
    for name, value in (("vendor", vendor), ("device", device), ("class", cls)):
        data = value if isinstance(value, bytes) else (value + "\n").encode()
        (node / name).write_bytes(data)
    return node


def _detect(tmp_path: Path, sysfs: Path, **kwargs: Any) -> list[DetectedGpu]:
    env = {"PATH": str(tmp_path / "empty-bin"), "CAPPLAN_SYSFS_ROOT": str(sysfs)}
    return detect_gpus(env=env, proc_root=tmp_path / "no-proc", kb=KB, **kwargs)


def test_one_nvidia_gpu_without_a_driver(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _function(root, "0000:00:00.0", "0x8086", "0x0d57", "0x060000")  # host bridge
    _function(root, "0000:01:00.0", "0x10de", "0x2684", "0x030000")  # RTX 4090, VGA
    _function(root, "0000:01:00.1", "0x10de", "0x22ba", "0x040300")  # its HDMI audio
    (gpu,) = _detect(tmp_path, root)
    assert (gpu.name, gpu.capability, gpu.driver) == (
        "NVIDIA GeForce RTX 4090",
        Capability(8, 9),
        None,
    )
    assert (gpu.source, gpu.pci_id) == ("sysfs", "10de:2684")


def test_two_different_gpus_in_bus_order(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _function(root, "0000:41:00.0", "0x10de", "0x2204", "0x030000")  # RTX 3090, GA102
    _function(root, "0000:01:00.0", "0x10de", "0x20b2", "0x030200")  # A100 SXM4 80GB, 3D
    gpus = _detect(tmp_path, root)
    assert [(g.pci_id, str(g.capability)) for g in gpus] == [
        ("10de:20b2", "8.0"),
        ("10de:2204", "8.6"),
    ]
    assert gpus[0].name == "NVIDIA A100-SXM4-80GB"


@pytest.mark.parametrize(
    ("functions", "reason"),
    [
        ([("0000:00:02.0", "0x8086", "0x46a6", "0x030000")], "lists no NVIDIA GPU"),  # Intel iGPU
        ([("0000:01:00.1", "0x10de", "0x22ba", "0x040300")], "lists no NVIDIA GPU"),  # audio only
    ],
)
def test_no_nvidia_gpu_function(
    tmp_path: Path, functions: list[tuple[str, str, str, str]], reason: str
) -> None:
    root = tmp_path / "sys"
    for bus, vendor, device, cls in functions:
        _function(root, bus, vendor, device, cls)
    with pytest.raises(NoGpuError) as info:
        _detect(tmp_path, root)
    assert reason in info.value.message and "\n" not in info.value.one_line()


@pytest.mark.parametrize(
    ("vendor", "device", "cls", "problem"),
    [
        ("0x10de", b"", "0x030000", "device: empty"),
        ("0x10de", "0xzz84", "0x030000", "device: not hex"),
        ("0x10de", b"\x00\xff\xfe", "0x030000", "device: not text"),
        (b"\n", "0x2684", "0x030000", "vendor: empty"),
        ("0x10de", "0x2684", "banana", "class: not hex"),
    ],
)
def test_garbage_in_sysfs_files_is_one_clear_reason(
    tmp_path: Path, vendor: str | bytes, device: str | bytes, cls: str | bytes, problem: str
) -> None:
    root = tmp_path / "sys"
    _function(root, "0000:01:00.0", vendor, device, cls)
    found, problems = read_sysfs(root)
    assert found == []
    assert len(problems) == 1 and problems[0].startswith(f"0000:01:00.0: {problem}"), problems
    with pytest.raises(NoGpuError, match=problem):
        _detect(tmp_path, root)


def test_garbage_beside_a_good_gpu_does_not_hide_it(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _function(root, "0000:01:00.0", "0x10de", b"\x00\x01", "0x030000")
    _function(root, "0000:02:00.0", "0x10de", "0x2330", "0x030200")
    (gpu,) = _detect(tmp_path, root)
    assert gpu.pci_id == "10de:2330" and gpu.capability == Capability(9, 0)


def test_unreadable_file_a_directory(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    node = _function(root, "0000:01:00.0", "0x10de", "0x2684", "0x030000")
    (node / "class").unlink()
    (node / "class").mkdir()
    found, problems = read_sysfs(root)
    assert found == [] and problems == [
        "0000:01:00.0: cannot read class (a folder, not a regular file)"
    ]


def test_unreadable_files(open_tmp: Path) -> None:
    # Run as nobody when the suite runs as root (root reads files whatever their mode).
    root = open_tmp / "sys"
    node = _function(root, "0000:01:00.0", "0x10de", "0x2684", "0x030000")
    (node / "device").chmod(0)
    found, problems = unprivileged(lambda: read_sysfs(root))
    assert found == []
    assert problems == ["0000:01:00.0: cannot read device (Permission denied)"]


def test_missing_sysfs_root(tmp_path: Path) -> None:
    found, problems = read_sysfs(tmp_path / "absent")
    assert found == [] and "No such file or directory" in problems[0]


def test_unknown_nvidia_device_id_says_so(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _function(root, "0000:01:00.0", "0x10de", "0xfff0", "0x030000")
    (gpu,) = _detect(tmp_path, root)
    assert gpu.capability is None and gpu.pci_id == "10de:fff0"
    assert "unknown NVIDIA device id 10de:fff0" in gpu.note
    assert "lspci -nn" in gpu.note and "--gpu 8.9" in gpu.note


def test_nvidia_smi_wins_over_sysfs_and_gets_its_pci_ids(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _function(root, "0000:00:06.0", "0x10de", "0x2330", "0x030200")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 9.0, 580.159.04'\n"
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": str(bin_dir), "CAPPLAN_SYSFS_ROOT": str(root)}
    (gpu,) = detect_gpus(env=env, proc_root=tmp_path / "no-proc", kb=KB)
    assert (gpu.source, gpu.pci_id, gpu.driver) == ("nvidia-smi", "10de:2330", "580.159.04")


def test_sysfs_takes_the_driver_version_from_proc(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _function(root, "0000:01:00.0", "0x10de", "0x27b8", "0x030200")  # L4
    proc = tmp_path / "proc"
    (proc / "gpus" / "0000:01:00.0").mkdir(parents=True)
    (proc / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build\n"
    )
    (proc / "gpus" / "0000:01:00.0" / "information").write_text("Model: \t NVIDIA L4\n")
    env = {"PATH": str(tmp_path / "empty-bin"), "CAPPLAN_SYSFS_ROOT": str(root)}
    (gpu,) = detect_gpus(env=env, proc_root=proc, kb=KB)
    assert (gpu.name, str(gpu.capability), gpu.driver, gpu.source) == (
        "NVIDIA L4",
        "8.9",
        "570.124.06",
        "sysfs",
    )


# --- NVML -------------------------------------------------------------------------------------


class _NvmlError(Exception):
    pass


def _fake_pynvml(
    devices: list[dict[str, Any]],
    *,
    driver: str | bytes = "580.159.04",
    init_error: str | None = None,
) -> types.SimpleNamespace:
    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if init_error:
            raise _NvmlError(init_error)

    def pci_info(index: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(pciDeviceId=devices[index]["pciDeviceId"])

    return types.SimpleNamespace(
        calls=calls,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlSystemGetDriverVersion=lambda: driver,
        nvmlDeviceGetCount=lambda: len(devices),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda i: devices[i]["name"],
        nvmlDeviceGetCudaComputeCapability=lambda i: tuple(devices[i]["cc"]),
        nvmlDeviceGetPciInfo=pci_info,
    )


def test_nvml_answers_from_the_h100_capture(tmp_path: Path) -> None:
    captured = json.loads((CAPTURE / "nvml.json").read_text())
    fake = _fake_pynvml(captured["devices"], driver=captured["driver"].encode())
    (gpu,) = _detect(tmp_path, tmp_path / "no-sys", nvml=fake)
    assert (gpu.name, gpu.capability, gpu.driver) == (
        "NVIDIA H100 80GB HBM3",
        Capability(9, 0),
        "580.159.04",
    )
    assert (gpu.source, gpu.pci_id) == ("nvml", "10de:2330")
    assert fake.calls == ["init", "shutdown"]


def test_nvml_without_a_driver_falls_through_to_sysfs(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _function(root, "0000:01:00.0", "0x10de", "0x1eb8", "0x030200")  # Tesla T4
    fake = _fake_pynvml([], init_error="Driver Not Loaded")
    assert read_nvml(fake) == ([], "NVML: Driver Not Loaded")
    (gpu,) = _detect(tmp_path, root, nvml=fake)
    assert (gpu.name, str(gpu.capability), gpu.source) == ("Tesla T4", "7.5", "sysfs")


def test_nvml_failing_midway_still_shuts_down() -> None:
    fake = _fake_pynvml([{"name": "X", "cc": [8, 6], "pciDeviceId": 0x220410DE}])
    fake.nvmlDeviceGetCudaComputeCapability = lambda i: (_ for _ in ()).throw(
        _NvmlError("GPU is lost")
    )
    assert read_nvml(fake) == ([], "NVML: GPU is lost")
    assert fake.calls == ["init", "shutdown"]


def _driver_loaded() -> bool:
    return Path("/proc/driver/nvidia/version").exists()


def test_real_pynvml_without_a_driver_falls_back(tmp_path: Path) -> None:
    # NVIDIA's nvidia-ml-py (installed by scripts/setup --dev) with no driver, as on these
    # machines: nvmlInit raises NVMLError_LibraryNotFound (no libnvidia-ml.so.1) or
    # NVMLError_DriverNotLoaded; capplan turns either into one reason and the next source.
    pynvml = importlib.import_module("pynvml")
    if _driver_loaded():
        gpus, reason = read_nvml()
        assert gpus and all(g.source == "nvml" and g.capability is not None for g in gpus), reason
        return
    with pytest.raises(pynvml.NVMLError) as info:
        pynvml.nvmlInit()
    assert info.value.value in (
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    )
    gpus, reason = read_nvml()
    assert gpus == [] and reason.startswith("NVML: ") and str(info.value) in reason
    # detect_gpus with the real binding on: NVML's failure is a reason, sysfs answers.
    root = tmp_path / "sys"
    _function(root, "0000:01:00.0", "0x10de", "0x2684", "0x030000")
    (gpu,) = _detect(tmp_path, root, use_nvml=True)
    assert gpu.source == "sysfs" and gpu.capability == Capability(8, 9)


# --- the H100 capture through every source ----------------------------------------------------


def test_h100_capture_through_sysfs(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    for line in (CAPTURE / "sysfs-pci.txt").read_text().splitlines():
        bus, vendor, device, cls, *_ = line.split()
        _function(root, bus, vendor, device, cls)
    (gpu,) = _detect(tmp_path, root)
    assert (gpu.name, str(gpu.capability), gpu.pci_id) == (
        "NVIDIA H100 80GB HBM3",
        "9.0",
        "10de:2330",
    )


def test_h100_capture_through_nvidia_smi_csv() -> None:
    assert parse_nvidia_smi_csv((CAPTURE / "smi-basic.csv").read_text()) == [
        DetectedGpu("NVIDIA H100 80GB HBM3", Capability(9, 0), "580.159.04", "nvidia-smi")
    ]
    # The longer query's pci.device_id (0x233010DE) is the id sysfs gives: the same table entry.
    fields = (CAPTURE / "smi-query.csv").read_text().split(", ")
    packed = int(fields[3], 16)
    assert f"{packed & 0xFFFF:04x}:{packed >> 16:04x}" == "10de:2330"
    assert nvidia(KB).pci_device("10de:2330") is not None
