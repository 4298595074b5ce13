"""Where each planned package's build minutes come from: a measurement or an estimate.

A knowledge-base cost whose ``source`` begins with ``measured:`` was fitted from real compiles
(``bench/bench_costs.py``, its data under ``bench/data/``); every other cost is an estimate
(its source says on what it rests). ``plan`` and ``matrix`` name the estimated ones, so a reader
knows which build hours to trust (issue 34).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.plan import Plan

__all__ = ["MEASURED", "CostBasis", "cost_bases", "cost_line", "is_measured"]

MEASURED = "measured:"
# kb/cpu_packages.json gives a CPU-side package's minutes and size_mb without a cost source.
_CPU_SOURCE = "estimate: kb/cpu_packages.json minutes and size_mb (no measurement)"


class CostBasis(NamedTuple):
    """One planned package of one vendor: are its minutes measured, and the KB's source."""

    package: str
    vendor: str  # "nvidia", "amd" or "cpu"
    measured: bool
    source: str
    independent: bool  # only capability-independent jobs: no per-target compile to measure

    def to_json(self) -> dict[str, object]:
        return {
            "package": self.package,
            "vendor": self.vendor,
            "basis": "measured" if self.measured else "estimate",
            "source": self.source,
        }


def is_measured(source: str) -> bool:
    return source.startswith(MEASURED)


def _sources(kb: KnowledgeBase) -> dict[str, dict[str, str]]:
    """Each vendor's cost sources by package, as its knowledge-base file holds them.

    A table rather than a branch per vendor (tests/unit/test_architecture.py): a family's
    costs could move behind its FamilyPlanning once it has a cost-source lookup of its own."""
    tables = {"nvidia": {name: p.cost.source for name, p in kb.packages.items()}}
    if kb.amd is not None:
        amd = {name: b.cost.source for name, b in kb.amd.builds.items()}
        amd.update({name: s.cost.source for name, s in kb.amd.stack_libraries.items()})
        tables["amd"] = amd
    return tables


def cost_bases(kb: KnowledgeBase, plan: Plan) -> tuple[CostBasis, ...]:
    """One entry per (package, vendor) the plan builds, sorted by package then vendor."""
    independent: dict[tuple[str, str], bool] = {}
    for v in plan.variants:
        key = (v.package, v.vendor or "cpu")
        independent[key] = independent.get(key, True) and v.independent
    tables = _sources(kb)
    out = []
    for (package, vendor), alone in sorted(independent.items()):
        source = tables.get(vendor, {}).get(package, _CPU_SOURCE)
        out.append(CostBasis(package, vendor, is_measured(source), source, alone))
    return tuple(out)


def cost_line(bases: tuple[CostBasis, ...]) -> str | None:
    """The bottom line's word on costs: which are measured, which estimated; None: no jobs."""
    if not bases:
        return None
    names = [b.package for b in bases]
    # A package planned for two vendors (torch on CUDA and ROCm) is named with each vendor.
    label = {
        b: f"{b.package} ({b.vendor})" if names.count(b.package) > 1 else b.package for b in bases
    }
    measured = [label[b] for b in bases if b.measured]
    # Named: the estimates of per-target builds; counted: those of one-build-each packages
    # (prebuilt redistributables, wheels), whose minutes do not grow with targets.
    named = [label[b] for b in bases if not b.measured and not b.independent]
    counted = sum(1 for b in bases if not b.measured and b.independent)
    parts = []
    if measured:
        parts.append(f"measured for {', '.join(measured)} (bench/bench_costs.py)")
    if named or counted:
        what = ", ".join(named)
        if counted:
            more = f"{counted} capability-independent package{'s' if counted > 1 else ''}"
            what = f"{what} and {more}" if what else more
        parts.append(f"estimates for {what}")
    return "build minutes: " + "; ".join(parts)
