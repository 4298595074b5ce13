"""Nix store paths: ``/<store dir>/<32 nix32 characters>-<name>``, split as Nix checks them
(src/libstore/path.cc ``checkName``). Kept apart from the narinfo reader so code that only reads
paths (a failure record's ``drvPath``) does not load its signature code."""

from __future__ import annotations

import re

from capplan.errors import InvalidInputError

__all__ = ["BASENAME_RE", "split_store_path", "store_path_hash"]

# A store path's hash part is 160 bits printed as 32 nix32 characters; names use only these
# characters and never start with a dot.
BASENAME_RE = re.compile(r"([0-9a-df-np-sv-z]{32})-([A-Za-z0-9+\-_?=][A-Za-z0-9+\-._?=]*)")


def split_store_path(path: str) -> tuple[str, str, str]:
    """Split ``/nix/store/<hash>-<name>`` into (store dir, hash, name); else InvalidInputError."""
    store_dir, sep, base = path.rpartition("/")
    match = BASENAME_RE.fullmatch(base)
    if not sep or not store_dir.startswith("/") or match is None or len(base) > 211:
        raise InvalidInputError(
            f"not a Nix store path: {path!r}",
            hint="expected /nix/store/<32 nix32 characters>-<name>",
        )
    return store_dir, match.group(1), match.group(2)


def store_path_hash(path: str) -> str:
    """The 32-character hash part of a store path: the key of ``<cache>/<hash>.narinfo``."""
    return split_store_path(path)[1]
