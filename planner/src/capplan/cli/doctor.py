"""``capplan doctor``: will this environment's GPU libraries run on these GPUs, and if not, why
and what to install instead. Documented in docs/doctor.md."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.cells import cell_len
from rich.markup import escape

from capplan.cli.doctor_reach import print_reach, reach_json
from capplan.cli.output import AsciiIntRange, emit_json, err_console, make_table, out_console
from capplan.cli.planning import current_kb
from capplan.core.binaries.doctor import (
    Cell,
    CpuFacts,
    DoctorReport,
    Driver,
    Gpu,
    Package,
    diagnose,
    judged,
)
from capplan.errors import ExitCode, InvalidInputError, NoGpuError, NothingToDo, shorten

if TYPE_CHECKING:
    from capplan.adapters.environment import Scan, Source
    from capplan.core.families.base import Pick
    from capplan.core.model.kb import KnowledgeBase

__all__ = ["doctor"]

_PYTHON_PREFIX = re.compile(r"^python[0-9.]*-")
_VERSION_SUFFIX = re.compile(r"-[0-9][^-]*$")
_CU_SUFFIX = re.compile(r"-cu[0-9]{2,3}$")


@click.command()
# Kept as text: click's Path(path_type=Path) turns '' into '.', which checked the current folder.
@click.argument("paths", nargs=-1, metavar="[PATH]...", type=click.Path())
@click.option(
    "--device",
    "devices",
    multiple=True,
    metavar="GPU",
    help="A GPU to check against instead of the detected ones (repeatable): a name (RTX 3090, "
    "MI300X), a capability (8.6) or an AMD processor (gfx1100).",
)
@click.option(
    "--driver",
    metavar="VERSION",
    help="The NVIDIA driver version to check against (535.104.05) instead of the detected one.",
)
@click.option(
    "--jobs",
    "-j",
    type=AsciiIntRange(1, 256),
    metavar="N",
    help="Read libraries with N worker processes (default: the CPUs available, at most 8).",
)
@click.option(
    "--cpu",
    metavar="CPU",
    help="The CPU to check libraries' recorded x86-64 levels against instead of the detected one "
    "(/proc/cpuinfo): a level (x86-64-v3) or a microarchitecture (haswell, sapphirerapids).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (shape in docs/doctor.md).")
def doctor(
    paths: tuple[str, ...],
    devices: tuple[str, ...],
    driver: str | None,
    jobs: int | None,
    cpu: str | None,
    as_json: bool,
) -> None:
    """Check that the GPU libraries of an environment run on this machine's GPUs.

    PATH is a virtualenv or site-packages, a conda prefix, a Nix store path (its closure), a wheel
    or a library; without PATH: the python3 on PATH's site-packages, $CONDA_PREFIX and the Nix
    profile. Exit 0 when everything runs, 16 when a library cannot run on a GPU.
    """
    from capplan.adapters.environment import default_sources, sources_for
    from capplan.core.families.registry import doctor_driver

    if driver is not None:
        driver = _check_driver(driver)
    if "" in paths:
        raise InvalidInputError(
            "PATH is empty ('')",
            hint="give a virtualenv, site-packages, conda prefix, store path, wheel or library "
            "('.' for the current folder)",
        )
    # What to check is settled first: a missing PATH is "no such file" (exit 4), whatever the
    # machine's GPUs (with none, GPU detection would answer exit 10 first).
    if paths:
        sources = sources_for([Path(path) for path in paths])
    else:
        sources = default_sources(os.environ)
        if not sources:
            raise InvalidInputError(
                "no environment found: no python3 on PATH, no $CONDA_PREFIX, no Nix profile",
                hint="give a PATH: a virtualenv, site-packages, conda prefix, store path or wheel",
            )
        for source in sources:
            err_console().print(f"capplan: checking {source.path} ({source.why})", markup=False,
                                highlight=False, soft_wrap=True)  # fmt: skip
    kb = current_kb()
    cpu_facts, cpu_note = _cpu_facts(cpu)
    if devices:  # checked before the scan: a GPU capplan does not know is exit 4 at once
        gpus, detected_driver = _gpus(devices, kb, need_driver=driver is None)
    scan = _scan(sources, jobs)
    from capplan.adapters.variant_wheels import installed_variants

    variants = installed_variants(sources)
    if not any(judged(lib) or lib.cpu_level for lib in scan.libraries) and not any(variants):
        # No library to judge on a GPU, none that records its x86-64 level, no variant wheel:
        # whatever the machine's GPUs (none, too: exit 3 before "no GPU found", exit 10).
        where = ", ".join(shorten(str(source.path)) for source in sources)
        raise NothingToDo(
            f"{where} holds no GPU code, nothing to check ({scan.files} ELF files read: no "
            "device code, no CUDA or ROCm runtime linked)",
            hint="give the environment that holds the GPU packages: a virtualenv, conda prefix, "
            "store path or wheel",
        )
    if not devices:
        gpus, detected_driver = _gpus(devices, kb, need_driver=driver is None)
    version = driver if driver is not None else detected_driver
    facts = doctor_driver(kb, version)
    report = diagnose(scan.libraries, scan.packages, gpus, facts, cpu_facts)
    fixes = _plan_fixes(report, kb, facts)
    data = _json(
        report,
        fixes,
        facts,
        "--driver" if driver else ("detected" if version else None),
        sources,
        scan,
    )
    data["cpu"] = _cpu_json(report, scan, cpu_note)
    data["variants"] = _variants_json(variants, report.gpus)
    data["driver_reach"] = reach_json(scan.libraries)  # issue 48: Nix-built code on other hosts
    data["ok"] = report.ok and data["driver_reach"]["ok"]
    if as_json:
        emit_json(data)
    else:
        _print_cpu(data)
        _print(data)
        _print_variants(data["variants"])
        print_reach(data["driver_reach"])
    if not data["ok"]:
        raise SystemExit(int(ExitCode.WONT_RUN))


def _cpu_facts(text: str | None) -> tuple[CpuFacts | None, str | None]:
    """The CPU to judge recorded x86-64 levels against: ``--cpu``, else this machine's
    (/proc/cpuinfo under CAPPLAN_ROOT); (None, why) when neither is known."""
    from capplan.adapters.families import cpu_model, find_cpu

    model = cpu_model(packages=False)
    if text is not None:
        name, source = model.parse(text), "--cpu"
        if model.arch(name) not in ("x86_64", "aarch64"):
            raise InvalidInputError(
                f"--cpu {shorten(text.strip())!r} is a {model.arch(name)} CPU: capplan checks "
                "x86_64 and aarch64 machines",
                hint="give an x86-64 level (x86-64-v3) or an x86_64 or aarch64 microarchitecture",
            )
    else:
        found, why = find_cpu()
        if found is None:
            return None, why
        name, source = found.microarchitecture, "detected"
    return CpuFacts(name, model.x86_levels(name), source), None


def _check_driver(text: str) -> str:
    from capplan.core.families.registry import is_driver_version

    value = text.strip()
    if not is_driver_version(value):
        raise InvalidInputError(
            f"--driver {shorten(text)!r} is not an NVIDIA driver version",
            hint="give digits and dots as nvidia-smi prints them, e.g. --driver 535.104.05",
        )
    return value


def _gpus(
    devices: Sequence[str], kb: KnowledgeBase, *, need_driver: bool
) -> tuple[list[Gpu], str | None]:
    """The GPUs to judge against and the detected driver (None when unknown)."""
    from capplan.core.families.registry import doctor_gpu

    # Each GPU as its family builds it, the spelling claimed as fleet entries are.
    gpus = [doctor_gpu(kb, text) for text in devices]
    if gpus:
        if not need_driver:
            return gpus, None
        from capplan.adapters.families import find_driver

        return gpus, find_driver(kb)
    return _detect(kb)


def _detect(kb: KnowledgeBase) -> tuple[list[Gpu], str | None]:
    from capplan.adapters.families import find_gpus
    from capplan.core.families.registry import detected_gpu

    # Every family's detector, as the registry names them (doctor reads no device tree).
    devices = [device for found in find_gpus(kb, board=False) for device in found.devices]
    gpus: list[Gpu] = []
    unknown: list[str] = []
    driver: str | None = None
    for device in devices:
        if device.target is None:
            unknown.append(device.name)
            continue
        gpus.append(detected_gpu(device.vendor, device.name, device.target, kb))
        driver = driver or device.driver
    if unknown:
        err_console().print(
            f"capplan: skipping {', '.join(unknown)}: capability unknown to capplan "
            "(give it with --device CAPABILITY)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if not gpus and unknown:
        raise NoGpuError(
            f"found {', '.join(unknown)}, whose capability capplan does not know",
            hint="give the GPU's capability: --device 8.6 (nvidia-smi --query-gpu=compute_cap)",
        )
    if not gpus:
        raise NoGpuError(
            "no GPU found on this machine (no NVIDIA GPU through NVML, nvidia-smi, sysfs or "
            "/proc/driver/nvidia, no AMD GPU through KFD or rocminfo), so there is nothing to "
            "check against",
            hint="name the GPUs to check for: --device 'RTX 3090' --device 8.6 --device gfx942",
        )
    return gpus, driver


@contextmanager
def _progress() -> Iterator[tuple[Any, Any]]:
    console = err_console()
    if not console.is_terminal:
        yield None, None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("checking libraries"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("scan", total=None)
        yield bar, task


def _scan(sources: Sequence[Source], jobs: int | None) -> Scan:
    from capplan.adapters.environment import scan_sources

    with _progress() as (bar, task):
        if bar is None:
            return scan_sources(sources, jobs=jobs)
        return scan_sources(
            sources,
            jobs=jobs,
            on_total=lambda total: bar.update(task, total=total),
            on_file=lambda size: bar.advance(task, size),
        )


# --- the fix from the plan --------------------------------------------------------------------


def _plan_names(package: Package) -> list[str]:
    name = package.name.lower()
    if package.kind == "nix":
        name = _VERSION_SUFFIX.sub("", _PYTHON_PREFIX.sub("", name))
    bare = _CU_SUFFIX.sub("", name.removeprefix("nvidia-"))
    return list(dict.fromkeys([name, bare]))


def _plan_fixes(
    report: DoctorReport, kb: KnowledgeBase, driver: Driver
) -> dict[tuple[str, int], str]:
    """(package name, GPU index) -> what the plan offers, for NVIDIA GPUs where it cannot run.
    Plans lazily: only when something cannot run on an NVIDIA GPU."""
    failing = [
        (package, index)
        for package, _ in report.packages
        for index, cell in enumerate(report.package_cells(package))
        if cell.level in ("cannot-run", "partly")
    ]
    if not failing:
        return {}
    by_vendor: dict[str, list[tuple[Package, int]]] = {}
    for p, i in failing:
        by_vendor.setdefault(report.gpus[i].vendor, []).append((p, i))
    wanted = by_vendor.get("nvidia", [])
    amd_wanted = by_vendor.get("amd", [])
    from capplan.adapters.nix import current_system
    from capplan.cli.planning import plan_with_settings

    planned_config = plan_with_settings(None, quiet=True)
    plan = planned_config.plan
    system = os.environ.get("CAPPLAN_SYSTEM", "").strip() or current_system()
    picks = _cuda_picks(kb, system, driver)

    fixes: dict[tuple[str, int], str] = {}
    missing: list[tuple[str, str, int]] = []  # (package, plan package, GPU index)
    for package, index in wanted:
        cap = report.gpus[index].device
        planned = next((n for n in _plan_names(package) if n in plan.packages), None)
        if planned is None or cap is None:
            continue
        pick = picks(plan, cap)[planned]
        if pick.variant is not None:
            fixes[(package.name, index)] = f"nix build .#{pick.variant.name}"
        elif pick.named is not None:  # a variant a newer driver would run
            fixes[(package.name, index)] = (
                f"nix build .#{pick.named.name} (with NVIDIA driver >= "
                f"{pick.detail['needs_driver']})"
            )
        else:
            missing.append((package.name, planned, index))
    if missing:
        fixes.update(_fleet_fixes(planned_config, missing, report, kb, picks, system))
    if amd_wanted:
        fixes.update(_amd_fixes(planned_config, amd_wanted, report, kb, system))
    return fixes


def _cuda_picks(kb: KnowledgeBase, system: str, driver: Driver) -> Any:
    """``picks(plan, capability)``: the CUDA family's answer for each package of ``plan`` on a
    GPU of that capability under the driver, among every variant of ``system`` (doctor judges
    the plan by system only: ``Machine.own_kind_only`` False), as package -> Pick."""
    from capplan.core.families.base import Machine
    from capplan.core.families.registry import gpu_families

    family = {f.vendor: f for f in gpu_families(kb)}["nvidia"]
    answers: dict[tuple[int, str], dict[str, Pick]] = {}

    def picks(plan: Any, cap: Any) -> dict[str, Pick]:
        key = (id(plan), str(cap))
        if key not in answers:
            machine = Machine(system, cap, driver.version, own_kind_only=False)
            answers[key] = {p.package: p for p in family.pick(plan, machine)}
        return answers[key]

    return picks


def _amd_fixes(
    planned: Any,
    wanted: list[tuple[Package, int]],
    report: DoctorReport,
    kb: KnowledgeBase,
    system: str,
) -> dict[tuple[str, int], str]:
    """For AMD GPUs: the plan's ROCm variant for the GPU's processor, as ``detect`` picks it
    (the family's :meth:`~capplan.core.families.base.TargetFamily.pick`), or this GPU's reason
    why the plan has none."""
    from capplan.core.families.base import Machine
    from capplan.core.families.registry import gpu_families

    plan = planned.plan
    family = {f.vendor: f for f in gpu_families(kb)}["amd"]
    vendors = {name: p.vendors for name, p in planned.config.packages.items()}
    answers: dict[int, dict[str, Pick]] = {}
    fixes: dict[tuple[str, int], str] = {}
    for package, index in wanted:
        target = report.gpus[index].device
        name = next((n for n in _plan_names(package) if n in plan.packages), None)
        if name is None or target is None:
            continue
        if index not in answers:
            machine = Machine(system, target, None, vendors)
            answers[index] = {p.package: p for p in family.pick(plan, machine)}
        pick = answers[index][name]
        if pick.variant is not None:
            fixes[(package.name, index)] = f"nix build .#{pick.variant.name}"
        else:
            fixes[(package.name, index)] = (
                f"the plan has no {name} variant for {target}: {pick.reason}"
            )
    return fixes


def _fleet_fixes(
    planned: Any,
    missing: list[tuple[str, str, int]],
    report: DoctorReport,
    kb: KnowledgeBase,
    picks: Any,
    system: str,
) -> dict[tuple[str, int], str]:
    """For GPUs the plan has no variant for: plan again with them in the fleet (by capability)
    and name the variant that adds, or say why the plan still has none."""
    from capplan.core.model.spec import spec_toolkit
    from capplan.core.planning.planner import make_plan
    from capplan.errors import CapplanError

    config = planned.config
    added = sorted({str(report.gpus[i].device) for _, _, i in missing})
    extra = tuple(c for c in added if c not in config.fleet.gpus)
    fleet = config.fleet.model_copy(update={"gpus": (*config.fleet.gpus, *extra)})
    where = "capplan.toml" if planned.config_file else "a capplan.toml (copy of the default plan)"
    fixes: dict[tuple[str, int], str] = {}
    try:
        wider = make_plan(kb, config.model_copy(update={"fleet": fleet}))
    except CapplanError as error:
        for name, planned_name, index in missing:
            fixes[(name, index)] = (
                f"the plan has no {planned_name} variant for {report.gpus[index].device}, "
                f"and adding it to the fleet fails: {error.message}"
            )
        return fixes
    for name, planned_name, index in missing:
        cap = report.gpus[index].device
        pick = picks(wider, cap)[planned_name]
        variant = pick.named  # the one to use, or the one a newer driver would run
        if variant is not None:
            fixes[(name, index)] = (
                f'the plan has no {planned_name} variant for {cap} on {system}: add "{cap}" to '
                f"[fleet] gpus in {where}, then nix build .#{variant.name}"
                + (f" (CUDA {toolkit})" if (toolkit := spec_toolkit(variant.spec)) else "")
            )
        else:
            fixes[(name, index)] = (
                f"the plan has no {planned_name} variant for {cap} on {system}, not even with "
                f'"{cap}" in the fleet: {pick.reason}'
            )
    return fixes


# --- output -----------------------------------------------------------------------------------


def _cpu_json(report: DoctorReport, scan: Scan, note: str | None) -> dict[str, Any] | None:
    """The CPU check: what the CPU is, how many libraries record their x86-64 level, and those
    this CPU does not run (docs/doctor.md, "CPU levels")."""
    cpu = report.cpu
    if cpu is None:
        return {"name": None, "note": note}
    owners = {lib.path: pkg.name for pkg, libs in report.packages for lib in libs}
    names = {key: pkg.name for key, pkg in scan.packages.items()}
    return {
        "name": cpu.name,
        "level": cpu.level,
        "source": cpu.source,
        "libraries_recording_level": report.cpu_recorded,
        "libraries_without_level": report.cpu_unrecorded,
        "cannot_run": [
            {
                "path": lib.path,
                "package": owners.get(lib.path) or names.get(lib.package, lib.package),
                "needs": lib.cpu_level,
                **cell.to_json(),
            }
            for lib, cell in report.cpu_cannot_run
        ],
    }


def _print_cpu(data: dict[str, Any]) -> None:
    cpu = data.get("cpu")
    if not cpu:
        return
    console = out_console()
    if cpu["name"] is None:
        console.print(f"CPU unknown: CPU levels not checked ({cpu['note']}; give --cpu)",
                      highlight=False, markup=False)  # fmt: skip
        return
    level = f", runs {cpu['level']}" if cpu["level"] else ""
    console.print(
        f"CPU {cpu['name']} ({cpu['source']}{level}): {cpu['libraries_recording_level']} "
        f"libraries record their x86-64 level, {cpu['libraries_without_level']} record none "
        "(their level is unknown)",
        highlight=False,
        markup=False,
    )
    for lib in cpu["cannot_run"]:
        console.print(f"[bold]{escape(lib['package'])}[/bold] {escape(lib['path'])} cannot run "
                      f"on this CPU: {escape(lib['reason'])}", highlight=False)  # fmt: skip
        console.print(f"  fix: {escape(lib['fix'])}", highlight=False)


def _variants_json(variants: tuple[Sequence[Any], Any], gpus: Sequence[Gpu]) -> dict[str, Any]:
    """PEP 825 variant wheels among the sources (``installed_variants``: the wheels and the
    problems), each judged against every GPU (issue 35)."""
    from capplan.core.binaries.variants import judge_variant

    found, problems = variants
    return {
        "installed": [
            {
                "package": v.package,
                "version": v.version,
                "path": v.path,
                "label": v.label,
                "properties": {
                    ns: {f: list(x) for f, x in fs.items()} for ns, fs in v.properties.items()
                },
                "gpus": [verdict.to_json() for verdict in judge_variant(v, gpus)],
            }
            for v in found
        ],
        "problems": problems,
    }


def _print_variants(data: dict[str, Any]) -> None:
    """One line per installed variant wheel, and one per GPU its properties do not cover."""
    console = out_console()
    for v in data["installed"]:
        missed = [g for g in v["gpus"] if g["covered"] is False]
        covered = [g["gpu"] for g in v["gpus"] if g["covered"]]
        head = f"variant wheel {v['package']} {v['version'] or ''} [{v['label']}]"
        console.print(
            f"{head}: covers {', '.join(covered) or 'no GPU here'}", markup=False, highlight=False
        )
        for g in missed:
            console.print(
                f"  does not cover {g['gpu']}: {g['reason']}; installers choose a variant by one "
                "GPU, so a machine with several models can get one that misses the others",
                markup=False,
                highlight=False,
            )
    for problem in data["problems"]:
        err_console().print(f"capplan: {problem}", markup=False, highlight=False)


def _cell_json(cell: Cell, plan_fix: str | None = None) -> dict[str, Any]:
    data = cell.to_json()
    data["plan"] = plan_fix
    return data


def _json(
    report: DoctorReport,
    fixes: dict[tuple[str, int], str],
    driver: Driver,
    driver_source: str | None,
    sources: Sequence[Source],
    scan: Scan,
) -> dict[str, Any]:
    gpus = [g.to_json() for g in report.gpus]
    packages = []
    for package, libs in report.packages:
        summary = report.package_cells(package)
        packages.append(
            {
                "name": package.name,
                "version": package.version,
                "kind": package.kind,
                "cuda_majors": list(report.package_majors(package)),
                "verdicts": [
                    _cell_json(cell, fixes.get((package.name, i))) for i, cell in enumerate(summary)
                ],
                "libraries": [
                    {
                        "path": lib.path,
                        "size": lib.size,
                        "sass": [c.sm for c in lib.sass],
                        "ptx": [
                            {
                                "arch": p.capability.compute,
                                "isa": f"{p.isa[0]}.{p.isa[1]}" if p.isa else None,
                                "size": p.size,
                            }
                            for p in lib.ptx
                        ],
                        "amd": [str(t) for t in lib.amd],
                        "soname": lib.soname,
                        "cuda_majors": list(lib.cuda_majors),
                        "problems": list(lib.problems),
                        "unloadable": lib.unloadable,
                        "machine": lib.machine,
                        "stubs": lib.stubs,
                        "toolkit": lib.toolkit,
                        "verdicts": [c.to_json() for c in report.cells[lib.path]],
                    }
                    for lib in libs
                ],
            }
        )
    return {
        "ok": report.ok,
        "gpus": gpus,
        "driver": {
            "version": driver.version,
            "source": driver_source,
            "runs_cuda": driver.runs_cuda,
        },
        "sources": [{"path": str(s.path), "kind": s.kind} for s in sources],
        "scanned": {"files": scan.files, "bytes": scan.bytes},
        "packages": packages,
        "mixed_cuda_majors": {str(m): list(n) for m, n in report.mixed_majors.items()},
        "unloadable": [{"path": lib.path, "reason": lib.unloadable} for lib in report.unloadable],
    }


_STYLE = {
    "runs": "green",
    "native": "green",
    "compatible": "green",
    "ptx-jit": "yellow",
    "other-vendor": "dim",
    "partly": "bold yellow",
    "cannot-run": "bold red",
}


def _print(data: dict[str, Any]) -> None:
    console = out_console()
    gpus = data["gpus"]
    drv = data["driver"]
    if drv["version"]:
        runs = (
            f", runs any CUDA {drv['runs_cuda']}"
            if drv["runs_cuda"]
            else ", runs no CUDA release capplan knows"
        )
        console.print(f"driver {escape(drv['version'])} ({drv['source']}{runs})", highlight=False)
    else:
        console.print(
            "driver unknown: driver checks skipped (give --driver VERSION)", highlight=False
        )
    if not data["packages"]:
        console.print(
            f"no library with GPU code in {data['scanned']['files']} ELF files checked",
            highlight=False,
        )
        return
    labels = [g["label"] for g in gpus]
    rows: list[list[tuple[str, str]]] = []  # (plain text, markup) per cell
    for package in data["packages"]:
        title = package["name"] + (f" {package['version']}" if package["version"] else "")
        majors = ",".join(str(m) for m in package["cuda_majors"])
        title += f" (CUDA {majors})" if majors else ""
        rows.append([(title, escape(title)), ("", ""), *map(_level, package["verdicts"])])
        for lib in package["libraries"]:
            name = os.path.basename(lib["path"])
            rows.append([("", ""), (name, escape(name)), *map(_level, lib["verdicts"])])
    table = make_table("package", "library", *labels, whole=("package", "library", *labels))
    for row in rows:
        table.add_row(*[markup for _, markup in row])
    # Every column is whole (names never cut): the table is as wide as its widest cells.
    heads = ["package", "library", *labels]
    widths = [max([cell_len(h), *(cell_len(r[i][0]) for r in rows)]) for i, h in enumerate(heads)]
    need = sum(widths) + 3 * len(widths) + 1
    width = console.width
    console.width = max(width, need)
    try:
        console.print(table)
    finally:
        console.width = width
    # One paragraph per package and reason: a driver too old says the same for every GPU.
    groups: dict[tuple[str, str, str, str | None], list[tuple[str, str | None]]] = {}
    for package in data["packages"]:
        for index, verdict in enumerate(package["verdicts"]):
            if verdict["level"] in ("cannot-run", "partly", "ptx-jit"):
                key = (package["name"], verdict["level"], verdict["reason"], verdict["fix"])
                groups.setdefault(key, []).append((gpus[index]["label"], verdict["plan"]))
    for (name, level, reason, fix), where in groups.items():
        word = {"cannot-run": "cannot run", "partly": "runs only partly"}.get(
            level, "runs only through PTX JIT"
        )
        on = ", ".join(label for label, _ in where)
        console.print(
            f"[bold]{escape(name)}[/bold] {word} on {escape(on)}: {escape(reason)}",
            highlight=False,
        )
        if fix:
            console.print(f"  fix: {escape(fix)}", highlight=False)
        for label, plan in where:
            if plan:
                prefix = f"for {label}: " if len(where) > 1 else ""
                console.print(f"  fix: {escape(prefix + plan)}", highlight=False)
    for major, names in data["mixed_cuda_majors"].items():
        console.print(
            f"mixed CUDA majors: CUDA {major} in {', '.join(names)}", highlight=False, markup=False
        )
    for lib in data["unloadable"]:
        console.print(f"cannot load {lib['path']}: {lib['reason']}", highlight=False,
                      markup=False, soft_wrap=True)  # fmt: skip
    if data["unloadable"]:
        ok = f"{len(data['unloadable'])} libraries cannot be loaded (exit 16)"
    else:
        ok = "everything runs" if data["ok"] else "something cannot run (exit 16)"
    console.print(
        f"{len(data['packages'])} packages, {data['scanned']['files']} ELF files "
        f"({data['scanned']['bytes'] / 1e9:.2f} GB) checked: {ok}",
        highlight=False,
    )


_CAUSE_WORDS = {
    "dropped-arch": "arch dropped",
    "device-code": "no code",
    "driver-runtime": "driver",
    "driver-ptx": "driver (PTX)",
    "driver-gpu": "driver too old for GPU",
    "machine": "wrong CPU",
    "vendor": "other vendor",
    "unloadable": "cannot load",
}


def _level(verdict: dict[str, Any]) -> tuple[str, str]:
    text = verdict["level"] + (f" {verdict['via']}" if verdict["via"] else "")
    if verdict.get("cause") in _CAUSE_WORDS:
        text += f" ({_CAUSE_WORDS[verdict['cause']]})"
    return text, f"[{_STYLE[verdict['level']]}]{escape(text)}[/]"
