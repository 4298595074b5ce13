"""Cubins that are not what their ELF magic promises, through doctor, inspect and verify (issue
46, "A regression: reading an embedded cubin"). A library's ``.nv_fatbin`` entries hold a real
nvcc 13 cubin, mutated: truncated, its e_shoff/e_shnum/e_shentsize/e_shstrndx or a section
header's fields rewritten, its section-name table without NUL, bytes flipped. No command ends
in exit 1 or a traceback, and doctor names every cubin it cannot read, never saying it runs."""

from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.fuzzing import at_most, derandomized

from capplan.core.binaries import cubin as cubins
from capplan.errors import ExitCode

pytestmark = pytest.mark.nvcc

KERNEL = b"__global__ void scale(float *x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }\n"


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory, nvcc_bin: Path) -> dict[str, bytes]:
    """A real sm_86 cubin (nvcc 13) and a plain shared object (gcc) to append fatbins to."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    folder = tmp_path_factory.mktemp("cubins")
    (folder / "k.cu").write_bytes(KERNEL)
    subprocess.run(
        [str(nvcc_bin), "-cubin", "-arch=sm_86", "k.cu", "-o", "k.cubin"],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-x", "c", "-", "-o", str(folder / "base.so")],
        input=b"int p(int x) { return x; }", check=True, capture_output=True,
    )  # fmt: skip
    return {"cubin": (folder / "k.cubin").read_bytes(), "base": (folder / "base.so").read_bytes()}


def fatbin_entry(arch: int, payload: bytes) -> bytes:
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, 2, 0x0101, 64, len(payload))
    struct.pack_into("<I", head, 0x1C, arch)
    struct.pack_into("<Q", head, 0x28, 1)
    return bytes(head) + payload


def library(base: bytes, entries: list[tuple[int, bytes]]) -> bytes:
    """``base`` with a fatbin container of ``entries`` (arch, cubin) appended, as the hook's
    recipe builds libgarbage.so."""
    body = b"".join(fatbin_entry(arch, p + bytes(-len(p) % 8)) for arch, p in entries)
    container = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
    return base + bytes(-len(base) % 8) + container


def _clean(result: Any, allowed: tuple[int, ...]) -> None:
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    assert result.exit_code in allowed, (result.exit_code, result.stderr)
    if result.exit_code not in (0, int(ExitCode.VERIFY_FAILED), int(ExitCode.WONT_RUN)):
        assert result.stderr.strip().splitlines()[-1].startswith("capplan: error: ")


def _verdict(result: Any) -> dict[str, Any]:
    ((package,),) = [json.loads(result.stdout)["packages"]]
    (lib,) = package["libraries"]
    (verdict,) = lib["verdicts"]
    return dict(verdict)


def test_the_issue_recipe_names_each_unreadable_cubin(
    capplan_in: Any, tmp_path: Path, parts: dict[str, bytes]
) -> None:
    # Issue 46: sm_80, sm_86 and sm_90 entries of random bytes after an ELF magic; exit 1
    # (OverflowError) before. The sm_90 entry (200,000 bytes) is judged by its header alone.
    rnd = random.Random(1)
    garbage = [(a, b"\x7fELF\x02\x01\x01" + rnd.randbytes(n)) for a, n in
               ((80, 4089), (86, 4089), (90, 200000))]  # fmt: skip
    env = tmp_path / "env" / "lib"
    env.mkdir(parents=True)
    (env / "libgarbage.so").write_bytes(library(parts["base"], garbage))
    with at_most(60, "doctor"):
        result = capplan_in("doctor", str(tmp_path / "env"), "--device", "8.6", "--json")
    _clean(result, (int(ExitCode.WONT_RUN),))
    verdict = _verdict(result)
    assert verdict["level"] == "cannot-run"
    (lib,) = json.loads(result.stdout)["packages"][0]["libraries"]
    for arch in ("sm_80", "sm_86", "sm_90"):
        assert f"{arch} entry: not a readable cubin" in verdict["reason"]
        assert any(p.startswith(f"{arch} entry: not a readable cubin") for p in lib["problems"])
    # Doctor's question is the environment: no note about the embedded default plan.
    assert "default plan" not in result.stderr
    text = capplan_in("doctor", str(tmp_path / "env"), "--device", "8.6")
    _clean(text, (int(ExitCode.WONT_RUN),))
    assert "not a readable cubin" in text.stdout and "default plan" not in text.stderr
    _clean(capplan_in("inspect", str(env / "libgarbage.so")), (0,))


def test_the_real_cubin_runs_and_is_read(
    capplan_in: Any, tmp_path: Path, parts: dict[str, bytes]
) -> None:
    assert cubins.cubin_has_kernel(parts["cubin"])
    (tmp_path / "libk.so").write_bytes(library(parts["base"], [(86, parts["cubin"])]))
    result = capplan_in("doctor", str(tmp_path), "--device", "8.6", "--json")
    _clean(result, (0,))
    assert _verdict(result)["level"] == "native"


def gabi_kernel(cubin: bytes) -> bool | None:
    """The test's own reading of a 64-bit little-endian cubin, from the ELF gABI: None when its
    header tables, sections or section names do not fit its bytes (not a readable cubin), else
    whether a ``.text.*`` section has bytes (a kernel). A payload that is no 64-bit
    little-endian ELF file at all makes no claim (True: taken as code)."""
    if cubin[:4] != b"\x7fELF" or len(cubin) < 6 or cubin[4:6] != b"\x02\x01":
        return True
    if len(cubin) < 64:
        return None
    size = len(cubin)
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", cubin, 0x36)
    if shnum == 0:
        return True  # no section table: no claim
    if shentsize < 64 or shstrndx >= shnum or shoff + shnum * shentsize > size:
        return None
    if phnum and phoff + phnum * phentsize > size:
        return None
    rows = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at, names_size = rows[shstrndx][4], rows[shstrndx][5]
    names = cubin[names_at : names_at + names_size]
    if names_at + names_size > size or not names.endswith(b"\0"):
        return None
    kernel = False
    for name, kind, _, _, offset, length in rows:
        if name >= names_size or (kind != 8 and offset + length > size):
            return None
        if length and names[name:].split(b"\0", 1)[0].startswith(b".text."):
            kernel = True
    return kernel


def _mutate(data: Any, whole: bytes) -> bytes:
    """One hostile variant of the cubin ``whole`` (hypothesis draws which)."""
    cubin = bytearray(whole)
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    kind = data.draw(
        st.sampled_from(["truncate", "header", "section", "names", "bytes", "random"]),
        label="kind",
    )
    if kind == "random":  # the issue's recipe: random bytes after the ELF magic
        size = data.draw(st.integers(57, 4096), label="size")
        return b"\x7fELF\x02\x01\x01" + random.Random(size).randbytes(size)
    if kind == "truncate":
        return bytes(cubin[: data.draw(st.integers(0, len(cubin) - 1), label="size")])
    if kind == "header":
        at, fmt = data.draw(
            st.sampled_from([(0x28, "<Q"), (0x3A, "<H"), (0x3C, "<H"), (0x3E, "<H")]), label="field"
        )
        bits = struct.calcsize(fmt) * 8
        hostile = [0, 1, 63, 64, len(whole) - 1, len(whole), (1 << bits) - 1, 1 << (bits - 1)]
        value = data.draw(
            st.one_of(st.sampled_from(hostile), st.integers(0, (1 << bits) - 1)), label="value"
        )
        struct.pack_into(fmt, cubin, at, value)
        return bytes(cubin)
    if kind == "section":
        row = shoff + data.draw(st.integers(0, shnum - 1), label="section") * shentsize
        at, fmt = data.draw(st.sampled_from([(0, "<I"), (0x18, "<Q"), (0x20, "<Q")]), label="field")
        top = (1 << (struct.calcsize(fmt) * 8)) - 1
        value = data.draw(
            st.one_of(st.sampled_from([len(whole), top, top >> 1]), st.integers(0, top)),
            label="value",
        )
        struct.pack_into(fmt, cubin, row + at, value)
        return bytes(cubin)
    if kind == "names":  # the section-name table without a single NUL
        names_at, names_size = struct.unpack_from("<QQ", cubin, shoff + shstrndx * shentsize + 0x18)
        cubin[names_at : names_at + names_size] = cubin[names_at : names_at + names_size].replace(
            b"\0", b"A"
        )
        return bytes(cubin)
    flips = data.draw(
        st.lists(st.tuples(st.integers(0, len(cubin) - 1), st.integers(0, 255)), min_size=1,
                 max_size=8),
        label="flips",
    )  # fmt: skip
    for at, value in flips:
        cubin[at] = value
    return bytes(cubin)


@derandomized(60)
@given(data=st.data())
def test_mutated_nvcc_cubins_through_doctor_inspect_and_verify(
    capplan_in: Any, tmp_path_factory: pytest.TempPathFactory, parts: dict[str, bytes], data: Any
) -> None:
    mutated = _mutate(data, parts["cubin"])
    folder = tmp_path_factory.mktemp("env")
    lib = folder / "libk.so"
    lib.write_bytes(library(parts["base"], [(86, mutated)]))
    readable = gabi_kernel(mutated + bytes(-len(mutated) % 8))  # the entry as stored: padded
    with at_most(60, "doctor, inspect and verify"):
        doctor = capplan_in("doctor", str(folder), "--device", "8.6", "--json")
        inspect = capplan_in("inspect", str(lib), "--json")
        verify = capplan_in("verify", str(lib), "--expect", "8.6", "--json")
    _clean(inspect, (0, int(ExitCode.BAD_BINARY)))
    _clean(verify, (0, int(ExitCode.VERIFY_FAILED), int(ExitCode.BAD_BINARY)))
    if readable is False:  # a cubin without a kernel: a stub, which runs
        _clean(doctor, (0,))
        return
    _clean(doctor, (0, int(ExitCode.WONT_RUN)))
    verdict = _verdict(doctor)
    if readable is None:  # not a readable cubin: named, and never "runs"
        assert verdict["level"] == "cannot-run", verdict
        assert "sm_86 entry: not a readable cubin" in verdict["reason"]
    else:
        assert "not a readable cubin" not in verdict["reason"]
