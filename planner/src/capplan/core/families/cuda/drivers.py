"""Which CUDA release a given NVIDIA driver can run. Pure.

A toolkit's minimum Linux driver is a per-release fact in the knowledge base (CUDA.md "Drivers
and CUDA versions": 11.x needs >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580). Versions are
compared numerically, component by component: "535.104.05" is newer than "535.54.03", which a
string comparison gets wrong.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from capplan.errors import DataError, InvalidInputError

__all__ = ["max_cuda_for_driver", "version_key"]

_VERSION_RE = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def version_key(text: str, *, width: int = 4) -> tuple[int, ...]:
    """Numeric key for a dotted version, zero-padded ("580" == "580.0"); ValueError if not one."""
    text = text.strip()
    if not _VERSION_RE.fullmatch(text):
        raise ValueError(f"not a dotted numeric version: {text!r}")
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * max(0, width - len(parts)))


def max_cuda_for_driver(driver: str, releases: Sequence[tuple[str, str]]) -> str | None:
    """The newest CUDA version in ``releases`` whose minimum driver is <= ``driver``.

    ``releases`` holds (cuda_version, min_driver) pairs from the knowledge base. Returns None when
    the driver is older than every release's minimum.
    """
    try:
        have = version_key(driver)
    except ValueError as exc:
        raise InvalidInputError(
            f"not a driver version: {driver!r}", hint="expected digits and dots, e.g. 570.124.06"
        ) from exc
    best: tuple[tuple[int, ...], str] | None = None
    for cuda, min_driver in releases:
        try:
            cuda_key, need = version_key(cuda), version_key(min_driver)
        except ValueError as exc:
            raise DataError(
                f"bad CUDA release entry ({cuda!r}, {min_driver!r}): {exc}",
                hint="fix the knowledge base's CUDA driver table",
            ) from exc
        if need <= have and (best is None or cuda_key > best[0]):
            best = (cuda_key, cuda)
    return None if best is None else best[1]
