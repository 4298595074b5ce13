"""``capplan inspect``: list the CUDA device code inside binaries, wheels and store paths.

AMD device code (offload bundles, bare AMDGPU code objects) is listed in its own ``AMD`` column
and JSON ``amd`` object; the CUDA columns and fields are unchanged.
"""

from __future__ import annotations

from pathlib import Path

import click

from capplan.cli.output import (
    emit_json,
    err_console,
    make_table,
    out_console,
    print_rows,
    print_table,
)
from capplan.errors import BinaryFormatError, InvalidInputError

__all__ = ["inspect"]


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
    from capplan.core.families.registry import binary_readers

    for path in paths:
        if not path.strip():
            # Path('') is '.', which would quietly scan the working directory.
            raise InvalidInputError(
                "an empty path was given to inspect", hint="name a file, wheel or directory"
            )
    reports = inspect_paths([Path(p) for p in paths])
    readers = binary_readers()
    if as_json:
        emit_json({"files": [r.to_json(entries=entries) for r in reports]})
    else:
        # Drawn without rich where the output is no terminal (print_rows): about 30 ms of
        # the start (issue 42). Each GPU family's reader gives its columns, in the registry's
        # order (CUDA's SASS to sections, then AMD's).
        print_rows(
            ("path", *(column for reader in readers for column in reader.columns)),
            [
                (
                    r.path + (" [partial]" if r.partial else ""),
                    *(cell for code in r.code for cell in code.cells()),
                )
                for r in reports
            ],
        )
        if entries:
            for index, reader in enumerate(readers):
                rows = [(r.path, *row) for r in reports for row in r.code[index].entry_cells()]
                if not rows and not reader.always_listed:
                    continue
                detail = make_table("path", *reader.entry_columns)
                for row in rows:
                    detail.add_row(*row)
                print_table(out_console(), detail)
        if not reports:
            err_console().print("no CUDA device code found")
    partial = [r for r in reports if r.partial or any(c.problems for c in r.code)]
    if partial:
        first = partial[0]
        problems = first.problems or tuple(p for c in first.code for p in c.problems)
        raise BinaryFormatError(
            f"{len(partial)} of {len(reports)} file(s) are truncated or corrupt; "
            f"{first.path}: {problems[0]}",
            hint="the listed targets of those files are partial; rebuild or re-download them",
        )
