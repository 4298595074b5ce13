"""Rule 2, serving a GPU: the capability (and run level) each fleet GPU gets from a package, and
rule 4, ``share = "compatible"``'s set cover.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import NamedTuple

from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import sass_runs_on
from capplan.core.families.cuda.cover import min_cover
from capplan.core.families.cuda.fleet import FleetGpu
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.rules import Rules
from capplan.core.families.cuda.version import CudaVersion

__all__ = ["ACTIONS", "Choice", "candidates", "serve_gpu", "share_compatible"]


# -- serving the fleet ----------------------------------------------------------------------------
class Choice(NamedTuple):
    gpu: FleetGpu
    cap: Capability | None
    level: RunLevel
    reason: str
    cuda: CudaVersion | None = None  # the first allowed CUDA that builds ``cap``


ACTIONS = {RunLevel.NATIVE: "kept", RunLevel.COMPATIBLE: "substituted", RunLevel.PTX_JIT: "ptx"}


def candidates(rules: Rules, package: str) -> Callable[[], list[Capability]]:
    """Every buildable capability of ``package``, computed only when a rule needs it."""
    return cache(lambda: _buildable(rules, package))


def _buildable(rules: Rules, package: str) -> list[Capability]:
    ok = frozenset().union(*(rules.ok(package, cuda) for cuda in rules.package_cuda(package)))
    return [c.capability for c in nvidia(rules.kb).capabilities if c.capability in ok]


def serve_gpu(
    rules: Rules,
    package: str,
    gpu: FleetGpu,
    allowed: list[tuple[CudaVersion, frozenset[Capability]]],
    pool: Callable[[], list[Capability]],
) -> Choice:
    """Rule 2 for one GPU. ``allowed`` pairs each allowed CUDA, preferred first, with what
    ``package`` builds under it."""
    dev = gpu.capability
    for cuda, ok in allowed:
        if dev in ok:
            return Choice(gpu, dev, RunLevel.NATIVE, f"{dev} is built exactly", cuda)
    _, why = rules.first_cuda(package, (dev,))
    if gpu.jetson:
        return Choice(gpu, None, RunLevel.CANNOT_RUN, why)
    sass = [c for c in pool() if c.suffix != "a" and sass_runs_on(c, dev)]
    if sass:
        best = max(sass)
        return Choice(
            gpu,
            best,
            RunLevel.COMPATIBLE,
            f"{dev} cannot be built ({why}); SASS for {best} runs on it (same major, lower minor)",
        )
    if rules.kb.package(package).ptx in ("none", "inherited"):
        return Choice(gpu, None, RunLevel.CANNOT_RUN, f"{why}; {package} cannot embed PTX")
    ptx = [c for c in pool() if not c.suffix and c <= dev]
    if ptx:
        best = max(ptx)
        return Choice(
            gpu,
            best,
            RunLevel.PTX_JIT,
            f"{dev} cannot be built ({why}) and no same-major SASS builds; {best}+PTX is "
            "JIT-compiled by the driver (slow first start, no arch-specific features)",
        )
    return Choice(gpu, None, RunLevel.CANNOT_RUN, f"{why}; nothing older builds to JIT from")


def share_compatible(
    rules: Rules, package: str, choices: list[Choice], pool: Callable[[], list[Capability]]
) -> list[Choice]:
    """Replace SASS-served choices with a minimum set cover of capabilities."""
    sass_served = [ch for ch in choices if ch.level in (RunLevel.NATIVE, RunLevel.COMPATIBLE)]
    devices = sorted({ch.gpu.capability for ch in sass_served})
    weights = {
        d: sum(ch.gpu.count for ch in sass_served if ch.gpu.capability == d) for d in devices
    }
    options = {
        c: frozenset(d for d in devices if sass_runs_on(c, d)) for c in pool() if c.suffix != "a"
    }
    options = {c: covered for c, covered in options.items() if covered}
    chosen = min_cover(devices, options, weights)
    result: list[Choice] = []
    for ch in choices:
        if ch not in sass_served:
            result.append(ch)
            continue
        dev = ch.gpu.capability
        best = max(c for c in chosen if dev in options[c])
        if best.base == dev:
            result.append(Choice(ch.gpu, best, RunLevel.NATIVE, f"{dev} is built exactly"))
        else:
            result.append(
                Choice(
                    ch.gpu,
                    best,
                    RunLevel.COMPATIBLE,
                    f"share=compatible: SASS for {best} runs on {dev} (same major, lower minor)",
                )
            )
    return result
