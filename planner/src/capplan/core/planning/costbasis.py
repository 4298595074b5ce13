"""Where each planned package's build minutes come from: a measurement or an estimate.

Each knowledge-base cost says so in its ``basis`` field (issue 40): ``measured`` (read off real
builds or compiles by ``bench/bench_costs.py``, its data under ``bench/data/``) or ``estimate``
(its source says on what it rests), and the machine its minutes are stated for
(``reference_cores``, ``reference_cpu``). ``plan`` and ``matrix`` name the estimated ones, so a
reader knows which build hours to trust (issue 34).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from capplan.core.model.kb import REFERENCE_CORES, PricesBuilds

if TYPE_CHECKING:
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.plan import Plan

__all__ = ["CostBasis", "cost_bases", "cost_line"]

# kb/cpu_packages.json gives a CPU-side package's minutes and size_mb without a cost source.
_CPU_SOURCE = "estimate: kb/cpu_packages.json minutes and size_mb (no measurement)"
_REFERENCE: tuple[int, str | None] = (REFERENCE_CORES, None)


class CostBasis(NamedTuple):
    """One planned package of one vendor: are its minutes measured, and the KB's source."""

    package: str
    vendor: str  # "nvidia", "amd" or "cpu"
    measured: bool
    source: str
    independent: bool  # only capability-independent jobs: no per-target compile to measure
    # The machine the minutes are stated for; None: a prebuilt redistributable, fetched and
    # patched, not compiled, whose minutes hold on any runner (core/planning/runners.py).
    reference_cores: int | None = REFERENCE_CORES
    reference_cpu: str | None = None  # its CPU class, where the figures name it

    @property
    def basis(self) -> str:
        return "measured" if self.measured else "estimate"

    @property
    def reference(self) -> str:
        if self.reference_cores is None:
            return "any runner (prebuilt)"
        cpu = f" of {self.reference_cpu}" if self.reference_cpu else ""
        return f"{self.reference_cores} cores{cpu}"

    def to_json(self) -> dict[str, object]:
        return {
            "package": self.package,
            "vendor": self.vendor,
            "basis": self.basis,
            "source": self.source,
            "reference": {"cores": self.reference_cores, "cpu": self.reference_cpu},
        }


_Entry = tuple[str, str, tuple[int | None, str | None]]  # basis, source, (cores, cpu)


def _sources(kb: KnowledgeBase) -> dict[str, dict[str, _Entry]]:
    """Each vendor's cost sources by package, as its knowledge-base file holds them.

    A table rather than a branch per vendor (tests/unit/test_architecture.py): a family's
    costs could move behind its FamilyPlanning once it has a cost-source lookup of its own."""
    tables: dict[str, dict[str, _Entry]] = {
        "nvidia": {
            name: (
                p.cost.basis,
                p.cost.source,
                (
                    None if p.kind == "capability-independent" else p.cost.reference_cores,
                    p.cost.reference_cpu,
                ),
            )
            for name, p in kb.packages.items()
        }
    }
    # The families' parts that price builds of their own (ROCm's builds and stack libraries).
    for part in kb.parts:
        if isinstance(part, PricesBuilds):
            vendor, sources = part.cost_sources()
            tables[vendor] = {
                name: (basis, source, _REFERENCE) for name, (basis, source) in sources.items()
            }
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
        basis, source, (cores, cpu) = tables.get(vendor, {}).get(
            package, ("estimate", _CPU_SOURCE, _REFERENCE)
        )
        out.append(CostBasis(package, vendor, basis == "measured", source, alone, cores, cpu))
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
