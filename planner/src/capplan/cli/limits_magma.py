"""``capplan limits read magma --file CMakeLists.txt [--json] [--update-kb [--write]]``.

Reads magma's HIP target list (``VALID_GFXS``) from its real CMake source and, with
``--update-kb``, shows (or writes) the ``magma-hip`` entry of kb/amd_packages.json.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

import click

from capplan.adapters.files import atomic_write_text
from capplan.cli.output import emit_json, err_console, make_table, out_console
from capplan.core.magma_limits import MagmaLimits, parse_magma_limits
from capplan.errors import DataError, InvalidInputError

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
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInputError(
            f"no such file: {path}", hint="give the path of magma's CMakeLists.txt"
        ) from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
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
    console.print(table)
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
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _validate(doc: dict[str, Any]) -> None:
    from pydantic import ValidationError

    from capplan.core.amd_kb import AmdPackagesFile

    try:
        AmdPackagesFile.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise DataError(
            f"the updated kb/{_KB_NAME} would be invalid at {where}: {first['msg']}"
        ) from None


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

        path = kb_path(_KB_NAME)
    else:
        path = kb_file
    try:
        old_text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        old_text = json.dumps({"source": "capplan limits read magma --update-kb", "packages": {}})
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path} is not UTF-8 text: byte offset {exc.start}",
            hint=f"give an {_KB_NAME} knowledge-base file",
        ) from None
    new_text = updated_amd_packages_text(old_text, result, release, origin)
    messages = err_console()
    if new_text == old_text:
        messages.print(f"kb/{_KB_NAME} already holds magma's VALID_GFXS as read")
        return
    diff = "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"a/kb/{_KB_NAME}",
            tofile=f"b/kb/{_KB_NAME}",
        )
    )
    click.echo(diff, nl=False, err=diff_to_stderr)
    if not write:
        messages.print(f"not written: add --write to update kb/{_KB_NAME}")
        return
    atomic_write_text(path, new_text)
    messages.print(f"updated kb/{_KB_NAME} (magma-hip)")
