"""The ELF section table, as every family's binary reader sees a file: which section holds an
offset, which sections can hold no device code, whether the table could be read at all.

Read with struct from the header's e_shoff/e_shentsize/e_shnum/e_shstrndx (the ELF gABI), the
extended numbering included; only the table and the section names are read. Pure: works on any
:data:`~capplan.core.binaries.buffers.Buffer`.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from typing import NamedTuple

from capplan.core.binaries.buffers import Buffer

__all__ = [
    "NAMES_MAX",
    "NAME_MAX",
    "NO_SECTION",
    "ElfError",
    "ElfSections",
    "SectionHeader",
    "complement",
    "read_sections",
    "section_headers",
]

NO_SECTION = "(none)"


class ElfSections(NamedTuple):
    starts: tuple[int, ...]
    spans: tuple[tuple[int, int, str], ...]  # (start, end, name), relative to the ELF start
    problems: tuple[str, ...]
    # (start, end) of sections whose kind cannot hold device code (symbol and string tables,
    # relocations, machine code, unwind tables), relative to the ELF start: never searched.
    no_device_code: tuple[tuple[int, int], ...] = ()
    # False when the section table is missing or unreadable: nothing is known about the bytes.
    known: bool = True
    # (start, end) of `.dynstr`, relative to the ELF start, when there is one.
    dynstr: tuple[int, int] | None = None

    def name_at(self, offset: int) -> str:
        index = bisect.bisect_right(self.starts, offset) - 1
        # Sections do not overlap in a sane ELF; look back a little in case a zero-size or odd one
        # sorts in between.
        for start, end, name in reversed(self.spans[max(0, index - 3) : index + 1]):
            if start <= offset < end:
                return name
        return NO_SECTION


def read_sections(buf: Buffer, start: int, end: int) -> ElfSections:
    size = end - start
    spans: list[tuple[int, int, str]] = []
    problems: list[str] = []
    skip: list[tuple[int, int]] = []
    dynstr: tuple[int, int] | None = None
    try:
        for header in section_headers(buf, start, end):
            if header.type == _SHT_NOBITS or not header.size:
                continue
            name, offset, length = header.name, header.offset, header.size
            if offset + length > size:
                problems.append(
                    f"section {name} ends {offset + length - size} bytes past the end of the "
                    "file (truncated?)"
                )
            spans.append((offset, offset + length, name))
            if name == ".dynstr" and header.type == _SHT_STRTAB:
                dynstr = (offset, min(offset + length, size))
            if header.type in _NO_DEVICE_CODE_TYPES or (
                header.type == _SHT_PROGBITS
                and (header.flags & _SHF_EXECINSTR or name in _NO_DEVICE_CODE_NAMES)
            ):
                skip.append((offset, min(offset + length, size)))
    except (ElfError, struct.error) as error:
        problems.append(f"ELF section table unreadable ({error}); sections unknown")
    spans.sort()
    known = bool(spans) and not any("unreadable" in p for p in problems)
    if not known:
        skip = []  # sections unknown: search everything
    return ElfSections(
        tuple(s[0] for s in spans),
        tuple(spans),
        tuple(problems),
        tuple(sorted(skip)),
        known,
        dynstr,
    )


class ElfError(Exception):
    """The ELF header or section table cannot be read (the message says where)."""


class SectionHeader(NamedTuple):
    name: str
    type: int
    flags: int
    offset: int  # relative to the ELF start
    size: int


# Section header layouts (the ELF gABI), by EI_CLASS: sh_name, sh_type, sh_flags, sh_addr,
# sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize.
_SHDR = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}
_SHN_XINDEX = 0xFFFF
_MAX_SECTIONS = 1 << 20  # far above any real file; a corrupt count must not loop for ages
# A section name is cut at this many bytes (nvcc's longest, a template kernel's mangled
# ``.text._Z...``, are some hundreds): one file's names then hold at most 1 KiB per section.
NAME_MAX = 1024
# All of one file's section names together: past this the table is taken as unreadable.
NAMES_MAX = 16 << 20


def section_headers(buf: Buffer, start: int, end: int) -> list[SectionHeader]:
    """The section headers of the ELF file at ``buf[start:end]``, read with struct from the
    header's e_shoff/e_shentsize/e_shnum/e_shstrndx (with the extended numbering in section 0
    when e_shnum or e_shstrndx overflow). Only the table and the name strings are read."""
    size = end - start
    ident = bytes(buf[start : start + 16])
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        raise ElfError("not an ELF header")
    elf_class, encoding = ident[4], ident[5]
    if elf_class not in _SHDR or encoding not in (1, 2):
        raise ElfError(f"unknown ELF class {elf_class} or data encoding {encoding}")
    order = "<" if encoding == 1 else ">"
    # e_shoff, then e_flags, e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx.
    layout, fields_at, header_size = (
        (order + "QIHHHHHH", 40, 64) if elf_class == 2 else (order + "IIHHHHHH", 32, 52)
    )
    if size < header_size:
        raise ElfError("the ELF header is cut short")
    shoff, _flags, _eh, _phentsize, _phnum, shentsize, shnum, shstrndx = struct.unpack_from(
        layout, buf, start + fields_at
    )
    if shoff == 0:
        return []  # no section table: nothing to name
    entry = struct.Struct(order + _SHDR[elf_class])
    if shentsize < entry.size:
        raise ElfError(f"section header size {shentsize} is smaller than {entry.size}")

    def raw(index: int) -> tuple[int, ...]:
        at = shoff + index * shentsize
        if at + entry.size > size:
            raise ElfError(f"section header {index} lies past the end of the file")
        return entry.unpack_from(buf, start + at)

    if shnum == 0 or shstrndx == _SHN_XINDEX:
        first = raw(0)
        shnum = shnum or first[5]
        if shstrndx == _SHN_XINDEX:
            shstrndx = first[6]
    if shnum > _MAX_SECTIONS:
        raise ElfError(f"{shnum} sections is not a real section count")
    headers = [raw(index) for index in range(shnum)]
    if not 0 <= shstrndx < shnum:
        raise ElfError(f"the section-name table index {shstrndx} is out of range")
    _, names_type, _, _, names_offset, names_size, *_ = headers[shstrndx]
    if names_type != _SHT_STRTAB:
        raise ElfError("the section-name table is not a string table")
    if names_offset + names_size > size:
        raise ElfError("the section-name table lies past the end of the file")
    names = bytes(buf[start + names_offset : start + names_offset + names_size])
    known: dict[int, str] = {}
    total = [0]

    def name_of(at: int) -> str:
        # The NUL is looked for within NAME_MAX bytes, and each offset is decoded once: 2,500
        # sections naming 256 KiB without a NUL no longer copy the table's tail each.
        name = known.get(at)
        if name is None:
            stop = names.find(b"\0", at, at + NAME_MAX)
            text = names[at : stop if stop >= 0 else at + NAME_MAX] if at < len(names) else b""
            total[0] += len(text)
            if total[0] > NAMES_MAX:
                raise ElfError(f"its section names hold more than {NAMES_MAX >> 20} MiB")
            name = known[at] = text.decode("utf-8", errors="replace") or "?"
        return name

    return [SectionHeader(name_of(h[0]), h[1], h[2], h[4], h[5]) for h in headers]


# Section kinds that never hold fatbin containers or offload bundles: searching them (on
# libtorch_cuda.so 150 MB of .text, .strtab, .symtab, .dynstr, .rela.dyn, .eh_frame) only costs.
# (ELF gABI section types: SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_HASH, SHT_DYNAMIC, SHT_REL,
# SHT_DYNSYM, and GNU's hash and symbol-version tables.)
_NO_DEVICE_CODE_TYPES = frozenset(
    {2, 3, 4, 5, 6, 9, 11, 0x6FFFFFF6, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF}
)
_SHT_PROGBITS = 1
_SHT_STRTAB = 3
_SHT_NOBITS = 8
_NO_DEVICE_CODE_NAMES = frozenset({".eh_frame", ".eh_frame_hdr", ".gcc_except_table"})
_SHF_EXECINSTR = 0x4


def complement(start: int, end: int, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` outside every one of ``ranges`` (absolute offsets)."""
    parts: list[tuple[int, int]] = []
    cursor = start
    for r_start, r_end in [*sorted(ranges), (end, end)]:
        if r_start > cursor:
            parts.append((cursor, min(r_start, end)))
        cursor = max(cursor, r_end)
        if cursor >= end:
            break
    return parts
