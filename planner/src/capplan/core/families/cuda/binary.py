"""The CUDA family's binary reader: fatbin containers in ELF files and bare fatbin files.

What ``capplan inspect`` lists of a file's CUDA code (its SASS, PTX and LTO-IR targets, the
containers and the sections holding them), read by :mod:`capplan.core.families.cuda.fatbin`
through the walker's :class:`~capplan.core.binaries.reading.Access`; and what a prebuilt
binary's code runs on (``capplan limits --binary``). The CUDA fields are the file's record's
own (``inspect --json`` has always listed them at its top level), so the problems of the
containers make the file partial.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from capplan.core.binaries.buffers import Buffer
from capplan.core.binaries.elf import NO_SECTION, ElfSections, complement
from capplan.core.binaries.reading import Access, Read, Report
from capplan.core.families.cuda import fatbin
from capplan.core.families.cuda.capability import Capability
from capplan.core.model.runs import RunLevel
from capplan.errors import BinaryFormatError

if TYPE_CHECKING:
    from capplan.core.families.cuda.compat import Verdict

__all__ = [
    "BinaryLimits",
    "CudaCode",
    "CudaReader",
    "LocatedContainer",
    "binary_limits",
    "cuda_code",
]

# Sections that hold nothing but fatbin containers: bytes there outside any valid container mean
# a corrupt container (CUDA.md: `.nv_fatbin`, and `__nv_relfatbin` for relocatable device code).
_FATBIN_SECTIONS = frozenset({".nv_fatbin", "__nv_relfatbin"})


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


def _sorted_unique(caps: Iterable[Capability]) -> tuple[Capability, ...]:
    return tuple(sorted(set(caps)))


@dataclass(frozen=True, slots=True)
class CudaCode:
    """The fatbin containers of one file and the targets their entries hold."""

    sass: tuple[Capability, ...] = ()
    ptx: tuple[Capability, ...] = ()
    lto: tuple[Capability, ...] = ()
    compression: tuple[str, ...] = ()
    containers: int = 0
    sections: dict[str, int] = field(default_factory=dict)
    located: tuple[LocatedContainer, ...] = ()

    @property
    def problems(self) -> tuple[str, ...]:
        # The containers' problems are the file's own (Read.problems): nothing beyond them.
        return ()

    def found(self) -> bool:
        return bool(self.containers)

    def runnable(self) -> tuple[str, ...]:
        return (*(c.sm for c in self.sass), *(c.compute for c in self.ptx))

    def json_fields(self, entries: bool) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sass": [c.sm for c in self.sass],
            "ptx": [c.compute for c in self.ptx],
            "lto": [f"lto_{c.cmake}" for c in self.lto],
            "compression": list(self.compression),
            "containers": self.containers,
            "sections": dict(sorted(self.sections.items())),
        }
        if entries:
            data["entries"] = [row for loc in self.located for row in loc.entries_json()]
        return data

    def cells(self) -> tuple[str, ...]:
        return (
            " ".join(c.sm for c in self.sass) or "-",
            " ".join(c.compute for c in self.ptx) or "-",
            " ".join(f"lto_{c.cmake}" for c in self.lto) or "-",
            " ".join(self.compression) or "-",
            str(self.containers),
            " ".join(f"{name}:{count}" for name, count in sorted(self.sections.items())) or "-",
        )

    def entry_cells(self) -> list[tuple[str, ...]]:
        return [
            (
                row["section"],
                f"{row['container']:#x}",
                row["kind"],
                row["arch"],
                row["compression"],
                f"{row['offset']:#x}",
                str(row["size"]),
            )
            for loc in self.located
            for row in loc.entries_json()
        ]


def cuda_code(reports: Iterable[Report]) -> list[CudaCode]:
    """The CUDA code of each of ``reports`` (the walker's, one per file)."""
    return [c for r in reports for c in r.code if isinstance(c, CudaCode)]


def _code(located: Sequence[LocatedContainer]) -> CudaCode:
    sass: set[Capability] = set()
    ptx: set[Capability] = set()
    lto: set[Capability] = set()
    compression: set[str] = set()
    kinds = {fatbin.EntryKind.SASS: sass, fatbin.EntryKind.PTX: ptx, fatbin.EntryKind.LTO: lto}
    for loc in located:
        for entry in loc.container.entries:
            kinds[entry.kind].add(entry.capability)
            compression.add(entry.compression)
    return CudaCode(
        sass=_sorted_unique(sass),
        ptx=_sorted_unique(ptx),
        lto=_sorted_unique(lto),
        compression=tuple(sorted(compression)),
        containers=len(located),
        sections=dict(sorted(Counter(loc.section for loc in located).items())),
        located=tuple(located),
    )


def _gap_problems(
    buf: Buffer,
    base: int,
    sections: ElfSections,
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


def _partial_end(container: fatbin.Container) -> int:
    if container.entries:
        last = container.entries[-1]
        return last.offset + last.header_size + last.payload_size
    return container.offset + fatbin.CONTAINER_HEADER_SIZE


class CudaReader:
    """Fatbin containers, found by their magic anywhere in a file (real NVIDIA libraries keep
    them outside ``.nv_fatbin`` too) and attributed to the ELF section holding them."""

    magics: tuple[bytes, ...] = (fatbin.MAGIC_BYTES,)
    columns: tuple[str, ...] = ("SASS", "PTX", "LTO-IR", "compression", "containers", "sections")
    entry_columns: tuple[str, ...] = (
        "section",
        "container",
        "kind",
        "arch",
        "compression",
        "offset",
        "size",
    )
    # inspect --entries has always drawn the fatbin entries' table, empty or not.
    always_listed: bool = True

    def empty(self) -> CudaCode:
        return CudaCode()

    def read_elf(
        self,
        buf: Buffer,
        start: int,
        end: int,
        sections: ElfSections,
        access: Access,
        skip: Sequence[tuple[int, int]],
    ) -> Read:
        containers: list[fatbin.Container] = []
        rejected: list[fatbin.Rejected] = []
        for r_start, r_end in complement(start, end, skip):
            part = fatbin.scan(
                buf, r_start, r_end, release=access.release, find=access.find, read=access.read
            )
            containers.extend(part.containers)
            rejected.extend(part.rejected)
        located = [
            LocatedContainer(sections.name_at(c.offset - start), c.offset - start, c, start)
            for c in containers
        ]
        problems: list[str] = []
        for container in containers:
            problems.extend(container.problems)
        for miss in rejected:
            section = sections.name_at(miss.offset - start)
            if section in _FATBIN_SECTIONS:
                problems.append(f"invalid fatbin container in {section}: {miss.reason}")
        if sections.spans:
            resume = {c.offset: (c.end if not c.partial else _partial_end(c)) for c in containers}
            problems.extend(_gap_problems(buf, start, sections, located, resume))
        claimed = tuple((c.offset, c.end) for c in containers if not c.partial)
        return Read(_code(located), tuple(problems), claimed)

    def read_bare(self, buf: Buffer, start: int, end: int, name: str, access: Access) -> Read:
        """A bare fatbin file (`nvcc -fatbin`): containers only, no ELF around them."""
        result = fatbin.scan(
            buf, start, end, release=access.release, find=access.find, read=access.read
        )
        located = [
            LocatedContainer(NO_SECTION, c.offset - start, c, start) for c in result.containers
        ]
        problems = [p for c in result.containers for p in c.problems]
        if not located:
            problems.extend(miss.reason for miss in result.rejected[:1])
            problems = problems or ["no valid fatbin container"]
        return Read(_code(located), tuple(problems))


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


def binary_limits(
    path: str,
    reports: Iterable[Report],
    candidates: Sequence[Capability],
    jetson: Callable[[Capability], bool] = lambda _cap: False,
) -> BinaryLimits:
    """Which ``candidates`` a prebuilt binary (file, wheel or store path; ``reports``: the
    walker's, one per file in it) can run on; ``jetson`` says which devices get the Jetson
    rule (compat.is_jetson)."""
    # Imported here: only limits --binary asks how a binary's code runs, not inspect.
    from capplan.core.families.cuda.compat import how_runs

    codes = cuda_code(reports)
    sass = _sorted_unique(c for code in codes for c in code.sass)
    ptx = _sorted_unique(c for code in codes for c in code.ptx)
    if not sass and not ptx:
        raise BinaryFormatError(
            f"no CUDA device code (SASS or PTX) found in {path}",
            hint="give the package's CUDA library, wheel or store path",
        )
    # Devices have no a/f suffix: a suffixed candidate stands for its base device.
    devices = sorted({cap.base for cap in candidates})
    verdicts = tuple((cap, how_runs(cap, sass, ptx, jetson=jetson(cap))) for cap in devices)
    supported = tuple(c for c, v in verdicts if v.level is not RunLevel.CANNOT_RUN)
    return BinaryLimits(path, sass, ptx, supported, verdicts)
