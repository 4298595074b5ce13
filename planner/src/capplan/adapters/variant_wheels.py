"""Reads the PEP 825 ``variant.json`` of installed variant wheels for ``capplan doctor``.

PEP 825 puts it in the wheel's ``*.dist-info/variant.json``; an installer keeps the dist-info, so
a virtualenv's site-packages holds it too. A file that cannot be read or is malformed becomes a
problem line, never a failure of doctor.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

# The library scan's own site-packages finder, so doctor reads variant.json where it reads RECORD.
from capplan.adapters.environment import Source
from capplan.adapters.environment import _site_dirs as site_dirs
from capplan.adapters.files import read_bounded
from capplan.core.binaries.variants import InstalledVariant, parse_variant_json

__all__ = ["installed_variants"]

# A variant.json is a few hundred bytes; an index-sized one a few KB.
_MAX_VARIANT_JSON = 1 << 20


def _dist_name(dist_info: str) -> tuple[str, str | None]:
    name, _, version = dist_info[: -len(".dist-info")].rpartition("-")
    return (name, version) if name else (version, None)


def _parse(data: bytes, shown: str, dist_info: str) -> tuple[InstalledVariant | None, str | None]:
    try:
        label, properties = parse_variant_json(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as error:
        return None, f"{shown}: not a PEP 825 variant.json ({str(error)[:200]})"
    name, version = _dist_name(dist_info)
    return InstalledVariant(name.replace("_", "-"), version, shown, label, properties), None


def installed_variants(sources: Sequence[Source]) -> tuple[list[InstalledVariant], list[str]]:
    """The variant wheels installed in (or given as) ``sources``, and the problems met."""
    found: list[InstalledVariant] = []
    problems: list[str] = []
    for source in sources:
        for shown, dist_info, data, error in _variant_files(source):
            if error is not None:
                problems.append(f"{shown}: cannot read ({error})")
                continue
            variant, problem = _parse(data, shown, dist_info)
            if variant is not None:
                found.append(variant)
            if problem is not None:
                problems.append(problem)
    return found, problems


def _variant_files(source: Source) -> list[tuple[str, str, bytes, str | None]]:
    """(shown path, dist-info name, bytes, read error) of each variant.json in ``source``."""
    out: list[tuple[str, str, bytes, str | None]] = []
    if source.kind == "wheel":
        try:
            with zipfile.ZipFile(source.path) as archive:
                for info in sorted(archive.infolist(), key=lambda i: i.filename):
                    parts = info.filename.split("/")
                    if (
                        len(parts) == 2
                        and parts[0].endswith(".dist-info")
                        and parts[1] == ("variant.json")
                    ):
                        if info.file_size > _MAX_VARIANT_JSON:
                            out.append((f"{source.path}!{info.filename}", parts[0], b"",
                                        "larger than 1 MiB"))  # fmt: skip
                            continue
                        with archive.open(info) as handle:
                            data = handle.read(_MAX_VARIANT_JSON)
                        out.append((f"{source.path}!{info.filename}", parts[0], data, None))
        except (zipfile.BadZipFile, OSError, EOFError):
            pass  # the library scan reports an unreadable wheel
        return out
    if source.kind not in ("dir", "nix"):
        return out
    for site in site_dirs(source.path):
        try:
            entries = sorted(e for e in os.listdir(site) if e.endswith(".dist-info"))
        except OSError:
            continue
        for entry in entries:
            path = Path(site) / entry / "variant.json"
            if not path.exists():
                continue
            try:
                out.append((str(path), entry, read_bounded(path, _MAX_VARIANT_JSON), None))
            except OSError as error:
                out.append((str(path), entry, b"", error.strerror or str(error)))
    return out
