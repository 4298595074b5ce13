"""Which planned variant fits a given GPU (``capplan detect``). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from capplan.core.capability import Capability
from capplan.core.compat import RunLevel, Verdict, how_runs
from capplan.core.cuda import CudaVersion
from capplan.core.plan import Plan, Variant

__all__ = ["Pick", "pick_variant"]


@dataclass(frozen=True, slots=True)
class Pick:
    package: str
    variant: Variant | None
    verdict: Verdict
    driver_ok: bool  # the driver runs the variant's CUDA (minor-version compatibility)


def pick_variant(
    plan: Plan,
    package: str,
    device: Capability,
    *,
    jetson: bool,
    max_cuda: CudaVersion | None,
) -> Pick:
    """The best variant of ``package`` for ``device``: best run level, then a CUDA the driver
    runs, then the smallest build (single-capability before fat), then the newest CUDA."""
    best: tuple[tuple[object, ...], Variant, Verdict] | None = None
    for variant in plan.variants_of(package):
        if variant.independent:
            verdict = Verdict(RunLevel.NATIVE, None, f"{package} is capability-independent")
        else:
            verdict = how_runs(device, variant.capabilities, variant.ptx, jetson=jetson)
        if verdict.level is RunLevel.CANNOT_RUN:
            continue
        driver_ok = max_cuda is None or variant.cuda <= max_cuda
        key = (
            verdict.level.rank,
            not driver_ok,
            len(variant.capabilities),
            (-variant.cuda.major, -variant.cuda.minor),
            variant.name,
        )
        if best is None or key < best[0]:
            best = (key, variant, verdict)
    if best is None:
        reason = next(
            (d.reason for d in plan.unserved if d.package == package),
            f"no planned {package} variant runs on {device}",
        )
        return Pick(package, None, Verdict(RunLevel.CANNOT_RUN, None, reason), False)
    _, variant, verdict = best
    return Pick(package, variant, verdict, max_cuda is None or variant.cuda <= max_cuda)
