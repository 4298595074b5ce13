"""Each GPU family reads its own device code (issue 42): the registry's binary readers, in its
order, and the walker (adapters/fatbin.py) handing each file to them, named by no family."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_amdgpu_synthetic import bundle, elf_header
from tests.unit.test_fatbin_synthetic import container, entry

from capplan.adapters.fatbin import inspect_paths
from capplan.core.binaries.reading import ReadsCodeObjects
from capplan.core.families.cuda.binary import CudaCode, CudaReader
from capplan.core.families.registry import binary_readers
from capplan.core.families.rocm.binary import AmdCode, RocmReader

PTX, SASS = 1, 2
# What `inspect --json` has always written per file (the CUDA fields at the top, AMD's apart).
FIELDS = {"path", "sass", "ptx", "lto", "compression", "containers", "sections", "partial",
          "problems", "amd"}  # fmt: skip


def test_the_readers_in_the_registry_order() -> None:
    readers = binary_readers()
    assert [type(r) for r in readers] == [CudaReader, RocmReader]
    # inspect's table: path, then each family's columns in that order.
    assert [c for r in readers for c in r.columns] == [
        "SASS", "PTX", "LTO-IR", "compression", "containers", "sections", "AMD"
    ]  # fmt: skip
    # Only AMD code can be an ELF file of its own (a bare AMDGPU code object).
    assert [isinstance(r, ReadsCodeObjects) for r in readers] == [False, True]
    for reader in readers:
        empty = reader.empty()
        assert not empty.found() and len(empty.cells()) == len(reader.columns)
        assert empty.problems == () and empty.entry_cells() == []


def test_a_bare_fatbin_goes_to_the_cuda_reader(tmp_path: Path) -> None:
    path = tmp_path / "k.fatbin"
    path.write_bytes(container(entry(SASS, 86), entry(PTX, 90)))
    (report,) = inspect_paths([path])
    cuda, amd = report.code
    assert isinstance(cuda, CudaCode) and isinstance(amd, AmdCode)
    assert cuda.runnable() == ("sm_86", "compute_90") and not amd.found()
    assert set(report.to_json()) == FIELDS and not report.partial


def test_a_bare_bundle_and_a_code_object_go_to_the_rocm_reader(tmp_path: Path) -> None:
    gfx90a = elf_header(0x3F)  # EF_AMDGPU_MACH_AMDGCN_GFX90A
    path = tmp_path / "device.bundle"
    path.write_bytes(bundle([("hipv4-amdgcn-amd-amdhsa--gfx90a", gfx90a)]))
    code_object = tmp_path / "k.o"
    code_object.write_bytes(gfx90a)
    for file in (path, code_object):
        (report,) = inspect_paths([file])
        cuda, amd = report.code
        assert isinstance(amd, AmdCode) and amd.runnable() == ("gfx90a",)
        assert not cuda.found() and set(report.to_json()) == FIELDS


def test_an_unreadable_file_in_a_folder_still_has_every_family(tmp_path: Path) -> None:
    # A corrupt archive member header: the walker's own error, reported as the file's problem.
    (tmp_path / "bad.a").write_bytes(b"!<arch>\n" + b"x" * 70)
    (report,) = inspect_paths([tmp_path])
    assert report.partial and "corrupt static archive" in report.problems[0]
    assert len(report.code) == len(binary_readers())
    assert set(report.to_json()) == FIELDS
