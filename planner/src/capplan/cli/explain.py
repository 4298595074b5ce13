"""``capplan explain``: how a build with given targets runs on a device, and why."""

from __future__ import annotations

from collections.abc import Mapping

import click

from capplan.cli.output import emit_json, out_console
from capplan.cli.planning import current_kb
from capplan.core.families.cuda.capability import parse_targets
from capplan.core.families.cuda.compat import device_verdict
from capplan.core.families.rocm.target import amd_how_runs, parse_amd_targets
from capplan.core.model.gpus import resolve_known_device
from capplan.core.model.vendors import amd_entry, looks_like_gfx
from capplan.errors import InvalidInputError, shorten

__all__ = ["explain"]


@click.command()
@click.argument("targets")
@click.option(
    "--device",
    required=True,
    metavar="CAP_OR_GPU",
    help="A capability (8.6), a GPU name (RTX 3090, MI300X) or an AMD processor (gfx1100).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def explain(targets: str, device: str, as_json: bool) -> None:
    """Say how a build of TARGETS runs on a device.

    TARGETS are capabilities such as 8.0,8.6,9.0+PTX (compute_90 is the same as 9.0+PTX), or
    AMD gfx targets such as gfx942,gfx1100 (an AMD GPU then as --device).
    """
    kb = current_kb()
    items = [i for i in targets.replace(";", ",").split(",") if i.strip()]
    gfx = [i for i in items if looks_like_gfx(i)]
    amd = amd_entry(kb, device)
    if gfx or amd is not None:
        if len(gfx) != len(items) or amd is None or not gfx:
            raise InvalidInputError(
                f"explain {shorten(targets)} --device {shorten(device)}: CUDA and AMD do not mix "
                "(AMD code runs only on AMD GPUs, CUDA code only on NVIDIA ones)",
                hint="give gfx targets with an AMD GPU (gfx942 --device mi300x) or capabilities "
                "with an NVIDIA one (8.6 --device 'RTX 3090')",
            )
        processor, name = amd
        amd_targets = parse_amd_targets(gfx)
        answer = amd_how_runs(processor, amd_targets)
        result = {
            "device": name or str(processor),
            "vendor": "amd",
            "target": str(processor),
            "capability": None,
            "targets": [str(t) for t in amd_targets],
            "level": answer.level.value,
            "via": str(answer.via) if answer.via else None,
            "reason": answer.reason,
        }
        _emit(result, str(processor), as_json)
        return
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
        "vendor": "nvidia",
        "target": None,
        "capability": str(cap),
        "targets": [str(t) for t in parsed],
        "level": verdict.level.value,
        "via": str(verdict.via) if verdict.via else None,
        "reason": verdict.reason,
    }
    _emit(result, str(cap), as_json)


def _emit(result: Mapping[str, object], what: str, as_json: bool) -> None:
    if as_json:
        emit_json(result)
        return
    out_console().print(
        f"{result['device']} ({what}): [bold]{result['level']}[/bold]: {result['reason']}"
    )
