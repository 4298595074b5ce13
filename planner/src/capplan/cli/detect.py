"""``capplan detect``: which planned variant fits each local GPU, and how to get it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from capplan.cli.output import emit_json, escape, make_table, out_console, print_table
from capplan.cli.planning import Planned, config_option, current_kb, plan_with_settings
from capplan.core.families.base import RunLevel
from capplan.core.model.gpus import unique_model
from capplan.core.model.kb import KnowledgeBase
from capplan.core.model.systems import uses_jetson_redist
from capplan.errors import DataError, printable

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan, Variant

__all__ = ["detect"]


@click.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def detect(config_path: Path | None, as_json: bool) -> None:
    """Detect local GPUs and name the planned variant to use for each package."""
    from capplan.adapters.detect.amd import detect_amd_gpus
    from capplan.adapters.detect.nvidia import detect_gpus
    from capplan.adapters.detect.system import (
        ROOT_ENV,
        SYSTEM_ENV,
        host_system,
        read_device_tree,
    )
    from capplan.errors import NoGpuError

    kb = current_kb()
    system = host_system(os.environ)
    amd_found, amd_notes = detect_amd_gpus()
    no_gpu: NoGpuError | None = None
    try:
        found = detect_gpus(kb=kb)
    except NoGpuError as error:
        # A Jetson without (a working) nvidia-smi: its device tree names the module.
        module, unusable = read_device_tree(Path(os.environ.get(ROOT_ENV) or "/"))
        found = [module] if module is not None else []
        if module is None and not amd_found:
            why = "; ".join(amd_notes[:3]) or "no KFD GPU node and no rocminfo"
            tree = f"; {unusable}" if unusable else ""
            # Not yet an error: a plan with per-CPU-level builds still has an answer here.
            no_gpu = NoGpuError(
                f"{error.message}{tree}; no AMD GPU found either ({why})", hint=error.hint
            )
    except (UnicodeError, ValueError) as error:
        raise DataError(
            f"nvidia-smi printed output that is not text: {error}",
            hint="check the driver installation, or point CAPPLAN_NVIDIA_SMI at a working one",
        ) from None
    # Here CAPPLAN_SYSTEM says which machine this is, not which systems to plan.
    environ = {k: v for k, v in os.environ.items() if k != SYSTEM_ENV}
    if no_gpu is not None:
        # Without a GPU only per-CPU-level builds can be answered: a fleet without CPUs has
        # none, so say "no GPU" before planning.
        from capplan.adapters.config import fleet_lists_cpus

        if not fleet_lists_cpus(config_path, cwd=Path.cwd(), environ=environ):
            raise no_gpu
    planned = plan_with_settings(config_path, environ=environ)
    # The planner's modules load only once there is something to plan for.
    from capplan.core.families.cuda.select import driver_support, pick_variant

    plan = planned.plan
    cpu = _cpu_entry(plan)
    if no_gpu is not None and not cpu["variants"]:
        raise no_gpu
    report: list[dict[str, Any]] = []
    for gpu in found:
        cap = gpu.capability
        if cap is None:
            # The name's one model under the GPU name rule; an ambiguous name is no answer.
            model = unique_model(gpu.name, kb.gpus)
            cap = model.capability if model else None
        if cap is not None and not kb.knows(cap.base):
            cap = None  # a capability the knowledge base does not know: no answer is right
        driver = driver_support(kb, gpu.driver)
        runs = driver.max_cuda()
        full = driver.max_cuda(full=True)
        entry = _entry(gpu.name, "nvidia", system, gpu.source, gpu.pci_id)
        entry.update(
            capability=str(cap) if cap else None,
            driver=gpu.driver,
            note=gpu.note,
            max_cuda=str(full) if full else None,
            max_cuda_minor_compat=str(runs) if runs else None,
        )
        if cap is not None:
            entry["overlay"] = f'cudaCapabilities = [ "{cap}" ];'
            jetson = kb.capability(cap.base).jetson
            mine = _variants_for(plan, system, cap, jetson)
            for package in plan.packages:
                pick = pick_variant(mine, package, cap, kb, driver=driver)
                named = pick.variant or pick.blocked
                _answer(
                    entry,
                    package,
                    pick.variant if pick.runnable else None,
                    pick.verdict.level,
                    pick.verdict.reason,
                    named=named,
                    driver_ok=pick.driver_ok,
                    needs_driver=pick.needs_driver,
                )
        report.append(entry)
    report.extend(_amd_entries(amd_found, system, planned, kb))
    if as_json:
        emit_json({"gpus": report, "notes": amd_notes, "cpu": cpu})
        return
    _print(report)
    _print_cpu(cpu, levels=any(v.cpu is not None for v in plan.variants))
    for note in amd_notes:
        out_console().print(f"note: {printable(note)}", markup=False)


def _cpu_entry(plan: Plan) -> dict[str, Any]:
    """This machine's CPU (``/proc/cpuinfo`` under CAPPLAN_ROOT) and, for each package the
    plan builds per CPU level for the CPU's system, the build to use; with no CPU known,
    ``microarchitecture`` is None and ``note`` says why."""
    from capplan.adapters.cpu_archspec import ArchspecCpuModel
    from capplan.adapters.detect.cpu import detect_cpu
    from capplan.core.families.cpu.planning import pick_cpu_variants

    found, why = detect_cpu()
    if found is None:
        return {"microarchitecture": None, "note": why, "variants": {}, "how": {}}
    # The CPU's own architecture names the system whose builds it runs (a Grace machine's
    # aarch64 builds, whatever the host running this reports).
    cpu_system = f"{found.arch}-linux"
    picks = pick_cpu_variants(
        plan.variants, cpu_system, found.microarchitecture, ArchspecCpuModel(policies={})
    )
    entry = found.to_json()
    entry["variants"] = {p.package: p.variant.name if p.variant else None for p in picks}
    entry["how"] = {
        p.package: {
            "reason": p.reason,
            "command": f"nix build .#{p.variant.name}" if p.variant else None,
        }
        for p in picks
    }
    return entry


def _print_cpu(cpu: dict[str, Any], *, levels: bool) -> None:
    """The CPU line and its answers; an unknown CPU is worth a line only to a plan with
    builds per CPU level (``--json`` always has the ``cpu`` object)."""
    console = out_console()
    if cpu["microarchitecture"] is None:
        if levels:
            console.print(f"CPU unknown ({printable(cpu['note'])})", markup=False, highlight=False)
        return
    level = f", {cpu['level']}" if cpu.get("level") else ""
    console.print(
        f"CPU {cpu['microarchitecture']} ({cpu['model'] or cpu['arch']}{level}) from "
        f"{cpu['source']}",
        markup=False,
        highlight=False,
    )
    for package, name in cpu["variants"].items():
        how = cpu["how"][package]
        use = f"use {name} ({how['command']}): " if name else ""
        console.print(f"  {package}: {use}{how['reason']}", markup=False, highlight=False)


def _entry(
    name: str, vendor: str, system: str, source: str | None, pci_id: str | None
) -> dict[str, Any]:
    """One GPU's detect entry, before its answers: the same fields for both vendors."""
    return {
        "name": name,
        "vendor": vendor,
        "system": system,
        "capability": None,
        "target": None,
        "driver": None,
        "source": source,
        "pci_id": pci_id,
        "note": "",
        "max_cuda": None,
        "max_cuda_minor_compat": None,
        "variants": {},
        "how": {},
    }


def _answer(
    entry: dict[str, Any],
    package: str,
    variant: Variant | None,
    level: RunLevel,
    reason: str,
    *,
    named: Variant | None = None,
    driver_ok: bool | None = None,
    needs_driver: str | None = None,
) -> None:
    """Record one package's answer: ``variant`` to use (None when none runs here) with the
    verdict; ``named``: the variant the answer is about (one a newer driver would run)."""
    name = variant.name if variant else None
    named = named or variant
    entry["variants"][package] = name
    entry["how"][package] = {
        "level": level.value,
        "reason": reason,
        "command": f"nix build .#{name}" if name else None,
        "driver_ok": driver_ok,
        "needs_driver": needs_driver,
        "variant": named.name if named else None,
    }


def _amd_entries(
    found: list[Any], system: str, planned: Planned, kb: KnowledgeBase
) -> list[dict[str, Any]]:
    """detect's entries for AMD GPUs: same shape as NVIDIA's, the gfx target in ``target``,
    each package answered with the plan's AMD variant for the GPU's processor (exact before
    ISA-compatible or generic code), or this GPU's own reason why none runs (a CUDA-only
    package, a build for another system, the plan's reason, or what to add to the fleet).
    Notes about skipped KFD nodes go in the report's top-level ``notes``."""
    from capplan.core.families.rocm.select import amd_plans_by_system, pick_amd_on_machine

    plan = planned.plan
    builds = kb.amd.builds if kb.amd is not None else {}
    plans = amd_plans_by_system(plan, system)
    entries: list[dict[str, Any]] = []
    for gpu in found:
        entry = _entry(gpu.name, "amd", system, gpu.source, gpu.pci_id)
        entry["target"] = str(gpu.target)
        entry["overlay"] = f'gpuTargets = [ "{gpu.target}" ];'
        for package in plan.packages:
            pick = pick_amd_on_machine(
                plans,
                package,
                gpu.target,
                system=system,
                rocm_build=package in builds,
                vendors=planned.config.packages[package].vendors,
            )
            _answer(entry, package, pick.variant, pick.level, pick.reason)
        entries.append(entry)
    return entries


def _variants_for(plan: Plan, system: str, cap: Any, jetson: bool) -> Plan:
    """The plan's variants this machine can use: its own system's, and of the capability-
    independent jobs the kind (Jetson or SBSA redistributables) its GPU needs."""

    def usable(v: Any) -> bool:
        if v.system != system:
            return False
        if not v.independent or v.cuda is None:
            return True  # no CUDA redistributables to match (AMD and CPU-side builds)
        return bool(v.jetson) == uses_jetson_redist(system, v.cuda, [(cap, jetson)])

    return replace(plan, variants=tuple(v for v in plan.variants if usable(v)))


def _print(report: list[dict[str, Any]]) -> None:
    console = out_console()
    for entry in report:
        # Each family prints its own GPUs (a report entry names its vendor).
        printer = _FAMILY_PRINTERS.get(entry["vendor"])
        if printer is not None:
            printer(console, entry)
            continue
        if entry["driver"] is None:
            runs = "driver unknown"
        elif entry["max_cuda_minor_compat"] is None:
            runs = "runs no CUDA release capplan knows"
        else:
            runs = (
                f"runs CUDA up to {entry['max_cuda_minor_compat']}; "
                f"new PTX up to {entry['max_cuda'] or '-'}"
            )
        source = f", from {entry['source']}" if entry["source"] else ""
        pci = f", PCI id {entry['pci_id']}" if entry["pci_id"] else ""
        console.print(
            f"[bold]{escape(entry['name'])}[/bold] ({entry['system']}): capability "
            f"{entry['capability'] or 'unknown'}, driver {escape(entry['driver'] or 'unknown')} "
            f"({runs}){source}{pci}"
        )
        if entry["driver"] is None and entry["source"] == "sysfs":
            console.print(
                "the NVIDIA driver is not loaded (no NVML, nvidia-smi or /proc/driver/nvidia):"
                " this GPU was found by its PCI id; below is what to use once the driver is"
                " installed (it must be new enough for the variant's CUDA)",
                markup=False,
            )
        if entry.get("note"):
            console.print(printable(entry["note"]), markup=False)
        if entry["capability"] is None:
            continue
        _print_answers(console, entry)
        console.print(f"or, in your nixpkgs config: {entry['overlay']}", markup=False)


def _print_answers(console: Any, entry: dict[str, Any]) -> None:
    """The table of packages, variants, verdicts and commands (both vendors)."""
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


def _print_amd(console: Any, entry: dict[str, Any]) -> None:
    source = f", from {entry['source']}" if entry["source"] else ""
    pci = f", PCI id {entry['pci_id']}" if entry["pci_id"] else ""
    console.print(
        f"[bold]{escape(entry['name'])}[/bold] ({entry['system']}): AMD target "
        f"{entry['target']}{source}{pci}"
    )
    if entry.get("note"):
        console.print(printable(entry["note"]), markup=False)
    _print_answers(console, entry)
    console.print(
        f"or, in a ROCm package set (rocmSupport = true), build for {entry['target']}: "
        f"{entry['overlay']} (e.g. torchWithRocm.override {{ {entry['overlay']} }})",
        markup=False,
    )


_FAMILY_PRINTERS = {"amd": _print_amd}
