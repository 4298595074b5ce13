"""``capplan inspect``: list the CUDA device code inside binaries, wheels and store paths.

AMD device code (offload bundles, bare AMDGPU code objects) is listed in its own ``AMD`` column
and JSON ``amd`` object; the CUDA columns and fields are unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from capplan.cli.output import emit_json, err_console, make_table, out_console, print_rows
from capplan.errors import BinaryFormatError, InvalidInputError

if TYPE_CHECKING:
    from capplan.adapters.fatbin import FileReport

__all__ = ["inspect"]


def _amd_cell(report: FileReport) -> str:
    """gfx targets, plus what could not be read (a zstd-compressed bundle)."""
    parts = [str(t) for t in report.amd]
    unopened = [loc.bundle for loc in report.amd_located if not loc.bundle.opened]
    for bundle in unopened:
        parts.append(f"[{bundle.compression} bundle, not opened]")
    return " ".join(parts) or "-"


@click.command("inspect")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")
@click.option(
    "--entries", is_flag=True, help="Also list every fatbin entry (kind, arch, offset, section)."
)
def inspect(paths: tuple[str, ...], as_json: bool, entries: bool) -> None:
    """List SASS, PTX and LTO-IR targets in ELF files, static archives, wheels or directories.

    Every fatbin container in a file is found by scanning for its magic and validating its
    headers; nothing is decompressed. AMD gfx targets (clang offload bundles, zlib-compressed
    CCOB bundles, bare AMDGPU code objects) go in the AMD column. Exits 12 (bad-binary) after
    printing when a file is truncated or corrupt (its report is marked partial).
    """
    # Imported here so `capplan --help` does not load the binary readers.
    from capplan.adapters.fatbin import inspect_paths

    for path in paths:
        if not path.strip():
            # Path('') is '.', which would quietly scan the working directory.
            raise InvalidInputError(
                "an empty path was given to inspect", hint="name a file, wheel or directory"
            )
    reports = inspect_paths([Path(p) for p in paths])
    if as_json:
        emit_json({"files": [r.to_json(entries=entries) for r in reports]})
    else:
        # Drawn without rich where the output is no terminal (print_rows): about 30 ms of
        # the start (issue 42).
        print_rows(
            ("path", "SASS", "PTX", "LTO-IR", "compression", "containers", "sections", "AMD"),
            [
                (
                    r.path + (" [partial]" if r.partial else ""),
                    " ".join(c.sm for c in r.sass) or "-",
                    " ".join(c.compute for c in r.ptx) or "-",
                    " ".join(f"lto_{c.cmake}" for c in r.lto) or "-",
                    " ".join(r.compression) or "-",
                    str(r.containers),
                    " ".join(f"{name}:{count}" for name, count in sorted(r.sections.items()))
                    or "-",
                    _amd_cell(r),
                )
                for r in reports
            ],
        )
        if entries:
            detail = make_table(
                "path", "section", "container", "kind", "arch", "compression", "offset", "size"
            )
            for r in reports:
                for loc in r.located:
                    for row in loc.entries_json():
                        detail.add_row(
                            r.path,
                            row["section"],
                            f"{row['container']:#x}",
                            row["kind"],
                            row["arch"],
                            row["compression"],
                            f"{row['offset']:#x}",
                            str(row["size"]),
                        )
            out_console().print(detail)
            amd_rows = [(r.path, row) for r in reports for loc in r.amd_located
                        for row in loc.entries_json()]  # fmt: skip
            if amd_rows:
                amd = make_table("path", "section", "bundle", "id", "target", "compression")
                for path, row in amd_rows:
                    amd.add_row(
                        path,
                        row["section"],
                        f"{row['bundle']:#x}",
                        row["id"],
                        row["target"] or "-",
                        row["compression"],
                    )
                out_console().print(amd)
        if not reports:
            err_console().print("no CUDA device code found")
    partial = [r for r in reports if r.partial or r.amd_problems]
    if partial:
        first = partial[0]
        raise BinaryFormatError(
            f"{len(partial)} of {len(reports)} file(s) are truncated or corrupt; "
            f"{first.path}: {(first.problems or first.amd_problems)[0]}",
            hint="the listed targets of those files are partial; rebuild or re-download them",
        )
