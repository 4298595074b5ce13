"""Why two derivations differ, in words (``capplan cache why``): pure, over a walk's findings.

Each finding (a derivation that differs in itself, drvgraph.py) gets one cause, the first of
these that fits, in this order because an earlier one explains the later ones' symptoms:

1. ``system``: the two sides build for different systems;
2. ``cuda-release``: another CUDA release (a ``cuda`` version key, or inputs that are the same
   package from another ``cudaPackages_X_Y``);
3. ``forward-compat``: ``cudaForwardCompat`` differs, or the capability lists differ only in
   their PTX entries (``+PTX``, ``compute_XX``);
4. ``capabilities``: the capability list (``cudaCapabilities``, ``TORCH_CUDA_ARCH_LIST``,
   ``CMAKE_CUDA_ARCHITECTURES``, the gencode flags);
5. ``config-flag``: a nixpkgs config switch (``cudaSupport``, ``rocmSupport``) differs, which
   changes the hash of packages that are not CUDA packages at all (issue 49);
6. ``nixpkgs-revision``: another version or source of a package, or another stdenv (builder,
   its arguments): what a different nixpkgs revision changes;
7. ``overlay``: any other attribute of one derivation (a patch, a flag, an override).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from capplan.core.caches.drvgraph import Change, Finding, drv_stem

__all__ = ["CAUSE_ORDER", "Cause", "name_causes"]

CAUSE_ORDER = (
    "system",
    "cuda-release",
    "forward-compat",
    "capabilities",
    "config-flag",
    "nixpkgs-revision",
    "overlay",
)
# The attributes that carry a capability list in nixpkgs' CUDA recipes (torch, magma, nccl,
# onnxruntime, llama-cpp, ollama) and config.
_CAPABILITY_KEYS = frozenset(
    {
        "cudacapabilities",
        "configcudacapabilities",
        "torch_cuda_arch_list",
        "cmake_cuda_architectures",
        "nvcc_gencode",
        "cudaarches",
        "cudaarchitectures",
        "gputargets",
        "gencode",
        "cuda_architectures",
    }
)
_CONFIG_KEYS = frozenset({"cudasupport", "rocmsupport", "configcudasupport", "configrocmsupport"})
_RELEASE_KEYS = frozenset({"cuda", "cudaversion", "cuda_version", "cudamajorminorversion"})
_REVISION_KEYS = frozenset(
    {"version", "src", "srcs", "urls", "url", "outputhash", "rev", "builder", "args", "stdenv"}
)
_PTX = re.compile(r"\+ptx|compute_[0-9]+[a-z]?|[0-9]+-virtual", re.IGNORECASE)
_CUDA_SET = re.compile(r"^cuda([0-9]+(?:\.[0-9]+)?)-")


@dataclass(frozen=True, slots=True)
class Cause:
    """One named cause: its kind (CAUSE_ORDER), the derivation it points at, the attribute,
    both sides' values, and the sentence."""

    kind: str
    drv: str  # the derivation's name
    attribute: str
    yours: str | None
    planned: str | None
    words: str
    trail: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "derivation": self.drv,
            "attribute": self.attribute,
            "yours": self.yours,
            "planned": self.planned,
            "words": self.words,
            "trail": list(self.trail),
        }


def _leaf(attribute: str) -> str:
    return attribute.rsplit(".", 1)[-1].lower()


def _ptx_only(change: Change) -> bool:
    left = {_PTX.sub("", t).strip() for t in re.split(r"[;, \"\[\]]+", change.yours or "") if t}
    right = {_PTX.sub("", t).strip() for t in re.split(r"[;, \"\[\]]+", change.planned or "") if t}
    return (change.yours or "") != (change.planned or "") and left - {""} == right - {""}


def _cuda_set(name: str) -> str | None:
    found = _CUDA_SET.match(name)
    return found.group(1) if found else None


def _side(value: str | None) -> str:
    return "unset" if value is None else value


def _classify(change: Change, finding: Finding) -> str:
    leaf = _leaf(change.attribute)
    if change.attribute == "system":
        return "system"
    if leaf in _RELEASE_KEYS:
        return "cuda-release"
    if change.attribute == "name":
        ours, theirs = _cuda_set(finding.yours.name), _cuda_set(finding.planned.name)
        if ours != theirs:
            return "cuda-release"
        return "nixpkgs-revision"
    if "forwardcompat" in leaf:
        return "forward-compat"
    if leaf in _CAPABILITY_KEYS:
        return "forward-compat" if _ptx_only(change) else "capabilities"
    if leaf in _CONFIG_KEYS:
        return "config-flag"
    if leaf in _REVISION_KEYS or change.attribute.split(".", 1)[0] in ("builder", "args"):
        return "nixpkgs-revision"
    return "overlay"


def _words(kind: str, change: Change, drv: str) -> str:
    yours, planned = _side(change.yours), _side(change.planned)
    said = f"{change.attribute} is {yours} on your side, {planned} in the plan"
    if kind == "system":
        return f"system difference: {drv} is built for {yours}, the plan's for {planned}"
    if kind == "cuda-release":
        if change.attribute == "name":
            return (
                f"CUDA release: your {drv} comes from another CUDA package set than the plan's "
                f"({_side(change.yours)} against {_side(change.planned)})"
            )
        return f"CUDA release: {drv}'s {said}"
    if kind == "forward-compat":
        return f"PTX / forward compatibility (cudaForwardCompat): {drv}'s {said}"
    if kind == "capabilities":
        return f"capability list: {drv}'s {said}"
    if kind == "config-flag":
        return (
            f"nixpkgs config: {drv}'s {said} (a config switch changes the hash of packages "
            "that are not CUDA packages too)"
        )
    if kind == "nixpkgs-revision":
        return f"nixpkgs revision: {drv} differs in {said} (another version, source or stdenv)"
    return f"a patch or override from an overlay: {drv}'s {said}"


def _input_cause(finding: Finding) -> Cause:
    """A derivation whose inputs were added or removed (nothing else differs)."""
    added = ", ".join(finding.added) or "none"
    removed = ", ".join(finding.removed) or "none"
    sets = {_cuda_set(n) for n in (*finding.added, *finding.removed)} - {None}
    stems_added = {drv_stem(n) for n in finding.added}
    stems_removed = {drv_stem(n) for n in finding.removed}
    if len(sets) > 1 and stems_added == stems_removed:
        kind = "cuda-release"
        words = (
            f"CUDA release: {finding.yours.name} takes {added}, the plan's {removed} "
            "(another cudaPackages set)"
        )
    else:
        kind = "overlay"
        words = (
            f"a patch or override from an overlay: {finding.yours.name} has other inputs "
            f"(only yours: {added}; only the plan's: {removed})"
        )
    return Cause(kind, finding.yours.name, "inputDrvs", added, removed, words, finding.trail)


def name_causes(findings: Sequence[Finding]) -> list[Cause]:
    """One cause per finding (the first in CAUSE_ORDER its changes show), most telling first."""
    causes: list[Cause] = []
    for finding in findings:
        drv = finding.yours.name
        if not finding.changes:
            if finding.added or finding.removed:
                causes.append(_input_cause(finding))
            else:
                causes.append(
                    Cause(
                        "overlay",
                        drv,
                        "",
                        None,
                        None,
                        f"{drv} differs in no attribute capplan reads (its outputs, or a "
                        "content-addressed input): compare the two with nix-diff",
                        finding.trail,
                    )
                )
            continue
        ranked = sorted(
            (
                (CAUSE_ORDER.index(_classify(c, finding)), i, c)
                for i, c in enumerate(finding.changes)
            ),
        )
        rank, _, change = ranked[0]
        kind = CAUSE_ORDER[rank]
        causes.append(
            Cause(
                kind,
                drv,
                change.attribute,
                change.yours,
                change.planned,
                _words(kind, change, drv),
                finding.trail,
            )
        )
    causes.sort(key=lambda c: (CAUSE_ORDER.index(c.kind), len(c.trail), c.drv))
    return causes
