"""``capplan explain``: how a build with given targets runs on a device, and why."""

from __future__ import annotations

import click

from capplan.cli.output import emit_json, out_console
from capplan.cli.planning import current_kb
from capplan.core.model.capability import parse_targets
from capplan.core.model.compat import device_verdict
from capplan.core.model.gpus import resolve_known_device

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
    """Say how a build of TARGETS runs on a device.

    TARGETS are capabilities such as 8.0,8.6,9.0+PTX (compute_90 is the same as 9.0+PTX).
    """
    kb = current_kb()
    parsed = kb.check_targets(parse_targets(targets))
    cap, model = resolve_known_device(device, kb)
    verdict = device_verdict(
        cap,
        [t.capability for t in parsed],
        [t.capability for t in parsed if t.ptx],
        kb,
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
