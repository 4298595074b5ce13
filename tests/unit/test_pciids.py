"""The pci.ids -> kb/pci.json generator (core/model/pciids.py and planner/scripts/pci_kb.py) on a
hand-written excerpt in pci.ids' format (the real file is read when regenerating, never kept)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from capplan.core.families.cuda.gpus import normalise
from capplan.core.model.pciids import (
    ChipRow,
    HandModel,
    build_pci_table,
    chip_of,
    clean_names,
    nvidia_entries,
)

REPO = Path(__file__).resolve().parents[2]

EXCERPT = """\
#	Version: 2099.01.01
10de  NVIDIA Corporation
\t0f02  GF108 [GeForce GT 730]
\t0fc1  GK107 [GeForce GT 640]
\t0fc8  GK107 [GeForce GT 740]
\t0fc9  GK107 [GeForce GT 730]
\t1287  GK208 [GeForce GT 730]
\t\t1043 8534  GK208 board (a subsystem line: ignored)
\t1f91  TU117M [GeForce GTX 1650 Mobile / Max-Q]
\t1f82  TU117 [GeForce GTX 1650]
\t10f9  TU106 High Definition Audio Controller
\t1ad6  TU102 USB 3.1 Host Controller
\t22a3  GH100 [H100 NVSwitch]
\t2330  GH100 [H100 SXM5 80GB]
\t2342  GH100 [GH200 120GB / 480GB]
\t2343  GH100
\t2820  AD106M [GeForce RTX 4070 Max-Q / Mobile]
\t2684  AD102 [GeForce RTX 4090]
\t26b2  AD102GL [RTX 5000 Ada Generation]
\t1e30  TU102GL [Quadro RTX 6000/8000]
\t2e12  GB20B [GB10]
\t3200  GB112
\t25ac  GA107BM / GN20-P0-R-K2 [GeForce RTX 3050 6GB Laptop GPU]
\t1e2d  TU102 [GeForce RTX 2080 Ti Engineering Sample]
10df  Emulex Corporation
\t1ae5  LP6000 [GeForce fake: another vendor]
"""

CHIPS = [
    ChipRow("GK107", "3.0", False),
    ChipRow("GK208", "3.5", False),
    ChipRow("TU102", "7.5", False),
    ChipRow("TU106", "7.5", False),
    ChipRow("TU117", "7.5", False),
    ChipRow("GA107", "8.6", False),
    ChipRow("AD102", "8.9", False),
    ChipRow("AD106", "8.9", False),
    ChipRow("GH100", "9.0", False),
    ChipRow("GB20B", "12.1", False),
]
HAND = [
    HandModel("NVIDIA H100 80GB HBM3", ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"), "9.0"),
    HandModel("NVIDIA GeForce RTX 4090", ("NVIDIA GeForce RTX 4090", "RTX 4090"), "8.9"),
    HandModel("NVIDIA RTX 5000 Ada Generation", ("NVIDIA RTX 5000 Ada Generation",), "8.9"),
]


@pytest.fixture(scope="module")
def table() -> dict[str, object]:
    return build_pci_table(EXCERPT, CHIPS, HAND, normalise, provenance="test")


def _devices(table: dict[str, object]) -> dict[str, dict[str, object]]:
    return {d["id"]: d for d in table["devices"]}  # type: ignore[attr-defined,index]


def _models(table: dict[str, object]) -> dict[str, dict[str, object]]:
    return {m["name"]: m for m in table["models"]}  # type: ignore[attr-defined,index]


def test_only_nvidia_device_lines() -> None:
    entries = nvidia_entries(EXCERPT)
    assert entries[0].device == "0f02" and entries[-1].device == "1e2d"
    assert all(e.token != "LP6000" for e in entries)
    assert [e.rest for e in entries if e.device == "10f9"] == ["High Definition Audio Controller"]


@pytest.mark.parametrize(
    ("token", "chip"),
    [
        ("GA107BM", "GA107"),
        ("AD102GL", "AD102"),
        ("TU117M", "TU117"),
        ("GK208", "GK208"),
        ("GK2080", None),
        ("GF108", None),
        ("GB112", None),
    ],
)
def test_chip_of(token: str, chip: str | None) -> None:
    assert chip_of(token, [c.chip for c in CHIPS]) == chip


@pytest.mark.parametrize(
    ("name", "cleaned"),
    [
        (
            "GeForce GTX 1650 Mobile / Max-Q",
            ["NVIDIA GeForce GTX 1650 Mobile", "NVIDIA GeForce GTX 1650 Max-Q"],
        ),
        ("GeForce RTX 4070 Max-Q / Mobile", ["NVIDIA GeForce RTX 4070 Laptop GPU"]),
        ("Quadro RTX 6000/8000", ["Quadro RTX 6000", "Quadro RTX 8000"]),
        ("GeForce GTX 780 Rev. 2", ["NVIDIA GeForce GTX 780"]),
        ("GeForce GTX 660 OEM", ["NVIDIA GeForce GTX 660"]),
        ("GeForce 945M / 945A", ["NVIDIA GeForce 945M", "NVIDIA GeForce 945A"]),
        ("Tesla K40c", ["Tesla K40c"]),
        ("GeForce RTX 2080 Ti Engineering Sample", []),
        ("PG506-232", []),
        ("Reserved Dev ID A", []),
    ],
)
def test_clean_names(name: str, cleaned: list[str]) -> None:
    assert clean_names(name) == cleaned


def test_gpu_functions_only(table: dict[str, object]) -> None:
    devices = _devices(table)
    assert "10de:10f9" not in devices and "10de:1ad6" not in devices  # audio, USB
    assert "10de:22a3" not in devices  # NVSwitch
    assert "10de:0f02" not in devices and "10de:3200" not in devices  # chips not in the table
    assert devices["10de:2343"] == {
        "id": "10de:2343",
        "chip": "GH100",
        "pci_name": None,
        "models": [],
    }


def test_hand_models_are_linked_not_duplicated(table: dict[str, object]) -> None:
    devices, models = _devices(table), _models(table)
    assert devices["10de:2330"]["models"] == ["NVIDIA H100 80GB HBM3"]
    assert devices["10de:2684"]["models"] == ["NVIDIA GeForce RTX 4090"]
    assert "NVIDIA H100 SXM5 80GB" not in models
    assert devices["10de:2342"]["models"] == ["NVIDIA GH200 120GB", "NVIDIA GH200 480GB"]


def test_names_on_chips_of_different_capabilities_split_per_chip(table: dict[str, object]) -> None:
    models = _models(table)
    assert models["NVIDIA GeForce GT 730 (GK208)"]["capability"] == "3.5"
    assert "GF108" in models["NVIDIA GeForce GT 730 (GK208)"]["note"]  # type: ignore[operator]
    assert models["NVIDIA GeForce GT 730 (GK107)"]["capability"] == "3.0"
    assert "NVIDIA GeForce GT 730" not in models
    assert models["NVIDIA GeForce GT 640"]["chips"] == ["GK107"]


def test_generated_models_carry_chip_pci_ids_segment_and_source(table: dict[str, object]) -> None:
    laptop = _models(table)["NVIDIA GeForce RTX 4070 Laptop GPU"]
    assert laptop["chips"] == ["AD106"] and laptop["pci_ids"] == ["10de:2820"]
    assert laptop["segment"] == "consumer" and "2820 AD106" in laptop["source"]  # type: ignore[operator]
    assert _models(table)["Quadro RTX 8000"]["segment"] == "workstation"
    assert _models(table)["NVIDIA GB10"]["capability"] == "12.1"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "pci_kb", REPO / "planner" / "scripts" / "pci_kb.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_writes_checks_and_refuses_bad_input(tmp_path: Path) -> None:
    script = _script()
    source = tmp_path / "pci.ids"
    source.write_text(EXCERPT)
    out = tmp_path / "pci.json"
    assert (
        script.main(
            [str(source), "--commit", "abc123", "--date", "2099-01-01", "--output", str(out)]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert "version 2099.01.01 of 2099-01-01 (pciutils/pciids commit abc123)" in data["source"]
    assert "10de:2684" in {d["id"] for d in data["devices"]}
    args = [
        str(source),
        "--commit",
        "abc123",
        "--date",
        "2099-01-01",
        "--output",
        str(out),
        "--check",
    ]
    assert script.main(args) == 0
    out.write_text("{}\n")
    assert script.main(args) == 11
    assert script.main([str(tmp_path / "absent.ids")]) == 4
    (tmp_path / "other.ids").write_text("8086  Intel Corporation\n\t46a6  Alder Lake GPU\n")
    assert script.main([str(tmp_path / "other.ids")]) == 4
