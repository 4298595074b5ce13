"""What a family's binary reader is: how ``capplan inspect`` (adapters/fatbin.py, the file
walker: ELF files, archives, wheels, folders) asks each GPU family for its device code.

Each GPU family's entry gives the registry one :class:`BinaryReader`
(``core/families/<f>/binary.py``): the walker hands it the bytes of an ELF file with the
section table (:mod:`capplan.core.binaries.elf`), or of a bare file starting with one of its
magics, and gets back the family's :class:`DeviceCode`. The readers run in the registry's order,
each skipping the byte ranges the earlier ones' valid finds account for (no AMD bundle sits
inside a valid NVIDIA fatbin container). Pure: the walker does the I/O and hands over how to
search and read (:class:`Access`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from capplan.core.binaries.buffers import Buffer, Finder, Reader
from capplan.core.binaries.elf import ElfSections

__all__ = ["Access", "BinaryReader", "DeviceCode", "Read", "ReadsCodeObjects", "Report"]


class Access(NamedTuple):
    """How a reader reaches a buffer: ``find`` searches it (adapters/memsearch.py), ``read``
    reads its headers (``pread`` on the mapped file), ``release(a, b)`` drops the pages of
    ``buf[a:b]`` of a file mapping once a scan is done with them; None for any of them: the
    buffer's own, nothing to release."""

    find: Finder | None = None
    read: Reader | None = None
    release: Callable[[int, int], None] | None = None


class DeviceCode(Protocol):
    """One family's device code in one file (or archive or wheel member), as a reader found it."""

    @property
    def problems(self) -> tuple[str, ...]:
        """What the family could not read, beyond the file's own problems (a reader's problems
        that make the file partial are the :class:`Read`'s)."""
        ...

    def found(self) -> bool:
        """Whether there is anything to report: code, or a problem with it."""
        ...

    def runnable(self) -> tuple[str, ...]:
        """The targets a device can run, as the family spells them (``sm_86``, ``compute_80``,
        ``gfx942``): what another family's verifier names as extra code."""
        ...

    def json_fields(self, entries: bool) -> dict[str, Any]:
        """Its fields in the file's ``inspect --json`` record (with every entry when
        ``entries``)."""
        ...

    def cells(self) -> tuple[str, ...]:
        """Its cells in inspect's table, one per :attr:`BinaryReader.columns`."""
        ...

    def entry_cells(self) -> list[tuple[str, ...]]:
        """One row per entry for ``inspect --entries``, one cell per
        :attr:`BinaryReader.entry_columns`."""
        ...


class Read(NamedTuple):
    """A reader's answer: its code, the problems that make the file partial, and the absolute
    byte ranges its valid finds account for (later readers skip them)."""

    code: DeviceCode
    problems: tuple[str, ...] = ()
    claimed: tuple[tuple[int, int], ...] = ()


class BinaryReader(Protocol):
    """A GPU family's reader of its device code in binaries."""

    # The first bytes of a bare file of the family's code (a ``nvcc -fatbin`` file, an offload
    # bundle): the walker hands such a file to :meth:`read_bare`.
    magics: tuple[bytes, ...]
    # inspect's table columns, and ``--entries``' columns after the path.
    columns: tuple[str, ...]
    entry_columns: tuple[str, ...]
    # Whether ``--entries`` draws the family's entry table when no file has an entry.
    always_listed: bool

    def empty(self) -> DeviceCode:
        """No code: a file without the family's code, or one that could not be read."""
        ...

    def read_elf(
        self,
        buf: Buffer,
        start: int,
        end: int,
        sections: ElfSections,
        access: Access,
        skip: Sequence[tuple[int, int]],
    ) -> Read:
        """The family's code in the ELF file ``buf[start:end]``, leaving out the absolute
        ranges ``skip`` (sections that hold no device code, earlier readers' finds)."""
        ...

    def read_bare(self, buf: Buffer, start: int, end: int, name: str, access: Access) -> Read:
        """The family's code in a bare file ``buf[start:end]`` starting with one of
        :attr:`magics` (``name`` for errors)."""
        ...


class Report(Protocol):
    """What the walker reports per file: the family readers' codes, in the registry's order."""

    @property
    def path(self) -> str: ...

    @property
    def problems(self) -> tuple[str, ...]: ...

    @property
    def code(self) -> tuple[DeviceCode, ...]: ...


@runtime_checkable
class ReadsCodeObjects(Protocol):
    """A reader whose family's code can be an ELF file of its own (an AMDGPU code object), not
    only something inside a host file: the walker asks it first."""

    def code_object(self, buf: Buffer, start: int, end: int) -> DeviceCode | None:
        """The family's code when the ELF file ``buf[start:end]`` is itself one of the
        family's code objects (its header says so; it holds no other family's code), else
        None."""
        ...
