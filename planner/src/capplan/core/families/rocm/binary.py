"""The ROCm family's binary reader: clang offload bundles (plain, or compressed ``CCOB``)
anywhere in a file, bare offload-bundle files, and bare AMDGPU ELF code objects, read by
:mod:`capplan.core.families.rocm.amdgpu` through the walker's
:class:`~capplan.core.binaries.reading.Access`.

``capplan inspect`` lists them in its own ``AMD`` column and ``amd`` JSON object (issue 16),
with their own problems: the file's CUDA fields never change for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from capplan.core.binaries.buffers import Buffer, Finder
from capplan.core.binaries.elf import NO_SECTION, ElfSections, complement
from capplan.core.binaries.reading import Access, Read
from capplan.core.families.rocm import amdgpu
from capplan.core.families.rocm.target import AmdTarget
from capplan.errors import BinaryFormatError

__all__ = ["AmdCode", "AmdLocated", "RocmReader"]

# HIP puts a program's offload bundles in `.hip_fatbin` (ROCM.md). A file that links the HIP
# runtime may also load code objects it embeds elsewhere (hipModuleLoadData), so in such a file
# every data section is searched, as is a file whose section table cannot be read.
_AMD_SECTIONS = frozenset({".hip_fatbin"})
_HIP_RUNTIME = b"libamdhip64.so"


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
class AmdCode:
    """The AMD device code of one file: gfx targets in bundles and a bare code object."""

    targets: tuple[AmdTarget, ...] = ()
    code_object: AmdTarget | None = None  # the file itself is an AMDGPU ELF for this target
    bundles: tuple[AmdLocated, ...] = ()
    problems: tuple[str, ...] = ()

    def found(self) -> bool:
        return bool(self.targets or self.bundles or self.code_object or self.problems)

    def runnable(self) -> tuple[str, ...]:
        return tuple(str(t) for t in self.targets)

    def json_fields(self, entries: bool) -> dict[str, Any]:
        bundles = [loc.bundle for loc in self.bundles]
        data: dict[str, Any] = {
            "targets": [str(t) for t in self.targets],
            "code_object": str(self.code_object) if self.code_object else None,
            "bundles": len(bundles),
            "compression": sorted({b.compression for b in bundles if b.compression}),
            # Compressed bundles whose targets were not read (zstd): their targets are unknown.
            "unopened": sum(1 for b in bundles if not b.opened),
            "sections": dict(sorted(Counter(loc.section for loc in self.bundles).items())),
            "problems": list(self.problems),
        }
        if entries:
            data["entries"] = [row for loc in self.bundles for row in loc.entries_json()]
        return {"amd": data}

    def cells(self) -> tuple[str, ...]:
        """gfx targets, plus what could not be read (a zstd-compressed bundle)."""
        parts = [str(t) for t in self.targets]
        unopened = [loc.bundle for loc in self.bundles if not loc.bundle.opened]
        for bundle in unopened:
            parts.append(f"[{bundle.compression} bundle, not opened]")
        return (" ".join(parts) or "-",)

    def entry_cells(self) -> list[tuple[str, ...]]:
        return [
            (
                row["section"],
                f"{row['bundle']:#x}",
                row["id"],
                row["target"] or "-",
                row["compression"],
            )
            for loc in self.bundles
            for row in loc.entries_json()
        ]


def _read(
    buf: Buffer,
    start: int,
    end: int,
    section_of: Callable[[int], str],
    access: Access,
    code_object: amdgpu.AmdCodeObject | None = None,
    skip: Sequence[tuple[int, int]] = (),
) -> AmdCode:
    """The AMD device code found in ``buf[start:end]`` outside the absolute ranges ``skip``
    (and the file's own code object, when it is one)."""
    bundles: list[amdgpu.Bundle] = []
    for part_start, part_end in complement(start, end, skip):
        bundles.extend(
            amdgpu.scan_amd(buf, part_start, part_end, release=access.release, find=access.find)
        )
    located = tuple(AmdLocated(section_of(b.offset - start), b, start) for b in bundles)
    targets: set[AmdTarget] = {t for b in bundles for t in b.targets}
    problems = [p for b in bundles for p in b.problems]
    if code_object is not None:
        problems.extend(code_object.problems)
        if code_object.target is not None:
            targets.add(code_object.target)
    if not located and code_object is None:
        return AmdCode()
    return AmdCode(
        targets=tuple(sorted(targets)),
        code_object=code_object.target if code_object else None,
        bundles=located,
        problems=tuple(problems),
    )


def _no_amd_code(
    start: int, end: int, sections: ElfSections, find: Finder
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
    return complement(start, end, hip)


class RocmReader:
    """AMD offload bundles and code objects."""

    magics: tuple[bytes, ...] = (amdgpu.BUNDLE_MAGIC, amdgpu.CCOB_MAGIC)
    columns: tuple[str, ...] = ("AMD",)
    entry_columns: tuple[str, ...] = ("section", "bundle", "id", "target", "compression")
    # inspect --entries draws the bundles' table only when some file has a bundle.
    always_listed: bool = False

    def empty(self) -> AmdCode:
        return AmdCode()

    def code_object(self, buf: Buffer, start: int, end: int) -> AmdCode | None:
        # A bare AMDGPU code object holds no fatbin and no bundle: its e_flags say it all.
        found = amdgpu.amdgpu_elf_target(buf, start, end)
        if found is None:
            return None
        return _read(buf, start, start, lambda _offset: NO_SECTION, Access(), found)

    def read_elf(
        self,
        buf: Buffer,
        start: int,
        end: int,
        sections: ElfSections,
        access: Access,
        skip: Sequence[tuple[int, int]],
    ) -> Read:
        # No AMD bundle sits inside what ``skip`` holds (sections without device code, valid
        # NVIDIA containers), nor outside `.hip_fatbin` in a file that does not load HIP code.
        ranges = [*skip, *_no_amd_code(start, end, sections, access.find or buf.find)]
        return Read(_read(buf, start, end, sections.name_at, access, skip=ranges))

    def read_bare(self, buf: Buffer, start: int, end: int, name: str, access: Access) -> Read:
        """A bare offload bundle file (``clang --cuda-device-only``) or a bare ``CCOB`` file."""
        code = _read(buf, start, end, lambda _offset: NO_SECTION, access)
        if not code.bundles:
            raise BinaryFormatError(
                f"{name} starts like a clang offload bundle but is not a valid one",
                hint="the file is truncated or corrupt; rebuild it",
            )
        return Read(code)
