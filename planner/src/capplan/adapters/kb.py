"""Load the knowledge base from its JSON files (packaged in ``capplan/kb/``, or a directory).

A broken file gives one :class:`DataError` naming the file, the entry and the field.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from capplan.adapters.files import INT_DIGITS_MESSAGE, read_bounded
from capplan.core.model.fromjson import from_json
from capplan.core.model.kb import KnowledgeBase
from capplan.errors import CapplanError, DataError, shorten

if TYPE_CHECKING:
    from capplan.core.families.base import ReadsKbFile
    from capplan.core.families.registry import AmdKnowledgeBase, CpuPackagesFile

__all__ = [
    "amd_kb_files",
    "kb_path",
    "load_amd_kb",
    "load_capability_kb",
    "load_cpu_packages",
    "load_kb",
    "load_kb_file",
    "load_nvidia_kb",
    "nvidia_kb_files",
]

M = TypeVar("M")

# The largest KB file (pci.json) is about 0.5 MB; a --kb folder holding more is not a KB.
MAX_KB_FILE_BYTES = 64 * 1024 * 1024


def nvidia_kb_files() -> dict[str, type]:
    """The CUDA family's knowledge-base files and the model of each (the tests validate every
    entry)."""
    from capplan.core.families.registry import nvidia_kb_files as files

    return files()


def kb_path(name: str, directory: Path | None = None) -> Path:
    """Where a KB file lives: ``directory`` when given, else the installed package data."""
    if directory is not None:
        return directory / name
    return Path(str(resources.files("capplan").joinpath("kb", name)))


def load_kb_file(name: str, model: type[M], directory: Path | None = None) -> M:
    path = kb_path(name, directory)
    label = f"kb/{name}" if directory is None else str(path)
    try:
        raw = read_bounded(path, MAX_KB_FILE_BYTES)
    except OSError as error:
        raise DataError(
            f"cannot read knowledge-base file {label}: {error.strerror or error}",
            hint="reinstall capplan, or point CAPPLAN_KB_DIR at a complete copy",
        ) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise DataError(
            f"knowledge-base file {label} is not UTF-8 text: byte 0x{raw[error.start]:02x} at "
            f"offset {error.start}",
            hint="fix the file or restore it from the capplan repository",
        ) from None
    except json.JSONDecodeError as error:
        raise DataError(
            f"knowledge-base file {label} is not valid JSON: {error.msg} at line {error.lineno} "
            f"column {error.colno}",
            hint="fix the file or restore it from the capplan repository",
        ) from None
    except RecursionError:
        raise DataError(
            f"knowledge-base file {label} is nested too deeply to read",
            hint="fix the file or restore it from the capplan repository",
        ) from None
    except ValueError:
        raise DataError(
            f"knowledge-base file {label} is not JSON capplan reads ({INT_DIGITS_MESSAGE})",
            hint="fix the file or restore it from the capplan repository",
        ) from None
    if directory is None:
        # The packaged files are validated by the tests (tests/kb): build them directly, and
        # validate only to name what is wrong when that fails (a broken installation).
        try:
            return from_json(model, data)
        except (CapplanError, KeyError, TypeError, ValueError, AttributeError):
            pass
    return validate_kb_data(model, data, label)


def validate_kb_data(model: type[M], data: Any, label: str) -> M:
    """``data`` validated as ``model`` with pydantic; a DataError naming the file, the entry
    and the reason otherwise (pydantic loads only here)."""
    from capplan.core.model.kb_schema import ValidationError, validate_record

    try:
        return validate_record(model, data)
    except ValidationError as error:
        raise DataError(_describe(label, data, error), hint="fix that entry") from None
    except (CapplanError, ValueError, TypeError) as error:
        # A record's own check (__post_init__) outside pydantic's wrapping.
        detail = error.one_line() if isinstance(error, CapplanError) else str(error)
        raise DataError(f"knowledge-base file {label}: {detail}", hint="fix that entry") from None


def _describe(label: str, data: Any, error: Any) -> str:
    first = error.errors()[0]
    loc = list(first["loc"])
    # Name the entry by its identifying field when there is one (e.g. gpus[3] "NVIDIA L4").
    entry = ""
    node = data
    walked: list[str] = []
    missing = ""
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if in_dict or in_list:
            node = node[part]
        else:
            if isinstance(node, dict) and isinstance(part, str):
                missing = f"{part}: "  # a required field the entry lacks: name it
            break
        walked.append(f"[{part}]" if isinstance(part, int) else f".{part}")
        if isinstance(node, dict) and not entry:
            # The entry's own name: a GPU by its name, a capability by its number.
            for key in ("name", "capability", "chip", "id", "version", "package", "target"):
                if isinstance(node.get(key), str):
                    entry = f" ({key} '{shorten(node[key])}')"
                    break
    where = "".join(walked).lstrip(".") or "top level"
    return f"knowledge-base file {label}: entry {where}{entry}: {missing}{first['msg']}"


@lru_cache(maxsize=4)
def load_capability_kb(directory: Path | None = None) -> KnowledgeBase:
    """The capability table and the CUDA releases alone (capabilities.json, cuda.json), as a
    knowledge base whose GPU, package, torch, chip, PCI and AMD parts are empty: for commands
    that answer from those two files only (``caps``, ``verify --expect``). Reading the eight
    other files :func:`load_kb` reads cost ``caps`` about 16 ms of its start, 9 of them
    pci.json's 1,250 records. Anything that names a GPU, a package or an AMD target needs
    :func:`load_kb`."""
    from capplan.core.families.registry import capability_kb

    return KnowledgeBase(packages={}, parts=(capability_kb(_reader(directory)),))


@lru_cache(maxsize=4)
def load_kb(directory: Path | None = None) -> KnowledgeBase:
    return _load_kb(directory, amd=True)


@lru_cache(maxsize=4)
def load_nvidia_kb(directory: Path | None = None) -> KnowledgeBase:
    """:func:`load_kb` without its AMD part: for ``capplan gpus``, whose NVIDIA answers read no
    AMD file (the ROCm model and its three files were about 5 ms of its start, issue 42); a
    query no NVIDIA model matches loads :func:`load_amd_kb` itself."""
    return _load_kb(directory, amd=False)


def _load_kb(directory: Path | None, *, amd: bool) -> KnowledgeBase:
    from capplan.core.families.registry import nvidia_kb

    # The package list every family plans from is packages.json's, read with the CUDA
    # family's record (its entries hold the packages' capability limits).
    packages, cuda = nvidia_kb(_reader(directory))
    parts: tuple[object, ...] = (cuda, load_amd_kb(directory)) if amd else (cuda,)
    return KnowledgeBase(packages=packages, parts=parts)


def _reader(directory: Path | None) -> ReadsKbFile:
    """How a family's knowledge base reads its files: :func:`load_kb_file` in ``directory``."""

    def read(name: str, model: type[M], /) -> M:
        return load_kb_file(name, model, directory)

    return read


def load_cpu_packages(directory: Path | None = None) -> CpuPackagesFile:
    """The CPU family's package file (``kb/cpu_packages.json``), by the same rules as
    :func:`load_kb`."""
    from capplan.core.families.registry import cpu_packages

    return cpu_packages(_reader(directory))


def amd_kb_files() -> dict[str, type]:
    """The AMD knowledge-base files and the model of each (the tests validate every entry)."""
    from capplan.core.families.registry import amd_kb_files as files

    return files()


@lru_cache(maxsize=4)
def load_amd_kb(directory: Path | None = None) -> AmdKnowledgeBase:
    """The AMD knowledge base (``kb/amd_targets.json``, ``amd_gpus.json``,
    ``amd_packages.json``), by the same rules as :func:`load_kb`."""
    from capplan.core.families.registry import amd_kb

    return amd_kb(_reader(directory))
