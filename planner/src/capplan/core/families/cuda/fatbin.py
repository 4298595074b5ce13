"""Find and read CUDA fatbin containers in a byte buffer, without decompressing anything.

The layout (../shared/CUDA.md, "Where device code sits in a binary"), checked against the bytes
nvcc 13.0 writes and against NVIDIA's cuobjdump 13.5 on the same files:

- container header, 16 bytes, little-endian: u32 magic 0xBA55ED50, u16 version 1, u16 header
  size 16, u64 size of the entries that follow;
- entry header (64 bytes or more): u16 kind at 0x00 (1 PTX, 2 SASS/ELF, 8 LTO-IR), u32 header
  size at 0x04, u64 padded payload size at 0x08, u32 decimal SM number at 0x1C (90 for sm_90 and
  sm_90a alike), u64 flags at 0x28. The next entry starts at entry + header size + payload size;
  entries tile the container exactly.
- flags: 0x1 64-bit, 0x2 debug, 0x2000 LZ4 payload, 0x8000 zstd payload, 0x100000 arch-specific
  ``a``, 0x200000 family-specific ``f``. The a/f suffix lives only in the flags. Headers are never
  compressed (nvcc 13 zstd-compresses PTX by default; ``--compress-mode=speed`` gives LZ4).

The scanner looks for the magic anywhere (real NVIDIA libraries keep containers outside
``.nv_fatbin`` too) and accepts a hit only when the container header *and* its first entry header
validate, so a stray magic in host code or data is never reported. A container that starts well
but breaks later (truncated file, corrupt size) is reported with the entries read so far and a
problem note: an arch is only ever taken from a complete, validated entry header.

Pure: works on ``bytes``, ``bytearray`` or an ``mmap`` (anything with ``find`` and the buffer
protocol); I/O and page management belong to the caller (see ``release`` and ``read`` in
:func:`scan`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any, NamedTuple

from capplan.core.binaries.buffers import Buffer, Finder, Reader
from capplan.core.families.cuda.capability import Capability, Suffix

__all__ = [
    "CONTAINER_HEADER_SIZE",
    "EMPTY_CONTAINER",
    "FLAG_64BIT",
    "FLAG_ARCH_SPECIFIC",
    "FLAG_DEBUG",
    "FLAG_FAMILY_SPECIFIC",
    "FLAG_LZ4",
    "FLAG_ZSTD",
    "MAGIC",
    "MAGIC_BYTES",
    "WRAPPER_MAGIC",
    "Container",
    "Entry",
    "EntryKind",
    "Rejected",
    "ScanResult",
    "parse_container",
    "scan",
]

MAGIC = 0xBA55ED50
MAGIC_BYTES = struct.pack("<I", MAGIC)
# `.nvFatBinSegment` holds 24-byte wrappers (u32 magic, u32 version, u64 pointer to the fatbin,
# u64 unused) whose pointer is a relocated address: the containers themselves are found by the
# scan, so wrappers are not needed to list archs.
WRAPPER_MAGIC = 0x466243B1

CONTAINER_HEADER_SIZE = 16
_CONTAINER = struct.Struct("<IHHQ")
# A container header that declares no entries at all: nvcc 13 puts one into every PTX-only
# shared library (`nvcc -shared -gencode arch=compute_80,code=compute_80`: `.nv_fatbin` holds
# this 16-byte header, then the real container). Valid, and empty: no target to list.
EMPTY_CONTAINER = _CONTAINER.pack(MAGIC, 1, CONTAINER_HEADER_SIZE, 0)
# What every container :func:`parse_container` accepts starts with: the magic, version 1 and the
# header size. Searching for these 8 bytes rather than the 4-byte magic finds the same containers
# (a magic followed by anything else is not one) and runs faster (a longer needle skips further).
_SEARCH_KEY = struct.pack("<IHH", MAGIC, 1, CONTAINER_HEADER_SIZE)
# An entry header's fields read in one call: kind, (unknown, 0x0101 in nvcc 13), header size,
# payload size at 0x00-0x0F; arch at 0x1C; flags at 0x28. All lie within _ENTRY_MIN bytes.
_ENTRY_HEAD = struct.Struct("<HHIQ12xI8xQ")
_ENTRY_MIN = 64
# nvcc 13 writes 64..120-byte entry headers; anything far beyond that is not a header.
_ENTRY_MAX = 4096
# Decimal SM numbers nvcc has used go from 10 (sm_10) to 121 (sm_121); allow later majors up to
# 19 but nothing below sm_10: a 0..9 "arch" is noise, never a real target.
_ARCH_MIN = 10
_ARCH_MAX = 199
# A container larger than this is a corrupt size, not a real fatbin (libtorch_cuda.so's largest
# is a few MiB; its whole .nv_fatbin is 330 MiB).
_CONTAINER_MAX = 1 << 36

FLAG_64BIT = 0x1
FLAG_DEBUG = 0x2
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000

# Windows bound how much of a mapped file is touched between two `release` calls, so a whole-file
# scan keeps a small resident set (pages of a file mapping count towards RSS until released).
_WINDOW = 16 << 20


class EntryKind(Enum):
    """What an entry holds."""

    PTX = "ptx"
    SASS = "sass"
    LTO = "lto"


_KINDS = {1: EntryKind.PTX, 2: EntryKind.SASS, 8: EntryKind.LTO}


class Entry(NamedTuple):
    """One validated entry header. ``offset`` is the header's offset in the scanned buffer."""

    kind: EntryKind
    capability: Capability
    flags: int
    offset: int
    header_size: int
    payload_size: int

    @property
    def compression(self) -> str:
        if self.flags & FLAG_ZSTD:
            return "zstd"
        if self.flags & FLAG_LZ4:
            return "lz4"
        return "none"

    @property
    def debug(self) -> bool:
        return bool(self.flags & FLAG_DEBUG)

    @property
    def name(self) -> str:
        """nvcc's spelling of the target: ``sm_90a``, ``compute_90``, ``lto_90``."""
        if self.kind is EntryKind.SASS:
            return self.capability.sm
        if self.kind is EntryKind.PTX:
            return self.capability.compute
        return f"lto_{self.capability.cmake}"

    def to_json(self, base: int = 0) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "arch": self.name,
            "capability": str(self.capability),
            "compression": self.compression,
            "debug": self.debug,
            "flags": self.flags,
            "offset": self.offset - base,
            "size": self.header_size + self.payload_size,
        }


class Container(NamedTuple):
    """One fatbin container found at ``offset``; ``problems`` is empty for a complete one."""

    offset: int
    declared_size: int  # the header's u64: bytes of entries after the 16-byte header
    entries: tuple[Entry, ...]
    problems: tuple[str, ...]

    @property
    def partial(self) -> bool:
        return bool(self.problems)

    @property
    def end(self) -> int:
        """Where the container ends according to its header."""
        return self.offset + CONTAINER_HEADER_SIZE + self.declared_size


class Rejected(NamedTuple):
    """A magic followed by a valid container header whose first entry failed validation.

    Not reported as a container (it may be chance bytes); a caller that knows the hit lies in a
    fatbin section can report it as corruption.
    """

    offset: int
    reason: str


class ScanResult(NamedTuple):
    containers: tuple[Container, ...]
    rejected: tuple[Rejected, ...]


def _entry_problem(
    buf: Buffer, at: int, stop: int, limit: int, read: Reader | None = None
) -> tuple[Entry | None, str | None, bool]:
    """Validate the entry header at ``at``; the container's entries end at ``stop``.

    Returns (entry, problem, header_ok). ``entry`` is None when the header is invalid or its
    payload is cut off; ``header_ok`` says whether the header itself validated.
    """
    if at + _ENTRY_MIN > min(stop, limit):
        where = "the end of the file" if at + _ENTRY_MIN > limit else "the container's end"
        return None, f"entry header at {at:#x} runs past {where}", False
    if read is None:
        fields = _ENTRY_HEAD.unpack_from(buf, at)
    else:
        head = read(at, _ENTRY_HEAD.size)
        if len(head) < _ENTRY_HEAD.size:  # the file shrank since it was mapped
            return None, f"entry header at {at:#x} runs past the end of the file", False
        fields = _ENTRY_HEAD.unpack(head)
    kind_code, _, header_size, payload_size, arch, flags = fields
    kind = _KINDS.get(kind_code)
    if kind is None:
        return None, f"entry at {at:#x} has unknown kind {kind_code}", False
    if not _ENTRY_MIN <= header_size <= _ENTRY_MAX or header_size % 8:
        return None, f"entry at {at:#x} has implausible header size {header_size}", False
    if not _ARCH_MIN <= arch <= _ARCH_MAX:
        return None, f"entry at {at:#x} has implausible arch number {arch}", False
    suffix: Suffix = ""
    if flags & FLAG_ARCH_SPECIFIC and flags & FLAG_FAMILY_SPECIFIC:
        return None, f"entry at {at:#x} claims both arch- and family-specific flags", False
    if flags & FLAG_ARCH_SPECIFIC:
        suffix = "a"
    elif flags & FLAG_FAMILY_SPECIFIC:
        suffix = "f"
    end = at + header_size + payload_size
    if end > stop:
        return None, f"entry at {at:#x} ({arch}) runs past its container's end", True
    if at + header_size > limit:
        return None, f"entry header at {at:#x} runs past the end of the file", False
    # kind, capability, flags, offset, header_size, payload_size (positional: built per entry)
    entry = Entry(kind, Capability.from_sm(arch, suffix), flags, at, header_size, payload_size)
    if end > limit:
        # The header is intact but the code is cut off: not usable, so not reported as present.
        return None, f"{entry.name} entry at {at:#x} is cut off by the end of the file", True
    return entry, None, True


def parse_container(
    buf: Buffer, offset: int, limit: int | None = None, read: Reader | None = None
) -> Container | Rejected | None:
    """Read the container whose magic is at ``offset``; ``limit`` is the end of the data.
    ``read`` reads headers instead of ``buf`` (:data:`Reader`; the same bytes).

    None: not a container (bad version, header size, size, or nothing to validate).
    Rejected: a good container header but an invalid first entry.
    """
    limit = len(buf) if limit is None else min(limit, len(buf))
    if offset + CONTAINER_HEADER_SIZE > limit:
        return None
    if read is None:
        magic, version, header_size, size = _CONTAINER.unpack_from(buf, offset)
    else:
        head = read(offset, CONTAINER_HEADER_SIZE)
        if len(head) < CONTAINER_HEADER_SIZE:
            return None
        magic, version, header_size, size = _CONTAINER.unpack(head)
    if magic != MAGIC or version != 1 or header_size != CONTAINER_HEADER_SIZE:
        return None
    if not _ENTRY_MIN <= size <= _CONTAINER_MAX:
        return None
    first = offset + CONTAINER_HEADER_SIZE
    declared_end = first + size
    problems: list[str] = []
    entries: list[Entry] = []
    at = first
    while at < declared_end:
        entry, problem, header_ok = _entry_problem(buf, at, declared_end, limit, read)
        if entry is None:
            if not entries and not header_ok:
                return Rejected(offset, problem or "invalid first entry")
            problems.append(problem or f"invalid entry at {at:#x}")
            break
        entries.append(entry)
        at = entry.offset + entry.header_size + entry.payload_size
    if declared_end > limit:
        problems.insert(
            0,
            f"container at {offset:#x} declares {size} bytes but the data ends "
            f"{limit - first} bytes in (truncated)",
        )
    return Container(offset, size, tuple(entries), tuple(problems))


def _resume_after(container: Container) -> int:
    if not container.partial:
        return container.end
    # A broken container's size cannot be trusted: look again right after the last good entry,
    # where the next real container may start.
    if container.entries:
        last = container.entries[-1]
        return last.offset + last.header_size + last.payload_size
    return container.offset + len(MAGIC_BYTES)


def _noop(start: int, end: int) -> None:
    return None


def scan(
    buf: Buffer,
    start: int = 0,
    end: int | None = None,
    *,
    release: Callable[[int, int], None] | None = None,
    find: Finder | None = None,
    read: Reader | None = None,
) -> ScanResult:
    """Every valid fatbin container in ``buf[start:end]``, in file order.

    ``release(a, b)`` is called for byte ranges the scan is done with, in increasing order, so a
    caller scanning an mmap can drop those pages (madvise) and keep the resident set small.
    ``find`` searches ``buf`` for the magic (default ``buf.find``). ``read`` reads container and
    entry headers (:data:`Reader`, default: from ``buf``); with it, a container that follows
    the previous one directly is recognised by its header alone, without a search.
    """
    containers: list[Container] = []
    rejected: list[Rejected] = []
    for item in _iter_scan(
        buf,
        start,
        len(buf) if end is None else min(end, len(buf)),
        release or _noop,
        find or buf.find,
        read,
    ):
        if isinstance(item, Container):
            containers.append(item)
        else:
            rejected.append(item)
    return ScanResult(tuple(containers), tuple(rejected))


def _iter_scan(
    buf: Buffer,
    start: int,
    end: int,
    release: Callable[[int, int], None],
    find: Finder,
    read: Reader | None,
) -> Iterator[Container | Rejected]:
    pos = start
    released = start
    key = len(_SEARCH_KEY)
    overlap = key - 1
    while pos < end:
        window_end = min(end, pos + _WINDOW)
        if read is not None and pos + key <= window_end and read(pos, key) == _SEARCH_KEY:
            hit = pos  # what the search would answer: the key's first place at or after pos
        else:
            hit = find(_SEARCH_KEY, pos, window_end)
        if hit < 0:
            if window_end >= end:
                break
            # Step back so a magic straddling the window edge is still found.
            pos = window_end - overlap
            release(released, pos)
            released = pos
            continue
        found = parse_container(buf, hit, end, read)
        if found is None:
            pos = hit + 1
            continue
        yield found
        if isinstance(found, Rejected):
            pos = hit + 1
            continue
        pos = max(_resume_after(found), hit + 1)
        # Release once a window's worth of the buffer lies behind, not after every container:
        # a walk through `.nv_fatbin` touches only a few header pages per container, and one
        # madvise per container cost more than the walk (libtorch_cuda.so: 475 of them).
        if min(pos, end) - released >= _WINDOW:
            release(released, min(pos, end))
            released = min(pos, end)
    if released < end:
        release(released, end)
