"""ROCm's fleet claim: whether a GPU name or target is an AMD one (a gfx processor, an AMD
model), for the planner's fleet, ``explain``, ``verify`` and ``doctor``. A spelling another GPU
family knows (an NVIDIA capability or model, asked through the registry) is left to it; a name
no family knows gets "did you mean" from every family. Pure.
"""

from __future__ import annotations

import difflib

from capplan.core.families.registry import gpu_families
from capplan.core.families.rocm.kb import AmdKnowledgeBase, normalise_amd_name
from capplan.core.families.rocm.target import AmdTarget
from capplan.core.model.devices import check_device_text
from capplan.core.model.kb import KnowledgeBase
from capplan.errors import InvalidInputError, shorten

__all__ = ["amd_entry", "looks_like_gfx"]


def looks_like_gfx(text: str) -> bool:
    """Whether a fleet entry or a package's ``extra``/``exclude`` value is meant as a gfx
    target (it is then parsed as one, and a bad one is an error of its own)."""
    return text.strip().lower().startswith("gfx")


def amd_entry(
    kb: KnowledgeBase, label: str, *, unknown: bool = True
) -> tuple[AmdTarget, str | None] | None:
    """An AMD fleet entry (``gfx942``, ``MI300X``, ``Radeon RX 7900 XTX``) as its processor and
    model name; None when the entry is another GPU family's (an NVIDIA GPU or capability). A
    bad gfx target or an ambiguous AMD name is exit 4; so is a name no family knows, with "did
    you mean", unless ``unknown`` is False (then None: ROCm's fleet claim leaves such a name to
    the families after it, so their order in the registry's table does not matter, and the
    fallback, CUDA, asks this family's ``owns_device`` for the same message at the same
    entry)."""
    check_device_text(label)
    if looks_like_gfx(label):
        target = AmdTarget.parse(label)
        if target.is_generic:
            raise InvalidInputError(
                f"fleet entry '{shorten(label)}' is a generic build target ({target}), not a GPU",
                hint="list the GPU or its processor, e.g. gfx1100",
            )
        return target.base, None
    # The other GPU families (NVIDIA's capabilities and models), in the registry's order.
    others = [f for f in gpu_families(kb) if f.name != "rocm"]
    amd = kb.part(AmdKnowledgeBase)
    if any(f.knows_device(label) for f in others) or amd is None:
        return None
    try:
        models = amd.lookup_gpu(label)
    except InvalidInputError:
        if not unknown:
            return None
        theirs = [name for f in others for name in f.device_suggestions(label)]
        close = _closest(label, [*theirs, *amd.suggest_gpus(label)])
        raise InvalidInputError(
            f"unknown GPU or capability '{shorten(label.strip())}'",
            hint="did you mean " + " or ".join(f"'{c}'" for c in close[:4]) + "?"
            if close
            else "run 'capplan gpus' to list known GPUs, or give a capability like 8.6 or a "
            "gfx target like gfx1100",
        ) from None
    targets = {m.target.base for m in models}
    if len(targets) > 1:
        names = ", ".join(f"{m.name} ({m.target})" for m in models[:4])
        raise InvalidInputError(
            f"GPU name '{shorten(label.strip())}' is ambiguous: {names}",
            hint="give the full model name or its gfx target",
        )
    return models[0].target.base, models[0].name


def _closest(label: str, names: list[str]) -> list[str]:
    """Every family's "did you mean" names, the closest to ``label`` first."""
    key = normalise_amd_name(label)
    return sorted(
        dict.fromkeys(names),
        key=lambda n: -difflib.SequenceMatcher(None, key, normalise_amd_name(n)).ratio(),
    )
