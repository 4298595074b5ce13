"""``capplan limits read magma --file CMakeLists.txt [--json] [--update-kb [--write]]``.

Reads magma's HIP target list (``VALID_GFXS``) from its real CMake source and, with
``--update-kb``, shows (or writes) the ``magma-hip`` entry of kb/amd_packages.json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from capplan.adapters.files import read_input_bytes
from capplan.cli.kb_update import apply_update, validate_kb
from capplan.cli.output import emit_json, make_table, out_console, print_table
from capplan.core.families.rocm.magma_limits import MagmaLimits, parse_magma_limits
from capplan.errors import DataError, InvalidInputError, json_printable

__all__ = ["read_magma", "updated_amd_packages_text"]

_KB_NAME = "amd_packages.json"
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
# A release or commit: written into the KB's source text, so no spaces or odd characters.
_RELEASE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,63}")
_ENTRY = "magma-hip"


def read_magma(
    file_path: Path,
    release: str | None,
    *,
    as_json: bool,
    update_kb: bool,
    write: bool,
    kb_file: Path | None,
) -> None:
    if release is not None and not _RELEASE.fullmatch(release):
        raise InvalidInputError(
            f"--release {release!r} is neither a magma release nor a commit",
            hint="e.g. --release 2.9.0 or --release 0150589c",
        )
    text = _read_text(file_path)
    result = parse_magma_limits(text)
    origin = f"file {file_path.name}"
    if as_json:
        emit_json({**result.to_json(), "origin": origin, "release": release})
    else:
        _print(result, origin, release)
    if update_kb:
        _update_kb(result, release, origin, kb_file, write=write, diff_to_stderr=as_json)


def _read_text(path: Path) -> str:
    data = read_input_bytes(path, hint="give the path of magma's CMakeLists.txt")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{path} is not UTF-8 text: byte offset {exc.start}",
            hint="give magma's CMakeLists.txt",
        ) from None


def _print(result: MagmaLimits, origin: str, release: str | None) -> None:
    console = out_console()
    table = make_table(
        "target", "as written", title=f"magma {release or '(release unknown)'}: VALID_GFXS"
    )
    by_name = {f"gfx{v.lower().removeprefix('gfx')}": v for v in result.raw}
    for target in result.valid:
        table.add_row(str(target), by_name.get(str(target), ""))
    print_table(console, table)
    if result.unknown:
        console.print(f"not known to capplan (skipped): {', '.join(result.unknown)}")
    console.print(f"source: {origin} (line {result.line})")


def _source(release: str | None, origin: str) -> str:
    what = "icl-utk-edu/magma"
    if release:
        what += f" v{release}" if _VERSION.fullmatch(release) else f" at {release}"
    return (
        f"{what} CMakeLists.txt VALID_GFXS, read by `capplan limits read magma` from {origin}; "
        "nixpkgs pkgs/by-name/ma/magma/package.nix copies it as supportedGpuTargets"
    )


def updated_amd_packages_text(
    old_text: str, result: MagmaLimits, release: str | None, origin: str
) -> str:
    """kb/amd_packages.json with the magma-hip entry replaced by what was read."""
    try:
        doc = json.loads(old_text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"kb/{_KB_NAME} is not valid JSON: {exc.msg} at line {exc.lineno}",
            hint="restore it from git",
        ) from None
    except RecursionError:
        raise DataError(f"kb/{_KB_NAME} is nested too deeply to read") from None
    packages = doc.get("packages") if isinstance(doc, dict) else None
    if not isinstance(packages, dict):
        raise DataError(f"kb/{_KB_NAME} has no 'packages' mapping", hint="restore it from git")
    old = packages.get(_ENTRY)
    packages[_ENTRY] = result.kb_entry(
        old if isinstance(old, dict) else None, _source(release, origin)
    )
    _validate(doc)
    return json_printable(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)) + "\n"


def _validate(doc: dict[str, Any]) -> None:
    from capplan.core.families.rocm.kb import AmdPackagesFile

    validate_kb(AmdPackagesFile, doc, _KB_NAME)


def _update_kb(
    result: MagmaLimits,
    release: str | None,
    origin: str,
    kb_file: Path | None,
    *,
    write: bool,
    diff_to_stderr: bool,
) -> None:
    if kb_file is None:
        from capplan.adapters.kb import kb_path

        kb_file = kb_path(_KB_NAME)
    apply_update(
        kb_file,
        _KB_NAME,
        empty={"source": "capplan limits read magma --update-kb", "packages": {}},
        update=lambda old: updated_amd_packages_text(old, result, release, origin),
        same=f"kb/{_KB_NAME} already holds magma's VALID_GFXS as read",
        done=f"updated kb/{_KB_NAME} (magma-hip)",
        write=write,
        diff_to_stderr=diff_to_stderr,
    )
