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
from functools import lru_cache

from capplan.core.model.capability import Capability
from capplan.core.model.kb import ChipInfo, GpuModel, KnowledgeBase, PciDevice
from capplan.errors import InvalidInputError, shorten

__all__ = [
    "REPORT_HINT",
    "GpuMatch",
    "PciAnswer",
    "find_gpus",
    "lookup_pci",
    "normalise",
    "parse_pci_id",
    "resolve_device",
    "resolve_known_device",
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


@lru_cache(maxsize=16384)
def normalise(name: str) -> tuple[str, ...]:
    text = _CHIP_QUALIFIER.sub(" ", name).lower()
    # "rtx3090" -> "rtx 3090", "gtx1650" -> "gtx 1650", "a100-sxm4" -> "a100 sxm4"
    text = re.sub(r"\b(rtx|gtx|gt|mx)(?=\d)", r"\1 ", text)
    # "rtx 4090d" -> "rtx 4090 d" (the China "D" models)
    text = re.sub(r"\b(\d{4})d\b", r"\1 d", text)
    words = re.split(r"[^a-z0-9.]+", text)
    return tuple(w for w in words if w and w not in _NOISE)


@dataclass(frozen=True, slots=True)
class GpuMatch:
    model: GpuModel
    score: float
    matched: str  # the name or alias that matched


def find_gpus(query: str, models: Sequence[GpuModel]) -> list[GpuMatch]:
    """Every model matching ``query``, best first (ties by capability then name).

    A chip in parentheses (``GT 640 (GK208)``) keeps only the models built on that chip.
    """
    wanted = normalise(query)
    if not wanted:
        return []
    chips = {m.group(0)[1:-1].upper() for m in _CHIP_QUALIFIER.finditer(query)}
    results: list[GpuMatch] = []
    for model in models:
        if chips and not chips <= {c.upper() for c in model.chips}:
            continue
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
            hint="add the chip, e.g. '" + _with_chip(text, matches[0].model) + "', give the PCI"
            " id ('capplan gpus --pci 10de:XXXX', from 'lspci -nn -d 10de:'), or the capability",
        )
    return matches[0].model.capability, matches[0].model


def _with_chip(text: str, model: GpuModel) -> str:
    return f"{text.strip()} ({model.chips[0]})" if model.chips else text.strip()


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
    device = kb.pci_device(wanted)
    if device is None:
        raise InvalidInputError(
            f"unknown NVIDIA device id '{wanted}': not in capplan's PCI table", hint=REPORT_HINT
        )
    chip = kb.chip(device.chip)
    if chip is None:  # the loader checks every device's chip; kept for type narrowing
        raise InvalidInputError(f"NVIDIA device id '{wanted}' has no known chip", hint=REPORT_HINT)
    models = tuple(m for m in (kb.gpu(n) for n in device.models) if m is not None)
    return PciAnswer(device, chip, models)


def resolve_known_device(text: str, kb: KnowledgeBase) -> tuple[Capability, GpuModel | None]:
    """:func:`resolve_device`, and the capability must be one the knowledge base knows (exit 4
    with the known capabilities and spellings otherwise: ``99.9`` or ``sm_86a`` are no device)."""
    cap, model = resolve_device(text, kb.gpus)
    kb.capability(cap)
    return cap, model
