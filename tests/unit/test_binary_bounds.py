"""What one hostile file may cost the binary readers (issues 46 and 52): every offset and count
of a cubin checked before use, LZ4 decoding bounded by the declared size and per file, section
names and DT_NEEDED strings found within a bound, note regions walked once, ar headers of ASCII
digits only, and nesting too deep in metadata left out. Work and memory are asserted as counts
(bytes decoded, notes walked, bytes allocated), never as times."""

from __future__ import annotations

import json
import os
import stat
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from tests.integration.fuzzing import at_most

from capplan.adapters import environment
from capplan.adapters.fatbin import inspect_paths
from capplan.core.binaries import cubin as cubins
from capplan.core.binaries import elf
from capplan.core.binaries.cubin import cubin_has_kernel, lz4_block
from capplan.core.binaries.doctor import Library, cuda_majors_linked, diagnose
from capplan.core.binaries.elf import section_headers
from capplan.core.families.cuda import fatbin

# --- cubins -------------------------------------------------------------------------------------


def cubin(names: bytes = b"\0.shstrtab\0.text.k\0", text: int = 16) -> bytearray:
    """A 64-bit little-endian cubin: the section-name table, then a ``.text.k`` of ``text``
    bytes, then three section headers (null, the name table, the kernel)."""
    header = bytearray(64)
    header[:7] = b"\x7fELF\x02\x01\x01"
    body = names + bytes(text)
    shoff = 64 + len(body) + (-len(body) % 8)
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 1)
    rows = bytes(64)
    rows += struct.pack("<IIQQQQ", 1, 3, 0, 0, 64, len(names)) + bytes(24)
    rows += struct.pack("<IIQQQQ", 11, 1, 6, 0, 64 + len(names), text) + bytes(24)
    return bytearray(bytes(header) + body + bytes(shoff - 64 - len(body)) + rows)


def test_a_readable_cubin_and_its_kernel() -> None:
    assert cubin_has_kernel(bytes(cubin()))
    assert not cubin_has_kernel(bytes(cubin(text=0)))  # an empty .text.k: no kernel


@pytest.mark.parametrize(
    ("field", "at", "fmt", "value", "why"),
    [
        ("e_shoff past the end", 0x28, "<Q", 1 << 63, "past its end"),
        ("e_shoff past ssize_t", 0x28, "<Q", (1 << 64) - 1, "past its end"),
        ("e_shentsize", 0x3A, "<H", 8, "section header size"),
        ("e_shnum", 0x3C, "<H", 0xFFFF, "past its end"),
        ("e_shstrndx", 0x3E, "<H", 7, "section-name table index"),
    ],
)
def test_a_header_that_does_not_fit_is_no_readable_cubin(
    field: str, at: int, fmt: str, value: int, why: str
) -> None:
    # Before issue 46 a huge e_shoff ended in OverflowError (exit 1 in doctor).
    data = cubin()
    struct.pack_into(fmt, data, at, value)
    with pytest.raises(cubins.CubinError, match=why):
        cubin_has_kernel(bytes(data))


def test_a_name_table_without_nul_or_past_the_end_is_no_readable_cubin() -> None:
    data = cubin(names=b"\0.shstrtab\0.text.k")  # no NUL at the table's end
    with pytest.raises(cubins.CubinError, match="NUL"):
        cubin_has_kernel(bytes(data))
    data = cubin()
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    struct.pack_into("<Q", data, shoff + 64 + 0x20, 1 << 40)  # the name table's sh_size
    with pytest.raises(cubins.CubinError, match="past its end"):
        cubin_has_kernel(bytes(data))
    data = cubin()
    struct.pack_into("<I", data, shoff + 128, 5000)  # the kernel's sh_name
    with pytest.raises(cubins.CubinError, match="name lies past"):
        cubin_has_kernel(bytes(data))


def test_every_truncation_is_an_answer_or_a_cubin_error() -> None:
    whole = bytes(cubin())
    for size in range(len(whole)):
        try:
            cubin_has_kernel(whole[:size])
        except cubins.CubinError:
            continue


# --- LZ4 ----------------------------------------------------------------------------------------


def lz4_bomb(match: int) -> bytes:
    """One literal, then one match of about ``match`` bytes at offset 1 (LZ4's run-length form:
    a 16-byte block can claim gigabytes)."""
    extra = match - 19
    return bytes([0x1F]) + b"a" + bytes([1, 0]) + b"\xff" * (extra // 255) + bytes([extra % 255])


def test_lz4_stops_at_the_declared_size_before_copying() -> None:
    block = lz4_bomb(40 << 20)  # claims 40 MiB
    tracemalloc.start()
    try:
        out = lz4_block(block, 4096)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == b"a" * 4096
    # The block itself is 160 KiB; the decoder may hold the output, never the claimed match.
    assert peak < len(block) + (256 << 10), peak


def test_lz4_overlapping_match_copies_the_pattern() -> None:
    # "ab", then a match of 10 at offset 2 (overlapping), then the last literals "z".
    block = bytes([0x26]) + b"ab" + bytes([2, 0]) + bytes([0x10]) + b"z"
    assert lz4_block(block, 100) == b"ab" * 6 + b"z"
    assert lz4_block(block, 7) == b"abababa"


def _lz4_entry(arch: int, declared: int, payload: bytes) -> bytes:
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, 2, 0x0101, 64, len(payload))
    struct.pack_into("<I", head, 0x1C, arch)
    struct.pack_into("<Q", head, 0x28, 1 | fatbin.FLAG_LZ4)
    struct.pack_into("<Q", head, 0x38, declared)
    return bytes(head) + payload


def test_one_file_decodes_at_most_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 60 LZ4 stub entries, each claiming 16 KiB: one file may decode DECODE_MAX in all.
    payload = lz4_bomb(1 << 20)
    payload += bytes(-len(payload) % 8)
    entries = b"".join(_lz4_entry(86, 16 << 10, payload) for _ in range(60))
    path = tmp_path / "bombs.fatbin"
    path.write_bytes(struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(entries)) + entries)
    decoded: list[int] = []
    real = environment.lz4_block

    def counting(data: bytes, size: int) -> bytes:
        out = real(data, size)
        decoded.append(len(out))
        return out

    monkeypatch.setattr(environment, "lz4_block", counting)
    monkeypatch.setattr(environment, "DECODE_MAX", 100 << 10, raising=False)
    reports = inspect_paths([path])
    fd = os.open(path, os.O_RDONLY)
    try:
        device = environment._device_details(fd, reports)
    finally:
        os.close(fd)
    assert 0 < sum(decoded) <= 100 << 10, sum(decoded)
    # Entries past the budget make no claim: they count as code, as unread entries do.
    assert [str(c) for c in device.sass] == ["8.6"]


# --- section names, DT_NEEDED strings -----------------------------------------------------------


def elf_with_names(sections: int, table: int) -> bytes:
    """An ELF64 whose ``sections`` section headers name offsets into a ``table``-byte name
    table that holds no NUL at all."""
    names = b"n" * table
    shoff = 64 + table
    header = bytearray(64)
    header[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, sections, 0)
    rows = struct.pack("<IIQQQQ", 0, 3, 0, 0, 64, table) + bytes(24)
    rows += b"".join(
        struct.pack("<IIQQQQ", i * 64, 1, 0, 0, 64, 8) + bytes(24) for i in range(1, sections)
    )
    return bytes(header) + names + rows


def test_section_names_without_nul_cost_at_most_name_max_each() -> None:
    # Issue 52: 2,500 names of 256 KiB took 670 MB; here 400 (100 MB before the bound).
    data = elf_with_names(400, 256 << 10)
    tracemalloc.start()
    try:
        headers = section_headers(data, 0, len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(headers) == 400
    assert max(len(h.name) for h in headers) <= elf.NAME_MAX
    assert peak < (256 << 10) + 400 * 4 * elf.NAME_MAX, peak


def test_a_5000_digit_cudart_is_no_runtime() -> None:
    huge = "libcudart.so." + "9" * 5000
    assert cuda_majors_linked([huge]) == ()
    assert cuda_majors_linked(["libcudart.so.13"]) == (13,)
    lib = Library("/env/libx.so", "p", needed=(huge,))
    assert diagnose([lib], {}, [], _driver()).packages == ()


def _driver() -> Any:
    from capplan.adapters.kb import load_kb
    from capplan.core.families.cuda.doctor import driver_facts

    return driver_facts(load_kb(), None)


# --- notes --------------------------------------------------------------------------------------


def elf_with_notes(headers: int) -> bytes:
    """An ELF64 whose ``headers`` PT_NOTE program headers all point at one 64 KiB region of
    empty notes (12 bytes each: 5,461 of them)."""
    region = 64 << 10
    phoff = 64
    data_at = phoff + headers * 56
    header = bytearray(64)
    header[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<HHI", header, 0x10, 3, 62, 1)
    struct.pack_into("<Q", header, 0x20, phoff)
    struct.pack_into("<HHHH", header, 0x34, 64, 56, headers, 0)
    table = struct.pack("<IIQQQQQQ", 4, 4, data_at, 0, 0, region, region, 4) * headers
    return bytes(header) + table + bytes(region)


class _Counting:
    """``struct`` as environment.py uses it, counting note headers unpacked (format ``III``)."""

    def __init__(self) -> None:
        self.notes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(struct, name)

    def unpack_from(self, fmt: str, *args: Any) -> Any:
        if fmt.endswith("III"):
            self.notes += 1
        return struct.unpack_from(fmt, *args)


def test_note_headers_naming_one_region_walk_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 52: 4,096 headers at one 64 KiB region walked 16.7 M notes; here 256 headers
    # (1.4 M notes before).
    path = tmp_path / "libnotes.so"
    path.write_bytes(elf_with_notes(256))
    counting = _Counting()
    monkeypatch.setattr(environment, "struct", counting)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert environment.elf_x86_isa_needed(fd) is None
    finally:
        os.close(fd)
    assert 0 < counting.notes <= 4096, counting.notes


# --- static archives ----------------------------------------------------------------------------


def _ar_header(name: str, size: str) -> bytes:
    fields = (name.ljust(16), "0".ljust(12), "0".ljust(6), "0".ljust(6), "644".ljust(8))
    return "".join(fields).encode("latin-1") + size.encode("latin-1").ljust(10) + b"`\n"


@pytest.mark.parametrize(
    "body",
    [
        _ar_header("a.o/", "-60") + b"x" * 100,  # a negative size: looped for ever
        _ar_header("#1/abc", "10") + b"x" * 10,  # a BSD name length that is no number
        _ar_header("#1/99", "10") + b"x" * 10,  # a BSD name longer than its member
        _ar_header("a.o/", "\xb2") + b"x" * 10,  # a size in superscript digits
    ],
)
def test_ar_headers_are_ascii_digits(tmp_path: Path, body: bytes) -> None:
    path = tmp_path / "lib.a"
    path.write_bytes(b"!<arch>\n" + body)
    with at_most(20, "an archive"):
        (report,) = inspect_paths([tmp_path])
    assert report.partial and "corrupt static archive" in report.problems[0]


def test_a_gnu_long_name_offset_in_superscript_digits_is_a_plain_name(tmp_path: Path) -> None:
    path = tmp_path / "lib.a"
    table = _ar_header("//", "4") + b"ab/\n"
    member = _ar_header("/\xb2", "8") + b"\x7fELF\x02\x01\x01\x00"
    path.write_bytes(b"!<arch>\n" + table + member)
    (report,) = inspect_paths([path])  # was int('²'): exit 1
    assert report.path.endswith("!/\xb2")


# --- metadata nested too deeply -----------------------------------------------------------------


def test_conda_metadata_nested_too_deeply_attributes_nothing(tmp_path: Path) -> None:
    meta = tmp_path / "conda-meta"
    meta.mkdir()
    (meta / "deep-1.0-0.json").write_text("[" * 200_000 + "]" * 200_000)
    (meta / "ok-1.0-0.json").write_text(json.dumps({"name": "ok", "files": ["lib/libok.so"]}))
    owners: dict[str, str] = {}
    packages: dict[str, Any] = {}
    environment._conda_packages(tmp_path, owners, packages)  # was RecursionError (exit 6)
    assert list(packages) == ["conda:ok"]
    assert list(owners.values()) == ["conda:ok"]


def test_an_interpreter_printing_deep_json_is_left_out(tmp_path: Path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nhead -c 50000 /dev/zero | tr '\\0' '['\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    sources = environment.default_sources({"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert sources == []
