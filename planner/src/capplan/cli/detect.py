"""``capplan detect``: which planned variant fits each local GPU, and how to get it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from capplan.cli.output import emit_json, make_table, out_console, print_table
from capplan.cli.planning import config_option, current_kb, load_plan
from capplan.core.gpus import find_gpus
from capplan.core.select import driver_support, pick_variant
from capplan.errors import DataError

__all__ = ["detect"]


@click.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def detect(config_path: Path | None, as_json: bool) -> None:
    """Detect local GPUs and name the planned variant to use for each package."""
    from capplan.adapters.gpu_detect import detect_gpus

    kb = current_kb()
    try:
        found = detect_gpus()
    except (UnicodeError, ValueError) as error:
        raise DataError(
            f"nvidia-smi printed output that is not text: {error}",
            hint="check the driver installation, or point CAPPLAN_NVIDIA_SMI at a working one",
        ) from None
    plan = load_plan(config_path)
    report: list[dict[str, Any]] = []
    for gpu in found:
        cap = gpu.capability
        if cap is None:
            matches = find_gpus(gpu.name, kb.gpus)
            cap = matches[0].model.capability if matches else None
        if cap is not None and not kb.knows(cap.base):
            cap = None  # a capability the knowledge base does not know: no answer is right
        driver = driver_support(kb, gpu.driver)
        runs = driver.max_cuda()
        full = driver.max_cuda(full=True)
        entry: dict[str, Any] = {
            "name": gpu.name,
            "capability": str(cap) if cap else None,
            "driver": gpu.driver,
            "max_cuda": str(full) if full else None,
            "max_cuda_minor_compat": str(runs) if runs else None,
            "variants": {},
            "how": {},
        }
        if cap is not None:
            entry["overlay"] = f'cudaCapabilities = [ "{cap}" ];'
            for package in plan.packages:
                pick = pick_variant(plan, package, cap, kb, driver=driver)
                name = pick.variant.name if pick.runnable and pick.variant else None
                named = pick.variant or pick.blocked
                entry["variants"][package] = name
                entry["how"][package] = {
                    "level": pick.verdict.level.value,
                    "reason": pick.verdict.reason,
                    "command": f"nix build .#{name}" if name else None,
                    "driver_ok": pick.driver_ok,
                    "needs_driver": pick.needs_driver,
                    "variant": named.name if named else None,
                }
        report.append(entry)
    if as_json:
        emit_json({"gpus": report})
        return
    _print(report)


def _print(report: list[dict[str, Any]]) -> None:
    console = out_console()
    for entry in report:
        if entry["driver"] is None:
            runs = "driver unknown"
        elif entry["max_cuda_minor_compat"] is None:
            runs = "runs no CUDA release capplan knows"
        else:
            runs = (
                f"runs CUDA up to {entry['max_cuda_minor_compat']}; "
                f"new PTX up to {entry['max_cuda'] or '-'}"
            )
        console.print(
            f"[bold]{escape(entry['name'])}[/bold]: capability {entry['capability'] or 'unknown'}, "
            f"driver {escape(entry['driver'] or 'unknown')} ({runs})"
        )
        if entry["capability"] is None:
            continue
        table = make_table(
            "package", "variant", "how", "get it", whole=("package", "variant", "get it")
        )
        for package, how in entry["how"].items():
            table.add_row(
                package,
                entry["variants"][package] or "-",
                escape(f"{how['level']}: {how['reason']}"),
                how["command"] or "-",
            )
        print_table(console, table)
        console.print(f"or, in your nixpkgs config: {entry['overlay']}", markup=False)
