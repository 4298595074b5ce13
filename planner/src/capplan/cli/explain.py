"""``capplan explain``: how a build with given targets runs on a device, and why."""

from __future__ import annotations

from collections.abc import Mapping

import click

from capplan.cli.output import emit_json, out_console
from capplan.cli.planning import current_kb
from capplan.core.families.registry import gpu_families
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
    families = gpu_families(current_kb())
    *others, fallback = families  # the fallback family (CUDA) takes what no other claims
    items = [i for i in targets.replace(";", ",").split(",") if i.strip()]
    claimed = {f.name: [i for i in items if f.claims(i)] for f in others}
    owns = {f.name: f.owns_device(device) for f in others}
    asked = [f for f in others if claimed[f.name] or owns[f.name]]
    if asked:
        family = asked[0]
        mine = claimed[family.name]
        if len(asked) > 1 or len(mine) != len(items) or not owns[family.name] or not mine:
            raise InvalidInputError(
                f"explain {shorten(targets)} --device {shorten(device)}: CUDA and AMD do not mix "
                "(AMD code runs only on AMD GPUs, CUDA code only on NVIDIA ones)",
                hint="give gfx targets with an AMD GPU (gfx942 --device mi300x) or capabilities "
                "with an NVIDIA one (8.6 --device 'RTX 3090')",
            )
    else:
        family = fallback
    answer = family.explain(targets, device)
    _emit(answer.fields, answer.device, as_json)


def _emit(result: Mapping[str, object], what: str, as_json: bool) -> None:
    if as_json:
        emit_json(result)
        return
    out_console().print(
        f"{result['device']} ({what}): [bold]{result['level']}[/bold]: {result['reason']}"
    )
