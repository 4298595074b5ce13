"""``limits read ... --update-kb [--write]``: one way to validate, show and write a KB file.

`capplan limits read torch` (kb/torch.json) and `capplan limits read magma`
(kb/amd_packages.json) both read a limit from its real source and turn it into knowledge-base
data; this module checks the new file against its pydantic model, prints the diff and writes it
atomically only with ``--write``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from capplan.adapters.files import atomic_write_text, read_bounded
from capplan.adapters.kb import MAX_KB_FILE_BYTES
from capplan.cli.output import err_console
from capplan.errors import DataError

__all__ = ["apply_update", "validate_kb"]


def validate_kb(model: type, doc: dict[str, Any], name: str) -> None:
    """Exit 6 unless ``model`` accepts the file we are about to write as kb/``name``."""
    from capplan.core.model.kb_schema import ValidationError, validate_record

    try:
        validate_record(model, doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise DataError(
            f"the updated kb/{name} would be invalid at {where}: {first['msg']}"
        ) from None


def apply_update(
    path: Path,
    name: str,
    *,
    empty: dict[str, Any],
    update: Callable[[str], str],
    same: str,
    done: str,
    write: bool,
    diff_to_stderr: bool,
) -> None:
    """Read kb/``name`` at ``path`` (``empty`` when missing), make the new text with ``update``,
    print the unified diff (to stderr under --json), and write it only with ``write``."""
    try:
        old_text = read_bounded(path, MAX_KB_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        old_text = json.dumps(empty)
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path} is not UTF-8 text: byte offset {exc.start}",
            hint=f"give a {name} knowledge-base file",
        ) from None
    new_text = update(old_text)
    messages = err_console()
    if new_text == old_text:
        messages.print(same)
        return
    diff = difflib.unified_diff(
        old_text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        fromfile=f"a/kb/{name}",
        tofile=f"b/kb/{name}",
    )
    click.echo("".join(diff), nl=False, err=diff_to_stderr)
    if not write:
        messages.print(f"not written: add --write to update kb/{name}")
        return
    atomic_write_text(path, new_text)
    messages.print(done)
