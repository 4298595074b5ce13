"""The AMD knowledge base (kb/amd_*.json): completeness, consistency, lookups, package lists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capplan.adapters.kb import amd_kb_files, load_amd_kb
from capplan.core.families.rocm.target import AmdTarget
from capplan.errors import DataError, ExitCode, InvalidInputError

KB_DIR = Path(__file__).resolve().parents[2] / "planner" / "src" / "capplan" / "kb"
KB = load_amd_kb()
T = AmdTarget.parse

# Every target ../shared/ROCM.md names (its table, the ROCm-support notes and gfx940/941).
ROCM_MD_TARGETS = [
    "gfx900",
    "gfx906",
    "gfx908",
    "gfx90a",
    "gfx940",
    "gfx941",
    "gfx942",
    "gfx950",
    "gfx1010",
    "gfx1012",
    "gfx1030",
    "gfx1031",
    "gfx1032",
    "gfx1035",
    "gfx1036",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1103",
    "gfx1150",
    "gfx1151",
    "gfx1152",
    "gfx1153",
    "gfx1200",
    "gfx1201",
]
# rocmPackages.clr.gpuTargets as ROCM.md states it.
NIXPKGS_DEFAULT = [
    "gfx900",
    "gfx906",
    "gfx908",
    "gfx90a",
    "gfx942",
    "gfx950",
    "gfx1010",
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1103",
    "gfx1150",
    "gfx1151",
    "gfx1200",
    "gfx1201",
]


def test_every_rocm_md_target_is_known() -> None:
    assert [str(t.target) for t in KB.targets] == sorted(ROCM_MD_TARGETS, key=T)
    for info in KB.targets:
        assert info.source and info.family
        assert info.gfx_target_version == info.target.gfx_target_version


def test_nixpkgs_default_list_and_scopes() -> None:
    assert [str(t) for t in KB.nixpkgs_default_targets] == NIXPKGS_DEFAULT
    assert [str(i.target) for i in KB.targets if i.nixpkgs_default] == NIXPKGS_DEFAULT
    info = KB.target_info(T("gfx942:xnack-"))
    assert info is not None and info.nixpkgs_scopes == ("gfx942", "gfx9")
    info = KB.target_info(T("gfx1031"))
    assert info is not None and info.nixpkgs_scopes == () and not info.nixpkgs_default


def test_rocm_ranges_from_rocm_md() -> None:
    by = {str(i.target): i for i in KB.targets}
    assert by["gfx950"].first_rocm == "7.0"
    assert by["gfx1201"].first_rocm == "6.4.1"
    assert by["gfx941"].removed_in_rocm == "7.0"
    assert by["gfx942"].removed_in_rocm is None


@pytest.mark.parametrize(
    ("query", "target", "name"),
    [
        ("mi300x", "gfx942", "AMD Instinct MI300X"),
        ("Radeon RX 7900 XTX", "gfx1100", "AMD Radeon RX 7900 XTX"),
        ("rx7900xtx", "gfx1100", "AMD Radeon RX 7900 XTX"),
        ("strix halo", "gfx1151", "AMD Radeon 8060S"),
        ("Ryzen AI Max", "gfx1151", "AMD Radeon 8060S"),
        ("AMD Instinct MI250X", "gfx90a", "AMD Instinct MI250X"),
        ("mi355x", "gfx950", "AMD Instinct MI355X"),
        ("Radeon AI PRO R9700", "gfx1201", "AMD Radeon AI PRO R9700"),
        ("radeon pro w7900", "gfx1100", "AMD Radeon PRO W7900"),
        ("780m", "gfx1103", "AMD Radeon 780M"),
        ("mi25", "gfx900", "AMD Instinct MI25"),
        ("RX 5500 XT", "gfx1012", "AMD Radeon RX 5500 XT"),
    ],
)
def test_lookup_by_loose_name(query: str, target: str, name: str) -> None:
    (gpu,) = KB.lookup_gpu(query)
    assert (str(gpu.target), gpu.name) == (target, name)


def test_partial_name_lists_every_match() -> None:
    names = [g.name for g in KB.lookup_gpu("7900")]
    assert "AMD Radeon RX 7900 XT" in names and "AMD Radeon RX 7900 GRE" in names


@pytest.mark.parametrize(("query", "says"), [("mi300xx", "MI300X"), ("", "empty"), ("zz", "")])
def test_unknown_gpu_did_you_mean(query: str, says: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        KB.lookup_gpu(query)
    assert info.value.exit_code == ExitCode.INVALID_INPUT
    assert says in info.value.one_line()


def test_every_gpu_product_in_rocm_md_table_has_a_model() -> None:
    for info in KB.targets:
        for product in info.products:
            hits = KB.lookup_gpu(product)
            assert any(g.target == info.target for g in hits), product


def test_magma_hip_excludes_mi300_with_reason() -> None:
    check = KB.package("magma-hip").check("magma-hip", [T("gfx942")])
    assert check.outcome == "throw" and check.kept == ()
    assert "No supported GPU targets specified" in check.reason
    ok = KB.package("magma-hip").check("magma-hip", [T("gfx906"), T("gfx1100")])
    assert ok.outcome == "ok" and ok.kept == (T("gfx906"),) and ok.excluded == (T("gfx1100"),)


def test_magma_list_lacks_what_rocm_md_says() -> None:
    accepts = KB.package("magma-hip").accepts
    assert accepts is not None
    for missing in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"):
        assert T(missing) not in accepts


def test_composable_kernel_needs_gfx9() -> None:
    ck = KB.package("composable_kernel")
    assert ck.check("composable_kernel", [T("gfx1100")]).outcome == "broken"
    assert ck.check("composable_kernel", [T("gfx1100"), T("gfx90a")]).outcome == "ok"


def test_shims_and_pass_through() -> None:
    assert KB.package("hipblaslt").check("hipblaslt", [T("gfx1030")]).outcome == "shim"
    assert KB.package("aotriton").check("aotriton", [T("gfx908")]).outcome == "shim"
    assert KB.package("hipsparselt").check("hipsparselt", [T("gfx1100")]).outcome == "empty"
    torch = KB.package("torch")
    assert torch.check("torch", [T("gfx1153")]).outcome == "ok"  # verbatim, no validation
    assert torch.default_targets is not None
    assert [str(t) for t in torch.default_targets] == [
        t for t in NIXPKGS_DEFAULT if t not in ("gfx1010", "gfx1012")
    ]


def test_unknown_package() -> None:
    with pytest.raises(InvalidInputError, match="did you mean magma-hip"):
        KB.package("magma-hp")


def _copy(tmp_path: Path, name: str, edit: Any) -> Path:
    folder = tmp_path / "kb"
    folder.mkdir()
    for path in KB_DIR.glob("*.json"):
        (folder / path.name).write_text(path.read_text())
    data = json.loads((folder / name).read_text())
    edit(data)
    (folder / name).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    ("name", "edit", "fragment"),
    [
        ("amd_targets.json", lambda d: d["targets"][0].update(gfx_target_version=1), "90000"),
        ("amd_targets.json", lambda d: d["targets"][0].update(target="gfx9999"), "gfx9999"),
        ("amd_targets.json", lambda d: d["targets"][2].update(generic="gfx9-generic"), "LLVM"),
        ("amd_targets.json", lambda d: d["targets"][0].update(nixpkgs_default=False), "default"),
        ("amd_targets.json", lambda d: d["targets"][0].update(first_rocm="seven"), "X.Y"),
        ("amd_gpus.json", lambda d: d["gpus"][0].update(target="gfx942:xnack*"), "xnack*"),
        ("amd_gpus.json", lambda d: d["gpus"][0].update(kind="gpu"), "amd_gpus.json"),
        ("amd_packages.json", lambda d: d["packages"]["torch"].pop("source"), "packages.torch"),
    ],
)
def test_corrupt_files_are_data_errors(tmp_path: Path, name: str, edit: Any, fragment: str) -> None:
    folder = _copy(tmp_path, name, edit)
    with pytest.raises(DataError) as info:
        load_amd_kb(folder)
    assert fragment in info.value.one_line()
    assert info.value.exit_code == ExitCode.DATA


def test_gpu_with_unlisted_target_is_a_data_error(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "amd_gpus.json", lambda d: d["gpus"][0].update(target="gfx1013"))
    with pytest.raises(DataError, match="gfx1013"):
        load_amd_kb(folder)


def test_every_amd_file_is_registered() -> None:
    assert sorted(p.name for p in KB_DIR.glob("amd_*.json")) == sorted(amd_kb_files())


def test_every_entry_has_a_source_and_lists_are_sorted_known_targets() -> None:
    for gpu in KB.gpus:
        assert gpu.source and gpu.target.base == gpu.target
    known = {t.target for t in KB.targets}
    for name, package in KB.packages.items():
        assert package.source and package.reads, name
        for targets in (package.accepts, package.default_targets):
            if targets is not None:
                assert list(targets) == sorted(set(targets)), name
        if package.default_targets is not None:
            # Processors the KB knows, or generic targets (composable_kernel's own default).
            assert {t for t in package.default_targets if not t.is_generic} <= known, name
