"""Knowledge-base invariants over every entry, and agreement with nixpkgs' table and nvcc."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from capplan.adapters.kb import kb_path, load_kb
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.kb import KnowledgeBase

KB: KnowledgeBase = load_kb()


def test_every_entry_has_a_source() -> None:
    for info in nvidia(KB).capabilities:
        assert info.source.strip(), info.capability
    for gpu in nvidia(KB).gpus:
        assert gpu.source.strip(), gpu.name
    for release in nvidia(KB).cuda_releases:
        assert release.source.strip(), release.version
    for name, pkg in KB.packages.items():
        assert pkg.source.strip() and pkg.cost.source.strip() and pkg.limits.source.strip(), name
    for torch in nvidia(KB).torch_releases:
        assert torch.source.strip(), torch.version


def test_capabilities_are_unique_sorted_and_span_3_0_to_12_1_plus_10_7() -> None:
    caps = [c.capability for c in nvidia(KB).capabilities]
    assert caps == sorted(set(caps))
    bases = {str(c) for c in caps if not c.suffix}
    for wanted in ["3.0", "3.2", "3.5", "5.3", "6.2", "8.8", "10.7", "12.1"]:
        assert wanted in bases
    for info in nvidia(KB).capabilities:
        assert info.max_cuda is None or info.min_cuda <= info.max_cuda
        if info.capability.suffix:
            # a and f variants exist only where their baseline does, never earlier.
            base = nvidia(KB).capability(info.capability.base)
            assert info.min_cuda >= base.min_cuda


def _tsv(shared: Path) -> list[dict[str, str]]:
    with (shared / "data" / "nixpkgs-cuda-capabilities.tsv").open() as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _null(value: str) -> str | None:
    return None if value in ("null", "") else value


def test_agrees_with_nixpkgs_table_on_every_row(shared_dir: Path) -> None:
    for row in _tsv(shared_dir):
        info = nvidia(KB).capability(Capability.parse(row["cudaCapability"]))
        assert info.nixpkgs
        assert info.capability.sm == row["smName"]
        assert info.capability.compute == row["computeName"]
        assert info.capability.cmake == row["cmakeArch"]
        assert info.arch == row["archName"]
        assert str(info.min_cuda) == row["minCudaMajorMinorVersion"]
        assert (str(info.max_cuda) if info.max_cuda else None) == _null(
            row["maxCudaMajorMinorVersion"]
        )
        assert info.jetson == (row["isJetson"] == "true")
        assert (info.capability.suffix == "a") == (row["isArchitectureSpecific"] == "true")
        assert (info.capability.suffix == "f") == (row["isFamilySpecific"] == "true")
        dont = row["dontDefaultAfterCudaMajorMinorVersion"]
        assert (str(info.dont_default_after) if info.dont_default_after else None) == _null(dont)


def test_default_lists_follow_nixpkgs_for_every_cuda(shared_dir: Path) -> None:
    rows = _tsv(shared_dir)
    columns = [k for k in rows[0] if k.startswith("default@")]
    assert columns
    for column in columns:
        cuda = CudaVersion.parse(column.removeprefix("default@"))
        expected = {r["cudaCapability"] for r in rows if r[column] == "default"}
        assert {str(c) for c in nvidia(KB).defaults(cuda)} == expected, column
        supported = {r["cudaCapability"] for r in rows if r[column] in ("default", "supported")}
        nix_supported = {str(i.capability) for i in nvidia(KB).supported(cuda) if i.nixpkgs}
        assert nix_supported == supported, column


def test_disagreements_between_sources_are_recorded() -> None:
    blackwell = nvidia(KB).capability(Capability.parse("10.0"))
    assert str(blackwell.min_cuda) == "12.7"  # nixpkgs' value
    assert any(str(o.min_cuda) == "12.8" for o in blackwell.other_sources)


def test_cuda_releases_cover_11_0_to_13_4_with_drivers() -> None:
    versions = [str(r.version) for r in nvidia(KB).cuda_releases]
    for wanted in ["11.0", "11.8", "12.0", "12.6", "12.8", "12.9", "13.0", "13.4"]:
        assert wanted in versions
    for release in nvidia(KB).cuda_releases:
        assert release.min_driver.split(".")[0].isdigit()
    sets = {str(r.version): r.nixpkgs_set for r in nvidia(KB).cuda_releases if r.nixpkgs_set}
    assert sets == {v: f"cudaPackages_{v.replace('.', '_')}" for v in sets}
    assert {"12.6", "12.8", "12.9", "13.0", "13.3"} <= set(sets)


def test_gpus_are_many_unique_and_known_capabilities() -> None:
    assert len(nvidia(KB).gpus) >= 50
    labels = [label.lower() for g in nvidia(KB).gpus for label in (g.name, *g.aliases)]
    assert len(labels) == len(set(labels))
    segments = {g.segment for g in nvidia(KB).gpus}
    assert segments == {"datacenter", "workstation", "consumer", "embedded"}
    for gpu in nvidia(KB).gpus:
        info = nvidia(KB).capability(gpu.capability)
        assert info.jetson == (gpu.segment == "embedded") or gpu.capability.major >= 9


def test_torch_releases_1_13_to_2_14() -> None:
    minors = {".".join(r.version.split(".")[:2]) for r in nvidia(KB).torch_releases}
    wanted = {"1.13", *(f"2.{n}" for n in range(15))}
    assert wanted <= minors
    for release in nvidia(KB).torch_releases:
        assert release.supported
    old = nvidia(KB).torch_release("1.13")
    assert max(old.supported) == Capability.parse("8.6")  # torch 1.13 refused anything above


def test_packages_depend_only_on_known_packages() -> None:
    for name, pkg in KB.packages.items():
        for dep in pkg.depends:
            assert dep in KB.packages, (name, dep)
        if pkg.limits.allow_from:
            nvidia(KB).torch_release(pkg.limits.allow_from.partition("@")[2])
    for name in ["torch", "torchvision", "magma", "nccl", "onnxruntime"]:
        assert KB.package(name).capability_dependent
    for name in ["cupy", "cudnn", "cublas"]:
        assert not KB.package(name).capability_dependent


@pytest.mark.nvcc
def test_oracle_nvcc_13_targets_equal_the_kb(nvcc_bin: Path) -> None:
    version = subprocess.run(
        [str(nvcc_bin), "--version"], capture_output=True, text=True, check=True
    ).stdout
    if "release 13.0" not in version:
        pytest.skip(f"nvcc is not CUDA 13.0: {version.splitlines()[-1]}")
    listed = subprocess.run(
        [str(nvcc_bin), "--list-gpu-code"], capture_output=True, text=True, check=True
    ).stdout.split()
    real = {Capability.parse(code) for code in listed}
    kb = {i.capability for i in nvidia(KB).supported(CudaVersion(13, 0)) if not i.capability.suffix}
    assert kb == real


def _broken_copy(tmp_path: Path, name: str, mutate: object) -> Path:
    folder = tmp_path / "kb"
    shutil.copytree(kb_path("capabilities.json").parent, folder)
    path = folder / name
    data = json.loads(path.read_text())
    mutate(data)  # type: ignore[operator]
    path.write_text(json.dumps(data))
    return folder


def test_corrupt_kb_file_is_one_line_naming_file_entry_and_field(
    tmp_path: Path, capplan_cli: object
) -> None:
    def breaker(data: dict[str, list[dict[str, object]]]) -> None:
        data["gpus"][3]["capability"] = "banana"

    folder = _broken_copy(tmp_path, "gpus.json", breaker)
    result = capplan_cli("gpus", "a100", env={"CAPPLAN_KB_DIR": str(folder)})  # type: ignore[operator]
    assert result.exit_code == 6
    line = result.stderr.strip()
    assert "\n" not in line and "gpus.json" in line and "gpus[3]" in line
    assert "capability" in line and "banana" in line


def test_kb_file_that_is_not_json(tmp_path: Path, capplan_cli: object) -> None:
    folder = tmp_path / "kb"
    shutil.copytree(kb_path("capabilities.json").parent, folder)
    (folder / "cuda.json").write_text("{ not json")
    result = capplan_cli("caps", env={"CAPPLAN_KB_DIR": str(folder)})  # type: ignore[operator]
    assert result.exit_code == 6
    assert "cuda.json" in result.stderr and "line 1" in result.stderr
