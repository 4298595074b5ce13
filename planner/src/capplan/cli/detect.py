"""``capplan detect``: which planned variant fits each local GPU, and how to get it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from capplan.cli.output import emit_json, escape, make_table, out_console, print_table
from capplan.cli.planning import config_option, current_kb, plan_with_settings
from capplan.core.families.base import GpuFamily, Machine
from capplan.core.families.registry import cpu_family, gpu_families, is_cpu_level
from capplan.errors import printable

if TYPE_CHECKING:
    from capplan.core.planning.plan import Plan

__all__ = ["detect"]


@click.command()
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--nix",
    "as_nix",
    is_flag=True,
    help="Print the NixOS / home-manager lines that give this machine its cached builds.",
)
def detect(config_path: Path | None, as_json: bool, as_nix: bool) -> None:
    """Detect local GPUs and name the planned variant to use for each package."""
    from capplan.adapters.detect.system import SYSTEM_ENV, host_system
    from capplan.adapters.families import find_gpus
    from capplan.errors import InvalidInputError, NoGpuError

    if as_json and as_nix:
        raise InvalidInputError("--json and --nix both ask for the output", hint="give one of them")

    kb = current_kb()
    system = host_system(os.environ)
    # Every family's detector, as the registry names them; each device goes to its family.
    found = find_gpus(kb)
    devices = [device for f in found for device in f.devices]
    notes = [note for f in found for note in f.notes]
    no_gpu: NoGpuError | None = None
    if not devices:
        # Not yet an error: a plan with per-CPU-level builds still has an answer here.
        no_gpu = NoGpuError(
            "; ".join(f.missing for f in found if f.missing),
            hint=next((f.hint for f in found if f.hint), None),
        )
    # Here CAPPLAN_SYSTEM says which machine this is, not which systems to plan.
    environ = {k: v for k, v in os.environ.items() if k != SYSTEM_ENV}
    if no_gpu is not None:
        # Without a GPU only per-CPU-level builds can be answered: a fleet without CPUs has
        # none, so say "no GPU" before planning.
        from capplan.adapters.config import fleet_lists_cpus

        if not fleet_lists_cpus(config_path, cwd=Path.cwd(), environ=environ):
            raise no_gpu
    planned = plan_with_settings(config_path, environ=environ)
    plan = planned.plan
    cpu = _cpu_entry(plan)
    if no_gpu is not None and not cpu["variants"]:
        raise no_gpu
    vendors = {name: package.vendors for name, package in planned.config.packages.items()}
    families = {f.vendor: f for f in gpu_families(kb)}
    report: list[dict[str, Any]] = []
    for device in devices:
        entry = _entry(device.name, device.vendor, system, device.source, device.pci_id)
        entry["note"] = device.note
        machine = Machine(system, device.target, device.driver, vendors)
        _ask(entry, families[device.vendor], plan, machine)
        report.append(entry)
    if as_json:
        emit_json({"gpus": report, "notes": notes, "cpu": cpu})
        return
    if as_nix:
        from capplan.cli.machine_lines import nix_lines

        levels = any(is_cpu_level(v) for v in plan.variants)
        click.echo(nix_lines(report, cpu if levels else None), nl=False)
        return
    _print(report)
    _print_cpu(cpu, levels=any(is_cpu_level(v) for v in plan.variants))
    for note in notes:
        out_console().print(f"note: {printable(note)}", markup=False)


def _cpu_entry(plan: Plan) -> dict[str, Any]:
    """This machine's CPU (``/proc/cpuinfo`` under CAPPLAN_ROOT) and, for each package the
    plan builds per CPU level for the CPU's system, the build to use; with no CPU known,
    ``microarchitecture`` is None and ``note`` says why."""
    from capplan.adapters.families import cpu_model, find_cpu

    found, why = find_cpu()
    if found is None:
        return {"microarchitecture": None, "note": why, "variants": {}, "how": {}}
    # The CPU's own architecture names the system whose builds it runs (a Grace machine's
    # aarch64 builds, whatever the host running this reports).
    cpu_system = f"{found.arch}-linux"
    family = cpu_family(cpu_model(packages=False))
    picks = family.pick(plan, Machine(cpu_system, found.microarchitecture))
    entry: dict[str, Any] = found.to_json()
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


def _ask(entry: dict[str, Any], family: GpuFamily[Any], plan: Plan, machine: Machine) -> None:
    """Fill one GPU's entry: the family's fields of the device, then each package's answer,
    the variant to use (None when none runs here) with the verdict and the variant the answer
    is about (``named``: one a newer driver would run)."""
    entry.update(family.device_fields(machine.device, machine.driver))
    for pick in family.pick(plan, machine):
        name = pick.variant.name if pick.variant else None
        named = pick.named or pick.variant
        entry["variants"][pick.package] = name
        entry["how"][pick.package] = {
            "level": pick.level.value,
            "reason": pick.reason,
            "command": f"nix build .#{name}" if name else None,
            "driver_ok": pick.detail.get("driver_ok"),
            "needs_driver": pick.detail.get("needs_driver"),
            "variant": named.name if named else None,
        }


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
            # Minor-version compatibility has no ceiling within a major (CUDA release notes,
            # "CUDA Minor Version Compatibility"): a 580 driver runs any 13.x, 13.5 included;
            # only PTX newer than the driver's own toolkit cannot be JIT-compiled.
            major = entry["max_cuda_minor_compat"].split(".")[0]
            runs = f"runs any CUDA {major}.x; new PTX up to {entry['max_cuda'] or '-'}"
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
