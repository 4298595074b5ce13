"""Find GPU models by the loose names people type (``a100``, ``GeForce RTX 4090``).

nvidia-smi prints names like ``NVIDIA A100-SXM4-80GB`` or ``Tesla V100-SXM2-32GB``; users type
``A100`` or ``rtx3090``. Matching normalises both sides (case, vendor words, punctuation) and
ranks: an exact name or alias, then entries holding every word of the query, then close spellings.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from capplan.core.capability import Capability
from capplan.core.kb import GpuModel, KnowledgeBase
from capplan.errors import InvalidInputError, shorten

__all__ = ["GpuMatch", "find_gpus", "normalise", "resolve_device", "resolve_known_device"]

# Words that vendors add and users leave out; they carry no identity.
_NOISE = {"nvidia", "geforce", "tesla", "quadro", "graphics", "gpu"}


def normalise(name: str) -> tuple[str, ...]:
    text = name.lower()
    # "rtx3090" -> "rtx 3090", "a100-sxm4" -> "a100 sxm4"
    text = (
        re.sub(r"([a-z])(?=\d{3,4}\b)", r"\1 ", text) if re.search(r"rtx\d|gtx\d", text) else text
    )
    words = re.split(r"[^a-z0-9.]+", text)
    return tuple(w for w in words if w and w not in _NOISE)


@dataclass(frozen=True, slots=True)
class GpuMatch:
    model: GpuModel
    score: float
    matched: str  # the name or alias that matched


def find_gpus(query: str, models: Sequence[GpuModel]) -> list[GpuMatch]:
    """Every model matching ``query``, best first (ties by capability then name)."""
    wanted = normalise(query)
    if not wanted:
        return []
    results: list[GpuMatch] = []
    for model in models:
        best: GpuMatch | None = None
        for label in (model.name, *model.aliases):
            words = normalise(label)
            if words == wanted:
                score = 100.0
            elif set(wanted) <= set(words):
                score = 80.0 - (len(words) - len(wanted))
            else:
                continue
            if best is None or score > best.score:
                best = GpuMatch(model, score, label)
        if best is not None:
            results.append(best)
    results.sort(key=lambda m: (-m.score, m.model.capability.sort_key, m.model.name))
    return results


def suggestions(query: str, models: Sequence[GpuModel], limit: int = 3) -> list[str]:
    labels = {" ".join(normalise(label)): label for m in models for label in (m.name, *m.aliases)}
    close = difflib.get_close_matches(" ".join(normalise(query)), list(labels), n=limit, cutoff=0.4)
    return [labels[c] for c in close]


def resolve_device(text: str, models: Sequence[GpuModel]) -> tuple[Capability, GpuModel | None]:
    """A capability (``8.6``, ``sm_86``) or a GPU name, to the device's capability."""
    try:
        return Capability.parse(text), None
    except InvalidInputError:
        pass
    matches = find_gpus(text, models)
    if not matches:
        close = suggestions(text, models)
        hint = (
            "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
            if close
            else "run 'capplan gpus' to list known GPUs, or give a capability like 8.6"
        )
        raise InvalidInputError(f"unknown GPU or capability '{shorten(text.strip())}'", hint=hint)
    caps = {m.model.capability for m in matches if m.score == matches[0].score}
    if len(caps) > 1:
        names = ", ".join(f"{m.model.name} ({m.model.capability})" for m in matches[:4])
        raise InvalidInputError(
            f"GPU name '{shorten(text.strip())}' is ambiguous: {names}",
            hint="give a fuller name, or the capability itself",
        )
    return matches[0].model.capability, matches[0].model


def resolve_known_device(text: str, kb: KnowledgeBase) -> tuple[Capability, GpuModel | None]:
    """:func:`resolve_device`, and the capability must be one the knowledge base knows (exit 4
    with the known capabilities and spellings otherwise: ``99.9`` or ``sm_86a`` are no device)."""
    cap, model = resolve_device(text, kb.gpus)
    kb.capability(cap)
    return cap, model
