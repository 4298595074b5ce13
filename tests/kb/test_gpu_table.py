"""Every GPU model and every PCI id through the same chip table (kb/chips.json): a name and a PCI
id give the same capability, and the names the issue lists resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.gpus import find_gpus, lookup_pci, normalise, resolve_device
from capplan.core.families.cuda.kb import GpuModel, nvidia
from capplan.errors import ExitCode, InvalidInputError

KB = load_kb()
KB_DIR = Path(__file__).resolve().parents[2] / "planner" / "src" / "capplan" / "kb"
BY_NAME = {m.name: m for m in nvidia(KB).gpus}


def _top(query: str) -> list[GpuModel]:
    matches = find_gpus(query, nvidia(KB).gpus)
    return [m.model for m in matches if m.score == matches[0].score]


@pytest.mark.parametrize("model", nvidia(KB).gpus, ids=lambda m: m.name)
def test_every_model_name_resolves_to_its_capability(model: GpuModel) -> None:
    # Every full name and alias; a name pci.ids puts on chips of different capabilities
    # ("GeForce GTX 750 Ti": GK106 3.0 and GM107 5.0) is said to be ambiguous, never picked,
    # and resolves once the chip is added.
    assert model in _top(model.name), model.name
    for label in (model.name, *model.aliases):
        try:
            cap = resolve_device(label, nvidia(KB).gpus)[0]
        except InvalidInputError as error:
            assert "ambiguous" in error.message, label
            assert {m.capability for m in _top(label)} != {model.capability}, label
            cap = resolve_device(f"{label} ({model.chips[0]})", nvidia(KB).gpus)[0]
        assert cap == model.capability, label
    for chip in model.chips:
        info = nvidia(KB).chip(chip)
        assert info is not None and info.capability == model.capability, (model.name, chip)


@pytest.mark.parametrize("device", nvidia(KB).pci_devices, ids=lambda d: d.id)
def test_every_pci_id_resolves_through_its_chip(device: object) -> None:
    answer = lookup_pci(device.id.upper(), KB)  # type: ignore[attr-defined]
    assert answer.device == device
    assert answer.capability == answer.chip.capability
    assert nvidia(KB).knows(answer.capability)
    for model in answer.models:
        # The same capability both ways: PCI id -> model -> name -> capability.
        assert model.capability == answer.capability
        assert answer.chip.chip in model.chips or not model.chips, (device, model.name)


def test_models_and_their_pci_ids_agree() -> None:
    for model in nvidia(KB).gpus:
        for pci_id in model.pci_ids:
            device = nvidia(KB).pci_device(pci_id)
            assert device is not None and model.name in device.models, (model.name, pci_id)


def test_every_model_has_chips_and_a_source() -> None:
    for model in nvidia(KB).gpus:
        assert model.chips, model.name
        assert model.source.strip(), model.name


def test_chips_file_is_complete() -> None:
    chips = {c.chip: c for c in nvidia(KB).chips}
    with_devices = {d.chip for d in nvidia(KB).pci_devices}
    # Every PCI chip has devices in the table; the Tegra ones have none (integrated, no PCI id).
    assert {c for c, info in chips.items() if info.pci} == with_devices
    for info in nvidia(KB).chips:
        assert nvidia(KB).knows(info.capability), info.chip
        assert info.source.strip(), info.chip
    raw = json.loads((KB_DIR / "chips.json").read_text())
    assert all(row["reason"].strip() for row in raw["left_out"])


def test_coverage_counts() -> None:
    assert len(nvidia(KB).gpus) >= 500
    assert len(nvidia(KB).pci_devices) >= 800
    archs = {nvidia(KB).capability(m.capability).arch for m in nvidia(KB).gpus}
    assert {
        "Kepler",
        "Maxwell",
        "Pascal",
        "Volta",
        "Turing",
        "Ampere",
        "Ada",
        "Hopper",
        "Blackwell",
    } <= archs


def test_names_unique_case_insensitively_across_files() -> None:
    names = [label.casefold() for m in nvidia(KB).gpus for label in (m.name, *m.aliases)]
    assert len(names) == len(set(names))


def test_pci_json_records_its_provenance() -> None:
    raw = json.loads((KB_DIR / "pci.json").read_text())
    assert "pci.ids version" in raw["source"] and "pciutils/pciids commit" in raw["source"]
    assert "planner/scripts/pci_kb.py" in raw["source"]


# The names issue 14 lists: nvidia-smi names and product names.
NAMED = {
    "NVIDIA GeForce GTX 1650": "7.5",
    "NVIDIA GeForce MX450": "7.5",
    "NVIDIA GeForce RTX 4090 D": "8.9",
    "NVIDIA L20": "8.9",
    "NVIDIA RTX 2000 Ada Generation": "8.9",
    "NVIDIA GeForce RTX 4070 Laptop GPU": "8.9",
    "GeForce GTX 780 Ti": "3.5",
    "GeForce GTX 680": "3.0",
    "Jetson TK1": "3.2",
    "DRIVE AGX Orin": "8.7",
    "NVIDIA GeForce RTX 5090 Laptop GPU": "12.0",
    "NVIDIA H20": "9.0",
    "NVIDIA A800 80GB PCIe": "8.0",
    "NVIDIA H800 PCIe": "9.0",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "12.0",
    "NVIDIA GeForce GTX TITAN Black": "3.5",
    "Tesla K80": "3.7",
    "NVIDIA GB10": "12.1",
    "Jetson AGX Thor": "11.0",
    "DRIVE AGX Thor": "11.0",
    "Jetson TX2": "6.2",
    "Jetson Nano": "5.3",
    "Jetson AGX Xavier": "7.2",
}

# Loose spellings people type -> the model they mean.
LOOSE = {
    "rtx 4090 d": "NVIDIA GeForce RTX 4090 D",
    "rtx 4090d": "NVIDIA GeForce RTX 4090 D",
    "4070 laptop": "NVIDIA GeForce RTX 4070 Laptop GPU",
    "gtx1650": "NVIDIA GeForce GTX 1650",
    "mx450": "NVIDIA GeForce MX450",
    "mx 450": "NVIDIA GeForce MX450",
    "rtx 2000 ada": "NVIDIA RTX 2000 Ada Generation",
    "a100 80gb pcie": "NVIDIA A100 80GB PCIe",
    "h100 nvl": "NVIDIA H100 NVL",
    "gh200 480gb": "NVIDIA GH200 480GB",
    "l20": "NVIDIA L20",
}


@pytest.mark.parametrize(("name", "cap"), sorted(NAMED.items()))
def test_named_models(name: str, cap: str) -> None:
    assert resolve_device(name, nvidia(KB).gpus)[0] == Capability.parse(cap)


@pytest.mark.parametrize(("query", "name"), sorted(LOOSE.items()))
def test_loose_names(query: str, name: str) -> None:
    cap, model = resolve_device(query, nvidia(KB).gpus)
    assert model is not None and model.name == name
    assert cap == BY_NAME[name].capability


@pytest.mark.parametrize(
    ("query", "caps"),
    [
        ("gt 640", ("3.0", "3.5")),
        ("GeForce GT 730", ("3.0", "3.5")),
    ],
)
def test_names_on_chips_of_different_capabilities_are_ambiguous(
    query: str, caps: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidInputError) as info:
        resolve_device(query, nvidia(KB).gpus)
    line = info.value.one_line()
    assert info.value.exit_code == ExitCode.INVALID_INPUT
    assert "ambiguous" in line and all(f"({c})" in line for c in caps)
    assert "capplan gpus --pci" in line and "add the chip, e.g." in line


@pytest.mark.parametrize(
    ("query", "cap"),
    [("gt 640 (GK208)", "3.5"), ("GeForce GT 640 (gk107)", "3.0"), ("gtx 750 ti (GM107)", "5.0")],
)
def test_a_chip_in_parentheses_settles_it(query: str, cap: str) -> None:
    assert resolve_device(query, nvidia(KB).gpus)[0] == Capability.parse(cap)


def test_chip_qualifier_is_not_a_word() -> None:
    assert normalise("NVIDIA GeForce GT 640 (GK107)") == normalise("GeForce GT 640")


def test_fermi_sibling_is_noted() -> None:
    (model,) = [m for m in nvidia(KB).gpus if m.name == "NVIDIA GeForce GT 730 (GK208B)"]
    assert "GF108" in model.note


@pytest.mark.parametrize(
    ("query", "cap", "chip"),
    [
        ("10de:2684", "8.9", "AD102"),
        ("10DE:2330", "9.0", "GH100"),
        ("0x10de:0x2b85", "12.0", "GB202"),
        ("10de:1db4", "7.0", "GV100"),
        ("10de:102d", "3.7", "GK210"),
        ("10de:2e12", "12.1", "GB20B"),
    ],
)
def test_pci_lookups(query: str, cap: str, chip: str) -> None:
    answer = lookup_pci(query, KB)
    assert (str(answer.capability), answer.chip.chip) == (cap, chip)


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("10de:ffff", "unknown NVIDIA device id '10de:ffff'"),
        ("8086:46a6", "not an NVIDIA device"),
        ("2684", "not vendor:device in hex"),
        ("10de:26840", "not vendor:device in hex"),
        ("10de-2684", "not vendor:device in hex"),
        ("", "not vendor:device in hex"),
    ],
)
def test_bad_pci_queries(query: str, says: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        lookup_pci(query, KB)
    assert says in info.value.message and info.value.exit_code == ExitCode.INVALID_INPUT


def _kb_copy(tmp_path: Path, name: str, edit: object) -> Path:
    folder = tmp_path / "kb"
    folder.mkdir()
    for path in KB_DIR.glob("*.json"):
        (folder / path.name).write_text(path.read_text())
    data = json.loads((folder / name).read_text())
    edit(data)  # type: ignore[operator]
    (folder / name).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    ("name", "edit", "fragment"),
    [
        ("chips.json", lambda d: d["chips"][-1].update(capability="8.9"), "its chip GB20B has 8.9"),
        ("gpus.json", lambda d: d["gpus"][0].update(chips=["GX999"]), "unknown chip 'GX999'"),
        ("pci.json", lambda d: d["devices"][0].update(chip="GX999"), "unknown chip 'GX999'"),
        ("pci.json", lambda d: d["devices"][-1].update(id="10de:XYZ"), "pci.json"),
    ],
)
def test_inconsistent_chip_data_is_a_data_error(
    capplan_cli: object, tmp_path: Path, name: str, edit: object, fragment: str
) -> None:
    folder = _kb_copy(tmp_path, name, edit)
    result = capplan_cli("gpus", "a100", env={"CAPPLAN_KB_DIR": str(folder)})  # type: ignore[operator]
    assert result.exit_code == ExitCode.DATA, result.stderr
    line = result.stderr.strip()
    assert line.startswith("capplan: error: ") and "\n" not in line and fragment in line
