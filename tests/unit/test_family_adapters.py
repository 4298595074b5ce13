"""The families' adapters through the registry (issue 42): ``detect`` and ``doctor`` ask every
detector core/families/registry.py names, and hand each device to the family of its vendor,
so a new family's detector is one adapter file and its line in the registry."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capplan.adapters.families import cpu_model, find_driver, find_gpus
from capplan.adapters.kb import load_kb
from capplan.core.families import registry
from capplan.core.families.base import Device, Found
from capplan.core.families.cuda.capability import Capability
from capplan.errors import DataError, ExitCode


def _register(monkeypatch: pytest.MonkeyPatch, **detectors: Callable[..., Found]) -> None:
    """Detectors, as a module of their own each, in place of the registry's."""
    names = []
    for name, function in detectors.items():
        module = types.ModuleType(f"capplan_test_{name}")
        module.find_devices = function  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
        names.append(f"{module.__name__}:find_devices")
    monkeypatch.setattr(registry, "gpu_detectors", lambda: tuple(names))


def _finds(*devices: Device, **more: Any) -> Callable[..., Found]:
    asked: list[bool] = []

    def find_devices(kb: object, *, board: bool = True) -> Found:
        asked.append(board)
        return Found(devices, **more)

    find_devices.asked = asked  # type: ignore[attr-defined]
    return find_devices


def test_find_gpus_asks_each_registered_detector_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _finds(Device("GPU A", "nvidia", Capability.parse("8.6"), "test"))
    second = _finds(notes=("nothing here",), missing="no B found")
    _register(monkeypatch, a=first, b=second)
    found = find_gpus(load_kb(), board=False)
    assert [[d.name for d in f.devices] for f in found] == [["GPU A"], []]
    assert found[1].notes == ("nothing here",) and found[1].missing == "no B found"
    assert first.asked == second.asked == [False]  # type: ignore[attr-defined]


def test_find_driver_stops_at_the_first_detector_with_a_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(kb: object, *, board: bool = True) -> Found:
        raise AssertionError("asked after a driver was found")

    none = _finds(Device("GPU A", "amd", None, "test"))
    some = _finds(Device("GPU B", "nvidia", None, "test", driver="550.54.14"))
    _register(monkeypatch, a=none, b=some, c=never)
    assert find_driver(load_kb()) == "550.54.14"
    _register(monkeypatch, a=none)
    assert find_driver(load_kb()) is None


def test_detect_hands_a_registered_detectors_devices_to_their_family(
    monkeypatch: pytest.MonkeyPatch, capplan_cli: Any
) -> None:
    # A detector the commands never name: detect finds its device through the registry and
    # the CUDA family (the device's vendor) answers for it with the plan's variants.
    device = Device("Test GPU", "nvidia", Capability.parse("8.6"), "test", "550.54.14")
    _register(monkeypatch, a=_finds(device, notes=("a note",)))
    result = capplan_cli("detect", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    (gpu,) = data["gpus"]
    assert (gpu["name"], gpu["vendor"], gpu["source"], gpu["capability"]) == (
        "Test GPU",
        "nvidia",
        "test",
        "8.6",
    )
    assert gpu["variants"]["torch"] == "torch-sm86"
    assert data["notes"] == ["a note"]


def test_detect_without_devices_joins_each_detectors_reason(
    monkeypatch: pytest.MonkeyPatch, capplan_cli: Any
) -> None:
    _register(
        monkeypatch,
        a=_finds(missing="no A GPU found", hint="install A's driver"),
        b=_finds(missing="no B GPU found either (no B tool)"),
    )
    result = capplan_cli("detect")
    assert result.exit_code == int(ExitCode.NO_GPU)
    assert result.stderr.strip() == (
        "capplan: error: no A GPU found; no B GPU found either (no B tool) (install A's driver)"
    )


def test_doctor_judges_a_registered_detectors_devices(
    monkeypatch: pytest.MonkeyPatch, capplan_cli: Any, tmp_path: Path
) -> None:
    # Doctor reads no device tree (board=False) and skips a device whose target is unknown.
    unknown = _finds(Device("Mystery GPU", "nvidia", None, "test"))
    _register(monkeypatch, a=unknown)
    library = tmp_path / "libnothing.so"
    library.write_bytes(b"\x7fELF" + b"\0" * 60)
    result = capplan_cli("doctor", str(library), "-j", "1")
    assert result.exit_code == int(ExitCode.NO_GPU)
    assert "found Mystery GPU, whose capability capplan does not know" in result.stderr
    assert unknown.asked == [False]  # type: ignore[attr-defined]


def test_cpu_model_without_packages_reads_no_package_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("archspec", reason="archspec (the CPU target database) is not installed")
    # A knowledge-base folder without cpu_packages.json: only the model with packages needs it.
    monkeypatch.setenv("CAPPLAN_KB_DIR", str(tmp_path))
    model = cpu_model(packages=False)
    assert model.parse("haswell") == "haswell"
    assert model.x86_levels("haswell")["x86-64-v3"] is None
    with pytest.raises(DataError, match=r"cpu_packages\.json"):
        cpu_model()
