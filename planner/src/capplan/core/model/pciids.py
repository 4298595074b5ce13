"""Turn the PCI ID repository's ``pci.ids`` into capplan's PCI table (``kb/pci.json``).

Pure: text in, JSON-ready data out. ``planner/scripts/pci_kb.py`` reads the files and writes the
result. ``pci.ids`` names the chip of every NVIDIA device (``2684  AD102 [GeForce RTX 4090]``);
``kb/chips.json`` gives each chip one capability, so a device id and a product name resolve
through the same chip table. Only devices of chips in that table are kept, and only GPU
functions (the HD-audio, USB and NVSwitch functions of the same chips are left out).

Product names are cleaned into the names nvidia-smi prints: ``Rev. A`` / ``OEM`` / ``Refresh`` /
``Mac Edition`` dropped, ``Mobile / Max-Q`` alternatives split, RTX 30/40/50 mobile parts named
``... Laptop GPU`` as the driver names them, and ``NVIDIA`` put in front where the driver does.
A name sold on chips of different capabilities (``GeForce GT 640`` on GK107 3.0 and GK208 3.5)
becomes one model per chip, ``NVIDIA GeForce GT 640 (GK107)``, so a lookup says it is ambiguous.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ChipRow",
    "HandModel",
    "PciEntry",
    "build_pci_table",
    "chip_of",
    "clean_names",
    "nvidia_entries",
    "pci_ids_version",
]

NVIDIA_VENDOR = "10de"

# What follows the chip code in a pci.ids chip token: GL professional, M / BM mobile, GLM mobile
# professional (GK104GLM, TU104BM, GA107BM).
_VARIANTS = ("", "GL", "GLM", "M", "BM", "GLB")
# Functions of a GPU chip that are not the GPU.
_NOT_GPU = re.compile(
    r"audio|usb|ucsi|nvswitch|pci bridge|pcie|root|host|sata|controller", re.IGNORECASE
)
# Bracketed names that are board codes, samples or placeholders, not products.
_NOT_PRODUCT = re.compile(
    r"engineering sample|\bsku\b|reserved|initial devid|\bint sku\b|\bfake\b|\bvgpu\b|\busm\b"
    r"|graphics device|skinny joe|^pg\d|^[a-z]\d{2}[a-z]\d|^n\d{2}|^nb\d|^exk|^gen\d|^q\d\d"
    r"|^g[kmpv]\d{3}|^gh100-|^tu\d{3}|^ad\d{3}|^ac |^ts4 |desktop device|generic-gpu|maxq\b"
    r"|gn\d\d-|^d\d\d[a-z]|\bgh3\b|initial dev|^ts4$|\bpg\d",
    re.IGNORECASE,
)
_DROP_WORDS = re.compile(r"\s+(?:Rev\. ?\w+|OEM|Refresh|Mac Edition)\b", re.IGNORECASE)
_FAMILIES = {"geforce", "quadro", "tesla", "grid", "drive", "rtx", "titan", "nvs", "jetson", "cmp"}
# RTX 30/40/50 mobile parts: the driver prints "NVIDIA GeForce RTX 4070 Laptop GPU".
_LAPTOP = re.compile(r"^(GeForce RTX [345]0[5-9]0(?: Ti)?(?: \d+GB)?) (?:Mobile|Max-Q)$")

# pci.ids names whose "/" alternatives the general rule below cannot split.
OVERRIDES: Mapping[str, tuple[str, ...]] = {
    "RTX 2000 / 2000E Ada Generation": ("RTX 2000 Ada Generation", "RTX 2000E Ada Generation"),
    "Tesla T10 16GB / GRID RTX T10-2/T10-4/T10-8": ("Tesla T10 16GB",),
    "Quadro P2000 Mobile / DRIVE PX 2 AutoChauffeur": ("Quadro P2000 Mobile",),
    "DGX Station / PH402 SKU 200": (),
    "Quadro M5000M / M5000 SE": ("Quadro M5000M", "Quadro M5000 SE"),
    "GH200 120GB / 480GB": ("GH200 120GB", "GH200 480GB"),
}


@dataclass(frozen=True, slots=True)
class PciEntry:
    """One NVIDIA device line of pci.ids: ``2684  AD102 [GeForce RTX 4090]``."""

    device: str  # four lower-case hex digits
    token: str  # the chip token as written (AD102, GA107BM, TU104GLM)
    rest: str  # the text after the token outside brackets ("High Definition Audio Controller")
    name: str | None  # the bracketed product name


@dataclass(frozen=True, slots=True)
class ChipRow:
    chip: str
    capability: str
    jetson: bool


@dataclass(frozen=True, slots=True)
class HandModel:
    """A hand-written model of kb/gpus.json: its labels and capability."""

    name: str
    labels: tuple[str, ...]
    capability: str


def pci_ids_version(text: str) -> str:
    """The ``# Version:`` line of a pci.ids file, or ``unknown``."""
    match = re.search(r"^#\s*Version:\s*(\S+)", text, re.MULTILINE)
    return match.group(1) if match else "unknown"


def nvidia_entries(text: str) -> list[PciEntry]:
    """Every device line of vendor 10de, in file order."""
    entries: list[PciEntry] = []
    inside = False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if not line.startswith("\t"):
            inside = line.lower().startswith(NVIDIA_VENDOR + " ")
            continue
        if not inside or line.startswith("\t\t"):
            continue
        device, _, label = line[1:].partition(" ")
        label = label.strip()
        if not re.fullmatch(r"[0-9a-fA-F]{4}", device) or not label:
            continue
        bracket = re.search(r"\[(.*)\]\s*$", label)
        name = bracket.group(1).strip() if bracket else None
        outside = label[: bracket.start()] if bracket else label
        token, _, rest = outside.strip().partition(" ")
        entries.append(PciEntry(device.lower(), token, rest.strip(), name or None))
    return entries


def chip_of(token: str, chips: Iterable[str]) -> str | None:
    """The chip of a pci.ids chip token (``GA107BM`` -> ``GA107``), longest chip first."""
    for chip in sorted(chips, key=len, reverse=True):
        if token.startswith(chip) and token[len(chip) :] in _VARIANTS:
            return chip
    return None


def _split_alternatives(name: str) -> list[str]:
    if name in OVERRIDES:
        return list(OVERRIDES[name])
    # "Quadro RTX 6000/8000": one token with slashes is two products differing in that token.
    match = re.fullmatch(r"(.*?)(\S+/\S+)(.*)", name)
    if match and " / " not in name:
        head, alts, tail = match.groups()
        return [f"{head}{alt}{tail}" for alt in alts.split("/")]
    parts = [p.strip() for p in name.split(" / ") if p.strip()]
    if not parts:
        return []
    first = _DROP_WORDS.sub("", parts[0]).strip()
    names = [first]
    words = first.split()
    for alt in parts[1:]:
        alt_words = alt.split()
        if alt_words[0].lower() in _FAMILIES or len(alt_words) >= len(words):
            names.append(alt)
            continue
        # "GeForce GTX 1650 Mobile / Max-Q", "GH200 120GB / 480GB", "Quadro M5000M / M5000 SE":
        # the alternative replaces the last word of the first name that starts like it.
        for i in range(len(words) - 1, 0, -1):
            if words[i][0].isdigit() == alt_words[0][0].isdigit() and (
                words[i][0].isdigit() or words[i][0].lower() == alt_words[0][0].lower()
            ):
                names.append(" ".join(words[:i] + alt_words))
                break
    return names


def clean_names(name: str) -> list[str]:
    """The product names one pci.ids bracket stands for, as nvidia-smi would print them."""
    out: list[str] = []
    for part in _split_alternatives(name):
        part = _DROP_WORDS.sub("", part).strip()
        if not part or _NOT_PRODUCT.search(part):
            continue
        laptop = _LAPTOP.match(part)
        if laptop:
            part = f"{laptop.group(1)} Laptop GPU"
        if not part.startswith(("Tesla ", "Quadro ", "GRID ", "NVIDIA ")):
            part = f"NVIDIA {part}"
        if part not in out:
            out.append(part)
    return out


def _segment(name: str, jetson: bool) -> str:
    if jetson:
        return "embedded"
    lower = name.lower()
    if re.search(r"geforce|titan|\bcmp |^nvidia p10\d|rtx spark", lower):
        return "consumer"
    if re.search(r"quadro|nvs |rtx a\d|rtx pro|ada generation|rtx \d{4}|\bt\d{3,4}\b", lower):
        return "workstation"
    return "datacenter"


def _systems(name: str, jetson: bool) -> list[str] | None:
    """aarch64-linux for Tegra modules (Jetson, DRIVE) and Grace superchips (GH200, GB200, GB300,
    GB10): their host is an Arm CPU (gpus.json's ``systems``); None: the default, x86_64."""
    if jetson or re.search(r"\b(GH200|GB200|GB300|GB10|DRIVE)\b", name):
        return ["aarch64-linux"]
    return None


def build_pci_table(
    text: str,
    chips: Sequence[ChipRow],
    hand: Sequence[HandModel],
    normalise_name: Callable[[str], tuple[str, ...]],
    *,
    provenance: str,
) -> dict[str, Any]:
    """The content of kb/pci.json: devices of known chips, and the models not in gpus.json.

    ``normalise`` is the name matcher's normaliser, so "same name" here means the same as it
    does when a user types one.
    """

    def normalise(name: str) -> tuple[str, ...]:
        # Word order differs between sources ("A100 PCIe 80GB", "A100 80GB PCIe").
        return tuple(sorted(normalise_name(name)))

    by_chip = {c.chip: c for c in chips}
    hand_by_key: dict[tuple[str, ...], HandModel] = {}
    for model in hand:
        for label in model.labels:
            hand_by_key.setdefault(normalise(label), model)

    kept: list[tuple[PciEntry, str, list[str]]] = []
    other_chips: dict[tuple[str, ...], set[str]] = {}
    for entry in nvidia_entries(text):
        chip = chip_of(entry.token, by_chip)
        if chip is None:
            # Names on chips outside the table (Fermi GF108 "GeForce GT 730"): noted on models.
            if re.match(r"(GF|GT|G)\d", entry.token) and entry.name:
                for name in clean_names(entry.name):
                    other_chips.setdefault(normalise(name), set()).add(
                        re.sub(r"(GL|GLM|M|BM)$", "", entry.token)
                    )
            continue
        if entry.rest and _NOT_GPU.search(entry.rest):
            continue
        if entry.name and _NOT_GPU.search(entry.name) and "nvswitch" in entry.name.lower():
            continue
        names = clean_names(entry.name) if entry.name else []
        kept.append((entry, chip, names))

    # name key -> chips it is sold on, and the spelling first seen.
    spelled: dict[tuple[str, ...], str] = {}
    sold_on: dict[tuple[str, ...], dict[str, list[str]]] = {}
    for entry, chip, names in kept:
        for name in names:
            key = normalise(name)
            spelled.setdefault(key, name)
            sold_on.setdefault(key, {}).setdefault(chip, []).append(entry.device)

    models: list[dict[str, Any]] = []
    model_of: dict[tuple[tuple[str, ...], str], str] = {}  # (name key, chip) -> model name
    for key, on in sorted(sold_on.items(), key=lambda kv: spelled[kv[0]]):
        hand_model = hand_by_key.get(key)
        rest = dict(on)
        if hand_model is not None:
            for chip in list(rest):
                if by_chip[chip].capability == hand_model.capability:
                    model_of[(key, chip)] = hand_model.name
                    del rest[chip]
        if not rest:
            continue
        caps = {by_chip[c].capability for c in rest}
        split = len(caps) > 1 or hand_model is not None
        groups = [[c] for c in sorted(rest)] if split else [sorted(rest)]
        for group in groups:
            name = f"{spelled[key]} ({group[0]})" if split else spelled[key]
            chip_rows = [by_chip[c] for c in group]
            ids = sorted(d for c in group for d in rest[c])
            source = "PCI ID repository pci.ids: " + ", ".join(
                f"{d} {c}" for c in group for d in sorted(rest[c])
            )
            note = ""
            if key in other_chips:
                note = (
                    "pci.ids also lists this name on "
                    + ", ".join(sorted(other_chips[key]))
                    + ", a chip no CUDA toolkit capplan knows targets; check the PCI id"
                    " (capplan gpus --pci)"
                )
            systems = _systems(name, chip_rows[0].jetson)
            models.append(
                {
                    "name": name,
                    "aliases": [],
                    "capability": chip_rows[0].capability,
                    "segment": _segment(name, chip_rows[0].jetson),
                    **({"systems": systems} if systems else {}),
                    "chips": group,
                    "pci_ids": [f"10de:{d}" for d in ids],
                    "note": note,
                    "source": source,
                }
            )
            for chip in group:
                model_of[(key, chip)] = name

    devices: list[dict[str, Any]] = []
    for entry, chip, names in sorted(kept, key=lambda k: k[0].device):
        linked: list[str] = []
        for name in names:
            linked_name = model_of[(normalise(name), chip)]
            if linked_name not in linked:
                linked.append(linked_name)
        devices.append(
            {
                "id": f"10de:{entry.device}",
                "chip": chip,
                "pci_name": entry.name,
                "models": linked,
            }
        )
    return {
        "source": provenance,
        "devices": devices,
        "models": sorted(models, key=lambda m: m["name"]),
    }
