"""Find GPU models by the loose names people type (``a100``, ``GeForce RTX 4090``).

nvidia-smi prints names like ``NVIDIA A100-SXM4-80GB`` or ``Tesla V100-SXM2-32GB``; users type
``A100`` or ``rtx3090``. Matching normalises both sides (case, vendor words, punctuation) and
ranks: an exact name or alias, then entries holding every word of the query, then close spellings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.kb import ChipInfo, GpuModel, PciDevice, nvidia
from capplan.core.model.devices import check_device_text
from capplan.core.model.kb import KnowledgeBase
from capplan.errors import InvalidInputError, shorten

__all__ = [
    "REPORT_HINT",
    "GpuMatch",
    "NvidiaGpuNames",
    "PciAnswer",
    "find_gpus",
    "lookup_pci",
    "normalise",
    "parse_pci_id",
    "resolve_device",
    "resolve_known_device",
    "unique_model",
]

NVIDIA_VENDOR = "10de"
# Where an unknown device id gets reported; the table is regenerated from pci.ids.
REPORT_HINT = (
    "report it with the output of 'lspci -nn -d 10de:' at the capplan issue tracker; meanwhile"
    " give the capability itself, e.g. --gpu 8.9 (see 'capplan caps')"
)

# Words that vendors add and users leave out; they carry no identity.
_NOISE = {"nvidia", "geforce", "tesla", "quadro", "graphics", "gpu"}


# "NVIDIA GeForce GT 640 (GK107)": the chip qualifier of a name sold on chips of different
# capabilities; dropped so the plain name matches every chip's model equally (then: ambiguous).
_CHIP_QUALIFIER = re.compile(r"\((?:G[KMPVAHB]|TU|AD)[0-9]{2,3}[A-Z]?\)", re.IGNORECASE)
_LINE_NUMBER = re.compile(r"\b(rtx|gtx|gt|mx)(?=\d)")  # "rtx3090": the line, then the number
_D_MODEL = re.compile(r"\b(\d{4})d\b")  # "4090d": the China "D" models
_SEPARATORS = re.compile(r"[^a-z0-9.]+")  # between the words of a lower-cased name
_KEY_SEPARATORS = re.compile(r"[^a-z0-9.()]+")  # the same for exact keys (chips kept)


@lru_cache(maxsize=16384)
def normalise(name: str) -> tuple[str, ...]:
    text = _CHIP_QUALIFIER.sub(" ", name).lower()
    # "rtx3090" -> "rtx 3090", "gtx1650" -> "gtx 1650", "a100-sxm4" -> "a100 sxm4"
    text = _LINE_NUMBER.sub(r"\1 ", text)
    # "rtx 4090d" -> "rtx 4090 d" (the China "D" models)
    text = _D_MODEL.sub(r"\1 d", text)
    words = _SEPARATORS.split(text)
    return tuple(w for w in words if w and w not in _NOISE)


@lru_cache(maxsize=16384)
def _words_with_noise(name: str) -> frozenset[str]:
    """Every word of a name, vendor and line words included ("Tesla", "Quadro", "TITAN")."""
    return frozenset(w for w in _SEPARATORS.split(name.lower()) if w and w != "nvidia")


@lru_cache(maxsize=16384)
def exact_key(name: str) -> str:
    """A name as typed, with "NVIDIA", case, spacing and punctuation aside: "rtx3090",
    "RTX 3090" and "NVIDIA RTX-3090" are one key; "Quadro RTX 6000" keeps its "quadro". Also
    the key of plan.json's ``machine.names`` (pkgs/machine.nix ``exactKey`` is the same)."""
    return "".join(w for w in _KEY_SEPARATORS.split(name.lower()) if w and w != "nvidia")


# Match ranks (GpuMatch.score): an exact name or alias, then loose matches of curated models
# (every word given, vendor and line words aside), then generated models (pci.ids names) and
# names that only match once their chip qualifier is dropped ("GTX 750 Ti (GK106)").
EXACT = 100.0
_LOOSE = 80.0
_GENERATED = 60.0


@dataclass(frozen=True, slots=True)
class GpuMatch:
    model: GpuModel
    score: float
    matched: str  # the name or alias that matched

    @property
    def exact(self) -> bool:
        return self.score >= EXACT


def find_gpus(query: str, models: Sequence[GpuModel]) -> list[GpuMatch]:
    """Every model matching ``query``, best first: exact names or aliases (``NVIDIA``, case
    and spacing aside), then loose matches, curated models before generated and
    chip-qualified ones; ties by capability then name.

    A chip in parentheses (``GT 640 (GK208)``) keeps only the models built on that chip. A query
    of vendor or line words only (``Tesla``, ``Quadro``) matches the models named with them.
    """
    wanted = normalise(query)
    key = exact_key(query)
    noise_only = not wanted
    wanted_set = _words_with_noise(_CHIP_QUALIFIER.sub(" ", query)) if noise_only else set(wanted)
    if not wanted_set:
        return []
    index = _label_index(models)
    if index is not None and key not in index[0] and not all(w in index[1] for w in wanted_set):
        # No label has this exact key, and some word is in no label: nothing can match (a
        # loose match needs every word in one label). Asked of every AMD spelling when
        # plan.json's GPU names are written, so a miss costs no pass over the models.
        return []
    chips = {m.group(0)[1:-1].upper() for m in _CHIP_QUALIFIER.finditer(query)}
    results: list[GpuMatch] = []
    for model in models:
        if chips and not chips <= {c.upper() for c in model.chips}:
            continue
        base = _GENERATED if model.pci_ids else _LOOSE
        best: GpuMatch | None = None
        for label in (model.name, *model.aliases):
            if exact_key(label) == key:
                score = EXACT
            else:
                if not _could_match(label, wanted_set):
                    continue
                words = _words_with_noise(label) if noise_only else normalise(label)
                if not wanted_set <= set(words):
                    continue
                qualified = _CHIP_QUALIFIER.search(label) is not None and not chips
                score = (_GENERATED if qualified else base) - min(len(words) - len(wanted_set), 19)
                if not noise_only and tuple(words) == wanted:
                    score += 0.5  # every word and no more: the closest loose match
            if best is None or score > best.score:
                best = GpuMatch(model, score, label)
        if best is not None:
            results.append(best)
    results.sort(key=lambda m: (-m.score, m.model.capability.sort_key, m.model.name))
    return results


_SEEN: dict[int, Sequence[GpuModel]] = {}
_INDEX: dict[int, tuple[Sequence[GpuModel], frozenset[str], str]] = {}


def _label_index(models: Sequence[GpuModel]) -> tuple[frozenset[str], str] | None:
    """The exact keys of every label of ``models`` and their lower-cased labels as one text,
    made on the second lookup in one model list (the knowledge base's lists live as long as
    the process); None on the first, so a command that looks one GPU up pays nothing for it."""
    found = _INDEX.get(id(models))
    if found is not None and found[0] is models:
        return found[1], found[2]
    if _SEEN.get(id(models)) is not models:
        _SEEN[id(models)] = models
        return None
    labels = [label for m in models for label in (m.name, *m.aliases)]
    keys = frozenset(exact_key(label) for label in labels)
    text = "\n".join(label.lower() for label in labels)
    _INDEX[id(models)] = (models, keys, text)
    return keys, text


def partial_matches(query: str, models: Sequence[GpuModel]) -> list[GpuModel]:
    """The models whose names hold a word beginning with each word of ``query`` (``rtx 30``:
    the RTX 3050 to 3090 Ti), by capability then name: what ``capplan gpus`` lists for a
    query no whole word matches. A search only: choosing one GPU (``--device``,
    ``fleet.gpus``) never takes a partial name."""
    wanted = normalise(query)
    if not wanted:
        return []
    found: list[GpuModel] = []
    for model in models:
        for label in (model.name, *model.aliases):
            words = normalise(label)
            if all(any(word.startswith(w) for word in words) for w in wanted):
                found.append(model)
                break
    return sorted(found, key=lambda m: (m.capability.sort_key, m.name))


def _could_match(label: str, wanted: AbstractSet[str]) -> bool:
    """Whether every wanted word occurs in the lower-cased label: each word normalising a label
    gives is a piece of it, so a label failing this cannot match loosely and is skipped before
    it is normalised (the first lookup of a process normalised all 800 labels: 8 of its 13 ms)."""
    lower = label.lower()
    return all(w in lower for w in wanted)


def suggestions(query: str, models: Sequence[GpuModel], limit: int = 3) -> list[str]:
    import difflib  # only a lookup that failed needs it

    labels = {" ".join(normalise(label)): label for m in models for label in (m.name, *m.aliases)}
    close = difflib.get_close_matches(" ".join(normalise(query)), list(labels), n=limit, cutoff=0.4)
    return [labels[c] for c in close]


def unique_model(query: str, models: Sequence[GpuModel]) -> GpuModel | None:
    """The one model a name stands for under the rule of :func:`resolve_device`; None when it
    matches nothing or models of different capabilities (a detected name is then no answer)."""
    try:
        return _pick(query, find_gpus(query, models))
    except InvalidInputError:
        return None


def _pick(text: str, matches: list[GpuMatch]) -> GpuModel | None:
    """The rule for one GPU: exact names win; without one, every loose match must agree on the
    capability, or the name is ambiguous (exit 4 with one candidate per capability)."""
    if not matches:
        return None
    exact = [m for m in matches if m.exact]
    pool = exact or matches
    caps = {m.model.capability for m in pool}
    if len(caps) > 1:
        per_cap: dict[Capability, GpuMatch] = {}
        for match in pool:
            per_cap.setdefault(match.model.capability, match)
        shown = sorted(per_cap.values(), key=lambda m: m.model.capability.sort_key)
        names = ", ".join(f"{m.model.name} ({m.model.capability})" for m in shown[:6])
        more = f" and {len(shown) - 6} more" if len(shown) > 6 else ""
        example = shown[-1].model
        raise InvalidInputError(
            f"GPU name '{shorten(text.strip())}' is ambiguous: it matches models of "
            f"{len(shown)} capabilities: {names}{more}",
            hint=_pick_hint(text.strip(), example),
        )
    return pool[0].model


def _pick_hint(text: str, example: GpuModel) -> str:
    if _CHIP_QUALIFIER.search(example.name) and example.chips:
        how = f"add the chip, e.g. '{shorten(text, 60)} ({example.chips[0]})'"
    else:
        how = f"give a full model name such as '{_short_name(example)}'"
    return (
        f"{how}, a capability such as {example.capability}, or a PCI id ('capplan gpus --pci "
        f"10de:XXXX', from 'lspci -nn -d 10de:'); 'capplan gpus \"{shorten(text, 60)}\"' lists "
        "the candidates"
    )


def _short_name(model: GpuModel) -> str:
    return model.aliases[0] if model.aliases else model.name


def resolve_device(text: str, models: Sequence[GpuModel]) -> tuple[Capability, GpuModel | None]:
    """A capability (``8.6``, ``sm_86``) or a GPU name, to the device's capability; exit 4 for
    what :func:`check_device_text` refuses."""
    check_device_text(text)
    try:
        return Capability.parse(text), None
    except InvalidInputError:
        pass
    model = _pick(text, find_gpus(text, models))
    if model is None:
        close = suggestions(text, models)
        hint = (
            "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
            if close
            else "run 'capplan gpus' to list known GPUs, or give a capability like 8.6"
        )
        raise InvalidInputError(f"unknown GPU or capability '{shorten(text.strip())}'", hint=hint)
    return model.capability, model


_PCI_RE = re.compile(r"(?:0x)?([0-9a-f]{4}):(?:0x)?([0-9a-f]{4})")


def parse_pci_id(text: str) -> str:
    """``10de:2684`` (any case, optional ``0x``) to ``10de:2684``; else exit 4."""
    match = _PCI_RE.fullmatch(text.strip().lower())
    if match is None:
        raise InvalidInputError(
            f"PCI id '{shorten(text.strip())}' is not vendor:device in hex",
            hint="give it as vvvv:dddd, e.g. 10de:2684, as 'lspci -nn' prints it",
        )
    return f"{match.group(1)}:{match.group(2)}"


@dataclass(frozen=True, slots=True)
class PciAnswer:
    device: PciDevice
    chip: ChipInfo
    models: tuple[GpuModel, ...]

    @property
    def capability(self) -> Capability:
        return self.chip.capability

    @property
    def name(self) -> str:
        """The best name: the first model's, else pci.ids' name, else the id and chip."""
        if self.models:
            return self.models[0].name
        if self.device.pci_name:
            return f"NVIDIA {self.device.pci_name}"
        return f"NVIDIA GPU {self.device.id} ({self.chip.chip})"


def lookup_pci(pci_id: str, kb: KnowledgeBase) -> PciAnswer:
    """The chip, capability and models of an NVIDIA PCI id; a clear error otherwise (exit 4)."""
    wanted = parse_pci_id(pci_id)
    vendor = wanted.split(":")[0]
    if vendor != NVIDIA_VENDOR:
        raise InvalidInputError(
            f"PCI id '{wanted}' is not an NVIDIA device (vendor {vendor}, NVIDIA is 10de)",
            hint="give an NVIDIA id from 'lspci -nn -d 10de:'",
        )
    device = nvidia(kb).pci_device(wanted)
    if device is None:
        raise InvalidInputError(
            f"unknown NVIDIA device id '{wanted}': not in capplan's PCI table", hint=REPORT_HINT
        )
    chip = nvidia(kb).chip(device.chip)
    if chip is None:  # the loader checks every device's chip; kept for type narrowing
        raise InvalidInputError(f"NVIDIA device id '{wanted}' has no known chip", hint=REPORT_HINT)
    models = tuple(m for m in (nvidia(kb).gpu(n) for n in device.models) if m is not None)
    return PciAnswer(device, chip, models)


def resolve_known_device(text: str, kb: KnowledgeBase) -> tuple[Capability, GpuModel | None]:
    """:func:`resolve_device`, and the capability must be one the knowledge base knows (exit 4
    with the known capabilities and spellings otherwise: ``99.9`` or ``sm_86a`` are no device)."""
    cap, model = resolve_device(text, nvidia(kb).gpus)
    nvidia(kb).capability(cap)
    return cap, model


class NvidiaGpuNames:
    """NVIDIA's GPU models by name and PCI id (:class:`capplan.core.families.base.GpuNames`):
    ``capplan gpus``' answers and ``dispatch --device``'s capabilities, from a knowledge base
    whose AMD part may be absent."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb

    def rows(self, query: str | None) -> list[dict[str, Any]]:
        if query is None:
            models = sorted(nvidia(self.kb).gpus, key=lambda m: (m.capability.sort_key, m.name))
        else:
            known = nvidia(self.kb).gpus
            models = [m.model for m in find_gpus(query, known)] or partial_matches(query, known)
        return [self._row(m) for m in models]

    def _row(self, model: GpuModel) -> dict[str, Any]:
        info = nvidia(self.kb).capability(model.capability)
        return {
            "name": model.name,
            "capability": str(model.capability),
            "arch": info.arch,
            "segment": model.segment,
            "jetson": info.jetson,
            "aliases": list(model.aliases),
            "chips": list(model.chips),
            "pci_ids": list(model.pci_ids)
            or sorted(d.id for d in nvidia(self.kb).pci_devices if model.name in d.models),
            "note": model.note,
        }

    def pci_rows(self, pci_id: str) -> list[dict[str, Any]]:
        answer = lookup_pci(pci_id, self.kb)
        rows = [self._row(m) for m in answer.models]
        if not rows:
            # An id pci.ids lists without a product name: the chip still gives the capability.
            info = nvidia(self.kb).capability(answer.capability)
            rows = [
                {
                    "name": answer.name,
                    "capability": str(answer.capability),
                    "arch": info.arch,
                    "segment": None,
                    "jetson": info.jetson,
                    "aliases": [],
                    "chips": [answer.chip.chip],
                    "pci_ids": [answer.device.id],
                    "note": "",
                }
            ]
        for row in rows:
            row["pci_id"] = answer.device.id
            row["chip"] = answer.chip.chip
            row["pci_name"] = answer.device.pci_name
        return rows

    def suggestions(self, query: str) -> list[str]:
        return suggestions(query, nvidia(self.kb).gpus)

    def targets(self, texts: Sequence[str]) -> tuple[str, ...]:
        caps = [resolve_device(t, nvidia(self.kb).gpus)[0] for t in texts]
        for cap in caps:
            nvidia(self.kb).capability(cap)  # an unknown capability (99.9) is exit 4, as everywhere
        return tuple(str(c) for c in caps)
