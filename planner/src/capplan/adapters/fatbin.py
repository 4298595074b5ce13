"""Inspect binaries for CUDA device code: ELF files, static archives, wheels and directories.

AMD device code is reported beside it, in separate ``amd*`` fields (issue 16 groundwork): clang
offload bundles (plain, or compressed ``CCOB``) anywhere in a file, bare offload-bundle files,
and bare AMDGPU ELF code objects (:mod:`capplan.core.families.rocm.amdgpu`). The CUDA fields never
change.

Files are mapped with mmap and scanned in place by :mod:`capplan.core.families.cuda.fatbin`; each
container is
attributed to the ELF section holding it (read from the section table with struct). Static archive
members are scanned in place inside the archive's mapping; wheel members are read into memory
from the zip (never extracted to disk). Nothing is decompressed beyond the zip layer: fatbin
headers are never compressed.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import shutil
import stat
import struct
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from capplan.adapters.files import open_regular, special_kind
from capplan.adapters.memsearch import finder, map_file
from capplan.adapters.pool import map_files
from capplan.adapters.zipmembers import ZIP_ERRORS, check_member, open_member
from capplan.core.binaries.buffers import Buffer, Finder, Reader
from capplan.core.families.cuda import fatbin
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import Verdict, how_runs
from capplan.core.families.rocm import amdgpu
from capplan.core.families.rocm.target import AmdTarget
from capplan.core.model.runs import RunLevel
from capplan.errors import BinaryFormatError, InvalidInputError, shorten

__all__ = [
    "AmdLocated",
    "BinaryLimits",
    "FileReport",
    "LocatedContainer",
    "binary_limits",
    "inspect_paths",
]

_ELF_MAGIC = b"\x7fELF"
_AR_MAGIC = b"!<arch>\n"
_THIN_AR_MAGIC = b"!<thin>\n"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_SNIFF = 24  # the longest magic: clang's __CLANG_OFFLOAD_BUNDLE__
# Sections that hold nothing but fatbin containers: bytes there outside any valid container mean
# a corrupt container (CUDA.md: `.nv_fatbin`, and `__nv_relfatbin` for relocatable device code).
_FATBIN_SECTIONS = frozenset({".nv_fatbin", "__nv_relfatbin"})
NO_SECTION = "(none)"
_PAGE = mmap.PAGESIZE
_WHEEL_CHUNK = 8 << 20
# A deflated wheel member up to this size is inflated in memory; a larger one into a temporary
# file that is mapped and released as the scan passes (memory stays bounded).
_IN_MEMORY_MEMBER = 48 << 20


class LocatedContainer(NamedTuple):
    """A container and where it sits: ``offset`` is relative to the start of its ELF file."""

    section: str
    offset: int
    container: fatbin.Container
    base: int  # where the ELF file starts in the scanned buffer (archive members)

    def entries_json(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for entry in self.container.entries:
            row = entry.to_json(self.base)
            row["container"] = self.offset
            row["section"] = self.section
            rows.append(row)
        return rows


def _sorted_unique(caps: Sequence[Capability] | set[Capability]) -> tuple[Capability, ...]:
    return tuple(sorted(set(caps)))


class AmdLocated(NamedTuple):
    """An AMD offload bundle and the ELF section holding it (offsets relative to the file)."""

    section: str
    bundle: amdgpu.Bundle
    base: int

    def entries_json(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for entry in self.bundle.entries:
            row = entry.to_json(self.base)
            row["bundle"] = self.bundle.offset - self.base
            row["section"] = self.section
            row["compression"] = self.bundle.compression or "none"
            rows.append(row)
        return rows


@dataclass(frozen=True, slots=True)
class FileReport:
    """What one ELF file (or archive/wheel member, named ``outer!member``) holds."""

    path: str
    sass: tuple[Capability, ...] = ()
    ptx: tuple[Capability, ...] = ()
    lto: tuple[Capability, ...] = ()
    compression: tuple[str, ...] = ()
    containers: int = 0
    sections: dict[str, int] = field(default_factory=dict)
    partial: bool = False
    problems: tuple[str, ...] = ()
    located: tuple[LocatedContainer, ...] = ()
    # AMD device code, kept apart from the CUDA fields above.
    amd: tuple[AmdTarget, ...] = ()  # gfx targets in bundles and bare code objects
    amd_code_object: AmdTarget | None = None  # the file itself is an AMDGPU ELF for this target
    amd_located: tuple[AmdLocated, ...] = ()
    amd_problems: tuple[str, ...] = ()

    @property
    def has_device_code(self) -> bool:
        return bool(self.containers)

    @property
    def has_amd_code(self) -> bool:
        return bool(self.amd or self.amd_located or self.amd_code_object or self.amd_problems)

    def amd_json(self, entries: bool = False) -> dict[str, Any]:
        bundles = [loc.bundle for loc in self.amd_located]
        data: dict[str, Any] = {
            "targets": [str(t) for t in self.amd],
            "code_object": str(self.amd_code_object) if self.amd_code_object else None,
            "bundles": len(bundles),
            "compression": sorted({b.compression for b in bundles if b.compression}),
            # Compressed bundles whose targets were not read (zstd): their targets are unknown.
            "unopened": sum(1 for b in bundles if not b.opened),
            "sections": dict(sorted(Counter(loc.section for loc in self.amd_located).items())),
            "problems": list(self.amd_problems),
        }
        if entries:
            data["entries"] = [row for loc in self.amd_located for row in loc.entries_json()]
        return data

    def to_json(self, entries: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "sass": [c.sm for c in self.sass],
            "ptx": [c.compute for c in self.ptx],
            "lto": [f"lto_{c.cmake}" for c in self.lto],
            "compression": list(self.compression),
            "containers": self.containers,
            "sections": dict(sorted(self.sections.items())),
            "partial": self.partial,
            "problems": list(self.problems),
        }
        if entries:
            data["entries"] = [row for loc in self.located for row in loc.entries_json()]
        data["amd"] = self.amd_json(entries)
        return data


class BinaryLimits(NamedTuple):
    """The capabilities a prebuilt binary supports: its SASS plus what its PTX can JIT to."""

    path: str
    sass: tuple[Capability, ...]
    ptx: tuple[Capability, ...]
    supported: tuple[Capability, ...]
    verdicts: tuple[tuple[Capability, Verdict], ...]  # every candidate device, in order

    @property
    def levels(self) -> dict[Capability, RunLevel]:
        return {cap: verdict.level for cap, verdict in self.verdicts}

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "sass": [c.sm for c in self.sass],
            "ptx": [c.compute for c in self.ptx],
            "supported": [str(c) for c in self.supported],
            # A list, not a mapping: JSON keys would sort as strings ("10.0" before "7.5").
            "levels": [
                {
                    "capability": str(cap),
                    "runs": verdict.level.value,
                    "via": str(verdict.via) if verdict.via else None,
                }
                for cap, verdict in self.verdicts
            ],
        }


# --- ELF section table -------------------------------------------------------------------------


class _Sections(NamedTuple):
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


def _read_sections(buf: Buffer, start: int, end: int) -> _Sections:
    size = end - start
    spans: list[tuple[int, int, str]] = []
    problems: list[str] = []
    skip: list[tuple[int, int]] = []
    dynstr: tuple[int, int] | None = None
    try:
        for header in _section_headers(buf, start, end):
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
    except (_ElfError, struct.error) as error:
        problems.append(f"ELF section table unreadable ({error}); sections unknown")
    spans.sort()
    known = bool(spans) and not any("unreadable" in p for p in problems)
    if not known:
        skip = []  # sections unknown: search everything
    return _Sections(
        tuple(s[0] for s in spans),
        tuple(spans),
        tuple(problems),
        tuple(sorted(skip)),
        known,
        dynstr,
    )


class _ElfError(Exception):
    """The ELF header or section table cannot be read (the message says where)."""


class _SectionHeader(NamedTuple):
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


def _section_headers(buf: Buffer, start: int, end: int) -> list[_SectionHeader]:
    """The section headers of the ELF file at ``buf[start:end]``, read with struct from the
    header's e_shoff/e_shentsize/e_shnum/e_shstrndx (with the extended numbering in section 0
    when e_shnum or e_shstrndx overflow). Only the table and the name strings are read."""
    size = end - start
    ident = bytes(buf[start : start + 16])
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        raise _ElfError("not an ELF header")
    elf_class, encoding = ident[4], ident[5]
    if elf_class not in _SHDR or encoding not in (1, 2):
        raise _ElfError(f"unknown ELF class {elf_class} or data encoding {encoding}")
    order = "<" if encoding == 1 else ">"
    # e_shoff, then e_flags, e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx.
    layout, fields_at, header_size = (
        (order + "QIHHHHHH", 40, 64) if elf_class == 2 else (order + "IIHHHHHH", 32, 52)
    )
    if size < header_size:
        raise _ElfError("the ELF header is cut short")
    shoff, _flags, _eh, _phentsize, _phnum, shentsize, shnum, shstrndx = struct.unpack_from(
        layout, buf, start + fields_at
    )
    if shoff == 0:
        return []  # no section table: nothing to name
    entry = struct.Struct(order + _SHDR[elf_class])
    if shentsize < entry.size:
        raise _ElfError(f"section header size {shentsize} is smaller than {entry.size}")

    def raw(index: int) -> tuple[int, ...]:
        at = shoff + index * shentsize
        if at + entry.size > size:
            raise _ElfError(f"section header {index} lies past the end of the file")
        return entry.unpack_from(buf, start + at)

    if shnum == 0 or shstrndx == _SHN_XINDEX:
        first = raw(0)
        shnum = shnum or first[5]
        if shstrndx == _SHN_XINDEX:
            shstrndx = first[6]
    if shnum > _MAX_SECTIONS:
        raise _ElfError(f"{shnum} sections is not a real section count")
    headers = [raw(index) for index in range(shnum)]
    if not 0 <= shstrndx < shnum:
        raise _ElfError(f"the section-name table index {shstrndx} is out of range")
    _, names_type, _, _, names_offset, names_size, *_ = headers[shstrndx]
    if names_type != _SHT_STRTAB:
        raise _ElfError("the section-name table is not a string table")
    if names_offset + names_size > size:
        raise _ElfError("the section-name table lies past the end of the file")
    names = bytes(buf[start + names_offset : start + names_offset + names_size])

    def name_of(at: int) -> str:
        stop = names.find(b"\0", at)
        text = names[at : stop if stop >= 0 else len(names)] if at < len(names) else b""
        return text.decode("utf-8", errors="replace") or "?"

    return [_SectionHeader(name_of(h[0]), h[1], h[2], h[4], h[5]) for h in headers]


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


def _complement(start: int, end: int, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
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


# --- One ELF file ------------------------------------------------------------------------------


class _Access(NamedTuple):
    """How the scans read a buffer: ``find`` searches it (adapters/memsearch.py), ``read`` reads
    its headers (:func:`_header_reader`); None for either: the buffer's own."""

    find: Finder | None = None
    read: Reader | None = None


@contextlib.contextmanager
def _mapped(handle: BinaryIO) -> Iterator[tuple[mmap.mmap, _Access]]:
    """The file ``handle`` has open, mapped, with how to search it and read its headers."""
    with map_file(handle) as mapped, finder(mapped) as find:
        yield mapped, _Access(find, _header_reader(handle))


def _header_reader(handle: BinaryIO) -> Reader | None:
    """Read headers of the file ``handle`` has open (and that is mapped) with ``pread``: the
    fatbin walk then never faults the mapping's pages in, one per entry a payload apart, and has
    none to release. On libtorch_cuda.so (2,975 entries in 475 containers) the scan of the
    range holding `.rodata` and `.nv_fatbin` took 28-51 ms through the mapping and takes 19-21
    ms this way, most of it validating the headers. None where the system has no ``pread``:
    the walk then reads the mapping."""
    pread: Callable[[int, int, int], bytes] | None = getattr(os, "pread", None)
    if pread is None:
        return None
    fd = handle.fileno()

    def read(offset: int, size: int) -> bytes:
        return pread(fd, size, offset)

    return read


def _release_for(buf: Buffer) -> Callable[[int, int], None] | None:
    """Drop scanned pages of a file mapping so they stop counting towards the RSS."""
    if not isinstance(buf, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return None

    def release(a: int, b: int) -> None:
        start = a - a % _PAGE
        if b - start >= _PAGE:
            buf.madvise(mmap.MADV_DONTNEED, start, b - start)

    return release


def _gap_problems(
    buf: Buffer,
    base: int,
    sections: _Sections,
    located: list[LocatedContainer],
    resume: dict[int, int],
) -> list[str]:
    """Non-zero bytes of a fatbin-only section outside every container: a corrupt container."""
    problems: list[str] = []
    for start, end, name in sections.spans:
        if name not in _FATBIN_SECTIONS:
            continue
        cursor = base + start
        stop = min(base + end, len(buf))
        uncovered = 0
        first_bad = -1
        inside = sorted(
            (loc.container.offset, resume[loc.container.offset])
            for loc in located
            if loc.section == name
        )
        for c_start, c_end in [*inside, (stop, stop)]:
            # Zeros (alignment) and empty containers (fatbin.EMPTY_CONTAINER) are no damage.
            gap = bytes(buf[cursor:c_start]).replace(fatbin.EMPTY_CONTAINER, b"")
            if c_start > cursor and gap.strip(b"\0"):
                uncovered += c_start - cursor
                if first_bad < 0:
                    first_bad = cursor
            cursor = max(cursor, c_end)
        if uncovered:
            problems.append(
                f"{uncovered} bytes of {name} from {first_bad - base:#x} are in no valid fatbin "
                "container (corrupt header?)"
            )
    return problems


def _with_amd(
    report: FileReport,
    buf: Buffer,
    start: int,
    end: int,
    section_of: Callable[[int], str],
    code_object: amdgpu.AmdCodeObject | None = None,
    explained: Sequence[tuple[int, int]] = (),
    find: Finder | None = None,
) -> FileReport:
    """``report`` with the AMD device code found in ``buf[start:end]`` added.

    ``explained``: absolute byte ranges that valid NVIDIA containers' headers already account
    for (``[offset, end)``); no AMD bundle sits inside one, so the search skips them.
    """
    release = _release_for(buf)
    bundles: list[amdgpu.Bundle] = []
    cursor = start
    for skip_start, skip_end in [*sorted(explained), (end, end)]:
        if skip_start > cursor:
            bundles.extend(
                amdgpu.scan_amd(buf, cursor, min(skip_start, end), release=release, find=find)
            )
        cursor = max(cursor, skip_end)
    located = tuple(AmdLocated(section_of(b.offset - start), b, start) for b in bundles)
    targets: set[AmdTarget] = {t for b in bundles for t in b.targets}
    problems = [p for b in bundles for p in b.problems]
    if code_object is not None:
        problems.extend(code_object.problems)
        if code_object.target is not None:
            targets.add(code_object.target)
    if not located and code_object is None:
        return report
    return replace(
        report,
        amd=tuple(sorted(targets)),
        amd_code_object=code_object.target if code_object else None,
        amd_located=located,
        amd_problems=tuple(problems),
    )


def _inspect_elf(buf: Buffer, start: int, end: int, name: str, access: _Access) -> FileReport:
    find = access.find
    sections = _read_sections(buf, start, end)
    code_object = amdgpu.amdgpu_elf_target(buf, start, end)
    if code_object is not None:
        # A bare AMDGPU code object holds no fatbin and no bundle: its e_flags say it all.
        return _with_amd(FileReport(path=name), buf, start, start, sections.name_at, code_object)
    skipped = [(start + a, start + b) for a, b in sections.no_device_code]
    containers: list[fatbin.Container] = []
    rejected: list[fatbin.Rejected] = []
    for r_start, r_end in _complement(start, end, skipped):
        part = fatbin.scan(
            buf, r_start, r_end, release=_release_for(buf), find=find, read=access.read
        )
        containers.extend(part.containers)
        rejected.extend(part.rejected)
    result = fatbin.ScanResult(tuple(containers), tuple(rejected))
    located = [
        LocatedContainer(sections.name_at(c.offset - start), c.offset - start, c, start)
        for c in result.containers
    ]
    problems = list(sections.problems)
    for container in result.containers:
        problems.extend(container.problems)
    for miss in result.rejected:
        section = sections.name_at(miss.offset - start)
        if section in _FATBIN_SECTIONS:
            problems.append(f"invalid fatbin container in {section}: {miss.reason}")
    if sections.spans:
        resume = {
            c.offset: (c.end if not c.partial else _partial_end(c)) for c in result.containers
        }
        problems.extend(_gap_problems(buf, start, sections, located, resume))
    explained = [(c.offset, c.end) for c in result.containers if not c.partial] + skipped
    explained.extend(_no_amd_code(buf, start, end, sections, find or buf.find))
    return _with_amd(
        _report(name, located, problems),
        buf,
        start,
        end,
        sections.name_at,
        explained=explained,
        find=find,
    )


# HIP puts a program's offload bundles in `.hip_fatbin` (ROCM.md). A file that links the HIP
# runtime may also load code objects it embeds elsewhere (hipModuleLoadData), so in such a file
# every data section is searched, as is a file whose section table cannot be read.
_AMD_SECTIONS = frozenset({".hip_fatbin"})
_HIP_RUNTIME = b"libamdhip64.so"


def _no_amd_code(
    buf: Buffer, start: int, end: int, sections: _Sections, find: Finder
) -> list[tuple[int, int]]:
    """Absolute ranges of the ELF at ``buf[start:end]`` where no AMD bundle is searched: all but
    `.hip_fatbin` in a file whose sections are known and that does not link the HIP runtime
    (``.dynstr`` names its DT_NEEDED libraries and SONAME). An NVIDIA library is never searched
    for AMD bundles."""
    if not sections.known:
        return []
    if sections.dynstr is not None:
        d_start, d_end = sections.dynstr
        if find(_HIP_RUNTIME, start + d_start, start + d_end) >= 0:
            return []
    hip = [(start + a, start + b) for a, b, name in sections.spans if name in _AMD_SECTIONS]
    return _complement(start, end, hip)


def _partial_end(container: fatbin.Container) -> int:
    if container.entries:
        last = container.entries[-1]
        return last.offset + last.header_size + last.payload_size
    return container.offset + fatbin.CONTAINER_HEADER_SIZE


def _report(name: str, located: list[LocatedContainer], problems: list[str]) -> FileReport:
    sass: set[Capability] = set()
    ptx: set[Capability] = set()
    lto: set[Capability] = set()
    compression: set[str] = set()
    kinds = {fatbin.EntryKind.SASS: sass, fatbin.EntryKind.PTX: ptx, fatbin.EntryKind.LTO: lto}
    for loc in located:
        for entry in loc.container.entries:
            kinds[entry.kind].add(entry.capability)
            compression.add(entry.compression)
    return FileReport(
        path=name,
        sass=_sorted_unique(sass),
        ptx=_sorted_unique(ptx),
        lto=_sorted_unique(lto),
        compression=tuple(sorted(compression)),
        containers=len(located),
        sections=dict(sorted(Counter(loc.section for loc in located).items())),
        partial=bool(problems),
        problems=tuple(problems),
        located=tuple(located),
    )


def _inspect_raw_fatbin(
    buf: Buffer, start: int, end: int, name: str, access: _Access
) -> FileReport:
    """A bare fatbin file (`nvcc -fatbin`): containers only, no ELF around them."""
    result = fatbin.scan(
        buf, start, end, release=_release_for(buf), find=access.find, read=access.read
    )
    located = [LocatedContainer(NO_SECTION, c.offset - start, c, start) for c in result.containers]
    problems = [p for c in result.containers for p in c.problems]
    if not located:
        problems.extend(miss.reason for miss in result.rejected[:1])
        problems = problems or ["no valid fatbin container"]
    return _report(name, located, problems)


def _inspect_raw_amd(
    buf: Buffer, start: int, end: int, name: str, find: Finder | None = None
) -> FileReport:
    """A bare offload bundle file (``clang --cuda-device-only``) or a bare ``CCOB`` file."""
    report = _with_amd(
        FileReport(path=name), buf, start, end, lambda _offset: NO_SECTION, find=find
    )
    if not report.amd_located:
        raise BinaryFormatError(
            f"{name} starts like a clang offload bundle but is not a valid one",
            hint="the file is truncated or corrupt; rebuild it",
        )
    return report


# --- Static archives ---------------------------------------------------------------------------


def _archive_members(
    buf: Buffer, start: int, end: int, name: str
) -> Iterator[tuple[str, int, int]]:
    """(member name, data start, data end) for each regular member of a System V/GNU/BSD ar."""
    pos = start + len(_AR_MAGIC)
    long_names = b""
    while pos + 60 <= end:
        header = bytes(buf[pos : pos + 60])
        if header[58:60] != b"`\n":
            raise BinaryFormatError(
                f"corrupt static archive member header at {pos - start:#x} in {name}",
                hint="the archive is truncated or not a Unix ar archive",
            )
        raw_name = header[0:16].decode("latin-1").rstrip(" ")
        try:
            size = int(header[48:58].decode("ascii").strip() or "0")
        except ValueError:
            raise BinaryFormatError(
                f"corrupt size in static archive member header at {pos - start:#x} in {name}",
                hint="the archive is truncated or not a Unix ar archive",
            ) from None
        data = pos + 60
        data_end = data + size
        member = raw_name
        if raw_name == "//":  # GNU long-name table
            long_names = bytes(buf[data : min(data_end, end)])
        elif raw_name.startswith("#1/"):  # BSD: the name leads the data
            length = int(raw_name[3:] or "0")
            member = bytes(buf[data : data + length]).decode("utf-8", "replace").rstrip("\0")
            data += length
        elif raw_name.startswith("/") and raw_name[1:].isdigit():
            index = int(raw_name[1:])
            member = long_names[index:].split(b"\n", 1)[0].decode("utf-8", "replace").rstrip("/")
        else:
            member = raw_name.rstrip("/")
        if raw_name not in ("/", "//", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED"):
            yield member, data, min(data_end, end)
        if data_end > end:
            return
        pos = data_end + (data_end - start) % 2  # members are 2-byte aligned


# --- Dispatch on content -----------------------------------------------------------------------


def _sniff(buf: Buffer, start: int, end: int) -> str | None:
    head = bytes(buf[start : min(end, start + _SNIFF)])
    if head.startswith(_ELF_MAGIC):
        return "elf"
    if head.startswith(_AR_MAGIC):
        return "ar"
    if head.startswith(_THIN_AR_MAGIC):
        return "thin"
    if head.startswith(fatbin.MAGIC_BYTES):
        return "fatbin"
    if head.startswith(_ZIP_MAGICS):
        return "zip"
    if head.startswith((amdgpu.BUNDLE_MAGIC, amdgpu.CCOB_MAGIC)):
        return "bundle"
    return None


def _inspect_blob(
    buf: Buffer,
    start: int,
    end: int,
    name: str,
    kind: str,
    *,
    keep_empty: bool,
    access: _Access,
) -> list[FileReport]:
    """The reports for ``buf[start:end]``, whose content ``kind`` is (:func:`_sniff`), read as
    ``access`` says (:class:`_Access`)."""
    if kind == "elf":
        report = _inspect_elf(buf, start, end, name, access)
        keep = keep_empty or report.containers or report.partial or report.has_amd_code
        return [report] if keep else []
    if kind == "fatbin":
        return [_inspect_raw_fatbin(buf, start, end, name, access)]
    if kind == "bundle":
        return [_inspect_raw_amd(buf, start, end, name, access.find)]
    if kind == "ar":
        reports: list[FileReport] = []
        for member, m_start, m_end in _archive_members(buf, start, end, name):
            member_kind = _sniff(buf, m_start, m_end)
            if member_kind in ("elf", "fatbin", "bundle"):
                reports.extend(
                    _inspect_blob(
                        buf,
                        m_start,
                        m_end,
                        f"{name}!{member}",
                        member_kind,
                        keep_empty=keep_empty,
                        access=access,
                    )
                )
        return reports
    if kind == "thin":
        raise BinaryFormatError(
            f"{name} is a thin static archive: its members live in other files",
            hint="inspect the member object files themselves",
        )
    raise BinaryFormatError(f"unsupported content in {name}")


def _inspect_wheel(path: Path, name: str) -> list[FileReport]:
    """Every ELF, archive, fatbin or bundle member of a wheel, read member by member (in a
    pool of workers where that pays): a member stored uncompressed is inspected in place in a
    mapping of the wheel; a deflated one is inflated in memory when small, else into an
    anonymous temporary file that is mapped and its pages dropped as the scan passes, so memory
    stays bounded whatever the member's size."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = sorted(
                (i for i in archive.infolist() if not i.is_dir() and i.file_size >= 16),
                key=lambda i: i.filename,
            )
            members: list[tuple[str, str, str, str]] = []
            sizes: list[int] = []
            for info in infos:
                with open_member(archive, info) as member:
                    head = member.read(_SNIFF)
                kind = _sniff(head, 0, len(head))
                if kind in ("elf", "ar", "fatbin", "bundle"):
                    members.append((str(path), name, info.filename, kind))
                    sizes.append(info.file_size)
    except ZIP_ERRORS as error:
        raise _unreadable_wheel(name, str(error)) from None
    reports: list[FileReport] = []
    for found in map_files(_inspect_wheel_member, members, sizes):
        if isinstance(found, str):
            raise _unreadable_wheel(name, found)
        reports.extend(found)
    return reports


def _unreadable_wheel(name: str, why: str) -> BinaryFormatError:
    return BinaryFormatError(
        f"{name} is not a readable wheel/zip: {why}",
        hint="check the download; a truncated wheel cannot be read",
    )


def _inspect_wheel_member(item: tuple[str, str, str, str]) -> list[FileReport] | str:
    """One wheel member's reports, or why the wheel cannot be read (a string: it crosses
    from a worker process intact)."""
    path, name, filename, kind = item
    shown = f"{name}!{filename}"
    try:
        with zipfile.ZipFile(path) as archive:
            info = check_member(archive.getinfo(filename))
            if info.compress_type == zipfile.ZIP_STORED:
                start = _stored_data_offset(archive, info)
                with open_regular(path) as handle, _mapped(handle) as (mapped, access):
                    if start + info.file_size > len(mapped):
                        return f"member {filename} runs past the end of the file"
                    return _inspect_blob(
                        mapped,
                        start,
                        start + info.file_size,
                        shown,
                        kind,
                        keep_empty=False,
                        access=access,
                    )
            if info.file_size <= _IN_MEMORY_MEMBER:
                with archive.open(info) as member:
                    data = member.read()
                with finder(data) as find:
                    return _inspect_blob(
                        data, 0, len(data), shown, kind, keep_empty=False, access=_Access(find)
                    )
            import tempfile  # only large deflated wheel members need it

            with tempfile.TemporaryFile(prefix="capplan-member-") as spill:
                with archive.open(info) as member:
                    shutil.copyfileobj(member, spill, _WHEEL_CHUNK)
                size = spill.tell()
                if size == 0:
                    return []
                spill.flush()
                with _mapped(spill) as (mapped, access):
                    return _inspect_blob(
                        mapped, 0, size, shown, kind, keep_empty=False, access=access
                    )
    except ZIP_ERRORS as error:
        return str(error)
    except OSError as error:
        return f"cannot unpack {filename} to a temporary file ({error.strerror or error})"


def _stored_data_offset(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """Where a stored member's bytes start: after its local file header (30 bytes, then the
    name and the extra field, whose lengths the local header gives)."""
    handle = archive.fp
    if handle is None:
        raise zipfile.BadZipFile("the archive is closed")
    handle.seek(info.header_offset)
    local = handle.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"bad local header for {info.filename}")
    name_length, extra_length = struct.unpack("<HH", local[26:30])
    return int(info.header_offset) + 30 + int(name_length) + int(extra_length)


def _inspect_file(path: Path, name: str, *, explicit: bool) -> list[FileReport]:
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF)
            kind = _sniff(head, 0, len(head))
            if kind is None:
                if not explicit:
                    return []
                shown = f"starts with bytes {head[:4].hex()}" if head else "an empty file"
                raise BinaryFormatError(
                    f"not an ELF file, static archive, wheel or fatbin: {name} ({shown})",
                    hint="give a .so, .o, executable, .a, .whl or a directory",
                )
            if not explicit and kind == "thin":
                return []  # its members are files of their own, which the walk visits
            if kind == "zip":
                if not explicit and path.suffix != ".whl":
                    return []
                return _inspect_wheel(path, name)
            with _mapped(handle) as (mapped, access):
                return _inspect_blob(
                    mapped, 0, len(mapped), name, kind, keep_empty=explicit, access=access
                )
    except OSError as error:
        raise BinaryFormatError(
            f"cannot read {name}: {error.strerror or error}", hint="check the path's permissions"
        ) from None


def _walk(root: Path, shown: str) -> list[tuple[str, Path]]:
    """Regular files under ``root`` in sorted depth-first order.

    Symbolic links are followed, but a directory already visited (a symlink loop, or a link back
    into the tree) is skipped, and a file reached twice (a symlink or hard link to it) is listed
    once, under its own name when the walk meets it directly.
    """
    seen_dirs: set[tuple[int, int]] = set()
    chosen: dict[tuple[int, int], tuple[bool, int, str, Path]] = {}
    order = 0
    stack: list[tuple[Path, str]] = [(root, shown)]
    while stack:
        directory, shown_dir = stack.pop()
        try:
            info = directory.stat()
        except OSError:
            continue
        key = (info.st_dev, info.st_ino)
        if key in seen_dirs:
            continue
        seen_dirs.add(key)
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs: list[tuple[Path, str]] = []
        for entry in entries:
            try:
                st = os.stat(entry.path)  # follows symlinks; a dangling one raises
                is_link = entry.is_symlink()
            except OSError:
                continue
            child = os.path.join(shown_dir, entry.name)
            if stat.S_ISDIR(st.st_mode):
                subdirs.append((Path(entry.path), child))
            elif stat.S_ISREG(st.st_mode):
                file_key = (st.st_dev, st.st_ino)
                candidate = (is_link, order, child, Path(entry.path))
                order += 1
                if file_key not in chosen or candidate[:2] < chosen[file_key][:2]:
                    chosen[file_key] = candidate
        stack.extend(reversed(subdirs))
    return [(c[2], c[3]) for c in sorted(chosen.values(), key=lambda c: c[1])]


def inspect_paths(paths: Sequence[Path], *, jobs: int | None = None) -> list[FileReport]:
    """Reports for every ELF with device code under ``paths``, in the order given (``jobs``:
    worker processes for a folder's files, default the CPUs available; the reports do not
    depend on it).

    A file named directly is always reported (an ELF without device code gives an empty report);
    inside directories and wheels only files with device code (or problems) are. Names are the
    paths as given, ``archive!member`` for archive and wheel members.
    """
    reports: list[FileReport] = []
    for path in paths:
        shown = str(path)
        if not path.exists():
            raise InvalidInputError(
                f"no such file or directory: {shorten(shown)}",
                hint="give an existing file or directory",
            )
        if not path.is_dir() and not path.is_file():
            # A FIFO or device would block or stream forever; nothing to map.
            raise BinaryFormatError(
                f"not a regular file or directory: {shorten(shown)} is {special_kind(path)}",
                hint="give a file or a directory",
            )
        if path.is_dir():
            files = _walk(path, shown)
            # Files are independent: with several CPUs a pool of forked workers reads them.
            sizes = [_size(f) for _, f in files]
            for found in map_files(_inspect_walked, files, sizes, jobs=jobs):
                reports.extend(found)
        else:
            reports.extend(_inspect_file(path, shown, explicit=True))
    return reports


def _inspect_walked(item: tuple[str, Path]) -> list[FileReport]:
    """One file met in a folder: its reports, or one partial report saying why it cannot be
    read (one unreadable or corrupt file must not hide the rest of a store path)."""
    name, file = item
    try:
        return _inspect_file(file, name, explicit=False)
    except BinaryFormatError as error:
        return [FileReport(path=name, partial=True, problems=(error.one_line(),))]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def binary_limits(
    path: Path,
    candidates: Sequence[Capability],
    jetson: Callable[[Capability], bool] = lambda _cap: False,
) -> BinaryLimits:
    """Which ``candidates`` a prebuilt binary (file, wheel or store path) can run on;
    ``jetson`` says which devices get the Jetson rule (core.compat.is_jetson)."""
    reports = inspect_paths([path])
    sass = _sorted_unique([c for r in reports for c in r.sass])
    ptx = _sorted_unique([c for r in reports for c in r.ptx])
    if not sass and not ptx:
        raise BinaryFormatError(
            f"no CUDA device code (SASS or PTX) found in {path}",
            hint="give the package's CUDA library, wheel or store path",
        )
    # Devices have no a/f suffix: a suffixed candidate stands for its base device.
    devices = sorted({cap.base for cap in candidates})
    verdicts = tuple((cap, how_runs(cap, sass, ptx, jetson=jetson(cap))) for cap in devices)
    supported = tuple(c for c, v in verdicts if v.level is not RunLevel.CANNOT_RUN)
    return BinaryLimits(str(path), sass, ptx, supported, verdicts)
