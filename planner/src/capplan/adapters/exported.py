"""Writing what ``capplan export`` made into its ``--output`` folder, and the record of it
that lets a re-export remove its own stale files and nothing else."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from capplan.adapters.files import atomic_write_text, output_folder, read_bounded

if TYPE_CHECKING:
    from capplan.core.export import Export

__all__ = ["MANIFEST", "write_export"]


def write_export(output: str, result: Export, made_by: str) -> None:
    """Write ``result``'s files into the folder ``output`` (made like mkdir when its parent is
    a folder), each atomically, then remove what an earlier export by ``made_by`` (a format and
    package) wrote there that this one no longer has."""
    folder = output_folder(output)
    for item in result.files:
        # Below the output folder the layout is export's own (variants/<label>/), made as needed.
        atomic_write_text(folder.joinpath(*item.path.split("/")), item.text, make_parents=True)
    _forget_stale(folder, made_by, {item.path: item.text for item in result.files})


# What each export into a folder wrote there (each file's SHA-256), so a re-export removes the
# variants/<label>/ files a previous one made and the plan no longer has: only those, only
# while they hold what capplan wrote (a file the user edited or put there is never removed),
# and only under variants/ (the index files of other versions are an index's own).
MANIFEST = ".capplan-export.json"
_MADE = "variants/"
_VARIANT_FILE = "variant.json"
_MANIFEST_BYTES = 4 * 1024 * 1024


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_manifest(folder: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(read_bounded(folder / MANIFEST, _MANIFEST_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}  # none, or not one capplan wrote: nothing is known to be ours
    made = data.get("made") if isinstance(data, dict) else None
    if not isinstance(made, dict):
        return {}
    return {
        str(key): {p: d for p, d in files.items() if _ours(p) and isinstance(d, str)}
        for key, files in made.items()
        if isinstance(files, dict)
    }


def _forget_stale(folder: Path, made_by: str, written: dict[str, str]) -> None:
    made = _read_manifest(folder)
    now = {p: _digest(text.encode("utf-8")) for p, text in written.items() if _ours(p)}
    still = {p for key, files in made.items() if key != made_by for p in files} | set(now)
    for stale, digest in sorted(made.get(made_by, {}).items()):
        if stale in still:
            continue
        where = folder.joinpath(*stale.split("/"))
        try:
            # Never through a link: a variants/<label> that leads out of the folder is not ours.
            if os.path.realpath(where) != os.path.join(os.path.realpath(folder), *stale.split("/")):
                continue
            if _digest(read_bounded(where, _MANIFEST_BYTES)) != digest:
                continue
            where.unlink()
            for parent in where.parents:
                if parent == folder:
                    break
                parent.rmdir()  # only an empty folder goes; OSError ends the walk up
        except OSError:
            continue
    if now:
        made[made_by] = dict(sorted(now.items()))
    else:
        made.pop(made_by, None)
    if made or os.path.lexists(folder / MANIFEST):
        text = json.dumps({"format": "capplan-export", "made": made}, indent=2, sort_keys=True)
        atomic_write_text(folder / MANIFEST, text + "\n")


def _ours(path: object) -> bool:
    """A path export writes under variants/, and so one a record may name: exactly
    ``variants/<label>/variant.json``, the label a plain name (nothing hidden, no '..'). A
    record is a file in the output folder anyone may have written (one committed in a cloned
    repository): one naming ``variants/old/NOTES.md`` must not remove the user's notes even when
    their digest matches."""
    if not isinstance(path, str):
        return False
    parts = path.split("/")
    return (
        len(parts) == 3
        and f"{parts[0]}/" == _MADE
        and parts[2] == _VARIANT_FILE
        and bool(parts[1])
        and not parts[1].startswith(".")
        and "\\" not in parts[1]
    )
