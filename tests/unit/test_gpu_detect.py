"""GPU detection: nvidia-smi CSV parsing, a fake nvidia-smi on PATH or via CAPPLAN_NVIDIA_SMI,
the /proc/driver/nvidia fallback on a fake tree, and the no-GPU error."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from capplan.adapters.detect.nvidia import (
    DetectedGpu,
    detect_gpus,
    parse_nvidia_smi_csv,
    read_proc_driver,
)
from capplan.core.families.cuda.capability import Capability
from capplan.errors import ConfigError, ExitCode, NoGpuError

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
QUERY = "--query-gpu=name,compute_cap,driver_version"
OLD_QUERY = "--query-gpu=name,driver_version"

H100 = ("NVIDIA H100 80GB HBM3", "9.0", "570.124.06")


def _gpus(*rows: tuple[str, str | None, str | None]) -> list[DetectedGpu]:
    return [DetectedGpu(n, Capability.parse(c) if c else None, d, "nvidia-smi") for n, c, d in rows]


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("a100.csv", [("NVIDIA A100-SXM4-80GB", "8.0", "535.104.05")]),
        ("rtx3090.csv", [("NVIDIA GeForce RTX 3090", "8.6", "550.54.14")]),
        ("h100.csv", [H100]),
        ("l4.csv", [("NVIDIA L4", "8.9", "535.161.08")]),
        ("rtx5090.csv", [("NVIDIA GeForce RTX 5090", "12.0", "575.57.08")]),
        ("jetson-orin.csv", [("Orin (nvgpu)", "8.7", "540.4.0")]),
        ("jetson-na.csv", [("NVIDIA Thor", None, None)]),
        ("cap-na.csv", [("NVIDIA GeForce RTX 3060", None, "550.54.14")]),
        ("spaces.csv", [("NVIDIA L40S", "8.9", "550.90.07")]),
        (
            "several.csv",
            [
                H100,
                H100,
                ("NVIDIA GeForce RTX 4090", "8.9", "570.124.06"),
                ("NVIDIA B200", "10.0", "570.124.06"),
            ],
        ),
        (
            "mig-and-warning.csv",
            [("NVIDIA A100 80GB PCIe", "8.0", "535.104.05")] * 2,
        ),
    ],
)
def test_parse_fixture(fixture: str, expected: list[tuple[str, str | None, str | None]]) -> None:
    assert parse_nvidia_smi_csv((FIXTURES / fixture).read_text()) == _gpus(*expected)


def test_capability_is_a_value_not_a_string() -> None:
    (gpu,) = parse_nvidia_smi_csv((FIXTURES / "rtx5090.csv").read_text())
    assert gpu.capability == Capability(12, 0)
    assert gpu.capability is not None and gpu.capability > Capability(
        9, 0
    )  # numeric, not "12" < "9"


def test_name_with_a_comma_and_junk_values() -> None:
    text = "Weird, Inc. GPU, 8.6, 550.54.14\nNVIDIA X, nonsense, not-a-driver\n, 8.0, 1.2\n"
    assert parse_nvidia_smi_csv(text) == _gpus(
        ("Weird, Inc. GPU", "8.6", "550.54.14"), ("NVIDIA X", None, None)
    )


# --- a fake nvidia-smi ------------------------------------------------------------------------


def _fake_smi(directory: Path, output: str, *, name: str = "nvidia-smi", old: bool = False) -> Path:
    """A shell script that answers like nvidia-smi, and only to the arguments capplan must pass."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "output.txt").write_text(output)
    accepted = OLD_QUERY if old else QUERY
    script = directory / name
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "{accepted}" ] && [ "$2" = "--format=csv,noheader" ] && [ $# -eq 2 ]; then\n'
        '  cat "$(dirname "$0")/output.txt"; exit 0\n'
        "fi\n"
        'case "$1" in *compute_cap*) echo \'Field "compute_cap" is not a valid field to query.\';'
        " exit 2;; esac\n"
        'echo "unexpected arguments: $*" >&2; exit 2\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def _env(path: Path | str, **extra: str) -> dict[str, str]:
    # An empty sysfs root: these tests stay about nvidia-smi and /proc on a machine with a GPU.
    return {"PATH": str(path), "CAPPLAN_SYSFS_ROOT": str(Path(path) / "no-sysfs"), **extra}


def test_fake_nvidia_smi_on_path(tmp_path: Path) -> None:
    _fake_smi(tmp_path / "bin", (FIXTURES / "several.csv").read_text())
    gpus = detect_gpus(env=_env(tmp_path / "bin"), proc_root=tmp_path / "no-proc")
    assert [g.name for g in gpus][-1] == "NVIDIA B200"
    assert len(gpus) == 4


def test_capplan_nvidia_smi_names_the_executable(tmp_path: Path) -> None:
    script = _fake_smi(tmp_path / "tools", (FIXTURES / "l4.csv").read_text(), name="my-smi")
    _fake_smi(tmp_path / "bin", (FIXTURES / "a100.csv").read_text())  # must not be used
    env = _env(tmp_path / "bin", CAPPLAN_NVIDIA_SMI=str(script))
    assert detect_gpus(env=env, proc_root=tmp_path / "no-proc") == _gpus(
        ("NVIDIA L4", "8.9", "535.161.08")
    )


def test_capplan_nvidia_smi_that_does_not_exist(tmp_path: Path) -> None:
    env = _env(tmp_path, CAPPLAN_NVIDIA_SMI=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="CAPPLAN_NVIDIA_SMI"):
        detect_gpus(env=env, proc_root=tmp_path / "no-proc")


def test_old_driver_without_compute_cap(tmp_path: Path) -> None:
    _fake_smi(tmp_path / "bin", "Tesla V100-SXM2-16GB, 470.82.01\n", old=True)
    gpus = detect_gpus(env=_env(tmp_path / "bin"), proc_root=tmp_path / "no-proc")
    assert gpus == [DetectedGpu("Tesla V100-SXM2-16GB", None, "470.82.01", "nvidia-smi")]


def test_real_process_environment_is_used_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _fake_smi(tmp_path / "bin", (FIXTURES / "h100.csv").read_text())
    monkeypatch.setenv("CAPPLAN_NVIDIA_SMI", str(script))
    assert detect_gpus(proc_root=tmp_path / "no-proc") == _gpus(H100)


# --- /proc/driver/nvidia --------------------------------------------------------------------

PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build"
    "  (dvs-builder@U16-I3-B03-4-3)  Thu Feb 20 02:38:49 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)


def _information(model: str, bus: str) -> str:
    return (
        f"Model: \t\t {model}\nIRQ:   \t\t 134\nGPU UUID: \t GPU-5f4a0a36-0000-0000-0000-000000000000\n"
        f"Video BIOS: \t 94.02.42.00.a9\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n"
        f"DMA Mask: \t 0x7fffffffffff\nBus Location: \t {bus}\nDevice Minor: \t 0\n"
        "GPU Excluded:\t No\n"
    )


def _proc_tree(root: Path, version: str, models: dict[str, str]) -> Path:
    (root / "gpus").mkdir(parents=True)
    (root / "version").write_text(version)
    for bus, model in models.items():
        (root / "gpus" / bus).mkdir()
        (root / "gpus" / bus / "information").write_text(_information(model, bus))
    return root


@pytest.mark.parametrize(("version", "driver"), [(PROPRIETARY, "535.104.05"), (OPEN, "570.124.06")])
def test_proc_fallback(tmp_path: Path, version: str, driver: str) -> None:
    root = _proc_tree(
        tmp_path / "nvidia",
        version,
        {
            "0000:41:00.0": "NVIDIA GeForce RTX 3090",
            "0000:01:00.0": "NVIDIA A100-SXM4-80GB",
        },
    )
    # No nvidia-smi anywhere: the module's files still name the GPUs, in PCI bus order.
    found = detect_gpus(env=_env(tmp_path / "empty-bin"), proc_root=root)
    assert found == [
        DetectedGpu("NVIDIA A100-SXM4-80GB", None, driver, "proc"),
        DetectedGpu("NVIDIA GeForce RTX 3090", None, driver, "proc"),
    ]
    # ... and say where the answer came from (a default once called it "nvidia-smi").
    assert [g.source for g in found] == ["proc", "proc"]


def test_proc_fallback_when_nvidia_smi_cannot_talk_to_the_driver(
    tmp_path: Path,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA"
        ' driver. Make sure that the latest NVIDIA driver is installed and running."\nexit 9\n'
    )
    script.chmod(0o755)
    root = _proc_tree(tmp_path / "nvidia", OPEN, {"0000:01:00.0": "NVIDIA L4"})
    assert detect_gpus(env=_env(bin_dir), proc_root=root) == [
        DetectedGpu("NVIDIA L4", None, "570.124.06", "proc")
    ]


def test_proc_driver_fills_a_driver_nvidia_smi_left_out(tmp_path: Path) -> None:
    _fake_smi(tmp_path / "bin", "NVIDIA L4, 8.9, [N/A]\n")
    root = _proc_tree(tmp_path / "nvidia", PROPRIETARY, {"0000:01:00.0": "NVIDIA L4"})
    assert detect_gpus(env=_env(tmp_path / "bin"), proc_root=root) == _gpus(
        ("NVIDIA L4", "8.9", "535.104.05")
    )


def test_proc_tree_with_unreadable_parts(tmp_path: Path) -> None:
    root = tmp_path / "nvidia"
    (root / "gpus" / "0000:01:00.0").mkdir(parents=True)  # no information file
    (root / "gpus" / "0000:02:00.0").mkdir()
    (root / "gpus" / "0000:02:00.0" / "information").write_text("IRQ: 5\n")  # no Model line
    found = read_proc_driver(root)
    assert found == [DetectedGpu("NVIDIA GPU 0000:02:00.0", None, None, "proc")]
    assert [g.source for g in found] == ["proc"]  # source takes no part in equality
    assert read_proc_driver(tmp_path / "absent") == []


# --- no GPU ---------------------------------------------------------------------------------


def test_no_gpu_at_all(tmp_path: Path) -> None:
    with pytest.raises(NoGpuError) as info:
        detect_gpus(env=_env(tmp_path / "empty-bin"), proc_root=tmp_path / "no-proc")
    assert info.value.exit_code == ExitCode.NO_GPU
    assert "no NVIDIA GPU found" in info.value.message
    assert "nvidia-smi not found" in info.value.message


def test_nvidia_smi_finds_no_devices(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    with pytest.raises(NoGpuError, match="No devices were found"):
        detect_gpus(env=_env(bin_dir), proc_root=tmp_path / "no-proc")


def test_hanging_nvidia_smi_is_abandoned(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # exec: the shell becomes sleep, so killing it on timeout frees the pipes at once.
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 30\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    root = _proc_tree(tmp_path / "nvidia", OPEN, {"0000:01:00.0": "NVIDIA H100 80GB HBM3"})
    gpus = detect_gpus(env=_env(bin_dir), proc_root=root, timeout=0.5)
    assert gpus == [DetectedGpu("NVIDIA H100 80GB HBM3", None, "570.124.06", "proc")]


def test_this_machine_raises_no_gpu_or_lists_gpus() -> None:
    # On the build machines (no GPU) this is the documented NoGpuError; with a GPU, a list.
    if os.environ.get("CAPPLAN_NVIDIA_SMI"):
        pytest.skip("CAPPLAN_NVIDIA_SMI is set in the environment")
    try:
        gpus = detect_gpus()
    except NoGpuError as exc:
        assert exc.exit_code == ExitCode.NO_GPU
    else:
        assert gpus and all(g.name for g in gpus)
