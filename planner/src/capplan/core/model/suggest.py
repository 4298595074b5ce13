""" "Did you mean" suggestions for unknown names."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = ["closest"]


def closest(word: str, choices: Sequence[str], *, what: str, limit: int = 3) -> str:
    """A hint naming the closest choices, or listing them when none is close."""
    matches = difflib.get_close_matches(word, choices, n=limit, cutoff=0.5)
    if matches:
        return "did you mean " + " or ".join(f"'{m}'" for m in matches) + "?"
    shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
    return f"known {what}s: {shown}" if choices else f"no {what}s are defined"
