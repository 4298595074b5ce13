"""`capplan inspect` on AMD device code Debian's clang-16 really built.

Bare amdgcn code objects (``clang-16 -target amdgcn-amd-amdhsa -mcpu=...``), HIP device-only
bundles and host objects with a ``.hip_fatbin`` section (``clang-16 -x hip --offload-arch``),
bundles made by ``clang-offload-bundler``, and a static archive of HIP objects. Our readings are
checked against LLVM's own tools (``llvm-readobj`` flag names, ``clang-offload-bundler --list``).
``scripts/setup --dev`` installs clang-16, llvm-16, clang-tools-16 and lld-16.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import LLVM16, llvm16_tool

from capplan.adapters.fatbin import FileReport, inspect_paths
from capplan.core.families.cuda.binary import CudaCode
from capplan.core.families.rocm.binary import AmdCode
from capplan.core.families.rocm.target import AmdTarget
from capplan.errors import ExitCode

T = AmdTarget.parse

KERNEL_C = "void k(float *a) { a[0] = 1.0f; }\n"
# Just enough of the HIP headers for a __global__ kernel without ROCm installed.
KERNEL_HIP = """
#define __global__ __attribute__((global))
typedef struct { unsigned x, y, z; } dim3;
typedef struct ihipStream_t *hipStream_t;
extern "C" int hipLaunchKernel(const void *, dim3, dim3, void **, unsigned long, hipStream_t);
__global__ void scale(float *a) { a[0] *= 2.0f; }
"""


def cuda(report: FileReport) -> CudaCode:
    """The CUDA reader's part of a report."""
    return next(c for c in report.code if isinstance(c, CudaCode))


def amd(report: FileReport) -> AmdCode:
    """The ROCm reader's part of a report."""
    return next(c for c in report.code if isinstance(c, AmdCode))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    clang = llvm16_tool("clang")
    bundler = llvm16_tool("clang-offload-bundler")
    if not (LLVM16 / "ld.lld").is_file() and shutil.which("ld.lld-16") is None:
        pytest.skip("lld-16 not installed: clang cannot link HIP device code")
    out = tmp_path_factory.mktemp("amd")
    (out / "k.c").write_text(KERNEL_C)
    (out / "k.hip").write_text(KERNEL_HIP)

    def run(*args: str | Path) -> None:
        subprocess.run([str(a) for a in args], check=True, cwd=out, capture_output=True)

    objects = {"gfx90a:xnack-": "k90a.o", "gfx1030": "k1030.o", "gfx1100": "k1100.o",
               "gfx906:sramecc+:xnack-": "k906.o"}  # fmt: skip
    for cpu, name in objects.items():
        run(clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={cpu}", "-nogpulib", "-c", "k.c",
            "-o", name)  # fmt: skip
    hip = ["-x", "hip", "--offload-arch=gfx90a", "--offload-arch=gfx1100", "-nogpulib",
           "-nogpuinc"]  # fmt: skip
    run(clang, *hip, "--cuda-device-only", "-c", "k.hip", "-o", "device.bundle")
    run(clang, *hip, "-c", "k.hip", "-o", "host.o")
    run(clang, *hip, "-fPIC", "-shared", "k.hip", "-o", "libscale.so")
    run(
        bundler, "--type=o",
        "--targets=host-x86_64-unknown-linux-gnu,hipv4-amdgcn-amd-amdhsa--gfx1030,"
        "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
        "--input=/dev/null", "--input=k1030.o", "--input=k90a.o", "--output=made.bundle",
    )  # fmt: skip
    run(
        bundler, "--type=o",
        "--targets=host-x86_64-unknown-linux-gnu,hipv4-amdgcn-amd-amdhsa--gfx942",
        "--input=/dev/null", "--input=k1100.o", "--output=liar.bundle",
    )  # fmt: skip
    ar = shutil.which("ar") or shutil.which("llvm-ar-16")
    if ar is not None:
        run(ar, "rcs", "libscale.a", "host.o")
    return {p.name: p for p in out.iterdir()}


def _readobj_flags(path: Path) -> set[str]:
    readobj = llvm16_tool("llvm-readobj")
    text = subprocess.run(
        [str(readobj), "--file-headers", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return set(re.findall(r"EF_AMDGPU_\w+", text))


def _bundler_list(path: Path) -> set[str]:
    bundler = llvm16_tool("clang-offload-bundler")
    text = subprocess.run(
        [str(bundler), "--list", "--type=o", f"--input={path}"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return {line for line in text.split() if "amdgcn" in line}


@pytest.mark.parametrize(
    ("name", "target", "flags"),
    [
        ("k90a.o", "gfx90a:xnack-", {"EF_AMDGPU_MACH_AMDGCN_GFX90A",
                                     "EF_AMDGPU_FEATURE_XNACK_OFF_V4"}),
        ("k906.o", "gfx906:sramecc+:xnack-", {"EF_AMDGPU_MACH_AMDGCN_GFX906",
                                               "EF_AMDGPU_FEATURE_SRAMECC_ON_V4"}),
        ("k1030.o", "gfx1030", {"EF_AMDGPU_MACH_AMDGCN_GFX1030"}),
        ("k1100.o", "gfx1100", {"EF_AMDGPU_MACH_AMDGCN_GFX1100"}),
    ],
)  # fmt: skip
def test_bare_code_objects(built: dict[str, Path], name: str, target: str, flags: set[str]) -> None:
    (report,) = inspect_paths([built[name]])
    assert amd(report).targets == (T(target),) and amd(report).code_object == T(target)
    assert cuda(report).sass == () and cuda(report).containers == 0  # CUDA fields untouched
    assert flags <= _readobj_flags(built[name])  # LLVM reads the same e_flags


def test_device_only_bundle(built: dict[str, Path]) -> None:
    path = built["device.bundle"]
    (report,) = inspect_paths([path])
    assert amd(report).targets == (T("gfx90a"), T("gfx1100"))
    assert {f"hipv4-amdgcn-amd-amdhsa--{t}" for t in ("gfx90a", "gfx1100")} == _bundler_list(path)
    (located,) = amd(report).bundles
    assert [e.elf_target for e in located.bundle.entries if e.target] == [T("gfx1100"), T("gfx90a")]


def test_host_object_hip_fatbin(built: dict[str, Path]) -> None:
    (report,) = inspect_paths([built["host.o"]])
    assert amd(report).targets == (T("gfx90a"), T("gfx1100"))
    assert amd(report).json_fields(False)["amd"]["sections"] == {".hip_fatbin": 1}
    assert cuda(report).sass == () and cuda(report).ptx == () and not report.partial


def test_shared_library(built: dict[str, Path]) -> None:
    (report,) = inspect_paths([built["libscale.so"]])
    assert amd(report).targets == (T("gfx90a"), T("gfx1100"))


def test_bundler_made_bundle_and_mismatch(built: dict[str, Path]) -> None:
    (report,) = inspect_paths([built["made.bundle"]])
    assert amd(report).targets == (T("gfx90a:xnack-"), T("gfx1030"))
    assert amd(report).problems == ()
    (liar,) = inspect_paths([built["liar.bundle"]])
    assert any("holds code for gfx1100, not gfx942" in p for p in amd(liar).problems)


def test_static_archive(built: dict[str, Path]) -> None:
    if "libscale.a" not in built:
        pytest.skip("no ar to build a static archive")
    (report,) = inspect_paths([built["libscale.a"]])
    assert report.path.endswith("libscale.a!host.o") and amd(report).targets == (
        T("gfx90a"),
        T("gfx1100"),
    )


def test_directory_walk_lists_amd_only_files(built: dict[str, Path]) -> None:
    reports = inspect_paths([built["host.o"].parent])
    names = {Path(r.path.split("!")[0]).name for r in reports}
    assert {"host.o", "k90a.o", "device.bundle", "libscale.so"} <= names
    assert "k.c" not in names


def test_zlib_ccob_around_a_real_bundle(built: dict[str, Path], tmp_path: Path) -> None:
    # clang-16 has no --offload-compress; wrap its real bundle in a v3 CCOB header as LLVM's
    # CompressedOffloadBundle writes it (method 0 = zlib).
    inner = built["device.bundle"].read_bytes()
    payload = zlib.compress(inner)
    head = b"CCOB" + struct.pack("<HHQQQ", 3, 0, 32 + len(payload), len(inner), 0)
    path = tmp_path / "device.ccob"
    path.write_bytes(head + payload)
    (report,) = inspect_paths([path])
    assert amd(report).targets == (T("gfx90a"), T("gfx1100"))
    assert amd(report).json_fields(False)["amd"]["compression"] == ["zlib"]


def _cli(*args: str) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from capplan.cli.main import cli

    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_cli_json_and_table(built: dict[str, Path]) -> None:
    code, out, _ = _cli("inspect", "--json", "--entries", str(built["host.o"]))
    assert code == 0
    (data,) = json.loads(out)["files"]
    amd: dict[str, Any] = data["amd"]
    assert amd["targets"] == ["gfx90a", "gfx1100"] and amd["bundles"] == 1
    assert {e["target"] for e in amd["entries"]} == {None, "gfx90a", "gfx1100"}
    assert data["sass"] == [] and data["containers"] == 0
    code, out, _ = _cli("inspect", str(built["k90a.o"]))
    assert code == 0 and "gfx90a:xnack-" in out.replace("\n", "").replace("│", "").replace(" ", "")


def test_cli_truncated_bundle_exits_12(built: dict[str, Path], tmp_path: Path) -> None:
    data = built["device.bundle"].read_bytes()
    cut = tmp_path / "cut.bundle"
    cut.write_bytes(data[: len(data) // 2])
    code, _, err = _cli("inspect", str(cut))
    assert code == ExitCode.BAD_BINARY and "runs past the end" in err
    garbage = tmp_path / "garbage.bundle"
    garbage.write_bytes(data[:24] + b"\xff" * 40)
    code, _, err = _cli("inspect", str(garbage))
    assert code == ExitCode.BAD_BINARY and "not a valid one" in err


def _embedding_library(out: Path, blob: bytes, name: str, *libs: str) -> Path:
    """A host shared library whose `.rodata` holds ``blob`` as a constant array (as a library
    embedding a code object for hipModuleLoadData would), linked against ``libs``."""
    clang = llvm16_tool("clang")
    source = out / f"{name}.c"
    body = ",".join(str(b) for b in blob)
    source.write_text(
        f"const unsigned char blob[{len(blob)}] = {{{body}}};\n"
        "const unsigned char *get(void) { return blob; }\n"
    )
    target = out / f"{name}.so"
    subprocess.run(
        [str(clang), "-fPIC", "-shared", "-o", str(target), str(source), f"-L{out}",
         "-Wl,--no-as-needed", *libs],
        check=True, capture_output=True,
    )  # fmt: skip
    return target


def _section_of(path: Path, offset: int) -> str:
    """The section holding file ``offset``, as llvm-readelf lists the sections."""
    readelf = llvm16_tool("llvm-readelf")
    text = subprocess.run(
        [str(readelf), "-S", "-W", str(path)], check=True, capture_output=True, text=True
    ).stdout
    row = re.compile(r"\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)")
    for found in row.finditer(text):
        start, size = int(found[2], 16), int(found[3], 16)
        if start <= offset < start + size:
            return found[1]
    return "?"


def test_amd_bundles_are_searched_where_hip_puts_them(
    built: dict[str, Path], tmp_path: Path
) -> None:
    """A bundle in `.rodata` counts in a library that links the HIP runtime (it can load what it
    embeds) and in an ELF whose section table is gone; an NVIDIA-style library that does not
    link libamdhip64 is only searched in `.hip_fatbin`, which it has none of."""
    blob = built["made.bundle"].read_bytes()
    clang = llvm16_tool("clang")
    (tmp_path / "hip.c").write_text("int hipInit(unsigned flags) { return (int)flags; }\n")
    subprocess.run(
        [str(clang), "-fPIC", "-shared", "-Wl,-soname,libamdhip64.so.6", "-o",
         str(tmp_path / "libamdhip64.so"), str(tmp_path / "hip.c")],
        check=True, capture_output=True,
    )  # fmt: skip
    linked = _embedding_library(tmp_path, blob, "libembed", "-lamdhip64")
    (report,) = inspect_paths([linked])
    assert amd(report).targets == (T("gfx90a:xnack-"), T("gfx1030"))
    (located,) = amd(report).bundles
    offset = linked.read_bytes().find(blob[:24])
    assert located.section == _section_of(linked, offset) == ".rodata"

    plain = _embedding_library(tmp_path, blob, "libplain")
    assert blob in plain.read_bytes()
    (report,) = inspect_paths([plain])
    assert amd(report).targets == () and amd(report).bundles == () and not amd(report).found()

    # The same file without its section table (e_shoff, e_shnum, e_shstrndx zeroed): nothing
    # says where device code is, so the whole file is searched and the bundle counts again.
    data = bytearray(plain.read_bytes())
    struct.pack_into("<Q", data, 0x28, 0)
    struct.pack_into("<HH", data, 0x3C, 0, 0)
    headless = tmp_path / "headless.so"
    headless.write_bytes(bytes(data))
    (report,) = inspect_paths([headless])
    assert amd(report).targets == (T("gfx90a:xnack-"), T("gfx1030"))
