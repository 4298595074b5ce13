"""doctor's pure rules (core/binaries/doctor.py) and its ELF dynamic-section reader on bad bytes."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.adapters.environment import elf_dynamic
from capplan.adapters.kb import load_kb
from capplan.core.binaries.doctor import (
    Library,
    Package,
    Ptx,
    cuda_major_of_name,
    cuda_majors_linked,
    diagnose,
)
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.doctor import (
    NvidiaGpu,
    driver_facts,
    is_driver_version,
    nvidia_driver,
    nvidia_gpu,
)
from capplan.core.families.cuda.drivers import version_key
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.version import CudaVersion

C = Capability.parse
TABLES = ({11: "450.80.02", 12: "525.60.13", 13: "580.65.06"},
          {"12.8": "570.26", "13.0": "580.65.06", "13.1": "590.44.01"})  # fmt: skip
A100 = NvidiaGpu("A100", C("8.0"), arch="Ampere", min_cuda=CudaVersion(11, 2))
P100 = NvidiaGpu("P100", C("6.0"), arch="Pascal",
           min_cuda=CudaVersion(10, 0), max_cuda=CudaVersion(12, 9))  # fmt: skip


def test_runtime_majors_from_needed_and_soname() -> None:
    assert cuda_majors_linked(["libc.so.6", "libcudart.so.13", "libcudart.so.12.8"]) == (12, 13)
    assert cuda_majors_linked([], "libcudart.so.11.0") == (11,)
    assert cuda_majors_linked(["libcudart_static.a", "libcudart.so"]) == ()


@pytest.mark.parametrize(
    ("name", "major"),
    [("nvidia-cudnn-cu13", 13), ("nvidia_nccl_cu12", 12), ("site/nvidia/cu13/lib/x.so", 13),
     ("torch", None), ("docu13ment", None),
     # CuPy's distributions name their CUDA major too (issue 38): cupy-cuda13x links cudart 13
     # statically, so no DT_NEEDED says it.
     ("cupy-cuda12x", 12), ("cupy_cuda13x-14.2.0", 13), ("cudax", None)],
)  # fmt: skip
def test_major_hints_from_names(name: str, major: int | None) -> None:
    assert cuda_major_of_name(name) == major


def test_dropped_architecture_is_the_first_cause() -> None:
    # A CUDA 13 library on Pascal with an old driver: the missing code is what to fix first.
    lib = Library("l.so", "k", sass=(C("7.5"), C("8.0")), needed=("libcudart.so.13",))
    runtime = Library("r.so", "k", needed=("libcudart.so.13",))
    report = diagnose([lib, runtime], {"k": Package("k", "1", "pip")}, [P100],
                      nvidia_driver("535.104.05", *TABLES, runs_cuda="12.9"))  # fmt: skip
    (cell,) = report.package_cells(Package("k", "1", "pip"))
    assert (cell.level, cell.cause) == ("cannot-run", "dropped-arch")
    assert "CUDA 12 build" in (cell.fix or "")
    assert report.cells["r.so"][0].cause == "driver-runtime"
    assert not report.ok


def test_unknown_driver_skips_driver_checks() -> None:
    lib = Library("l.so", "k", ptx=(Ptx(C("8.0"), (9, 1), 10),), needed=("libcudart.so.13",))
    report = diagnose([lib], {}, [A100], nvidia_driver(None, *TABLES))
    assert report.cells["l.so"][0].level == "ptx-jit" and report.ok


def test_ptx_isa_newer_than_known_needs_a_newer_driver() -> None:
    lib = Library("l.so", "k", ptx=(Ptx(C("8.0"), (9, 9), 10),))
    old = diagnose([lib], {}, [A100], nvidia_driver("580.65.06", *TABLES)).cells["l.so"][0]
    assert (old.level, old.cause) == ("cannot-run", "driver-ptx")
    new = diagnose([lib], {}, [A100], nvidia_driver("600.1", *TABLES)).cells["l.so"][0]
    assert new.level == "ptx-jit"  # newer than any driver capplan knows: no claim


def test_mixed_majors_and_hints_from_cu_folders() -> None:
    libs = [Library("a/cu13/lib/x.so", "a", sass=(C("8.0"),)),
            Library("b/y.so", "b", sass=(C("8.0"),), needed=("libcudart.so.12",))]  # fmt: skip
    pkgs = {"a": Package("a", None, "pip"), "b": Package("b", None, "pip")}
    report = diagnose(libs, pkgs, [A100], nvidia_driver("570.124.06", *TABLES, runs_cuda="12.9"))
    assert report.mixed_majors == {12: ("b",), 13: ("a",)}
    assert report.cells["a/cu13/lib/x.so"][0].cause == "driver-runtime"
    assert report.cells["b/y.so"][0].level == "native"


_libraries = st.builds(
    Library,
    path=st.text(min_size=1, max_size=8),
    package=st.sampled_from(["a", "b"]),
    sass=st.lists(st.sampled_from([C(x) for x in ("7.5", "8.0", "8.6", "9.0a", "10.0f", "12.0")]),
                  max_size=3).map(tuple),
    ptx=st.lists(st.builds(Ptx, st.sampled_from([C("7.5"), C("9.0"), C("10.0f")]),
                           st.one_of(st.none(), st.tuples(st.integers(0, 12), st.integers(0, 9))),
                           st.integers(0, 1 << 30)), max_size=2).map(tuple),
    needed=st.lists(st.sampled_from(["libcudart.so.12", "libcudart.so.13", "libm.so.6"]),
                    max_size=2).map(tuple),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(libs=st.lists(_libraries, max_size=6), driver=st.sampled_from([None, "535", "580.65.06"]))
def test_diagnose_never_raises_and_ok_means_nothing_fails(
    libs: list[Library], driver: str | None
) -> None:
    unique = list({lib.path: lib for lib in libs}.values())
    jetson = NvidiaGpu("Orin", C("8.7"), jetson=True)
    report = diagnose(unique, {}, [A100, P100, jetson], nvidia_driver(driver, *TABLES))
    levels = [c.level for cells in report.cells.values() for c in cells]
    assert report.ok == ("cannot-run" not in levels)
    for cells in report.cells.values():
        for cell in cells:
            assert cell.reason
            assert (cell.cause is not None) == (cell.level == "cannot-run")


def _real_library() -> Path:
    for name in ("libz.so.1", "libc.so.6", "libm.so.6"):
        for folder in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib"):
            if os.path.isfile(os.path.join(folder, name)):
                return Path(folder, name)
    pytest.skip("no system shared library to read")


def test_elf_dynamic_reads_a_real_library() -> None:
    path = _real_library()
    fd = os.open(path, os.O_RDONLY)
    try:
        needed, soname = elf_dynamic(fd)
    finally:
        os.close(fd)
    assert soname == path.name
    # readelf agrees when it is installed
    readelf = shutil.which("readelf")
    if readelf:
        import subprocess

        out = subprocess.run([readelf, "-d", str(path)], capture_output=True, text=True).stdout
        assert [line.split("[")[1].split("]")[0] for line in out.splitlines()
                if "(NEEDED)" in line] == list(needed)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    cut=st.integers(0, 4096),
    flips=st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=8),
)
def test_elf_dynamic_never_raises_on_damaged_headers(cut: int, flips: list[tuple[int, int]]) -> None:  # fmt: skip
    data = bytearray(_real_library().read_bytes()[:65536])
    for at, value in flips:
        if at < len(data):
            data[at] = value
    struct.pack_into("<4s", data, 0, b"\x7fELF")
    with tempfile.TemporaryFile() as handle:
        handle.write(bytes(data[: max(cut, 0)] if cut < 4096 else data))
        handle.flush()
        needed, soname = elf_dynamic(handle.fileno())
    assert isinstance(needed, tuple) and (soname is None or isinstance(soname, str))


def test_driver_versions_as_nvidia_smi_prints_them() -> None:
    assert is_driver_version("535.104.05") and is_driver_version("580")
    for bad in ("0", "0.1", "abc", "535.", "1.2.3.4.5", "", "5350000000"):
        assert not is_driver_version(bad), bad


def test_driver_facts_are_the_knowledge_bases_driver_table() -> None:
    kb = load_kb()
    need = {r.version: min((r.min_driver, r.toolkit_driver), key=version_key)
            for r in nvidia(kb).cuda_releases}  # fmt: skip
    unknown = driver_facts(kb, None)
    assert unknown.version is None and unknown.runs_cuda is None
    for major in {v.major for v in need}:
        lowest = min((n for v, n in need.items() if v.major == major), key=version_key)
        assert unknown.major_minimum[major] == lowest
    assert unknown.toolkit_driver == {
        str(r.version): r.toolkit_driver for r in nvidia(kb).cuda_releases
    }
    # Each release's own lowest driver runs the newest release whose lowest driver it meets.
    for driver in need.values():
        newest = max(v for v, n in need.items() if version_key(n) <= version_key(driver))
        # Minor-version compatibility has no maximum within a major (issue 38): a driver at the
        # major's minimum runs every N.x; one between a toolkit's own driver and that minimum
        # (450.51.05, below 11.x's 450.80.02) runs that release only.
        compat = {r.version.major: r.min_driver for r in nvidia(kb).cuda_releases}
        whole = version_key(compat[newest.major]) <= version_key(driver)
        assert driver_facts(kb, driver).runs_cuda == (f"{newest.major}.x" if whole else str(newest))
    assert driver_facts(kb, "580.159.04").runs_cuda == "13.x"
    assert driver_facts(kb, "450.51.05").runs_cuda == "11.0"
    assert driver_facts(kb, "1").runs_cuda is None


def test_nvidia_gpu_carries_the_knowledge_bases_facts() -> None:
    kb = load_kb()
    jetson = next(c for c in nvidia(kb).capabilities if c.jetson)
    desktop = next(c for c in nvidia(kb).capabilities if not c.jetson and c.max_cuda is not None)
    j = nvidia_gpu("Jetson", jetson.capability, kb)
    d = nvidia_gpu(None, desktop.capability, kb)
    assert j.jetson and not d.jetson
    assert j.label == f"Jetson ({jetson.capability})" and d.label == str(desktop.capability)
    assert (d.arch, d.min_cuda, d.max_cuda) == (desktop.arch, desktop.min_cuda, desktop.max_cuda)
    unknown = nvidia_gpu(None, C("99.9"), kb)  # not in the table: no facts, not a Jetson
    assert (unknown.jetson, unknown.arch, unknown.min_cuda) == (False, "", None)
