"""Inspect binaries for GPU device code: ELF files, static archives, wheels and directories.

This is the file walker every GPU family's binary reader shares (the registry's
``binary_readers``, core/binaries/reading.py): it maps each file with mmap, reads the ELF
section table (core/binaries/elf.py), and hands the bytes to each family's reader in the
registry's order, CUDA's fatbin containers (core/families/cuda/binary.py), then AMD's offload
bundles and code objects (core/families/rocm/binary.py), each skipping what the earlier ones
found. A file starting with a family's magic (a bare fatbin or offload bundle) goes to that
family alone. Static archive members are scanned in place inside the archive's mapping; wheel
members are read into memory from the zip (never extracted to disk). Nothing is decompressed
beyond the zip layer: fatbin headers are never compressed.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import stat
import struct
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from capplan.adapters.files import open_regular, special_kind
from capplan.adapters.memsearch import finder, map_file
from capplan.adapters.pool import map_files
from capplan.adapters.zipmembers import ZIP_ERRORS, check_member, open_member
from capplan.core.binaries.buffers import Buffer, Reader
from capplan.core.binaries.elf import read_sections
from capplan.core.binaries.reading import Access, BinaryReader, DeviceCode, ReadsCodeObjects
from capplan.core.families.registry import binary_readers
from capplan.errors import BinaryFormatError, InvalidInputError, shorten

__all__ = ["FileReport", "inspect_paths"]

_ELF_MAGIC = b"\x7fELF"
_AR_MAGIC = b"!<arch>\n"
_THIN_AR_MAGIC = b"!<thin>\n"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_SNIFF = 24  # the longest magic: clang's __CLANG_OFFLOAD_BUNDLE__
_PAGE = mmap.PAGESIZE
_WHEEL_CHUNK = 8 << 20
# A deflated wheel member up to this size is inflated in memory; a larger one into a temporary
# file that is mapped and released as the scan passes (memory stays bounded).
_IN_MEMORY_MEMBER = 48 << 20
# The kinds of file the walker knows itself (:func:`_sniff`): an ELF file, which every family's
# reader reads, and the archives and zips it opens; any other kind is one family's bare file.
_WALKER_KINDS = ("elf", "ar", "thin", "zip")


@dataclass(frozen=True, slots=True)
class FileReport:
    """What one ELF file (or archive/wheel member, named ``outer!member``) holds: each GPU
    family's code (``code``, in the registry's order), and the problems that make it partial
    (a truncated or corrupt file; a family's own notes are in its code)."""

    path: str
    partial: bool = False
    problems: tuple[str, ...] = ()
    code: tuple[DeviceCode, ...] = ()

    def to_json(self, entries: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "partial": self.partial,
            "problems": list(self.problems),
        }
        for code in self.code:
            data.update(code.json_fields(entries))
        return data


def _file_report(
    name: str, problems: Sequence[str] = (), code: Sequence[DeviceCode] | None = None
) -> FileReport:
    """A report with every family's code (an empty one for each family not given)."""
    codes = tuple(code) if code is not None else tuple(r.empty() for r in binary_readers())
    return FileReport(name, bool(problems), tuple(problems), codes)


# --- One ELF file ------------------------------------------------------------------------------


@contextlib.contextmanager
def _mapped(handle: BinaryIO) -> Iterator[tuple[mmap.mmap, Access]]:
    """The file ``handle`` has open, mapped, with how to search it, read its headers and
    release the pages a scan is done with."""
    with map_file(handle) as mapped, finder(mapped, handle.fileno()) as find:
        yield mapped, Access(find, _header_reader(handle), _release_for(mapped))


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


def _inspect_elf(buf: Buffer, start: int, end: int, name: str, access: Access) -> FileReport:
    sections = read_sections(buf, start, end)
    readers = binary_readers()
    for reader in readers:
        if isinstance(reader, ReadsCodeObjects):
            own = reader.code_object(buf, start, end)
            if own is not None:
                # The file is the family's code object: no other family's code is in it.
                return _file_report(name, code=[own if r is reader else r.empty() for r in readers])
    skip = [(start + a, start + b) for a, b in sections.no_device_code]
    problems = list(sections.problems)
    codes: list[DeviceCode] = []
    for reader in readers:
        read = reader.read_elf(buf, start, end, sections, access, tuple(skip))
        codes.append(read.code)
        problems.extend(read.problems)
        skip.extend(read.claimed)
    return _file_report(name, problems, codes)


def _inspect_bare(
    buf: Buffer, start: int, end: int, name: str, reader: BinaryReader, access: Access
) -> FileReport:
    """A bare file of one family's code (``nvcc -fatbin``, an offload bundle)."""
    read = reader.read_bare(buf, start, end, name, access)
    codes = [read.code if r is reader else r.empty() for r in binary_readers()]
    return _file_report(name, read.problems, codes)


# --- Static archives ---------------------------------------------------------------------------


def _archive_members(
    buf: Buffer, start: int, end: int, name: str
) -> Iterator[tuple[str, int, int]]:
    """(member name, data start, data end) for each regular member of a System V/GNU/BSD ar.
    Sizes and name lengths are ASCII decimal digits (ar's format), so every member starts past
    the one before it: a negative or non-ASCII number (``-60``, ``²``) is a corrupt header."""
    pos = start + len(_AR_MAGIC)
    long_names = b""
    while pos + 60 <= end:
        header = bytes(buf[pos : pos + 60])
        if header[58:60] != b"`\n":
            raise _corrupt_member(f"member header at {pos - start:#x}", name)
        raw_name = header[0:16].decode("latin-1").rstrip(" ")
        size = _ar_number(header[48:58].strip(b" "), "size", pos - start, name)
        data = pos + 60
        data_end = data + size
        member = raw_name
        if raw_name == "//":  # GNU long-name table
            long_names = bytes(buf[data : min(data_end, end)])
        elif raw_name.startswith("#1/"):  # BSD: the name leads the data
            length = _ar_number(raw_name[3:].encode("latin-1"), "name length", pos - start, name)
            if length > size:
                raise _corrupt_member(f"name length {length} past its member at {pos - start:#x}",
                                      name)  # fmt: skip
            named = bytes(buf[data : data + min(length, _AR_NAME_MAX)])
            member = named.decode("utf-8", "replace").rstrip("\0")
            data += length
        elif raw_name.startswith("/") and raw_name[1:].isascii() and raw_name[1:].isdigit():
            index = int(raw_name[1:])  # at most 15 ASCII digits
            stop = long_names.find(b"\n", index, index + _AR_NAME_MAX)
            entry = long_names[index : stop if stop >= 0 else index + _AR_NAME_MAX]
            member = entry.decode("utf-8", "replace").rstrip("/")
        else:
            member = raw_name.rstrip("/")
        if raw_name not in ("/", "//", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED"):
            yield member, data, min(data_end, end)
        if data_end > end:
            return
        pos = data_end + (data_end - start) % 2  # members are 2-byte aligned


# A member name is cut here (a GNU long name, a BSD name): names are a path at most.
_AR_NAME_MAX = 4096


def _ar_number(field: bytes, what: str, at: int, name: str) -> int:
    """An ar header's decimal field (ASCII digits, 10 at most; empty is 0)."""
    if field and not (field.isdigit() and len(field) <= 10):  # bytes.isdigit: ASCII only
        raise _corrupt_member(f"{what} in member header at {at:#x}", name)
    return int(field or b"0")


def _corrupt_member(what: str, name: str) -> BinaryFormatError:
    return BinaryFormatError(
        f"corrupt static archive {name}: bad {what}",
        hint="the archive is truncated or not a Unix ar archive",
    )


# --- Dispatch on content -----------------------------------------------------------------------


# --- Dispatch on content -----------------------------------------------------------------------


def _sniff(buf: Buffer, start: int, end: int) -> str | None:
    """What ``buf[start:end]`` is: ``elf``, ``ar``, ``thin``, ``zip``, or the index (as text:
    it crosses to worker processes) of the family reader whose bare file it is."""
    head = bytes(buf[start : min(end, start + _SNIFF)])
    if head.startswith(_ELF_MAGIC):
        return "elf"
    if head.startswith(_AR_MAGIC):
        return "ar"
    if head.startswith(_THIN_AR_MAGIC):
        return "thin"
    if head.startswith(_ZIP_MAGICS):
        return "zip"
    for index, reader in enumerate(binary_readers()):
        if head.startswith(reader.magics):
            return str(index)
    return None


def _has_code(kind: str) -> bool:
    """Whether a file of ``kind`` (:func:`_sniff`) is read for device code itself: an ELF file
    or a family's bare file, not a container of files."""
    return kind not in ("ar", "thin", "zip")


def _inspect_blob(
    buf: Buffer,
    start: int,
    end: int,
    name: str,
    kind: str,
    *,
    keep_empty: bool,
    access: Access,
) -> list[FileReport]:
    """The reports for ``buf[start:end]``, whose content ``kind`` is (:func:`_sniff`), read as
    ``access`` says (:class:`~capplan.core.binaries.reading.Access`)."""
    if kind == "elf":
        report = _inspect_elf(buf, start, end, name, access)
        keep = keep_empty or report.partial or any(c.found() for c in report.code)
        return [report] if keep else []
    if kind not in _WALKER_KINDS:
        return [_inspect_bare(buf, start, end, name, binary_readers()[int(kind)], access)]
    if kind == "ar":
        reports: list[FileReport] = []
        for member, m_start, m_end in _archive_members(buf, start, end, name):
            member_kind = _sniff(buf, m_start, m_end)
            if member_kind is not None and _has_code(member_kind):
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
                if kind is not None and kind not in ("thin", "zip"):
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
                        data, 0, len(data), shown, kind, keep_empty=False, access=Access(find)
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
        return [_file_report(name, (error.one_line(),))]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
