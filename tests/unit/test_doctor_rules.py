"""Issue 38's rules in doctor's pure core: what a fatbin entry holds (core/binaries/cubin.py), and
the verdicts of core/binaries/doctor.py for a GPU newer than the driver, the wrong machine,
coverage by containers, partial packages and the PTX ISA table. The real artifacts these rules
were made for are checked in tests/integration/test_doctor_truth.py."""

from __future__ import annotations

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.binaries.cubin import cubin_has_kernel, cubin_toolkit, lz4_block, ptx_has_code
from capplan.core.binaries.doctor import PTX_ISA_CUDA, Library, Package, Ptx, diagnose, isa_major
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.doctor import NvidiaGpu, driver_facts, nvidia_gpu

C = Capability.parse
KB = load_kb()


def gpu(name: str) -> NvidiaGpu:
    from capplan.core.families.cuda.gpus import resolve_known_device

    cap, model = resolve_known_device(name, KB)
    assert model is not None
    return nvidia_gpu(model.name, cap, KB, model.systems)


def cell(lib: Library, device: str, driver: str) -> tuple[str, str | None, str]:
    report = diagnose([lib], {}, [gpu(device)], driver_facts(KB, driver))
    got = report.cells[lib.path][0]
    return got.level, got.cause, got.reason + " | " + (got.fix or "")


# -- what an entry holds --------------------------------------------------------------------------

EMPTY_PTX = b"""
.version 9.0
.target sm_80
.address_size 64
// cuDNN keeps one such entry: nothing to launch
.visible .entry nopHardwareDetection()
{
\tret;
}
"""
REAL_PTX = EMPTY_PTX.replace(
    b"\tret;", b"\t.reg .b32 %r<2>;\n$L__BB0_1:\n\tmov.u32 %r1, 0;\n\tret;"
)


def test_ptx_with_only_empty_entries_has_no_code() -> None:
    assert not ptx_has_code(EMPTY_PTX)
    assert not ptx_has_code(EMPTY_PTX + b"\0padding")
    assert not ptx_has_code(b".version 9.0\n.target sm_80\n.global .u32 x;\n")  # no entry at all
    assert ptx_has_code(REAL_PTX)
    assert ptx_has_code(EMPTY_PTX + b".entry k() { exit; }\n.entry j() { bar.sync 0; ret; }")
    # An instruction hidden in a comment is none.
    assert not ptx_has_code(EMPTY_PTX.replace(b"\tret;", b"/* mov.u32 %r1, 0; */ ret;"))


def test_cubin_without_text_section_has_no_kernel() -> None:
    # Not ELF, or not a 64-bit little-endian one: no claim (taken as code).
    assert cubin_has_kernel(b"garbage" * 20)
    names = b"\0.shstrtab\0.nv.info\0"
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    shoff = 64 + len(names)
    header[0x28:0x30] = shoff.to_bytes(8, "little")
    header[0x3A:0x40] = (
        (64).to_bytes(2, "little") + (2).to_bytes(2, "little") + (1).to_bytes(2, "little")
    )
    null = bytes(64)
    strtab = bytearray(64)
    strtab[0:4] = (11).to_bytes(4, "little")  # named .nv.info: the table is its only section
    strtab[4:8] = (3).to_bytes(4, "little")
    strtab[0x18:0x20] = (64).to_bytes(8, "little")
    strtab[0x20:0x28] = len(names).to_bytes(8, "little")
    stub = bytes(header) + names + null + bytes(strtab)
    assert not cubin_has_kernel(stub)
    assert cubin_has_kernel(stub.replace(b"\0.nv.info\0", b"\0.text.k\0\0"))
    # A name that only appears in the table, no section carrying it, is no kernel (the reader
    # used to search the bytes for "\0.text.").
    assert not cubin_has_kernel(stub.replace(b"\0.shstrtab\0", b"\0.text.abc\0"))


def test_toolkit_note() -> None:
    note = b"NVIDIA Corp\0nvlink\0Cuda compilation tools, release 13.2, V13.2.51\0"
    assert cubin_toolkit(note) == "13.2"
    assert cubin_toolkit(b"no note") is None


def test_lz4_block() -> None:
    # One literal 'a', a match of 8 at offset 1 (overlapping itself), then the last literals.
    block = bytes([0x14]) + b"a" + bytes([1, 0]) + bytes([0x30]) + b"xyz"
    assert lz4_block(block, 12) == b"a" * 9 + b"xyz"
    assert lz4_block(block, 5) == b"aaaaa"
    with pytest.raises(ValueError, match="offset"):
        lz4_block(bytes([0x14]) + b"a" + bytes([9, 0]), 12)


# -- tables ---------------------------------------------------------------------------------------


def test_ptx_isa_table_reaches_9_5() -> None:
    # PTX ISA release history: 9.0 CUDA 13.0 ... 9.5 CUDA 13.5.
    assert [PTX_ISA_CUDA[(9, m)] for m in range(6)] == [f"13.{m}" for m in range(6)]
    assert isa_major((9, 7)) == 13 and isa_major((8, 8)) == 12 and isa_major((7, 0)) == 11


def test_cuda_13_4_driver_is_r615() -> None:
    assert driver_facts(KB, None).toolkit_driver["13.4"] == "615"


# -- rules ----------------------------------------------------------------------------------------

CU13 = ("libcudart.so.13",)


def test_gpu_newer_than_the_driver_comes_before_code() -> None:
    # No SASS for 10.0 and an R550 driver: the driver is what fails first (no device at all).
    lib = Library("l.so", "k", sass=(C("8.0"),), needed=CU13)
    level, cause, text = cell(lib, "B200", "550.163.01")
    assert (level, cause) == ("cannot-run", "driver-gpu")
    assert "570.26" in text and "NVIDIA driver >= 580.65.06" in text  # and CUDA 13's minimum
    # R570 knows a B200: then the code is judged (and CUDA 13's runtime needs 580).
    assert cell(lib, "B200", "570.172.08")[1] == "device-code"
    assert cell(lib, "RTX 5090", "535.261.03")[1] == "driver-gpu"
    assert cell(lib, "H100", "535.261.03")[1] == "device-code"  # H100 is known since R520


def test_x86_library_cannot_run_on_an_aarch64_host() -> None:
    lib = Library("l.so", "k", sass=(C("8.7"), C("9.0")), needed=CU13, machine="x86_64")
    for device in ("Jetson AGX Orin", "GH200"):
        level, cause, text = cell(lib, device, "580.159.04")
        assert (level, cause) == ("cannot-run", "machine"), device
        assert "aarch64" in text
    assert cell(lib, "H100", "580.159.04")[0] == "native"  # a discrete card: any host
    arm = Library("l.so", "k", sass=(C("9.0"),), needed=CU13, machine="aarch64")
    assert cell(arm, "GH200", "580.159.04")[0] == "native"


def _groups(*spec: tuple[int, tuple[str, ...], tuple[str, ...]]) -> tuple[object, ...]:
    return tuple(
        (tuple(sorted(map(C, sass))), tuple(sorted(map(C, ptx))))
        for count, sass, ptx in spec
        for _ in range(count)
    )


def test_a_minority_of_containers_does_not_speak_for_the_library() -> None:
    # nvidia-cusparse 12.9.4.2's shape: 34 containers (CUDA 12.8) with sm_70, 121 without it.
    groups = _groups(
        (34, ("7.0", "7.5", "8.0", "9.0"), ()),
        (121, ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0"), ("12.0",)),
    )
    sass = tuple(sorted({c for g in groups for c in g[0]}))  # type: ignore[index]
    lib = Library("s.so", "k", sass=sass, ptx=(Ptx(C("12.0"), (9, 0), 1),), needed=CU13,
                  groups=groups)  # type: ignore[arg-type]  # fmt: skip
    level, cause, text = cell(lib, "V100", "580.159.04")
    assert (level, cause) == ("cannot-run", "dropped-arch")
    assert "only 34 of the 155" in text
    assert cell(lib, "T4", "580.159.04")[0] == "native"


def test_per_arch_kernel_sets_raise_no_alarm() -> None:
    # cuBLASLt's shape: Hopper/Blackwell-specific kernels and Blackwell-only sets beside the
    # library's full list; NCCL-like single-target containers.
    groups = _groups(
        (868, ("9.0a", "12.0f"), ()),
        (222, ("8.0", "8.9", "9.0a", "12.0f"), ()),
        (131, ("10.0", "12.0"), ("12.0",)),
        (59, ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0"), ("12.0",)),
        (21, ("8.9", "12.0f"), ("12.0",)),
    )
    sass = tuple(sorted({c for g in groups for c in g[0]}))  # type: ignore[index]
    lib = Library("lt.so", "k", sass=sass, needed=CU13, groups=groups)  # type: ignore[arg-type]
    for device in ("T4", "A100", "RTX 3090", "L4", "H100", "B200", "RTX 5090"):
        assert cell(lib, device, "580.159.04")[0] in ("native", "compatible"), device


def test_ptx_is_judged_by_the_newest_isa_of_its_target() -> None:
    old = Ptx(C("7.5"), (9, 0), 100)
    new = Ptx(C("7.5"), (9, 3), 10)  # smaller, but newer: a driver must know 9.3 too
    lib = Library("p.so", "k", ptx=(old, new), needed=CU13)
    level, cause, text = cell(lib, "RTX 5090", "590.44.01")  # CUDA 13.1's driver
    assert (level, cause) == ("cannot-run", "driver-ptx") and "9.3" in text
    assert cell(Library("p.so", "k", ptx=(old,), needed=CU13), "RTX 5090", "590.44.01")[0] == (
        "ptx-jit"
    )
    assert cell(lib, "RTX 5090", "610.57.04")[0] == "ptx-jit"


def test_ptx_isa_9_5_needs_a_driver_newer_than_13_4s() -> None:
    lib = Library("p.so", "k", ptx=(Ptx(C("7.5"), (9, 5), 10),), needed=CU13)
    level, cause, text = cell(lib, "L4", "615.10.01")
    assert (level, cause) == ("cannot-run", "driver-ptx") and "> 615" in text
    assert cell(lib, "L4", "620.70.06")[0] == "ptx-jit"  # newer than capplan knows: no claim


def test_stub_only_library_runs() -> None:
    lib = Library("w.so", "k", stubs=1, toolkit="13.0", soname="libcufftw.so.12")
    level, _, text = cell(lib, "V100", "580.159.04")
    assert level == "runs" and "no GPU code of its own" in text
    assert cell(lib, "H100", "570.172.08")[1] == "driver-runtime"  # a CUDA 13.0 build


def test_package_runs_partly_and_names_what_fails() -> None:
    torch = Package("torch", "2.14.1", "pip")
    main = Library("t/libtorch_cuda.so", "pip:torch", sass=(C("7.5"), C("8.0")), needed=CU13)
    linalg = Library("t/libtorch_cuda_linalg.so", "pip:torch", sass=(C("8.0"),), needed=CU13)
    report = diagnose(
        [main, linalg], {"pip:torch": torch}, [gpu("T4")], driver_facts(KB, "580.159.04")
    )  # type: ignore[list-item]
    (summary,) = report.package_cells(torch)
    assert summary.level == "partly" and summary.cause == "device-code"
    assert "libtorch_cuda_linalg.so" in summary.reason and "MAGMA" in summary.reason
    assert not report.ok  # a library the program may call cannot run: exit 16
    # With a driver too old for the rest, the driver is the package's first fix.
    old = diagnose(
        [main, linalg], {"pip:torch": torch}, [gpu("T4")], driver_facts(KB, "570.172.08")
    )  # type: ignore[list-item]
    assert old.package_cells(torch)[0].cause == "driver-runtime"


def test_major_signals_beyond_dt_needed() -> None:
    assert Library("a.so", "k", sass=(C("8.0"),), toolkit="13.2").cuda_majors == (13,)
    assert Library("b.so", "k", ptx=(Ptx(C("8.0"), (9, 2), 1),)).cuda_majors == (13,)
    # Older PTX inside a newer build does not make it a second major.
    both = Library("c.so", "k", ptx=(Ptx(C("8.0"), (7, 4), 1), Ptx(C("9.0"), (9, 0), 1)))
    assert both.cuda_majors == (13,)
    # A dynamic link says the runtime: it wins over the toolkit's note.
    linked = Library("d.so", "k", sass=(C("8.0"),), toolkit="13.0", needed=("libcudart.so.12",))
    assert linked.cuda_majors == (12,)
    # An RPATH/folder hint only when nothing else says it.
    assert Library("e.so", "k", sass=(C("8.0"),), major_hint=13).cuda_majors == (13,)


def test_gpu_facts_from_the_knowledge_base() -> None:
    b200, spark, orin, h100 = (gpu(n) for n in ("B200", "DGX Spark", "Jetson AGX Orin", "H100"))
    assert b200.min_driver == "570.26" and "12.8" in (b200.min_driver_source or "")  # type: ignore[attr-defined]
    assert spark.min_driver == "580.65.06" and spark.machines == ("aarch64",)  # type: ignore[attr-defined]
    assert orin.machines == ("aarch64",) and h100.machines == ()  # type: ignore[attr-defined]
