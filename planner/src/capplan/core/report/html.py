"""The report as one self-contained HTML file: inline CSS and hand-written SVG, no script.

Why hand-written SVG: the pictures are rectangles, text and a few lines, which SVG states
directly; a charting library would add megabytes of JavaScript (or a Python dependency) to
draw the same, and its output would need a script at view time. The page holds no script
at all and its Content-Security-Policy forbids every fetch (``default-src 'none'``), so it
opens from disk with no network and nothing in a name can run. Every shown value goes through
:func:`capplan.core.report.escape.html_text`. Hover text is SVG ``<title>`` and HTML
``title``; every picture has a table beside it with the same facts, for screen readers.
"""

from __future__ import annotations

import math

from capplan.core.report.data import (
    LEVELS,
    Lane,
    Report,
    bottom_line,
)
from capplan.core.report.escape import html_text as e

__all__ = ["STAGE_COLOURS", "render_html"]

# Okabe-Ito colours for the stages (the coverage grid's own are in data.LEVELS).
STAGE_COLOURS = ("#0072B2", "#CC79A7", "#F0E442", "#56B4E9", "#E69F00", "#009E73")
CRITICAL = "#000000"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1a1a1a;
background:#fff}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin:16px 0 6px}
.lines p{margin:2px 0}.warn{color:#7a3000}
nav a{margin-right:14px}
.pic{overflow-x:auto;border:1px solid #ddd;padding:6px;background:#fafafa}
.legend span{display:inline-block;margin:2px 14px 2px 0}
.sw{display:inline-block;width:14px;height:14px;border:1px solid #555;vertical-align:-2px;
margin-right:4px;text-align:center;font-size:11px;line-height:14px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
svg text{font-family:system-ui,sans-serif}
"""


def _n(value: float) -> str:
    return f"{value:,.1f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"


def _table(head: list[str], rows: list[list[str]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    out = ["<table><thead><tr>", *(f"<th scope=col>{e(h)}</th>" for h in head), "</tr></thead>"]
    out.append("<tbody>")
    for row in rows:
        cells = "".join(
            f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        out.append(f"<tr>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


# ------------------------------------------------------------------------------ coverage


def _coverage(report: Report) -> str:
    cov = report.coverage
    # Wide cells name their variant; past 24 packages the grid keeps to symbols (the table
    # and the hover text name every variant).
    wide = len(cov.packages) <= 24
    cw, ch, left = (132 if wide else 30), 28, 250
    top = 30 if wide else 110
    width = left + cw * len(cov.packages) + 10
    height = top + ch * len(cov.devices) + 10
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="cov-t">'
        '<title id="cov-t">Coverage grid: fleet devices by planned package (the table below '
        "says the same)</title>"
    ]
    for j, package in enumerate(cov.packages):
        x = left + j * cw + cw // 2
        if wide:
            svg.append(
                f'<text x="{x}" y="{top - 10}" font-size="13" font-weight="600" '
                f'text-anchor="middle"><title>{e(package)}</title>{e(_cut(package, 17))}</text>'
            )
        else:
            svg.append(
                f'<text x="{x}" y="{top - 6}" font-size="12" '
                f'transform="rotate(-45 {x} {top - 6})"><title>{e(package)}</title>'
                f"{e(_cut(package, 18))}</text>"
            )
    for i, (label, count, system) in enumerate(cov.devices):
        y = top + i * ch
        svg.append(
            f'<text x="{left - 8}" y="{y + ch / 2 + 4:g}" font-size="13" text-anchor="end">'
            f"<title>{e(label)} x{count} ({e(system)})</title>"
            f"{e(_cut(label, 26))} \u00d7{count}</text>"
        )
        for j, c in enumerate(cov.cells[i]):
            level = LEVELS[c.level]
            x = left + j * cw
            what = f"{label} \u00d7 {cov.packages[j]}: {level.words}"
            if c.variant:
                what += f", {c.variant}"
            mark = f"{level.symbol} {_short(c.variant, cov.packages[j])}" if wide else level.symbol
            svg.append(
                f'<g><title>{e(what)}: {e(c.reason)}</title><rect x="{x + 1}" y="{y + 1}" '
                f'width="{cw - 2}" height="{ch - 2}" fill="{level.colour}" stroke="#555" '
                f'stroke-width="0.5"/><text x="{x + (8 if wide else cw / 2):g}" '
                f'y="{y + ch / 2 + 5:g}" font-size="{13 if wide else 15}" '
                f'text-anchor="{"start" if wide else "middle"}" fill="#000">{e(mark)}</text></g>'
            )
    svg.append("</svg>")
    legend = "".join(
        f'<span><span class="sw" style="background:{lv.colour}">{lv.symbol}</span>'
        f"{e(lv.words)}</span>"
        for lv in LEVELS.values()
    )
    rows = []
    for i, (label, count, system) in enumerate(cov.devices):
        for j, c in enumerate(cov.cells[i]):
            if c.level == "none":
                continue
            level = LEVELS[c.level]
            rows.append(
                [
                    e(label),
                    str(count),
                    e(system),
                    e(cov.packages[j]),
                    f"{level.symbol} {e(c.level)}",
                    e(c.variant or "-"),
                    e(c.reason),
                ]
            )
    return (
        '<section id="coverage"><h2>Coverage</h2>'
        "<p>How each GPU (and CPU) of the fleet runs each planned package, and which variant "
        "serves it. Hover a cell for the reason; the table below has every reason.</p>"
        f'<p class="legend">{legend}</p><div class="pic">{"".join(svg)}</div>'
        "<details><summary>Coverage as a table (every reason)</summary>"
        + _table(
            ["device", "count", "system", "package", "how it runs", "variant", "reason"],
            rows,
            {1},
        )
        + "</details></section>"
    )


def _short(variant: str | None, package: str) -> str:
    """A cell's variant without its package's name (``torch-sm86`` in torch's column is
    ``sm86``); the hover text and the table name it whole."""
    if not variant:
        return ""
    rest = variant[len(package) + 1 :] if variant.startswith(package + "-") else variant
    return _cut(rest, 15)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ------------------------------------------------------------------------------ schedule


def _ticks(span: float) -> float:
    """A round tick step that gives 5 to 12 ticks over ``span`` minutes."""
    if span <= 0:
        return 1.0
    raw = span / 8
    power = 10 ** math.floor(math.log10(raw))
    for step in (1, 2, 5, 10):
        if raw <= step * power:
            return float(step * power)
    return float(10 * power)


def _schedule(report: Report) -> str:
    span = max(report.makespan, 1e-9)
    plot, left, lane_h = 960, 120, 16
    scale = plot / span
    step = _ticks(span)
    parts = [
        '<section id="schedule"><h2>Schedule</h2>'
        "<p>The matrix as a Gantt chart: each runner pool (one per system), runner by runner; "
        "a bar is a job, as long as its minutes on the runner it is scheduled on, coloured by "
        "stage; bars with a black outline and ★ are on the critical path (the longest chain of "
        "needs, which no number of runners shortens). Jobs a cache holds or the failure record "
        "skips are left out, as capplan matrix leaves them out. Makespan "
        f"{_n(report.makespan)} min, critical path {_n(report.critical_minutes)} min.</p>"
    ]
    stages = sorted({s.stage for s in report.stages})
    legend = "".join(
        f'<span><span class="sw" style="background:{STAGE_COLOURS[s % len(STAGE_COLOURS)]}">'
        f"</span>stage {s}</span>"
        for s in stages
    )
    legend += (
        f'<span><span class="sw" style="border:2px solid {CRITICAL}">★</span>critical path</span>'
    )
    parts.append(f'<p class="legend">{legend}</p>')
    pools: dict[str, list[Lane]] = {}
    for lane in report.lanes:
        pools.setdefault(lane.system, []).append(lane)
    for system, lanes in pools.items():
        lanes.sort(key=lambda ln: ln.runner)
        height = 30 + lane_h * len(lanes) + 24
        width = left + plot + 20
        svg = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="Gantt chart of '
            f'{e(system)} (the schedule table says the same)">'
        ]
        bottom = 30 + lane_h * len(lanes)
        t = 0.0
        while t <= span + 1e-9:
            x = left + t * scale
            svg.append(
                f'<line x1="{x:.1f}" y1="24" x2="{x:.1f}" y2="{bottom}" stroke="#ddd"/>'
                f'<text x="{x:.1f}" y="{bottom + 14}" font-size="10" text-anchor="middle">'
                f"{_n(t)}</text>"
            )
            t += step
        svg.append(
            f'<text x="{left}" y="14" font-size="12">{e(system)}: {len(lanes)} runners '
            "(minutes from the start)</text>"
        )
        for k, lane in enumerate(lanes):
            y = 30 + k * lane_h
            svg.append(
                f'<text x="{left - 6}" y="{y + 12}" font-size="11" text-anchor="end">'
                f"runner {lane.runner}</text>"
            )
            for bar in lane.bars:
                x = left + bar.start * scale
                w = max(bar.minutes * scale, 1.0)
                colour = STAGE_COLOURS[bar.stage % len(STAGE_COLOURS)]
                stroke = (
                    f'stroke="{CRITICAL}" stroke-width="2"'
                    if bar.critical
                    else 'stroke="#fff" stroke-width="0.5"'
                )
                tip = (
                    f"{bar.job}: stage {bar.stage}, {_n(bar.minutes)} min on a {bar.runner_kind} "
                    f"runner, from minute {_n(bar.start)}"
                    + ("; on the critical path" if bar.critical else "")
                )
                label = ("★ " if bar.critical else "") + bar.job
                text = ""
                if w > 7 * len(label):
                    text = (
                        f'<text x="{x + 3:.1f}" y="{y + 11}" font-size="10" fill="#000">'
                        f"{e(label)}</text>"
                    )
                elif bar.critical and w > 10:
                    text = f'<text x="{x + 2:.1f}" y="{y + 11}" font-size="10">★</text>'
                svg.append(
                    f'<g><title>{e(tip)}</title><rect x="{x:.1f}" y="{y + 1}" width="{w:.1f}" '
                    f'height="{lane_h - 2}" fill="{colour}" {stroke}/>{text}</g>'
                )
        svg.append("</svg>")
        parts.append(f'<h3>{e(system)}</h3><div class="pic">{"".join(svg)}</div>')
    parts.append(
        "<h3>Jobs per stage</h3>"
        + _table(
            ["stage", "jobs", "to build", "cached", "skipped (failures)", "minutes to build"],
            [
                [
                    str(s.stage),
                    str(s.jobs),
                    str(s.to_build),
                    str(s.cached),
                    str(s.skipped),
                    _n(s.minutes),
                ]
                for s in report.stages
            ],
            {0, 1, 2, 3, 4, 5},
        )
    )
    rows = []
    for lane in sorted(report.lanes, key=lambda ln: (ln.system, ln.runner)):
        for bar in lane.bars:
            rows.append(
                [
                    e(bar.job),
                    e(lane.system),
                    str(lane.runner),
                    str(bar.stage),
                    _n(bar.start),
                    _n(bar.minutes),
                    e(bar.runner_kind),
                    "yes" if bar.critical else "",
                ]
            )
    parts.append(
        "<details><summary>The schedule as a table (every job)</summary>"
        + _table(
            [
                "job",
                "system",
                "runner",
                "stage",
                "start (min)",
                "minutes",
                "runner kind",
                "critical path",
            ],
            rows,
            {2, 3, 4, 5},
        )
        + "</details></section>"
    )
    return "".join(parts)


# ------------------------------------------------------------------------------ costs


def _bars(title: str, values: list[tuple[str, float]], unit: str) -> str:
    left, plot, row = 230, 560, 22
    top = max((v for _, v in values), default=0.0) or 1.0
    height = 22 + row * len(values)
    width = left + plot + 120
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{e(title)} (the table says '
        'the same)">'
        f'<text x="0" y="14" font-size="13" font-weight="600">{e(title)}</text>'
    ]
    colours = ("#0072B2", "#E69F00", "#CC79A7")
    for i, (label, value) in enumerate(values):
        y = 22 + i * row
        w = max(plot * value / top, 1.0)
        svg.append(
            f"<g><title>{e(label)}: {_n(value)} {e(unit)}</title>"
            f'<text x="{left - 6}" y="{y + 14}" font-size="12" text-anchor="end">{e(label)}'
            f'</text><rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{row - 6}" '
            f'fill="{colours[i % 3]}"/><text x="{left + w + 6:.1f}" y="{y + 14}" font-size="12">'
            f"{_n(value)} {e(unit)}</text></g>"
        )
    svg.append("</svg>")
    return "".join(svg)


def _costs(report: Report) -> str:
    rows = report.costs
    pics = [
        _bars("build jobs", [(r.strategy, r.jobs) for r in rows], "jobs"),
        _bars("build minutes (reference builder)", [(r.strategy, r.minutes) for r in rows], "min"),
        _bars("output size", [(r.strategy, r.size_mb / 1024) for r in rows], "GiB"),
    ]
    return (
        '<section id="costs"><h2>Costs</h2><p>This plan against nixpkgs\' default fat builds '
        "and the naive plan (one variant per fleet target), in the knowledge base's minutes and "
        "sizes.</p>"
        + "".join(f'<div class="pic">{p}</div>' for p in pics)
        + _table(
            ["strategy", "jobs", "build minutes", "output size (MB)"],
            [[e(r.strategy), str(r.jobs), _n(r.minutes), _n(r.size_mb)] for r in rows],
            {1, 2, 3},
        )
        + "</section>"
    )


# ------------------------------------------------------------------------------ cache


def _cache(report: Report) -> str:
    jobs = len(report.matrix.graph.order)
    cached = len(report.cached)
    failed = len(report.failed)
    blocked = len(report.blocked)
    build = jobs - cached - failed - blocked
    values = [("to build", build), ("cached", cached)]
    if report.asked_failures:
        values += [("recorded failed", failed), ("blocked", blocked)]
    rows = [[e(name), e(url)] for name, url in report.cached.items()]
    out = [
        '<section id="cache"><h2>Cache and failures</h2>',
        f'<div class="pic">{_bars("jobs by state", [(k, float(v)) for k, v in values], "jobs")}'
        "</div>",
        _table(["state", "jobs"], [[e(k), str(v)] for k, v in values], {1}),
    ]
    if rows:
        out.append("<details><summary>Cached jobs</summary>")
        out.append(_table(["job", "held by"], rows))
        out.append("</details>")
    if report.asked_failures:
        out.append("<h3>Recorded failures and what they block</h3>")
        out.append(
            _table(
                ["job", "state", "needs the failed"],
                [[e(n), "recorded failure", ""] for n in report.failed]
                + [[e(n), "blocked", e(", ".join(by))] for n, by in report.blocked.items()],
            )
        )
    out.append("</section>")
    return "".join(out)


def _warnings(report: Report) -> str:
    from capplan.core.planning.summary import warnings

    found = warnings(report.plan)
    if not found:
        return "<p>no warnings</p>"
    items = "".join(f'<li class="warn">{e(kind)}: {e(text)}</li>' for kind, text in found)
    return f"<p>{len(found)} warning{'s' if len(found) > 1 else ''}:</p><ul>{items}</ul>"


def render_html(report: Report) -> str:
    """The whole page; the same report gives the same bytes."""
    asked = report.asked_cache or report.asked_failures
    nav = ["coverage", "schedule", "costs", *(["cache"] if asked else [])]
    lines = "".join(f"<p>{e(line)}</p>" for line in bottom_line(report))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(report.title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>{e(report.title)}</h1>"
        f'<div class="lines">{lines}</div>{_warnings(report)}'
        "<nav>"
        + "".join(f'<a href="#{n}">{n}</a>' for n in nav)
        + "</nav>"
        + _coverage(report)
        + _schedule(report)
        + _costs(report)
        + (_cache(report) if asked else "")
        + "<p><small>Written by capplan report from the same plan and matrix that "
        "<code>capplan plan</code> and <code>capplan matrix</code> print.</small></p>"
        "</main></body></html>\n"
    )
