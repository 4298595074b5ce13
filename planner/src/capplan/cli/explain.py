"""``capplan explain``: how a build with given targets runs on a device, and why."""

from __future__ import annotations

import click

from capplan.cli.output import emit_json, out_console
from capplan.cli.planning import current_kb
from capplan.core.capability import parse_targets
from capplan.core.compat import how_runs
from capplan.core.gpus import resolve_device

__all__ = ["explain"]


@click.command()
@click.argument("targets")
@click.option(
    "--device",
    required=True,
    metavar="CAP_OR_GPU",
    help="A capability (8.6) or GPU name (RTX 3090).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def explain(targets: str, device: str, as_json: bool) -> None:
    """Explain how a build with TARGETS (e.g. 8.0,8.6,9.0+PTX) runs on --device."""
    kb = current_kb()
    parsed = parse_targets(targets)
    cap, model = resolve_device(device, kb.gpus)
    jetson = kb.knows(cap.base) and kb.capability(cap.base).jetson
    verdict = how_runs(
        cap,
        [t.capability for t in parsed],
        [t.capability for t in parsed if t.ptx],
        jetson=jetson,
    )
    result = {
        "device": model.name if model else str(cap),
        "capability": str(cap),
        "targets": [str(t) for t in parsed],
        "level": verdict.level.value,
        "via": str(verdict.via) if verdict.via else None,
        "reason": verdict.reason,
    }
    if as_json:
        emit_json(result)
        return
    out_console().print(
        f"{result['device']} ({cap}): [bold]{verdict.level.value}[/bold]: {verdict.reason}"
    )
