"""``capplan doctor`` on PEP 825 variant wheels: does the variant an installer chose cover every
GPU of the machine? Pure.

An installer picks a variant wheel for one GPU (the nvidia provider keys on the highest), so on a
machine with two GPU models it can install a wheel whose ``variant.json`` does not cover the
other. Each GPU judges its vendor's properties (its family's doctor module: ``nvidia :: sm_arch``
``86_real`` SASS and ``90_virtual`` PTX with ``how_runs``, ``amd :: gfx_arch`` with
``amd_how_runs``), with the same rules as the libraries' code. A wheel's libraries decide
doctor's exit code; this verdict says why an installer gave a machine a wheel that misses one of
its GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from capplan.core.binaries.doctor import Gpu, Properties

__all__ = ["InstalledVariant", "VariantVerdict", "judge_variant", "parse_variant_json"]

_LABEL = re.compile(r"[0-9a-z_.]{1,16}")
_NAME = re.compile(r"[a-z0-9_]+")
_VALUE = re.compile(r"[a-z0-9_.]+")


@dataclass(frozen=True, slots=True)
class InstalledVariant:
    """One installed distribution's ``variant.json``: its label and properties."""

    package: str
    version: str | None
    path: str  # where variant.json was read, as shown to the user
    label: str
    properties: Properties


@dataclass(frozen=True, slots=True)
class VariantVerdict:
    gpu: str
    covered: bool | None  # None: the variant states nothing about this GPU's vendor
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "covered": self.covered, "reason": self.reason}


def parse_variant_json(document: object) -> tuple[str, Properties]:
    """(label, properties) of a wheel's ``variant.json`` (PEP 825: exactly one label under
    ``variants``, namespace -> feature -> non-empty list of values); ValueError saying what is
    wrong otherwise."""
    if not isinstance(document, dict) or not isinstance(document.get("variants"), dict):
        raise ValueError("no 'variants' object")
    variants = document["variants"]
    if len(variants) != 1:
        raise ValueError(f"{len(variants)} labels under 'variants' (a wheel's has exactly one)")
    ((label, namespaces),) = variants.items()
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise ValueError(f"label {str(label)[:40]!r} is not 1-16 of 0-9, a-z, '_', '.'")
    if not isinstance(namespaces, dict):
        raise ValueError(f"label {label}: properties are not an object")
    properties: dict[str, dict[str, tuple[str, ...]]] = {}
    for namespace, features in namespaces.items():
        if not _NAME.fullmatch(namespace) or not isinstance(features, dict):
            raise ValueError(f"namespace {namespace[:40]!r} is malformed")
        for feature, values in features.items():
            ok = (
                isinstance(values, list)
                and values
                and all(isinstance(v, str) and _VALUE.fullmatch(v) for v in values)
            )
            if not _NAME.fullmatch(feature) or not ok:
                raise ValueError(f"{namespace} :: {feature[:40]} is malformed")
            properties.setdefault(namespace, {})[feature] = tuple(values)
    return label, properties


def judge_variant(variant: InstalledVariant, gpus: Sequence[Gpu]) -> tuple[VariantVerdict, ...]:
    """One verdict per GPU: does the variant's stated device code cover it?"""
    verdicts = []
    for gpu in gpus:
        judged = gpu.judge_variant(variant.properties)
        if judged is None:
            verdicts.append(
                VariantVerdict(gpu.label, None, f"states nothing about {gpu.vendor} GPUs")
            )
        else:
            verdicts.append(VariantVerdict(gpu.label, *judged))
    return tuple(verdicts)
