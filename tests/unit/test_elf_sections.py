"""The struct-based ELF section reader of `capplan inspect` (core/binaries/elf.py), checked
against pyelftools as the reference: real ELF files of this machine (64-bit little-endian
executables, libraries and objects, a 32-bit object from objcopy), synthetic files of every
class and byte order (big-endian included), extended section numbering, and corrupt headers,
which must end as a "sections unknown" problem and never as an exception."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.core.binaries.elf import ElfError, read_sections, section_headers

REAL = [
    Path("/bin/true"),
    Path("/lib/x86_64-linux-gnu/libc.so.6"),
    Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
]


def _reference(data: bytes) -> list[tuple[str, int, int, int, int]]:
    """(name, type, flags, offset, size) of every section, as pyelftools reads them."""
    import io

    elf = ELFFile(io.BytesIO(data))
    names = elf.get_section(elf.get_shstrndx())
    out = []
    for index in range(elf.num_sections()):
        header = elf._get_section_header(index)
        out.append(
            (
                names.get_string(header["sh_name"]) or "?",
                _raw_type(elf, index),
                int(header["sh_flags"]),
                int(header["sh_offset"]),
                int(header["sh_size"]),
            )
        )
    return out


def _raw_type(elf: ELFFile, index: int) -> int:
    """sh_type as a number (pyelftools gives known types as names)."""
    offset = elf["e_shoff"] + index * elf["e_shentsize"]
    order = "<" if elf.little_endian else ">"
    elf.stream.seek(offset + 4)
    return int(struct.unpack(order + "I", elf.stream.read(4))[0])


def _ours(data: bytes) -> list[tuple[str, int, int, int, int]]:
    return [
        (h.name, h.type, h.flags, h.offset, h.size) for h in section_headers(data, 0, len(data))
    ]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_files_read_as_pyelftools_reads_them(path: Path) -> None:
    data = path.read_bytes()
    assert _ours(data) == _reference(data)
    assert len(_ours(data)) > 10


def test_a_32_bit_object_reads_as_pyelftools_reads_it(tmp_path: Path) -> None:
    if shutil.which("gcc") is None or shutil.which("objcopy") is None:
        pytest.skip("needs gcc and objcopy (Debian's build-essential)")
    source = tmp_path / "x.c"
    source.write_text("int x = 1; int f(void) { return x; }\n")
    subprocess.run(["gcc", "-c", str(source), "-o", str(tmp_path / "x64.o")], check=True)
    subprocess.run(
        ["objcopy", "-O", "elf32-i386", str(tmp_path / "x64.o"), str(tmp_path / "x32.o")],
        check=True,
    )
    data = (tmp_path / "x32.o").read_bytes()
    assert data[4] == 1  # ELFCLASS32
    assert _ours(data) == _reference(data)


def _synthetic(
    elf_class: int, order: str, sections: list[tuple[str, int, bytes]], *, extended: bool = False
) -> bytes:
    """A minimal ELF: header, section contents, the name table, then the section table
    (section 0 null). ``extended``: e_shnum = 0 and e_shstrndx = SHN_XINDEX, the real values
    in section 0's sh_size and sh_link."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    header_size = 64 if elf_class == 2 else 52
    body = b""
    placed = []
    for _name, _type, content in sections:
        placed.append(header_size + len(body))
        body += content
    names_at = header_size + len(body)
    body += names
    shoff = header_size + len(body)
    shdr = order + ("IIQQQQIIQQ" if elf_class == 2 else "IIIIIIIIII")
    count = len(sections) + 2
    table = struct.pack(
        shdr, 0, 0, 0, 0, 0, count if extended else 0, count - 1 if extended else 0, 0, 0, 0
    )
    name_at = 1
    for (name, kind, content), at in zip(sections, placed, strict=True):
        table += struct.pack(shdr, name_at, kind, 2, 0, at, len(content), 0, 0, 1, 0)
        name_at += len(name) + 1
    table += struct.pack(shdr, name_at, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([elf_class, 1 if order == "<" else 2, 1]) + b"\0" * 9
    shentsize = struct.calcsize(shdr)
    shnum, shstrndx = (0, 0xFFFF) if extended else (count, count - 1)
    if elf_class == 2:
        rest = struct.pack(
            order + "HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, shentsize, shnum, shstrndx
        )
    else:
        rest = struct.pack(
            order + "HHIIIIIHHHHHH", 1, 3, 1, 0, 0, shoff, 0, 52, 0, 0, shentsize, shnum, shstrndx
        )
    return ident + rest + body + table


SECTIONS = [(".text", 1, b"\x90" * 16), (".nv_fatbin", 1, b"\0" * 24), (".bss", 8, b"")]


@pytest.mark.parametrize("elf_class", [1, 2])
@pytest.mark.parametrize("order", ["<", ">"])
def test_every_class_and_byte_order(elf_class: int, order: str) -> None:
    data = _synthetic(elf_class, order, SECTIONS)
    assert _ours(data) == _reference(data)
    assert [name for name, *_ in _ours(data)] == ["?", ".text", ".nv_fatbin", ".bss", ".shstrtab"]


def test_extended_section_numbering() -> None:
    data = _synthetic(2, "<", SECTIONS, extended=True)
    assert [name for name, *_ in _ours(data)] == ["?", ".text", ".nv_fatbin", ".bss", ".shstrtab"]


@pytest.mark.parametrize(
    ("offset", "value", "why"),
    [
        (4, b"\x07", "unknown ELF class"),
        (0x3A, struct.pack("<H", 8), "smaller than 64"),  # e_shentsize
        (0x3C, struct.pack("<H", 60000), "past the end"),  # e_shnum
        (0x3E, struct.pack("<H", 2), "not a string table"),  # e_shstrndx -> .nv_fatbin
        (0x3E, struct.pack("<H", 40), "out of range"),
    ],
)
def test_corrupt_headers_say_what_is_wrong(offset: int, value: bytes, why: str) -> None:
    data = bytearray(_synthetic(2, "<", SECTIONS))
    data[offset : offset + len(value)] = value
    with pytest.raises(ElfError, match=why):
        section_headers(bytes(data), 0, len(data))
    sections = read_sections(bytes(data), 0, len(data))
    assert sections.spans == () and sections.no_device_code == ()
    assert sections.problems and "sections unknown" in sections.problems[0]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_damage_is_a_problem_never_an_exception(data: st.DataObject) -> None:
    raw = bytearray(
        _synthetic(
            data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from(["<", ">"])), SECTIONS
        )
    )
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    blob = bytes(raw[:cut])
    sections = read_sections(blob, 0, len(blob))  # must not raise
    for start, end, _name in sections.spans:
        assert 0 <= start <= end
