"""``capplan caps``: every capability the knowledge base knows, or those a CUDA version targets."""

from __future__ import annotations

from typing import Any

import click

from capplan.cli.output import emit_json, make_table, out_console, print_table
from capplan.cli.planning import current_capability_kb
from capplan.core.families.cuda.kb import CapabilityInfo, nvidia
from capplan.core.families.cuda.version import CudaVersion

__all__ = ["caps"]


def _row(info: CapabilityInfo, cuda: CudaVersion | None, default: bool) -> dict[str, Any]:
    row: dict[str, Any] = {
        "capability": str(info.capability),
        "arch": info.arch,
        "min_cuda": str(info.min_cuda),
        "max_cuda": str(info.max_cuda) if info.max_cuda else None,
        "jetson": info.jetson,
        "suffix": info.capability.suffix,
        "sm": info.capability.sm,
        "nixpkgs": info.nixpkgs,
        "note": info.note,
    }
    if cuda is not None:
        row["default"] = default
    return row


@click.command()
@click.option(
    "--cuda",
    default=None,
    metavar="X.Y",
    help="Only what this CUDA version targets, with nixpkgs' defaults marked.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def caps(cuda: str | None, as_json: bool) -> None:
    """List CUDA capabilities: architecture, CUDA range, Jetson, suffix."""
    kb = current_capability_kb()
    version = CudaVersion.parse(cuda) if cuda is not None else None
    if version is not None:
        nvidia(kb).cuda_release(version)
        infos = nvidia(kb).supported(version)
        defaults = set(nvidia(kb).defaults(version))
    else:
        infos, defaults = nvidia(kb).capabilities, set()
    rows = [_row(i, version, i.capability in defaults) for i in infos]
    if as_json:
        emit_json(rows)
        return
    title = f"Capabilities CUDA {version} can target" if version else "Known capabilities"
    table = make_table(
        "capability",
        "arch",
        "CUDA",
        "jetson",
        "default" if version else "nixpkgs",
        "note",
        title=title,
    )
    for r in rows:
        span = f"{r['min_cuda']}..{r['max_cuda'] or ''}"
        flag = r["default"] if version else r["nixpkgs"]
        table.add_row(
            r["capability"],
            r["arch"],
            span,
            "yes" if r["jetson"] else "",
            "yes" if flag else "",
            r["note"],
        )
    print_table(out_console(), table)
