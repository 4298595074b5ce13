"""Find the libraries of an environment and read what ``capplan doctor`` needs from each.

An environment is a directory (a virtualenv or its site-packages, a conda prefix, any tree), a
Nix store path (its whole closure when ``nix-store`` is there), a wheel, or one library. Every
library is grouped into the package a user installed: a pip distribution (its dist-info
``RECORD``), a conda package (``conda-meta/*.json``), a Nix store path, the wheel itself.

Device code comes from inspect's reader (:func:`capplan.adapters.fatbin.inspect_paths`); the
PTX entries' ISA versions are two 16-bit fields of their fatbin entry headers (at 0x18 minor and
0x1A major, e.g. 9.0 for CUDA 13.0's PTX; checked with nvcc 13.0 here); ``DT_NEEDED`` and
``DT_SONAME`` come from the ELF dynamic section, read with a few bounded ``pread`` calls.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import os
import re
import shutil
import stat
import struct
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capplan.adapters.files import open_regular, read_bounded, special_kind
from capplan.adapters.pool import map_files
from capplan.adapters.zipmembers import ZIP_ERRORS, open_member
from capplan.core.binaries.cubin import (
    CubinError,
    cubin_has_kernel,
    cubin_header_problem,
    cubin_toolkit,
    lz4_block,
    ptx_has_code,
)
from capplan.core.binaries.doctor import (
    Group,
    Library,
    Package,
    Ptx,
    Target,
    cuda_major_of_name,
    isa_cuda,
)
from capplan.errors import BinaryFormatError, InvalidInputError, NixError, printable
from capplan.runtime.selector import run_bounded

__all__ = [
    "Scan",
    "Source",
    "default_sources",
    "elf_dynamic",
    "elf_facts",
    "elf_loader_facts",
    "loader_problem",
    "scan_sources",
    "sources_for",
]

_LIB_NAME = re.compile(r"\.so(?:\.[0-9A-Za-z_]+)*$")
_ELF = b"\x7fELF"
# A RECORD or conda-meta JSON file: torch's RECORD is about 1 MB; anything past this is no
# package metadata, and is left out as unreadable metadata is.
MAX_METADATA_BYTES = 64 << 20
_DT_NEEDED, _DT_STRTAB, _DT_SONAME, _DT_STRSZ = 1, 5, 14, 10
_DT_RPATH, _DT_RUNPATH = 15, 29
# Sonames of NVIDIA's CUDA libraries (libcudart, libcublas, libcudnn, libnccl, libnvrtc, ...).
_CUDA_LIBS = ("libcu", "libnv", "libnccl")
# ELF e_machine values (the System V gABI's registry): the CPUs doctor tells apart.
_MACHINES = {62: "x86_64", 183: "aarch64", 3: "i386", 40: "arm", 21: "ppc64"}
_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_MAX_DYNAMIC = 1 << 20  # a dynamic section is a few hundred entries
_MAX_STRTAB = 16 << 20
# A DT_NEEDED name or RPATH string is cut here (PATH_MAX), and at most this many of each read.
_MAX_NAME = 4096
_MAX_NEEDED = 1024
_STORE = "/nix/store/"
_STORE_NAME = re.compile(r"^[0-9a-df-np-sv-z]{32}-(.+)$")
_PTX_KIND = 1


@dataclass(frozen=True, slots=True)
class Source:
    """One thing to check: ``path`` of ``kind`` (dir, nix, wheel, file), and why it was chosen."""

    path: Path
    kind: str
    why: str = ""


@dataclass(frozen=True, slots=True)
class Scan:
    libraries: tuple[Library, ...]
    packages: Mapping[str, Package]
    files: int  # ELF files read
    bytes: int  # their total size


# --- ELF dynamic section ----------------------------------------------------------------------


def _pread(fd: int, size: int, offset: int) -> bytes:
    if size <= 0 or not 0 <= offset < 1 << 62:
        return b""
    return os.pread(fd, size, offset)


_DAMAGED = (OSError, OverflowError, ValueError, struct.error)


def elf_dynamic(fd: int) -> tuple[tuple[str, ...], str | None]:
    """(DT_NEEDED names, DT_SONAME) of the ELF open at ``fd``; ((), None) when it has none or is
    malformed. Bounded: the header, the program headers, the dynamic segment and the strings."""
    return elf_facts(fd)[:2]


def elf_facts(fd: int) -> tuple[tuple[str, ...], str | None, str | None]:
    """(DT_NEEDED names, DT_SONAME, the x86-64 level it needs) of the ELF open at ``fd``, its
    program headers read once for both (:func:`elf_dynamic`, :func:`elf_x86_isa_needed`). A
    damaged part makes no claim: ((), None) for the links, None for the level."""
    return _facts(fd, _read_headers(fd))


def elf_loader_facts(
    fd: int,
) -> tuple[str | None, tuple[str, ...], tuple[str, ...], str | None]:
    """(PT_INTERP, the DT_RPATH/DT_RUNPATH entries, DT_NEEDED, DT_SONAME) of the ELF open at
    ``fd``: what the loader searches with (``capplan doctor``'s driver check); a damaged part
    makes no claim (None, ())."""
    found = _read_headers(fd)
    needed, soname, _, rpaths = _all_facts(fd, found)
    interp: str | None = None
    for p_type, p_offset, _, p_filesz in found[2] if found else ():
        if p_type == _PT_INTERP:
            try:
                raw = _pread(fd, min(p_filesz, 4096), p_offset)
            except _DAMAGED:
                break
            interp = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape") or None
            break
    return interp, rpaths, needed, soname


def _read_headers(fd: int) -> _Headers | None:
    """:func:`_program_headers`, None for a damaged table as for a missing one."""
    try:
        return _program_headers(fd)
    except _DAMAGED:
        return None


def _facts(fd: int, found: _Headers | None) -> tuple[tuple[str, ...], str | None, str | None]:
    return _all_facts(fd, found)[:3]


def _all_facts(
    fd: int, found: _Headers | None
) -> tuple[tuple[str, ...], str | None, str | None, tuple[str, ...]]:
    """:func:`_facts` and the RPATH/RUNPATH entries, from one read of the dynamic section."""
    if found is None:
        return (), None, None, ()
    try:
        needed, soname, rpaths = _elf_dynamic(fd, found)
    except _DAMAGED:
        needed, soname, rpaths = (), None, ()  # a damaged header: no claim about its links
    try:
        level = _elf_x86_isa_needed(fd, found)
    except _DAMAGED:
        level = None
    return needed, soname, level, rpaths


# (byte order, 64-bit, [(p_type, p_offset, p_vaddr, p_filesz)], where the table ends)
_Headers = tuple[str, bool, list[tuple[int, int, int, int]], int]


def _program_headers(fd: int) -> _Headers | None:
    """(byte order, 64-bit, [(p_type, p_offset, p_vaddr, p_filesz)], the table's end offset) of
    the ELF open at ``fd``; None when its header is not a readable ELF header. Bounded: 4096
    entries at most."""
    head = _pread(fd, 64, 0)
    if len(head) < 52 or head[:4] != _ELF or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    wide = head[4] == 2
    if wide and len(head) < 64:
        return None
    end = "<" if head[5] == 1 else ">"
    if wide:
        phoff, phentsize, phnum = (
            struct.unpack_from(end + "Q", head, 0x20)[0],
            *struct.unpack_from(end + "HH", head, 0x36),
        )
        ph = struct.Struct(end + "IIQQQQQQ")
    else:
        phoff, phentsize, phnum = (
            struct.unpack_from(end + "I", head, 0x1C)[0],
            *struct.unpack_from(end + "HH", head, 0x2A),
        )
        ph = struct.Struct(end + "IIIIIIII")
    if phentsize < ph.size or not 0 < phnum <= 4096:
        return None
    table = _pread(fd, phentsize * phnum, phoff)
    out: list[tuple[int, int, int, int]] = []
    for i in range(phnum):
        if (i + 1) * phentsize > len(table):
            break
        fields = ph.unpack_from(table, i * phentsize)
        if wide:
            p_type, _, p_offset, p_vaddr, _, p_filesz = fields[:6]
        else:
            p_type, p_offset, p_vaddr, _, p_filesz = fields[:5]
        out.append((p_type, p_offset, p_vaddr, p_filesz))
    return end, wide, out, phoff + phentsize * phnum


def _elf_dynamic(fd: int, found: _Headers) -> tuple[tuple[str, ...], str | None, tuple[str, ...]]:
    """(DT_NEEDED, DT_SONAME, the DT_RPATH/DT_RUNPATH entries split at ':')."""
    end, wide, headers, _ = found
    dyn = struct.Struct(end + ("qQ" if wide else "iI"))
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    for p_type, p_offset, p_vaddr, p_filesz in headers:
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, min(p_filesz, _MAX_DYNAMIC))
    if dynamic is None:
        return (), None, ()
    raw = _pread(fd, dynamic[1], dynamic[0])
    needed: list[int] = []
    paths: list[int] = []
    soname: int | None = None
    strtab = strsz = 0
    for off in range(0, len(raw) - dyn.size + 1, dyn.size):
        tag, value = dyn.unpack_from(raw, off)
        if tag == 0:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
        elif tag == _DT_SONAME:
            soname = value
        elif tag in (_DT_RPATH, _DT_RUNPATH):
            paths.append(value)
        elif tag == _DT_STRTAB:
            strtab = value
        elif tag == _DT_STRSZ:
            strsz = value
    file_off = next(
        (
            strtab - vaddr + offset
            for vaddr, offset, size in loads
            if vaddr <= strtab < vaddr + size
        ),
        None,
    )
    if file_off is None or not strsz:
        return (), None, ()
    strings = _pread(fd, min(strsz, _MAX_STRTAB), file_off)

    known: dict[int, str | None] = {}

    def text(index: int) -> str | None:
        # Each string once, and its NUL looked for within a bound: entries naming the same
        # or overlapping 16 MiB without a NUL must not copy it each.
        if index in known:
            return known[index]
        found = None
        if 0 <= index < len(strings):
            stop = strings.find(b"\0", index, index + _MAX_NAME)
            raw = strings[index : stop if stop >= 0 else index + _MAX_NAME]
            found = raw.decode("utf-8", "replace")
        known[index] = found
        return found

    # A library links some tens of libraries: the rest of a longer list is not read.
    names = tuple(n for n in (text(i) for i in needed[:_MAX_NEEDED]) if n)
    rpaths = tuple(
        p for t in (text(i) for i in paths[:_MAX_NEEDED]) if t for p in t.split(":") if p
    )
    return names, text(soname) if soname is not None else None, rpaths


# GNU property notes (the x86-64 psABI, "Program Property"; binutils' elf/common.h):
# NT_GNU_PROPERTY_TYPE_0 notes named "GNU" in PT_GNU_PROPERTY (or PT_NOTE) segments; the
# property GNU_PROPERTY_X86_ISA_1_NEEDED is a 4-byte bit set of the micro-architecture levels
# the object's code needs (`ld -z x86-64-v3` records it; GCC with -mneeded too).
_PT_NOTE = 4
_PT_GNU_PROPERTY = 0x6474E553
_NT_GNU_PROPERTY_TYPE_0 = 5
_GNU_PROPERTY_X86_ISA_1_NEEDED = 0xC0008002
_ISA_LEVELS = ((8, "x86-64-v4"), (4, "x86-64-v3"), (2, "x86-64-v2"), (1, "x86-64"))
_MAX_NOTES = 64 << 10
# Notes walked in one file, all its note segments together: a real library has a handful
# (build id, ABI tag, GNU properties); the x86-64 level is in the first GNU property note.
_MAX_NOTES_PER_FILE = 4096


def elf_x86_isa_needed(fd: int) -> str | None:
    """The highest x86-64 level (``x86-64-v3``) the ELF open at ``fd`` records as needed in
    its GNU property note; None when it records none (most binaries: their level is unknown, not
    baseline) or the file is not a readable ELF. Bounded: the program headers and 64 KiB of
    notes."""
    return elf_facts(fd)[2]


def _elf_x86_isa_needed(fd: int, found: _Headers) -> str | None:
    bits, _ = _note_bits(fd, found)
    return next((name for bit, name in _ISA_LEVELS if bits & bit), None)


def _note_bits(fd: int, found: _Headers) -> tuple[int, int]:
    """(GNU_PROPERTY_X86_ISA_1_NEEDED's bits, the notes walked) of the ELF's note segments.
    Each region (offset, size) is read and walked once however many program headers name it,
    64 KiB of notes a region, 64 KiB read in all, and :data:`_MAX_NOTES_PER_FILE` notes walked in
    all: 4,096 headers
    pointing at one 64 KiB region were 16.7 M notes walked."""
    end, wide, headers, _ = found
    segments = [h for h in headers if h[0] == _PT_GNU_PROPERTY] or [
        h for h in headers if h[0] == _PT_NOTE
    ]
    align = 8 if wide else 4
    bits = 0
    walked = 0
    left = _MAX_NOTES_PER_FILE * 16  # bytes read, all regions together
    for offset, size in sorted({(h[1], min(h[3], _MAX_NOTES)) for h in segments}):
        if walked >= _MAX_NOTES_PER_FILE or left <= 0:
            break
        data = _pread(fd, min(size, left), offset)
        left -= len(data) or 1
        pos = 0
        while pos + 12 <= len(data) and walked < _MAX_NOTES_PER_FILE:
            walked += 1
            namesz, descsz, kind = struct.unpack_from(end + "III", data, pos)
            name_at = pos + 12
            # The descriptor and the next note start at the segment's alignment, counted from
            # the note's start (glibc's ELF_NOTE_DESC_OFFSET / ELF_NOTE_NEXT_OFFSET).
            desc_at = pos + _align(12 + namesz, align)
            next_note = pos + _align(desc_at - pos + descsz, align)
            if next_note > len(data) or next_note <= pos:
                break
            if kind == _NT_GNU_PROPERTY_TYPE_0 and data[name_at : name_at + namesz] == b"GNU\0":
                bits |= _isa_bits(data[desc_at : desc_at + descsz], end, align)
            pos = next_note
    return bits, walked


def _align(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def _isa_bits(desc: bytes, end: str, align: int) -> int:
    """GNU_PROPERTY_X86_ISA_1_NEEDED's bits in one note's properties (pr_type, pr_datasz,
    data padded to the alignment)."""
    pos = 0
    while pos + 8 <= len(desc):
        pr_type, pr_size = struct.unpack_from(end + "II", desc, pos)
        data_at = pos + 8
        if pr_type == _GNU_PROPERTY_X86_ISA_1_NEEDED and pr_size >= 4:
            return int(struct.unpack_from(end + "I", desc, data_at)[0])
        pos = data_at + _align(pr_size, align)
    return 0


# --- packages ---------------------------------------------------------------------------------


def _dist_packages(site: Path, owners: dict[str, str], packages: dict[str, Package]) -> None:
    """Owners of files under a site-packages directory, from each dist-info's RECORD."""
    try:
        entries = sorted(e for e in os.listdir(site) if e.endswith(".dist-info"))
    except OSError:
        return
    for entry in entries:
        name, _, version = entry[: -len(".dist-info")].rpartition("-")
        if not name:
            name, version = version, ""
        key = f"pip:{name.lower().replace('_', '-')}"
        packages[key] = Package(name.replace("_", "-"), version or None, "pip")
        record = site / entry / "RECORD"
        try:
            text = read_bounded(record, MAX_METADATA_BYTES).decode("utf-8", errors="replace")
            for row in csv.reader(io.StringIO(text, newline="")):
                if row and row[0]:
                    owners.setdefault(os.path.normpath(os.path.join(site, row[0])), key)
        except (OSError, csv.Error):
            continue


def _conda_packages(prefix: Path, owners: dict[str, str], packages: dict[str, Package]) -> None:
    meta = prefix / "conda-meta"
    try:
        names = sorted(n for n in os.listdir(meta) if n.endswith(".json"))
    except OSError:
        return
    for name in names:
        try:
            data = json.loads(read_bounded(meta / name, MAX_METADATA_BYTES).decode("utf-8"))
        except (OSError, ValueError, RecursionError):  # nested too deeply: unreadable too
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            continue
        key = f"conda:{data['name']}"
        version = data.get("version")
        packages[key] = Package(
            data["name"], version if isinstance(version, str) else None, "conda"
        )
        files = data.get("files")
        for rel in files if isinstance(files, list) else ():  # a damaged file's 5 or true: none
            if isinstance(rel, str):
                owners.setdefault(os.path.normpath(os.path.join(prefix, rel)), key)


def _site_dirs(root: Path) -> list[Path]:
    """site-packages directories at or under ``root`` (a venv, a conda prefix, a Nix output)."""
    found = []
    if any(n.endswith(".dist-info") for n in _listdir(root)):
        found.append(root)
    for lib in ("lib", "lib64"):
        for entry in sorted(_listdir(root / lib)):
            if entry.startswith("python"):
                for sub in ("site-packages", "dist-packages"):
                    candidate = root / lib / entry / sub
                    if candidate.is_dir():
                        found.append(candidate)
    return found


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def store_name(path: str) -> str:
    """``/nix/store/<hash>-python3.11-torch-2.5.1`` -> ``python3.11-torch-2.5.1``."""
    base = path[len(_STORE) :].split("/", 1)[0] if path.startswith(_STORE) else Path(path).name
    match = _STORE_NAME.match(base)
    return match.group(1) if match else base


# --- discovery --------------------------------------------------------------------------------


def _store_path_of(path: Path) -> Path:
    """The store path holding ``path`` (``/nix/store/<hash>-name``, without a subpath)."""
    text = str(path)
    return Path(_STORE + text[len(_STORE) :].split("/", 1)[0]) if text.startswith(_STORE) else path


def _nix_closure(path: Path, environ: Mapping[str, str]) -> list[Path] | None:
    """The closure of the store path holding ``path``; None without nix-store, or when nix-store
    does not know the path (a copy, a foreign store): then the path itself is checked."""
    tool = shutil.which("nix-store", path=environ.get("PATH"))
    if tool is None:
        return None
    top = _store_path_of(path)
    # A closure lists a store path a line (~100 bytes): 16 MiB is some 160,000 paths.
    done = run_bounded([tool, "--query", "--requisites", str(top)], timeout=120, limit=16 << 20)
    if isinstance(done, str):
        raise NixError(
            f"nix-store --query --requisites {top} failed: {done}",
            hint="check the Nix installation, or give a directory that is not a store path",
        )
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace")
        line = next((s for s in stderr.splitlines() if s.strip()), "no output").strip()
        say(f"nix-store does not know {top} ({line[:160]}): checking the path itself")
        return None
    return [Path(p) for p in sorted(done.stdout.decode(errors="replace").split())]


def sources_for(paths: Sequence[Path]) -> list[Source]:
    """What each PATH is; InvalidInputError (exit 4) for a missing one, BinaryFormatError (12) for
    one that is neither a directory nor a regular file."""
    sources = []
    for path in paths:
        shown = str(path)
        if not os.path.lexists(path) or not path.exists():
            raise InvalidInputError(
                f"no such file or directory: {shown}",
                hint="give a virtualenv, site-packages, conda prefix, store path, wheel or library",
            )
        if path.is_dir():
            kind = "nix" if str(path.resolve()).startswith(_STORE) else "dir"
        elif path.is_file():
            kind = "wheel" if path.suffix == ".whl" else "file"
        else:
            raise BinaryFormatError(
                f"not a regular file or directory: {shown} is {special_kind(path)}",
                hint="give a file or a directory",
            )
        sources.append(Source(path, kind))
    return sources


def default_sources(environ: Mapping[str, str]) -> list[Source]:
    """With no PATH: the site-packages of the ``python3`` on PATH, ``$CONDA_PREFIX`` when set, and
    the current Nix profile when there is one."""
    sources: list[Source] = []
    python = shutil.which("python3", path=environ.get("PATH"))
    if python is not None:
        script = (
            "import json, site, sysconfig; p = sysconfig.get_paths(); "
            "print(json.dumps(sorted({p['purelib'], p['platlib']})))"
        )
        done = run_bounded([python, "-c", script], timeout=30, limit=64 << 10)
        dirs: object = []
        if not isinstance(done, str) and done.returncode == 0:
            with contextlib.suppress(ValueError, RecursionError):  # not JSON, not UTF-8, too deep
                dirs = json.loads(done.stdout)
        for entry in dirs if isinstance(dirs, list) else []:
            if isinstance(entry, str) and os.path.isdir(entry):
                sources.append(Source(Path(entry), "dir", f"site-packages of {python}"))
    conda = environ.get("CONDA_PREFIX", "").strip()
    if conda and os.path.isdir(conda):
        sources.append(Source(Path(conda), "dir", "$CONDA_PREFIX"))
    home = environ.get("HOME", "").strip()
    profile = Path(home) / ".nix-profile" if home else None
    if profile is not None and profile.is_dir():
        real = profile.resolve()
        kind = "nix" if str(real).startswith(_STORE) else "dir"
        sources.append(Source(real, kind, f"the current Nix profile ({profile})"))
    seen: set[str] = set()
    unique = []
    for source in sources:
        key = os.path.realpath(source.path)
        if key not in seen:
            seen.add(key)
            unique.append(source)
    return unique


# --- scanning ---------------------------------------------------------------------------------


_PSEUDO_DIRS = frozenset({"/proc", "/sys", "/dev", "/run"})


def _candidates(root: Path, store: bool = False) -> Iterator[tuple[str, int]]:
    """Library-like regular files under ``root`` (sorted walk, each inode once): names ending in
    ``.so``/``.so.N``, or executable files of 64 bytes or more; directory symlinks are not
    followed, file symlinks only to files under ``root`` (with ``store``, a Nix environment,
    under /nix/store too)."""
    seen: set[tuple[int, int]] = set()
    inside = os.path.join(os.path.realpath(root), "")
    for directory, dirs, files in os.walk(root, followlinks=False):
        # The kernel's file systems hold no libraries, and reading their files can fail
        # (EIO) or never end: ``doctor /`` does not walk them.
        dirs[:] = sorted(
            d for d in dirs if os.path.normpath(os.path.join(directory, d)) not in _PSEUDO_DIRS
        )
        for name in sorted(files):
            path = os.path.join(directory, name)
            try:
                info = os.stat(path)
                # A link to a file outside the environment (a venv's bin/python3 -> /usr/bin)
                # is not the environment's: not read, not counted. In a Nix environment (a
                # profile, a buildEnv: symlink forests) the store it links into is.
                if os.path.islink(path):
                    real = os.path.realpath(path)
                    if not real.startswith(inside) and not (store and real.startswith(_STORE)):
                        continue
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            # Every file named as a library (even empty: the loader cannot load it); other
            # executables only when they can hold an ELF header.
            if not _LIB_NAME.search(name) and (info.st_size < 64 or not info.st_mode & 0o111):
                continue
            key = (info.st_dev, info.st_ino)
            if key in seen:
                continue
            seen.add(key)
            yield path, info.st_size


# Device-code entries up to this size (stored, and plain) are read to see whether they hold
# anything to launch: stubs are a few kB (libcufftw's sm_75 cubin: 1,904 bytes; nvcc's link
# stubs about 1.5 kB, cuDNN's empty PTX under 1 kB); a bigger entry is taken as code. 16 kB
# plain, not less: libcudnn_ext.so.9 (cuDNN 9.24) holds nothing but stubs, 18 of them between 4
# and 16 kB; with a 4 kB bound its sm_100f/sm_120f/sm_121 stubs counted as code and doctor
# said it could not run on an H100.
_STUB_MAX = 16 << 10
_STUB_PLAIN_MAX = 16 << 10
# A container up to this size is read in one call for its small entries.
_CONTAINER_READ = 1 << 20
# The toolkit note is read from the smallest cubin of a library, if it is at most this big.
_NOTE_MAX = 4 << 20
# What the compressed entries of one file may decode to, all together (docs/limits.md): stubs
# are read up to 16 KiB each and one cubin for its toolkit note, so a real library needs a few
# MiB; a file of LZ4 bombs stops here, and its further compressed entries count as code.
DECODE_MAX = 64 << 20


class _Budget:
    """The bytes one file's compressed entries may still decode to (:data:`DECODE_MAX`)."""

    __slots__ = ("left", "spent")

    def __init__(self, total: int) -> None:
        self.left = total
        self.spent = 0

    def take(self, size: int) -> bool:
        if size > self.left:
            return False
        self.left -= size
        self.spent += size
        return True


@functools.cache
def _zstd() -> Callable[[bytes, int], bytes] | None:
    """A zstd decoder (the zstandard package, the ``zstd`` extra), or None: then
    zstd-compressed entries are not opened and count as code, as before issue 38."""
    try:
        import zstandard

        decoder = zstandard.ZstdDecompressor()  # one per process: making one costs more

        def decode(data: bytes, size: int) -> bytes:
            try:
                return bytes(decoder.decompress(data, max_output_size=size))
            except zstandard.ZstdError as error:
                raise ValueError(str(error)) from None

        return decode
    except ImportError:
        return None


def _payload(
    read: Callable[[int, int], bytes],
    entry: Any,
    at: int,
    limit: int = 64 << 20,
    budget: _Budget | None = None,
) -> bytes | None:
    """The plain bytes of the entry whose header is at file offset ``at`` (``read(offset,
    size)``); None when they cannot be had (an unknown compression, no zstd decoder, damaged
    data), are bigger than ``limit``, or would decode past what ``budget`` has left."""
    data = read(at, entry.header_size + entry.payload_size)
    if len(data) < entry.header_size + entry.payload_size:
        return None
    payload = data[entry.header_size :]
    if entry.compression == "none":
        return payload if len(payload) <= limit else None
    (full,) = struct.unpack_from("<Q", data, 0x38) if entry.header_size >= 0x40 else (0,)
    if not 0 < full <= limit:
        return None
    if entry.compression in ("lz4", "zstd") and budget is not None and not budget.take(full):
        return None  # the file has decoded what one file may: no claim about the rest
    try:
        if entry.compression == "lz4":
            return lz4_block(payload, full)
        decode = _zstd() if entry.compression == "zstd" else None
        if decode is not None:
            return decode(payload, full)
    except (ValueError, IndexError):  # damaged compressed data: no claim
        return None
    return None


@dataclass(frozen=True, slots=True)
class _Device:
    sass: tuple[Target, ...]
    ptx: tuple[Ptx, ...]
    stubs: int
    toolkit: str | None
    groups: tuple[Group, ...]
    unreadable: tuple[str, ...] = ()


def _unreadable_cubin(entry: Any, why: str) -> str:
    return f"{entry.capability.sm} entry: not a readable cubin ({why})"


def _device_details(fd: int, reports: Sequence[Any], budget: _Budget | None = None) -> _Device:
    """The device code of a library as doctor judges it: entries with nothing to launch left
    out (counted in ``stubs``), PTX with ISA version and size (two 16-bit fields of the PTX
    entry header at 0x18 minor and 0x1A major; the decompressed size at 0x38), the toolkit the
    smallest cubin's note names, and the targets of each container holding several."""
    sass: set[Target] = set()
    ptx: dict[tuple[Target, tuple[int, int] | None], Ptx] = {}
    groups: list[Group] = []
    stubs = 0
    smallest: tuple[int, Any, int] | None = None  # (payload size, entry, file offset)
    toolkit: str | None = None
    unreadable: list[str] = []
    budget = _Budget(DECODE_MAX) if budget is None else budget
    for report in reports:
        # The fatbin containers of each file's CUDA code (the registry's readers' codes).
        for loc in [x for code in report.code for x in getattr(code, "located", ())]:
            base = getattr(loc, "base", 0)
            c_sass: set[Target] = set()
            c_ptx: set[Target] = set()
            read = _container_reader(fd, loc.container, base)
            for entry in loc.container.entries:
                at = entry.offset - base
                kind = entry.kind.value
                if kind not in ("sass", "ptx"):
                    continue
                plain = (
                    _payload(read, entry, at, _STUB_PLAIN_MAX, budget)
                    if entry.payload_size <= _STUB_MAX
                    else None
                )
                if kind == "sass":
                    if plain is not None:
                        toolkit = _newer(toolkit, cubin_toolkit(plain))
                        try:
                            if not cubin_has_kernel(plain):
                                stubs += 1
                                continue
                        except CubinError as error:
                            unreadable.append(_unreadable_cubin(entry, str(error)))
                            continue
                    else:
                        why = _stored_cubin_problem(read, entry, at)
                        if why is not None:
                            unreadable.append(_unreadable_cubin(entry, why))
                            continue
                    if plain is None and (smallest is None or entry.payload_size < smallest[0]):
                        smallest = (entry.payload_size, entry, at)
                    c_sass.add(entry.capability)
                    sass.add(entry.capability)
                    continue
                head = read(at, 0x40)
                if plain is not None and not ptx_has_code(plain):
                    # Nothing to launch, yet its ISA says which toolkit made the library.
                    stubs += 1
                    if len(head) >= 0x1C:
                        minor, major = struct.unpack_from("<HH", head, 0x18)
                        toolkit = _newer(toolkit, isa_cuda((major, minor)))
                    continue
                isa: tuple[int, int] | None = None
                size = entry.payload_size
                if len(head) >= 0x40 and struct.unpack_from("<H", head, 0)[0] == _PTX_KIND:
                    minor, major = struct.unpack_from("<HH", head, 0x18)
                    isa = (major, minor) if 1 <= major <= 99 else None
                    if entry.compression != "none":
                        (full,) = struct.unpack_from("<Q", head, 0x38)
                        size = full if 0 < full < 1 << 34 else size
                key = (entry.capability, isa)
                old = ptx.get(key)
                ptx[key] = Ptx(entry.capability, isa, size + (old.size if old else 0))
                c_ptx.add(entry.capability)
            if len(c_sass | c_ptx) > 1:
                groups.append((tuple(sorted(c_sass)), tuple(sorted(c_ptx))))
    if toolkit is None and smallest is not None and smallest[0] <= _NOTE_MAX:
        read_all = functools.partial(_pread_at, fd)
        plain = _payload(read_all, smallest[1], smallest[2], budget=budget)
        toolkit = cubin_toolkit(plain) if plain is not None else None
    caps = {p.capability for p in ptx.values()}
    for code in (code for report in reports for code in report.code):
        for cap in getattr(code, "ptx", ()):
            if cap not in caps and not getattr(code, "located", ()):
                ptx[(cap, None)] = Ptx(cap, None, 0)  # seen without header detail: ISA unknown
    return _Device(
        tuple(sorted(sass)),
        tuple(sorted(ptx.values(), key=lambda p: (p.capability, p.isa or (0, 0)))),
        stubs,
        toolkit,
        tuple(sorted(groups)),
        tuple(unreadable),
    )


def _pread_at(fd: int, at: int, size: int) -> bytes:
    return _pread(fd, size, at)


def _stored_cubin_problem(read: Callable[[int, int], bytes], entry: Any, at: int) -> str | None:
    """Why a cubin stored uncompressed, too big to read whole, cannot be read, from its ELF
    header alone (its section table must lie inside the entry); None when it can, or when it is
    no 64-bit little-endian ELF file (no claim)."""
    if entry.compression != "none":
        return None
    head = read(at + entry.header_size, 64)
    if head[:6] != b"\x7fELF\x02\x01":
        return None
    return cubin_header_problem(head, min(entry.payload_size, 1 << 62))


def _container_reader(fd: int, container: Any, base: int) -> Callable[[int, int], bytes]:
    """``read(offset, size)`` for the entries of ``container``: one read of a small container,
    sliced, instead of one call per entry (cuBLASLt: 4,796 small entries)."""
    start = container.offset - base
    total = 16 + container.declared_size
    if total > _CONTAINER_READ:
        return lambda at, size: _pread(fd, size, at)
    blob = _pread(fd, total, start)

    def read(at: int, size: int) -> bytes:
        if at - start + size > len(blob):
            return _pread(fd, size, at)
        return blob[at - start : at - start + size]

    return read


def _newer(a: str | None, b: str | None) -> str | None:
    if a is None or b is None or a == b:
        return a or b
    return max(a, b, key=lambda v: tuple(int(x) for x in v.split(".")))


# ELF e_type: a shared object (every library, and PIE programs) or a fixed-address program.
_LOADABLE_TYPES = (2, 3)
_ET_REL = 1
_PT_LOAD = 1
# A GNU ld linker script named like a library (libc.so, libpthread.so in a conda prefix): read by
# the static linker at build time, never by the dynamic loader.
_LD_SCRIPT = re.compile(rb"^\s*(?:/\*.*?\*/\s*)*(?:OUTPUT_FORMAT|GROUP|INPUT)\s*\(", re.S)


def loader_problem(fd: int, size: int) -> str | None:
    """Why the dynamic loader cannot load the ELF file open at ``fd`` (``size`` bytes), from
    its ELF and program headers the way ld.so reads them (glibc elf/dl-load.c: the header, the
    program header table, then each PT_LOAD segment mapped from the file); None when they are
    whole. A file cut inside a loaded segment is refused: the loader dies of SIGBUS touching the
    missing pages, or maps zeros for the tail of its last page."""
    return _loader_problem(fd, size, _read_headers(fd))


def _loader_problem(fd: int, size: int, found: _Headers | None) -> str | None:
    """:func:`loader_problem` with the program headers already read (``found``)."""
    if size == 0:
        return "an empty file"
    head = _pread(fd, 64, 0)
    if head[:4] == _ELF[: len(head)] and len(head) < (64 if head[4:5] != b"\x01" else 52):
        return f"truncated: {size} bytes, shorter than an ELF header"
    if head[:4] != _ELF:
        return f"not an ELF file (it starts with bytes {head[:8].hex()})"
    if head[4] not in (1, 2) or head[5] not in (1, 2):
        return f"its ELF header is damaged (class {head[4]}, byte order {head[5]})"
    (e_type,) = struct.unpack_from("<H" if head[5] == 1 else ">H", head, 0x10)
    if e_type == _ET_REL:
        return None  # an object file (an AMD code object named directly): no loader reads it
    if e_type not in _LOADABLE_TYPES:
        return f"its ELF header is damaged (file type {e_type}, not a library or a program)"
    if found is None:
        return "its ELF header is damaged (no readable program header table)"
    _, _, headers, table_end = found
    if table_end > size:
        return f"truncated: {size} bytes, its program headers end at byte {table_end}"
    loads = [offset + filesz for kind, offset, _, filesz in headers if kind == _PT_LOAD]
    if not loads:
        return "its ELF header is damaged (no loadable segment)"
    if max(loads) > size:
        return f"truncated: {size} bytes, its segments need {max(loads)}"
    return None


_SHT_SYMTAB = 2
_MAX_SECTIONS = 1 << 16
_STATIC_CUDART = b"libcudart_static"


def _static_cudart(fd: int, size: int) -> bool:
    """Whether the ELF's symbol table names cudart's static library (``libcudart_static_<hash>``
    symbols, which ``-cudart static`` links in). Bounded: the section headers and a string table
    of at most 64 MiB; a stripped file or a damaged header says no."""
    head = _pread(fd, 64, 0)
    if len(head) < 64 or head[4] != 2 or head[5] != 1:
        return False
    try:
        (shoff,) = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
        if shentsize < 64 or not 0 < shnum <= _MAX_SECTIONS or shoff + shnum * shentsize > size:
            return False
        table = _pread(fd, shnum * shentsize, shoff)
        row = struct.Struct("<IIQQQQI")
        headers = [row.unpack_from(table, i * shentsize) for i in range(shnum)]
        for _, kind, _, _, _, _, link in headers:
            if kind != _SHT_SYMTAB or link >= shnum:
                continue
            offset, length = headers[link][4], headers[link][5]
            if length > _MAX_STRTAB * 4:
                return False
            return _STATIC_CUDART in _pread(fd, length, offset)
    except _DAMAGED:
        return False
    return False


def _machine(head: bytes) -> str | None:
    """The CPU an ELF file is for, from e_machine (bytes 18-19 in the file's byte order)."""
    if len(head) < 20 or head[:4] != _ELF or head[5] not in (1, 2):
        return None
    (code,) = struct.unpack_from("<H" if head[5] == 1 else ">H", head, 18)
    return _MACHINES.get(code)


def _library(path: str, shown: str, package: str, size: int) -> Library:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        return Library(shown, package, size=size, problems=(f"cannot read: {error.strerror}",))
    try:
        return _read_library(fd, path, shown, package, size)
    except OSError as error:  # EIO from a failing disk, or a kernel file linked in
        return Library(shown, package, size=size, problems=(f"cannot read: {error.strerror}",))
    finally:
        os.close(fd)


def _read_library(fd: int, path: str, shown: str, package: str, size: int) -> Library:
    from capplan.adapters.fatbin import inspect_paths

    if _pread(fd, 4, 0) != _ELF:
        # A file named as a library that is neither ELF nor a linker script: the loader
        # refuses it ("invalid ELF header"); other non-ELF executables are scripts.
        named = _LIB_NAME.search(os.path.basename(path))
        if not named or _LD_SCRIPT.match(_pread(fd, 4096, 0)):
            return Library(shown, package, size=size)
        return Library(shown, package, size=size, unloadable=loader_problem(fd, size))
    # The program headers are read once, for the loader's verdict and the ELF facts alike.
    found = _read_headers(fd)
    unloadable = _loader_problem(fd, size, found)
    needed, soname, level, rpaths = _all_facts(fd, found)
    machine = _machine(_pread(fd, 20, 0))
    # A cuNN folder on its RPATH/RUNPATH ($ORIGIN/../nvidia/cu13/lib): the CUDA libraries
    # it loads come from there. Only for a library that uses CUDA (device code, or a CUDA
    # library among its DT_NEEDED): torch sets that RPATH on libgomp too.
    hint = next((m for m in map(cuda_major_of_name, rpaths) if m is not None), None)
    uses_cuda = any(n.startswith(_CUDA_LIBS) for n in needed)
    if unloadable is not None:
        # The loader refuses it: it runs nowhere, whatever device code it holds, so its
        # bytes are not searched (a sparse 64 GiB file of zeros took minutes).
        return Library(shown, package, needed=needed, soname=soname, size=size,
                       cpu_level=level, unloadable=unloadable, machine=machine,
                       major_hint=hint if uses_cuda else None)  # fmt: skip
    try:
        reports = inspect_paths([Path(path)])
    except BinaryFormatError as error:
        return Library(shown, package, needed=needed, soname=soname, size=size,
                       problems=(error.one_line(),), cpu_level=level,
                       unloadable=unloadable, machine=machine,
                       major_hint=hint)  # fmt: skip
    device = _device_details(fd, reports)
    # Without device code of its own, a library may still hold cudart linked statically
    # (cupy-cuda13x's runtime module): its symbol table says so, its package the major.
    static = not (device.sass or device.ptx or device.stubs or device.unreadable) and (
        _static_cudart(fd, size)
    )
    if not (uses_cuda or static or device.sass or device.ptx or device.stubs):
        hint = None
    amd = tuple(sorted({t for r in reports for c in r.code for t in getattr(c, "targets", ())}))
    problems = (*(p for r in reports for p in r.problems), *device.unreadable)
    return Library(shown, package, device.sass, device.ptx, amd, needed, soname, size,
                   problems, major_hint=hint, cpu_level=level, unloadable=unloadable,
                   machine=machine, stubs=device.stubs, toolkit=device.toolkit,
                   groups=device.groups, static_cudart=static,
                   unreadable=device.unreadable)  # fmt: skip


def _owner_maps(root: Path) -> tuple[dict[str, str], dict[str, Package]]:
    owners: dict[str, str] = {}
    packages: dict[str, Package] = {}
    _conda_packages(root, owners, packages)
    for site in _site_dirs(root):
        _dist_packages(site, owners, packages)
    return owners, packages


def _fallback_package(root: Path, path: str, kind: str) -> tuple[str, Package]:
    if kind == "nix" or path.startswith(_STORE):
        top = _STORE + path[len(_STORE) :].split("/", 1)[0]
        name = store_name(top)
        return f"nix:{name}", Package(name, None, "nix")
    rel = os.path.relpath(path, root)
    first = rel.split(os.sep, 1)[0] if os.sep in rel else rel
    name = f"{root.name}/{first}" if os.sep in rel else rel
    return f"unowned:{name}", Package(name, None, "unowned")


def scan_sources(
    sources: Sequence[Source],
    *,
    environ: Mapping[str, str] | None = None,
    on_total: Callable[[int], None] | None = None,
    on_file: Callable[[int], None] | None = None,
    jobs: int | None = None,
) -> Scan:
    """Read every library of ``sources``. ``on_total(bytes)`` once the files are listed, then
    ``on_file(bytes)`` after each (progress). ``jobs``: worker processes (default: the CPUs this
    process may use, at most 8; 1 reads in this process). The result does not depend on it."""
    env = os.environ if environ is None else environ
    plan: list[tuple[str, str, str, int]] = []  # (path, shown, package key, size)
    packages: dict[str, Package] = {}
    with contextlib.ExitStack() as stack:
        for source in sources:
            roots = [source.path]
            if source.kind == "nix":
                closure = _nix_closure(source.path.resolve(), env)
                roots = closure if closure else [source.path]
            if source.kind == "wheel":
                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="capplan-")))
                key, package = _wheel_package(source.path)
                packages[key] = package
                for rel, size in _extract_wheel(source.path, tmp):
                    plan.append((str(tmp / rel), f"{source.path}!{rel}", key, size))
                continue
            if source.kind == "file":
                _check_library(source.path)
                key = f"file:{source.path}"
                packages[key] = Package(source.path.name, None, "file")
                plan.append((str(source.path), str(source.path), key, source.path.stat().st_size))
                continue
            for root in roots:
                # A store path is the package a Nix user installed, whatever dist-info it holds.
                owners, found = _owner_maps(root) if source.kind != "nix" else ({}, {})
                packages.update(found)
                shown_root = str(source.path) if root == source.path else str(root)
                for path, size in _candidates(root, source.kind == "nix"):
                    owner = owners.get(os.path.normpath(path))
                    if owner is None:
                        owner, package = _fallback_package(root, path, source.kind)
                        packages.setdefault(owner, package)
                    shown = os.path.join(shown_root, os.path.relpath(path, root))
                    plan.append((path, shown, owner, size))
        total = sum(item[3] for item in plan)
        if on_total is not None:
            on_total(total)
        libraries = _read_all(plan, jobs, on_file)
    return Scan(tuple(libraries), packages, len(plan), total)


def _read_one(item: tuple[str, str, str, int]) -> Library:
    return _library(*item)


def _read_all(
    plan: Sequence[tuple[str, str, str, int]],
    jobs: int | None,
    on_file: Callable[[int], None] | None,
) -> list[Library]:
    """Every library of ``plan``, in ``plan``'s order; files are independent, so with more than
    one CPU a pool of forked workers reads them (adapters/pool.py)."""
    return map_files(_read_one, plan, [item[3] for item in plan], jobs=jobs, on_done=on_file)


def _check_library(path: Path) -> None:
    """A library named directly must be a readable ELF file (exit 12 otherwise)."""
    try:
        with open_regular(path) as handle:
            head = handle.read(4)
    except OSError as error:
        raise BinaryFormatError(
            f"cannot read {path}: {error.strerror or error}", hint="check the path's permissions"
        ) from None
    if head != _ELF:
        shown = f"starts with bytes {head.hex()}" if head else "an empty file"
        raise BinaryFormatError(
            f"not an ELF library or a wheel: {path} ({shown})",
            hint="give a .so, a .whl, or a directory such as a virtualenv or site-packages",
        )


def _wheel_package(path: Path) -> tuple[str, Package]:
    parts = path.name[: -len(".whl")].split("-")
    name = parts[0].replace("_", "-")
    version = parts[1] if len(parts) > 1 else None
    return f"pip:{name.lower()}", Package(name, version, "wheel")


_WHEEL_ERRORS: tuple[type[Exception], ...] = (*ZIP_ERRORS, OSError)


def _extract_wheel(path: Path, into: Path) -> list[tuple[str, int]]:
    """Extract the wheel's library members (never anything else) into ``into``."""
    out = []
    try:
        with zipfile.ZipFile(path) as archive:
            for info in sorted(archive.infolist(), key=lambda i: i.filename):
                name = info.filename
                if info.is_dir() or not _LIB_NAME.search(name):
                    continue
                parts = [p for p in name.split("/") if p not in ("", ".", "..")]
                target = into.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with open_member(archive, info) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 8 << 20)
                out.append(("/".join(parts), info.file_size))
    except _WHEEL_ERRORS as error:
        raise BinaryFormatError(
            f"{path} is not a readable wheel: {error}",
            hint="check the download; a truncated wheel cannot be read",
        ) from None
    return out


def say(message: str) -> None:
    sys.stderr.write(f"capplan: {printable(message)}\n")  # paths of the environment, echoed
