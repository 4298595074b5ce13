"""How a build's device code runs on a device: a ranked answer with a reason.

The rules are CUDA's (restated in ../shared/CUDA.md, "Where compiled code runs"):

- SASS ``sm_XY`` runs on a device X.Z with Z >= Y, same major only;
- ``sm_XYa`` runs only on exactly X.Y; ``sm_XYf`` runs within its family (same major) on minors
  >= Y;
- PTX ``compute_XY`` is JIT-compiled for any device >= X.Y, across majors; ``compute_XYf`` PTX
  stays in its family, ``compute_XYa`` PTX runs only on X.Y;
- Jetson (Tegra) devices are not promised the minor-version SASS rule: only an exact build counts.

Explaining never raises: every "no" carries a reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from capplan.core.families.cuda.capability import Capability
from capplan.core.model.runs import RunLevel

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase

__all__ = ["Verdict", "device_verdict", "how_runs", "is_jetson", "sass_runs_on"]


class Verdict(NamedTuple):
    level: RunLevel
    via: Capability | None
    reason: str


def sass_runs_on(sass: Capability, device: Capability, *, jetson: bool = False) -> bool:
    """Whether SASS for ``sass`` runs on ``device`` (exactly or by a compatibility rule)."""
    # A physical device has no suffix; be lenient and judge a suffixed one by its base.
    if sass.major == device.major and sass.minor == device.minor:
        return True
    if jetson or sass.major != device.major or sass.minor > device.minor:
        return False
    # Same major, lower minor: baseline and family SASS carry over, arch-specific does not.
    return sass.suffix in ("", "f")


def _ptx_runs_on(ptx: Capability, device: Capability) -> bool:
    if ptx.suffix == "a":
        return ptx.base == device
    if ptx.suffix == "f":
        return ptx.major == device.major and ptx.minor <= device.minor
    return device >= ptx


def is_jetson(device: Capability, kb: KnowledgeBase) -> bool:
    """The one Jetson rule's question: is ``device`` a Jetson (Tegra) capability?

    ../shared/CUDA.md: no minor-version compatibility is promised on Jetson, so its SASS must be
    for exactly its capability. Every command that judges a device asks here (``explain``,
    ``verify --device``, ``limits read --binary``, ``detect``, the planner).
    """
    # The knowledge base's CUDA part is asked only here: inspect, which loads no knowledge
    # base, imports this module without loading its records.
    from capplan.core.families.cuda.kb import nvidia

    base = device.base
    nv = nvidia(kb)
    return nv.knows(base) and nv.capability(base).jetson


def device_verdict(
    device: Capability,
    sass: Iterable[Capability],
    ptx: Iterable[Capability],
    kb: KnowledgeBase,
) -> Verdict:
    """:func:`how_runs` with the Jetson rule taken from the knowledge base."""
    return how_runs(device, sass, ptx, jetson=is_jetson(device, kb))


def how_runs(
    device: Capability,
    sass: Iterable[Capability],
    ptx: Iterable[Capability],
    *,
    jetson: bool = False,
) -> Verdict:
    """The best way a build holding ``sass`` and ``ptx`` code runs on ``device``."""
    device = device.base
    sass_list = sorted(set(sass))
    ptx_list = sorted(set(ptx))
    exact = [s for s in sass_list if s.base == device]
    if exact:
        # Prefer the arch-specific build on its own device: it may use a-only features.
        best = max(exact)
        return Verdict(RunLevel.NATIVE, best, f"{best.sm} is SASS for exactly {device}")
    compatible = [s for s in sass_list if sass_runs_on(s, device, jetson=jetson)]
    if compatible:
        best = max(compatible)
        rule = (
            f"family SASS {best.sm} runs on later {best.major}.x minors"
            if best.suffix == "f"
            else f"SASS {best.sm} runs on {device} (same major {device.major}, lower minor)"
        )
        return Verdict(RunLevel.COMPATIBLE, best, rule)
    jit = [p for p in ptx_list if _ptx_runs_on(p, device)]
    if jit:
        best = max(jit)
        return Verdict(
            RunLevel.PTX_JIT,
            best,
            f"no SASS runs on {device}; the driver JIT-compiles {best.compute} PTX at start-up "
            "(slower first launch, no arch-specific features, needs a driver that knows the PTX "
            "version)",
        )
    return Verdict(RunLevel.CANNOT_RUN, None, _why_not(device, sass_list, ptx_list, jetson))


def _why_not(
    device: Capability, sass: list[Capability], ptx: list[Capability], jetson: bool
) -> str:
    if not sass and not ptx:
        return "the build holds no device code at all"
    parts: list[str] = []
    for s in sass:
        if s.major != device.major:
            parts.append(f"{s.sm} is for major {s.major}, SASS never crosses majors")
        elif s.minor > device.minor:
            parts.append(f"{s.sm} is newer than {device}")
        elif s.suffix == "a":
            parts.append(f"{s.sm} is arch-specific and runs only on {s.base}")
        elif jetson:
            parts.append(f"{s.sm}: Jetson devices need SASS for exactly {device}")
    for p in ptx:
        if p.suffix == "a":
            parts.append(f"{p.compute} PTX is arch-specific to {p.base}")
        elif p.suffix == "f" and p.major != device.major:
            parts.append(f"{p.compute} PTX stays in the {p.major}.x family")
        else:
            parts.append(f"{p.compute} PTX needs a device >= {p.base}")
    if not ptx:
        parts.append("no PTX to JIT from")
    return f"nothing runs on {device}: " + "; ".join(parts)
