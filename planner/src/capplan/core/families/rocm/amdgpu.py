"""AMD device code in binaries: clang offload bundles, compressed ``CCOB`` bundles, AMDGPU ELF.

Pure functions over a buffer (bytes, bytearray or mmap: :mod:`capplan.core.binaries.buffers`);
the adapter maps files and attributes finds to ELF sections.

Formats, with their sources:

- Offload bundle (clang/lib/Driver/OffloadBundler.cpp, llvm/lib/Object/OffloadBundle.cpp):
  the 24-byte magic ``__CLANG_OFFLOAD_BUNDLE__``, a little-endian u64 entry count, then per entry
  u64 offset (from the bundle start), u64 size, u64 ID length and the ID, e.g.
  ``hipv4-amdgcn-amd-amdhsa--gfx942`` (``<kind>-<triple>-<target ID>``; the triple's environment
  is empty, hence ``--``) or ``host-x86_64-unknown-linux-gnu-``. HIP programs carry one in the
  ``.hip_fatbin`` section.
- Compressed bundle (llvm/include/llvm/Object/OffloadBundle.h ``CompressedOffloadBundle``):
  ``CCOB``, u16 version, u16 method (llvm::compression::Format: 0 zlib, 1 zstd), then v1: u32
  uncompressed size; v2: u32 total size, u32 uncompressed size; v3: u64 total size, u64
  uncompressed size; then a u64 truncated MD5 and the compressed bundle. zlib ones are opened
  with the standard library; zstd ones are reported without their targets.
- AMDGPU code object: ELF with e_machine EM_AMDGPU (224), OS ABI 64 (HSA); the processor and
  xnack/sramecc modes are in e_flags (LLVM AMDGPUUsage "AMDGPU ELF Header").
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

from capplan.core.binaries.buffers import Buffer, Finder
from capplan.core.families.rocm.target import AmdTarget
from capplan.errors import CapplanError

__all__ = [
    "BUNDLE_MAGIC",
    "CCOB_MAGIC",
    "EM_AMDGPU",
    "AmdCodeObject",
    "Buffer",
    "Bundle",
    "BundleEntry",
    "amdgpu_elf_target",
    "parse_bundle",
    "scan_amd",
    "target_from_bundle_id",
]


BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
EM_AMDGPU = 224
_ELFOSABI_AMDGPU_HSA = 64
_MAX_ENTRIES = 4096
_MAX_ID = 1024
_MAX_UNCOMPRESSED = 1 << 34
_METHODS = {0: "zlib", 1: "zstd"}
_CCOB_HEADER = {1: 20, 2: 24, 3: 32}
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def target_from_bundle_id(bundle_id: str) -> AmdTarget | None:
    """The target of an AMD bundle entry ID; ``None`` for host and non-AMD entries.

    Raises InvalidInputError for an AMD entry whose target ID capplan cannot read.
    """
    marker = "amdgcn-amd-amdhsa"
    at = bundle_id.find(marker)
    if at < 0:
        return None
    rest = bundle_id[at + len(marker) :]
    # "--gfx942" (empty environment) in current clang, "-gfx906" in older HIP bundles.
    rest = rest[2:] if rest.startswith("--") else rest.removeprefix("-")
    return AmdTarget.parse(rest)


class BundleEntry(NamedTuple):
    bundle_id: str
    offset: int  # absolute, in the scanned buffer
    size: int
    target: AmdTarget | None
    elf_target: AmdTarget | None  # what the entry's own e_flags say, when it is an AMDGPU ELF

    def to_json(self, base: int = 0) -> dict[str, Any]:
        return {
            "id": self.bundle_id,
            "target": str(self.target) if self.target else None,
            "elf_target": str(self.elf_target) if self.elf_target else None,
            "offset": self.offset - base,
            "size": self.size,
        }


class Bundle(NamedTuple):
    """One offload bundle, plain or compressed (``compression`` "zlib"/"zstd")."""

    offset: int
    end: int
    entries: tuple[BundleEntry, ...] = ()
    compression: str = ""
    version: int = 0  # CCOB header version (0: not compressed)
    opened: bool = True  # False: compressed with a method capplan does not decompress
    problems: tuple[str, ...] = ()

    @property
    def targets(self) -> tuple[AmdTarget, ...]:
        return tuple(sorted({e.target for e in self.entries if e.target is not None}))


class AmdCodeObject(NamedTuple):
    """A bare AMDGPU ELF code object (``clang -target amdgcn-amd-amdhsa -c``, a ``.hsaco``)."""

    target: AmdTarget | None
    abi_version: int
    problems: tuple[str, ...] = ()


def _u64(buf: Buffer, pos: int) -> int:
    value: int = struct.unpack_from("<Q", buf, pos)[0]
    return value


def amdgpu_elf_target(buf: Buffer, start: int, end: int) -> AmdCodeObject | None:
    """The code object at ``start`` if it is an AMDGPU ELF, else ``None``."""
    if end - start < 52 or bytes(buf[start : start + 4]) != b"\x7fELF":
        return None
    elf_class, data = buf[start + 4], buf[start + 5]
    if data != 1:  # AMDGPU objects are little-endian
        return None
    (machine,) = struct.unpack_from("<H", buf, start + 18)
    if machine != EM_AMDGPU:
        return None
    flags_at = start + (48 if elf_class == 2 else 36)
    if flags_at + 4 > end:
        return AmdCodeObject(None, 0, ("truncated AMDGPU ELF header",))
    (flags,) = struct.unpack_from("<I", buf, flags_at)
    osabi, abi_version = buf[start + 7], buf[start + 8]
    if osabi != _ELFOSABI_AMDGPU_HSA:
        return AmdCodeObject(None, abi_version, (f"AMDGPU ELF with OS ABI {osabi}, not HSA",))
    try:
        return AmdCodeObject(AmdTarget.from_elf_flags(flags, abi_version), abi_version)
    except CapplanError as error:
        return AmdCodeObject(None, abi_version, (error.message,))


def parse_bundle(buf: Buffer, start: int, end: int) -> Bundle | None:
    """The uncompressed bundle at ``start`` (its magic must be there); ``None`` if implausible."""
    pos = start + len(BUNDLE_MAGIC)
    if bytes(buf[start:pos]) != BUNDLE_MAGIC or pos + 8 > end:
        return None
    count = _u64(buf, pos)
    if count == 0 or count > _MAX_ENTRIES:
        return None
    pos += 8
    entries: list[BundleEntry] = []
    problems: list[str] = []
    bundle_end = pos
    for index in range(count):
        if pos + 24 > end:
            problems.append(f"bundle at {start:#x} truncated in entry {index} of {count}")
            break
        offset, size, id_len = struct.unpack_from("<QQQ", buf, pos)
        pos += 24
        if id_len == 0 or id_len > _MAX_ID or pos + id_len > end:
            if not entries:
                return None  # not a bundle after all: a stray magic
            problems.append(f"bundle at {start:#x}: entry {index} has a corrupt ID length")
            break
        try:
            bundle_id = bytes(buf[pos : pos + id_len]).decode("ascii")
        except UnicodeDecodeError:
            return None if not entries else _partial(start, pos, entries, problems, index)
        pos += id_len
        payload = start + offset
        if payload + size > end:
            problems.append(
                f"bundle at {start:#x}: entry {bundle_id} runs past the end of the data"
            )
            size = max(0, end - payload)
        try:
            target = target_from_bundle_id(bundle_id)
        except CapplanError as error:
            target = None
            problems.append(f"bundle entry {bundle_id}: {error.message}")
        code = amdgpu_elf_target(buf, payload, payload + size) if size else None
        elf_target = code.target if code else None
        if target and elf_target and elf_target.processor != target.processor:
            problems.append(
                f"bundle entry {bundle_id} holds code for {elf_target}, not {target.processor}"
            )
        entries.append(BundleEntry(bundle_id, payload, size, target, elf_target))
        bundle_end = max(bundle_end, pos, payload + size)
    return Bundle(start, min(bundle_end, end), tuple(entries), problems=tuple(problems))


def _partial(
    start: int, pos: int, entries: list[BundleEntry], problems: list[str], index: int
) -> Bundle:
    problems.append(f"bundle at {start:#x}: entry {index} has a non-ASCII ID")
    return Bundle(start, pos, tuple(entries), problems=tuple(problems))


def _parse_ccob(buf: Buffer, start: int, end: int) -> Bundle | None:
    if end - start < 8:
        return None
    version, method = struct.unpack_from("<HH", buf, start + 4)
    header = _CCOB_HEADER.get(version)
    if header is None or method not in _METHODS or start + header > end:
        return None
    if version == 1:
        (uncompressed,) = struct.unpack_from("<I", buf, start + 8)
        total = end - start  # v1 does not record it: the data runs to the end of the section
    elif version == 2:
        total, uncompressed = struct.unpack_from("<II", buf, start + 8)
    else:
        total, uncompressed = struct.unpack_from("<QQ", buf, start + 8)
    if not 0 < uncompressed <= _MAX_UNCOMPRESSED or total <= header:
        return None
    problems: list[str] = []
    if start + total > end:
        problems.append(f"compressed bundle at {start:#x} runs past the end of the data")
        total = end - start
    name = _METHODS[method]
    first = bytes(buf[start + header : start + header + 4])
    # The stream must start like one (zstd frame magic; zlib CMF/FLG check): otherwise the
    # four letters were a coincidence inside other data, not a compressed bundle.
    if name == "zstd":
        if first != _ZSTD_MAGIC:
            return None
        return Bundle(start, start + total, (), name, version, False, tuple(problems))
    if len(first) < 2 or first[0] & 0x0F != 8 or (first[0] << 8 | first[1]) % 31:
        return None
    data = bytes(buf[start + header : start + total])
    try:
        inner = zlib.decompressobj().decompress(data, uncompressed)
    except zlib.error as error:
        problems.append(f"compressed bundle at {start:#x} does not decompress: {error}")
        return Bundle(start, start + total, (), name, version, False, tuple(problems))
    bundle = parse_bundle(inner, 0, len(inner))
    if bundle is None:
        problems.append(f"compressed bundle at {start:#x} holds no offload bundle")
        return Bundle(start, start + total, (), name, version, False, tuple(problems))
    # Entry offsets refer to the decompressed data: report them relative to the CCOB header.
    entries = tuple(
        BundleEntry(e.bundle_id, start, e.size, e.target, e.elf_target) for e in bundle.entries
    )
    return Bundle(
        start, start + total, entries, name, version, True, tuple(problems) + bundle.problems
    )


_WINDOW = 16 << 20  # bytes searched between two ``release`` calls (bounded resident set)


def _find_all(
    buf: Buffer,
    needles: tuple[bytes, ...],
    start: int,
    end: int,
    release: Callable[[int, int], None] | None = None,
    find: Finder | None = None,
) -> list[tuple[int, int]]:
    """(offset, needle index) of every needle in ``buf[start:end]``, sorted, in one windowed pass.

    ``release(a, b)`` is told after each window that the search is done with ``buf[a:b]``, so a
    caller holding a file mapping can drop its pages (the search never touches them again).
    ``find`` searches ``buf`` (default ``buf.find``).
    """
    find = find or buf.find
    found: set[tuple[int, int]] = set()
    overlap = max(len(n) for n in needles) - 1
    window_start = start
    while window_start < end:
        window_end = min(end, window_start + _WINDOW)
        search_end = min(end, window_end + overlap)
        for index, needle in enumerate(needles):
            pos = find(needle, window_start, search_end)
            while 0 <= pos < window_end:
                found.add((pos, index))
                pos = find(needle, pos + 1, search_end)
        if release is not None:
            release(window_start, window_end)
        window_start = window_end
    return sorted(found)


def scan_amd(
    buf: Buffer,
    start: int,
    end: int,
    release: Callable[[int, int], None] | None = None,
    find: Finder | None = None,
) -> list[Bundle]:
    """Every plausible plain or compressed offload bundle in ``buf[start:end]``, in order.

    Bundles nested inside an earlier bundle's entries are not reported again. ``release`` as in
    :func:`_find_all`: the magic search runs in windows and releases each one behind it;
    ``find`` as there.
    """
    bundles: list[Bundle] = []
    covered_to = start
    hits = _find_all(buf, (BUNDLE_MAGIC, CCOB_MAGIC), start, end, release, find)
    candidates = [(p, "plain" if index == 0 else "ccob") for p, index in hits]
    for pos, kind in candidates:
        if pos < covered_to:
            continue
        bundle = parse_bundle(buf, pos, end) if kind == "plain" else _parse_ccob(buf, pos, end)
        if bundle is None:
            continue
        bundles.append(bundle)
        covered_to = max(bundle.end, pos + 1)
    return bundles
