"""The one check of a device a user names (``--device``, a ``fleet.gpus`` entry, a ``capplan
explain`` device) before any GPU family looks it up: one GPU name or target, of a bounded
length. Shared by the families (CUDA's GPU names, ROCm's fleet claim), so each refuses the same
values with the same words whichever is asked first. Pure.
"""

from __future__ import annotations

import itertools
import re

from capplan.errors import InvalidInputError, shorten

__all__ = ["MAX_DEVICE_TEXT", "check_device_text"]

# The longest GPU name in the knowledge base has 56 characters; a device is never a page long.
MAX_DEVICE_TEXT = 128
_LIST_WORDS = re.compile(r"[\s,;]+")


def check_device_text(text: str) -> None:
    """Refuse what cannot name one device (exit 4) before any lookup: a value longer than
    :data:`MAX_DEVICE_TEXT`, a list (``A100,A100``), one name repeated (``a100 a100 a100``:
    word matching would read it as one A100), or a value starting with ``-`` (``-8.6`` is no
    capability, and looked up as a name it matched a Radeon 860M)."""
    stripped = text.strip()
    how = "give one GPU name or capability, e.g. 'RTX 3090' or 8.6"
    if len(stripped) > MAX_DEVICE_TEXT:
        raise InvalidInputError(
            f"device '{shorten(stripped)}' is {len(stripped)} characters long, more than a GPU "
            f"name ({MAX_DEVICE_TEXT} at most)",
            hint=how,
        )
    if "," in stripped or ";" in stripped:
        raise InvalidInputError(
            f"device '{shorten(stripped)}' is a list, not one device",
            hint="give each device on its own (one --device each, one [fleet] gpus entry each)",
        )
    if stripped.startswith("-"):
        raise InvalidInputError(
            f"device '{shorten(stripped)}' is no GPU name or capability (it starts with '-')",
            hint=how,
        )
    words = [w for w in _LIST_WORDS.split(stripped.lower()) if w]
    for size in range(1, len(words) // 2 + 1):
        if len(words) % size == 0 and words == words[:size] * (len(words) // size):
            raise InvalidInputError(
                f"device '{shorten(stripped)}' repeats '{' '.join(words[:size])}' "
                f"{len(words) // size} times: it names one device once",
                hint="give each GPU once; a fleet lists each model once, whatever its count",
            )
    # A word said twice in a row ('rtx 4090 4090') is a slip: word matching read it as an RTX
    # 4090. No name or alias in the knowledge base repeats a word in a row (a kb test checks).
    for first, second in itertools.pairwise(words):
        if first == second:
            raise InvalidInputError(
                f"device '{shorten(stripped)}' repeats '{shorten(first, 40)}': it names one "
                "device once",
                hint="give each GPU once; a fleet lists each model once, whatever its count",
            )
