"""Wheel (zip) members: the one rule for what a damaged or unreadable archive raises.

:mod:`zipfile` reports a damaged archive in several ways besides ``BadZipFile``: a member
whose compression method it lacks is ``NotImplementedError``, an encrypted one
``RuntimeError``, a corrupt deflate or LZMA stream ``zlib.error`` or ``lzma.LZMAError``. The
first two are refused here before a member is opened (as ``BadZipFile`` naming the member), so
a caller catches :data:`ZIP_ERRORS` and never the broad built-in exceptions, which would hide
our own bugs.
"""

from __future__ import annotations

import lzma
import zipfile
import zlib
from typing import IO

__all__ = ["ZIP_ERRORS", "check_member", "open_member"]

ZIP_ERRORS: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    EOFError,
    zlib.error,
    lzma.LZMAError,
)

# What zipfile unpacks (wheels use stored and deflate; PEP 427 allows no others, but a zip
# tool may write them).
_METHODS = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}


def check_member(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """``info`` when its member can be unpacked; else BadZipFile saying why."""
    if info.flag_bits & 0x1:
        raise zipfile.BadZipFile(f"member {info.filename} is encrypted")
    if info.compress_type not in _METHODS:
        raise zipfile.BadZipFile(
            f"member {info.filename} uses compression method {info.compress_type}, not one of "
            + ", ".join(f"{n} ({m})" for m, n in sorted(_METHODS.items()))
        )
    return info


def open_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> IO[bytes]:
    """The member ``info`` of ``archive`` open for reading, after :func:`check_member`."""
    return archive.open(check_member(info))
