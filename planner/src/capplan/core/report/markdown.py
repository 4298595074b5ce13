"""GitHub job summaries as Markdown: the plan job's (``capplan matrix --format summary``) and
the final job's (``capplan ci results``: built, failed and skipped per variant).

GitHub shows at most 1 MiB of ``$GITHUB_STEP_SUMMARY`` per step. Every table here is capped
(devices, warnings, variants) and every value cut, so a plan of any size stays far below it;
a capped table says how much it leaves out and where the rest is. Every value goes through
:func:`capplan.core.report.escape.md_text`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from capplan.core.report.data import LEVELS, Report, bottom_line
from capplan.core.report.escape import md_text

__all__ = [
    "GITHUB_SUMMARY_LIMIT_BYTES",
    "Outcome",
    "outcomes",
    "plan_summary",
    "results_summary",
]

GITHUB_SUMMARY_LIMIT_BYTES = 1024 * 1024  # per step (docs.github.com, "job summaries")
MAX_DEVICES = 40  # rows of the coverage table
MAX_GRID_PACKAGES = 8  # more packages: coverage as counts per device, not a grid
MAX_WARNINGS = 20
MAX_VARIANTS = 500  # rows of the per-variant results table; past it, counts per package
MAX_FAILED = 200  # failed variants listed by name past MAX_VARIANTS
_VALUE = 120  # characters of one shown value


def _v(value: object, limit: int = _VALUE) -> str:
    text = str(value)
    return md_text(text if len(text) <= limit else text[:limit] + "…")


def _n(value: float) -> str:
    return f"{value:,.1f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _legend() -> str:
    return "; ".join(f"{lv.symbol} {lv.words}" for lv in LEVELS.values())


def _coverage(report: Report) -> list[str]:
    cov = report.coverage
    out = ["### Coverage", ""]
    shown = cov.devices[:MAX_DEVICES]
    if len(cov.packages) <= MAX_GRID_PACKAGES:
        out.append(_row(["device", "count", *(_v(p) for p in cov.packages)]))
        out.append(_row(["---", "---:", *("---" for _ in cov.packages)]))
        for i, (label, count, _system) in enumerate(shown):
            cells = []
            for c in cov.cells[i]:
                level = LEVELS[c.level]
                cells.append(f"{level.symbol} {_v(c.variant)}" if c.variant else level.symbol)
            out.append(_row([_v(label), str(count), *cells]))
        out += ["", _legend()]
    else:
        keys = [k for k in LEVELS if k != "none"]
        out.append(
            f"{len(cov.packages):,} packages: how many of them run each way on each device "
            "(`capplan report` draws the whole grid)."
        )
        out.append("")
        out.append(_row(["device", "count", *(f"{LEVELS[k].symbol} {k}" for k in keys)]))
        out.append(_row(["---", "---:", *("---:" for _ in keys)]))
        for i, (label, count, _system) in enumerate(shown):
            tally = {k: 0 for k in keys}
            for c in cov.cells[i]:
                if c.level in tally:
                    tally[c.level] += 1
            out.append(_row([_v(label), str(count), *(f"{tally[k]:,}" for k in keys)]))
    if len(cov.devices) > len(shown):
        out += [
            "",
            f"Summarised: {len(shown)} of {len(cov.devices):,} fleet devices shown "
            "(`capplan report` and `capplan plan` list them all).",
        ]
    return out


def _stages(report: Report) -> list[str]:
    out = ["### Jobs per stage", ""]
    out.append(_row(["stage", "jobs", "to build", "cached", "skipped (failures)", "minutes"]))
    out.append(_row(["---:"] * 6))
    for s in report.stages:
        out.append(
            _row(
                [
                    str(s.stage),
                    f"{s.jobs:,}",
                    f"{s.to_build:,}",
                    f"{s.cached:,}",
                    f"{s.skipped:,}",
                    _n(s.minutes),
                ]
            )
        )
    total = len(report.matrix.graph.order)
    cached, failed, blocked = len(report.cached), len(report.failed), len(report.blocked)
    build = total - cached - failed - blocked
    out.append("")
    if report.asked_cache or report.asked_failures:
        words = [f"{build:,} to build", f"{cached:,} cached"]
        if report.asked_failures:
            words += [f"{failed:,} recorded failed", f"{blocked:,} blocked by them"]
        out.append(f"Of {total:,} planned jobs: {', '.join(words)}.")
    else:
        out.append(f"{total:,} planned jobs; no binary cache was asked (`--skip-cached`).")
    return out


def _minutes(report: Report) -> list[str]:
    s = report.scheduled.summary()
    out = ["### Estimated minutes", ""]
    out.append(
        f"{_n(s['total_minutes'])} build minutes on the runners the jobs are scheduled on; on "
        f"{s['runners']} runners the schedule takes {_n(s['makespan_minutes'])} min (critical "
        f"path {_n(report.critical_minutes)} min, lower bound {_n(s['lower_bound_minutes'])})."
    )
    pools = s["pools"]
    if len(pools) > 1:
        out.append("")
        for system, pool in pools.items():
            out.append(
                f"- {_v(system)}: {pool['jobs']:,} jobs on {pool['runners']} runners, "
                f"{_n(pool['makespan_minutes'])} min"
            )
    return out


def plan_summary(report: Report) -> str:
    """The plan job's summary: the bottom line, coverage, jobs per stage, cached against to
    build, and the estimated minutes."""
    from capplan.core.planning.summary import warnings

    out = ["## capplan: the plan", ""]
    out += [_v_line(line) for line in bottom_line(report)]
    found = warnings(report.plan)
    if found:
        out += ["", f"**{len(found)} warning{'s' if len(found) > 1 else ''}:**", ""]
        out += [f"- {_v(kind)}: {_v(text, 400)}" for kind, text in found[:MAX_WARNINGS]]
        if len(found) > MAX_WARNINGS:
            out.append(
                f"- summarised: {len(found) - MAX_WARNINGS:,} more (`capplan plan` lists them)"
            )
    out.append("")
    out += _coverage(report)
    out.append("")
    out += _stages(report)
    out.append("")
    out += _minutes(report)
    return "\n".join(out) + "\n"


def _v_line(line: str) -> str:
    """A bottom-line sentence: whole (it is capplan's own text), escaped, a line of its own."""
    return md_text(line) + "  "


# ------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class Outcome:
    job: str
    package: str
    result: str  # "built", "failed", "not scheduled", "not run", "unknown"
    why: str


_WHY = {
    "built": "its shard job succeeded",
    "failed": "its build failed (its failure record was uploaded)",
    "not scheduled": "the plan left it out: a cache holds it, or the failure record skips it",
    "not run": "its shard job was {result}",
    "unknown": "its shard job failed before or after the build (see the job's log)",
}


def outcomes(
    jobs: Sequence[tuple[str, str]],
    shard_of: Mapping[str, str],
    scheduled: set[str] | None,
    results: Mapping[str, str],
    failed: set[str],
) -> list[Outcome]:
    """Each planned job's result in this run. ``jobs``: (name, package) in the plan's order;
    ``shard_of``: the build job each runs in; ``scheduled``: the jobs the plan job gave the
    build jobs (its rows file; None: the plan job left none, so nothing ran); ``results``:
    each build job's ``needs.<job>.result``; ``failed``: the jobs that uploaded a failure.

    GitHub gives a matrix job one result for all its entries, so an entry of a shard that
    failed and that uploaded no failure is ``unknown``."""
    out = []
    for name, package in jobs:
        if name in failed:
            result, why = "failed", _WHY["failed"]
        elif scheduled is None:
            result, why = "not run", "the plan job gave no jobs (it failed or was cancelled)"
        elif name not in scheduled:
            result, why = "not scheduled", _WHY["not scheduled"]
        else:
            shard = results.get(shard_of.get(name, ""), "")
            if shard == "success":
                result, why = "built", _WHY["built"]
            elif shard == "failure":
                result, why = "unknown", _WHY["unknown"]
            else:
                result = "not run"
                why = _WHY["not run"].format(result=shard or "not reported")
        out.append(Outcome(name, package, result, why))
    return out


_RESULTS = ("built", "failed", "unknown", "not run", "not scheduled")
_MARK = {"built": "✅", "failed": "❌", "unknown": "❔", "not run": "⏭", "not scheduled": "💾"}


def results_summary(found: Sequence[Outcome]) -> str:
    """The final job's summary: counts, then one row per variant (past MAX_VARIANTS: counts
    per package and the failed variants by name, and it says so)."""
    counts = {r: sum(1 for o in found if o.result == r) for r in _RESULTS}
    out = ["## capplan: build results", ""]
    out.append(
        f"{len(found):,} planned variants: "
        + ", ".join(f"{_MARK[r]} {counts[r]:,} {r}" for r in _RESULTS)
        + "."
    )
    out += [
        "",
        "; ".join(
            f"{_MARK[r]} {r}: {_WHY[r].format(result='skipped or cancelled')}" for r in _RESULTS
        ),
    ]
    out.append("")
    if len(found) <= MAX_VARIANTS:
        out.append(_row(["variant", "package", "result"]))
        out.append(_row(["---", "---", "---"]))
        for o in found:
            out.append(_row([_v(o.job), _v(o.package), f"{_MARK[o.result]} {o.result}"]))
        return "\n".join(out) + "\n"
    out.append(
        f"Summarised: {len(found):,} variants are more than the {MAX_VARIANTS} this summary "
        "lists one by one; counts per package follow, then the failed variants by name."
    )
    out += ["", _row(["package", *(f"{_MARK[r]} {r}" for r in _RESULTS)])]
    out.append(_row(["---", *("---:" for _ in _RESULTS)]))
    per: dict[str, dict[str, int]] = {}
    for o in found:
        per.setdefault(o.package, dict.fromkeys(_RESULTS, 0))[o.result] += 1
    for package in sorted(per)[:MAX_VARIANTS]:
        out.append(_row([_v(package), *(f"{per[package][r]:,}" for r in _RESULTS)]))
    if len(per) > MAX_VARIANTS:
        out += ["", f"Summarised: {MAX_VARIANTS} of {len(per):,} packages shown."]
    failed = [o for o in found if o.result == "failed"]
    if failed:
        out += ["", "**Failed:** " + ", ".join(_v(o.job) for o in failed[:MAX_FAILED])]
        if len(failed) > MAX_FAILED:
            out.append(f"and {len(failed) - MAX_FAILED:,} more (`capplan failures list`).")
    return "\n".join(out) + "\n"
