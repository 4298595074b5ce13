"""`capplan gpus --pci`, and `capplan detect` through sysfs on a machine without a driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capplan.errors import ExitCode


def _one_line_error(result: object, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr)  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert err.startswith("capplan: error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_gpus_pci(capplan_cli: object) -> None:
    result = capplan_cli("gpus", "--pci", "10de:2684", "--json")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["name"], row["capability"], row["chip"], row["pci_id"]) == (
        "NVIDIA GeForce RTX 4090",
        "8.9",
        "AD102",
        "10de:2684",
    )
    table = capplan_cli("gpus", "--pci", "10DE:2330")  # type: ignore[operator]
    assert "NVIDIA H100 80GB HBM3" in table.stdout and "GH100" in table.stdout


def test_gpus_json_rows_name_their_chips(capplan_cli: object) -> None:
    result = capplan_cli("gpus", "mx450", "--json")  # type: ignore[operator]
    row = json.loads(result.stdout)[0]
    assert row["chips"] == ["TU117"] and "10de:1f97" in row["pci_ids"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--pci", "2684"), "not vendor:device in hex"),
        (("--pci", "10de:zzzz"), "not vendor:device in hex"),
        (("--pci", "8086:46a6"), "not an NVIDIA device"),
        (("--pci", "10de:fff0"), "unknown NVIDIA device id '10de:fff0'"),
        (("rtx 4090", "--pci", "10de:2684"), "not both"),
    ],
)
def test_gpus_pci_bad_input(capplan_cli: object, args: tuple[str, ...], fragment: str) -> None:
    err = _one_line_error(capplan_cli("gpus", *args), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert fragment in err


def test_unknown_device_says_how_to_report_and_suggests_gpu(capplan_cli: object) -> None:
    err = _one_line_error(capplan_cli("gpus", "--pci", "10de:fff0"), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert "lspci -nn" in err and "--gpu 8.9" in err


def _sysfs(root: Path, device: str) -> Path:
    node = root / "bus" / "pci" / "devices" / "0000:01:00.0"
    node.mkdir(parents=True)
    (node / "vendor").write_text("0x10de\n")
    (node / "device").write_text(f"0x{device}\n")
    (node / "class").write_text("0x030000\n")
    return root


def test_detect_without_a_driver_through_sysfs(capplan_cli: object, tmp_path: Path) -> None:
    env = {
        "PATH": str(tmp_path / "empty-bin"),
        "CAPPLAN_SYSFS_ROOT": str(_sysfs(tmp_path / "sys", "2204")),  # RTX 3090
        "CAPPLAN_NVML": "0",
    }
    result = capplan_cli("detect", "--json", env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    assert (gpu["source"], gpu["pci_id"], gpu["capability"], gpu["driver"]) == (
        "sysfs",
        "10de:2204",
        "8.6",
        None,
    )
    assert gpu["variants"]["torch"] == "torch-sm86"
    text = capplan_cli("detect", env=env)  # type: ignore[operator]
    assert text.exit_code == 0, text.stderr
    out = " ".join(text.stdout.split())  # rich wraps at the terminal width
    assert "from sysfs, PCI id 10de:2204" in out
    assert "driver is not loaded" in out and "once the driver is installed" in out


def test_detect_unknown_device_id(capplan_cli: object, tmp_path: Path) -> None:
    env = {
        "PATH": str(tmp_path / "empty-bin"),
        "CAPPLAN_SYSFS_ROOT": str(_sysfs(tmp_path / "sys", "fff0")),
        "CAPPLAN_NVML": "0",
    }
    result = capplan_cli("detect", env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    assert "unknown NVIDIA device id 10de:fff0" in " ".join(result.stdout.split())
