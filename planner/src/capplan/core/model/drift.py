"""Where a nixpkgs says otherwise than the knowledge base (``capplan nixpkgs check``), and the
readers of what it answered (pure).

Nix answers whatever the pinned nixpkgs holds: ``gpuTargets = 5``, ``cudaCapabilities = [ 86 ]``,
an attrset where a list belongs. Each answer is read through :func:`mapping` and :func:`strings`,
and an answer of another type is a drift of its own fact (never an exception, never "agrees"),
shown by :func:`odd`. Shared by the check's orchestration (core/planning/nixpkgs_check.py) and
each family's part of it (core/families/<family>/nixpkgs.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capplan.errors import MESSAGE_LIMIT, shorten

__all__ = ["Drift", "mapping", "odd", "strings", "words"]


@dataclass(frozen=True, order=True)
class Drift:
    """One fact on which the knowledge base and the nixpkgs checked disagree."""

    package: str
    fact: str
    kb: str
    nixpkgs: str

    def __post_init__(self) -> None:
        # What nixpkgs says is echoed like any outside value: control characters escaped (a
        # "::error::" after a newline is a GitHub workflow command), a 10 MB name cut.
        for name in ("package", "fact", "kb", "nixpkgs"):
            object.__setattr__(self, name, shorten(str(getattr(self, name)), MESSAGE_LIMIT))

    def line(self) -> str:
        says = f"knowledge base says {self.kb}; nixpkgs says {self.nixpkgs}"
        return f"{self.package}: {self.fact}: {says}"

    def as_dict(self) -> dict[str, str]:
        return {"package": self.package, "fact": self.fact, "kb": self.kb, "nixpkgs": self.nixpkgs}


def words(items: Sequence[str]) -> str:
    """``[a, b, c]``; items past what a drift line shows (:data:`MESSAGE_LIMIT`, where
    :class:`Drift` cuts) are left out, so a nixpkgs naming megabytes is not joined whole."""
    if not items:
        return "none"
    shown: list[str] = []
    size = 0
    for item in items:
        if size > MESSAGE_LIMIT:
            shown.append("...")
            break
        shown.append(item)
        size += len(item) + 2
    return "[" + ", ".join(shown) + "]"


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def strings(value: Any) -> list[str] | None:
    """``value`` when it is a list of strings, else None."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    return None


def odd(value: Any) -> str:
    """An answer of the wrong type, as the drift line shows it."""
    import json

    kinds = {dict: "an attrset", list: "a list", str: "a string", bool: "a boolean"}
    kind = "null" if value is None else kinds.get(type(value), "a number")
    # Encoded lazily up to what the line shows: a list of megabytes is not copied whole.
    pieces: list[str] = []
    size = 0
    try:
        for piece in json.JSONEncoder(sort_keys=True, ensure_ascii=False).iterencode(value):
            pieces.append(piece)
            size += len(piece)
            if size > MESSAGE_LIMIT:
                break
    except (TypeError, ValueError):  # pragma: no cover - decoded JSON always encodes
        pieces = [repr(value)]
    text = "".join(pieces)
    return f"{shorten(text)} ({kind}, not what this fact is)"
