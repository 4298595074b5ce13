"""``capplan detect``: which planned variant fits each local GPU, and how to get it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from capplan.cli.output import emit_json, make_table, out_console
from capplan.cli.planning import config_option, current_kb, plan_with_settings
from capplan.core.cuda import CudaVersion
from capplan.core.drivers import max_cuda_for_driver
from capplan.core.gpus import find_gpus
from capplan.core.kb import KnowledgeBase
from capplan.core.plan import Plan
from capplan.core.select import pick_variant
from capplan.core.systems import uses_jetson_redist

__all__ = ["detect"]


def _max_cuda(kb: KnowledgeBase, driver: str | None, *, full: bool) -> CudaVersion | None:
    if not driver:
        return None
    pairs = [(str(r.version), r.toolkit_driver if full else r.min_driver) for r in kb.cuda_releases]
    found = max_cuda_for_driver(driver, pairs)
    return CudaVersion.parse(found) if found else None


@click.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def detect(config_path: Path | None, as_json: bool) -> None:
    """Detect local GPUs and name the planned variant to use for each package."""
    from capplan.adapters.gpu_detect import detect_gpus
    from capplan.adapters.system_detect import (
        ROOT_ENV,
        SYSTEM_ENV,
        host_system,
        jetson_from_device_tree,
    )
    from capplan.errors import NoGpuError

    kb = current_kb()
    system = host_system(os.environ)
    try:
        found = detect_gpus(kb=kb)
    except NoGpuError:
        # A Jetson without (a working) nvidia-smi: its device tree names the module.
        module = jetson_from_device_tree(Path(os.environ.get(ROOT_ENV) or "/"))
        if module is None:
            raise
        found = [module]
    # Here CAPPLAN_SYSTEM says which machine this is, not which systems to plan.
    environ = {k: v for k, v in os.environ.items() if k != SYSTEM_ENV}
    plan = plan_with_settings(config_path, environ=environ).plan
    report: list[dict[str, Any]] = []
    for gpu in found:
        cap = gpu.capability
        if cap is None:
            matches = find_gpus(gpu.name, kb.gpus)
            cap = matches[0].model.capability if matches else None
        entry: dict[str, Any] = {
            "name": gpu.name,
            "system": system,
            "capability": str(cap) if cap else None,
            "driver": gpu.driver,
            "source": gpu.source,
            "pci_id": gpu.pci_id,
            "note": gpu.note,
            "max_cuda": None,
            "max_cuda_minor_compat": None,
            "variants": {},
            "how": {},
        }
        full = _max_cuda(kb, gpu.driver, full=True)
        compat = _max_cuda(kb, gpu.driver, full=False)
        entry["max_cuda"] = str(full) if full else None
        entry["max_cuda_minor_compat"] = str(compat) if compat else None
        if cap is not None:
            entry["overlay"] = f'cudaCapabilities = [ "{cap}" ];'
            jetson = kb.knows(cap) and kb.capability(cap).jetson
            mine = _variants_for(plan, system, cap, jetson)
            for package in plan.packages:
                pick = pick_variant(mine, package, cap, jetson=jetson, max_cuda=compat)
                name = pick.variant.name if pick.variant else None
                entry["variants"][package] = name
                entry["how"][package] = {
                    "level": pick.verdict.level.value,
                    "reason": pick.verdict.reason,
                    "command": f"nix build .#{name}" if name else None,
                    "driver_ok": pick.driver_ok,
                }
        report.append(entry)
    if as_json:
        emit_json({"gpus": report})
        return
    _print(report)


def _variants_for(plan: Plan, system: str, cap: Any, jetson: bool) -> Plan:
    """The plan's variants this machine can use: its own system's, and of the capability-
    independent jobs the kind (Jetson or SBSA redistributables) its GPU needs."""

    def usable(v: Any) -> bool:
        if v.system != system:
            return False
        if not v.independent:
            return True
        return bool(v.jetson) == uses_jetson_redist(system, v.cuda, [(cap, jetson)])

    return replace(plan, variants=tuple(v for v in plan.variants if usable(v)))


def _print(report: list[dict[str, Any]]) -> None:
    console = out_console()
    for entry in report:
        console.print(
            f"[bold]{entry['name']}[/bold] ({entry['system']}): capability "
            f"{entry['capability'] or 'unknown'}, "
            f"driver {entry['driver'] or 'unknown'} (runs CUDA up to "
            f"{entry['max_cuda_minor_compat'] or '?'}; new PTX up to {entry['max_cuda'] or '?'})"
            f", from {entry['source']}" + (f", PCI id {entry['pci_id']}" if entry["pci_id"] else "")
        )
        if entry["driver"] is None and entry["source"] == "sysfs":
            console.print(
                "the NVIDIA driver is not loaded (no NVML, nvidia-smi or /proc/driver/nvidia):"
                " this GPU was found by its PCI id; below is what to use once the driver is"
                " installed (it must be new enough for the variant's CUDA)",
                markup=False,
            )
        if entry.get("note"):
            console.print(entry["note"], markup=False)
        if entry["capability"] is None:
            continue
        table = make_table("package", "variant", "how", "get it")
        for package, how in entry["how"].items():
            note = "" if how["driver_ok"] else " (driver too old for its CUDA)"
            table.add_row(
                package,
                entry["variants"][package] or "-",
                f"{how['level']}: {how['reason']}{note}",
                how["command"] or "-",
            )
        console.print(table)
        console.print(f"or, in your nixpkgs config: {entry['overlay']}", markup=False)
