"""``capplan cache why``'s work: the installable's derivation, the planned variant it should have
been, the walk of both derivation graphs, the causes in words and the nearest cached thing."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capplan.cli.output import emit_json, out_console
from capplan.errors import InvalidInputError, printable, shorten

__all__ = ["explain_why"]


def explain_why(
    installable: str,
    *,
    gpus: Sequence[str],
    caches: Sequence[str],
    failures_file: Path | None,
    flake: str,
    overrides: Mapping[str, str],
    timeout: float,
    as_json: bool,
    config_path: Path | None,
) -> bool:
    """Print why; True when every build the installable asks for is in a cache."""
    from capplan.adapters.derivations import installable_drv, show_derivations
    from capplan.adapters.detect.system import host_system
    from capplan.adapters.failures import flake_derivations
    from capplan.cli.cachestate import (
        caches_to_ask,
        machine_gpus,
        module_lines,
        nix_substitutes_from,
        picks_for,
        present_at,
        read_failure_record,
    )
    from capplan.cli.planning import current_kb, plan_with_settings
    from capplan.core.caches.drvgraph import Drv, find_named, package_of, walk
    from capplan.core.caches.status import minutes_here

    kb = current_kb()
    machine = machine_gpus(kb, gpus)
    planned = plan_with_settings(config_path)
    system = host_system(os.environ)
    gpu = machine[0]
    picks = {p.package: p for p in picks_for(kb, planned.plan, planned.config, gpu, system)}
    spellings = {
        v.package: (v.attr.rsplit(".", 1)[-1],) for v in planned.plan.variants if v.package in picks
    }
    root = installable_drv(installable, overrides)
    read: dict[str, Drv] = {}

    def fetch(paths: Sequence[str], recursive: bool) -> Mapping[str, Drv]:
        # Each derivation is read once: the search for planned packages and the walks share.
        need = [p for p in paths if p not in read]
        if need:
            read.update(show_derivations(need, recursive))
        return {p: read[p] for p in paths if p in read}

    found = find_named(root, fetch, lambda d: package_of(d.name, spellings) is not None)
    if not found:
        raise InvalidInputError(
            f"{shorten(installable)} holds no package the plan builds for {shorten(gpu.label)}",
            hint="name a planned package (capplan plan lists them) or a closure that holds one",
        )
    record = read_failure_record(failures_file)
    wanted = {
        d.path: picks[pkg] for d in found if (pkg := package_of(d.name, spellings)) is not None
    }
    variants = sorted({p.variant.name for p in wanted.values() if p.variant is not None})
    evaluated = flake_derivations(flake, variants, dict(overrides), system=system)
    urls = caches_to_ask(planned.config, caches)
    paths_of: dict[str, Sequence[str]] = {f"yours:{d.path}": d.outputs for d in found}
    paths_of.update({name: outs for name, (_, outs) in evaluated.items()})
    present = present_at(paths_of, urls, planned.config.cache.public_keys, timeout)
    reports: list[dict[str, Any]] = []
    all_cached = True
    for drv in found:
        pick = wanted[drv.path]
        yours_at = next((u for u, here in present[f"yours:{drv.path}"].items() if here), None)
        report: dict[str, Any] = {
            "package": pick.package,
            "derivation": drv.path,
            "name": drv.name,
            "yours_cached_at": yours_at,
            "variant": None,
            "same": False,
            "causes": [],
        }
        all_cached = all_cached and yours_at is not None
        if pick.variant is None:
            report["reason"] = pick.reason
            reports.append(report)
            continue
        v_drv, v_outs = evaluated[pick.variant.name]
        v_at = next((u for u, here in present[pick.variant.name].items() if here), None)
        failure = None if record is None else record.failures.get(v_drv)
        report.update(
            {
                "variant": pick.variant.name,
                "variant_derivation": v_drv,
                "variant_cached_at": v_at,
                "same": v_drv == drv.path
                or (bool(v_outs) and tuple(sorted(v_outs)) == drv.outputs),
                "failure": None
                if failure is None
                else {
                    "last": failure.last,
                    "count": failure.count,
                    "log_line": failure.log_tail[-1] if failure.log_tail else None,
                },
                "not_substituted_by_nix": v_at is not None and nix_substitutes_from(v_at) is False,
                # The knowledge base's minutes spread over this machine's cores.
                "minutes": round(
                    minutes_here(
                        pick.variant.minutes,
                        compiled=not pick.variant.independent,
                        cores=os.cpu_count() or 1,
                    ),
                    1,
                ),
            }
        )
        if not report["same"]:
            done = walk(drv.path, v_drv, fetch)
            report["walk"] = {"read": done.read, "levels": done.depth, "nix_calls": done.calls}
            report["causes"] = [
                c.to_json() for c in _causes(done.findings, installable, flake, overrides)
            ]
        reports.append(report)
    lines = module_lines([gpu.label])
    nearest = [r["variant"] for r in reports if r["variant"]]
    data = {
        "installable": installable,
        "derivation": root,
        "gpu": gpu.label,
        "cached": all_cached,
        "packages": reports,
        "module": lines,
        "build": [f"nix build .#{name}" for name in nearest],
    }
    if as_json:
        emit_json(data)
    else:
        _print(data)
    return all_cached


def _causes(findings: Any, installable: str, flake: str, overrides: Mapping[str, str]) -> list[Any]:
    from dataclasses import replace

    from capplan.adapters.derivations import locked_nixpkgs
    from capplan.core.caches.causes import name_causes

    causes = name_causes(findings)
    if any(c.kind == "nixpkgs-revision" for c in causes):
        yours = locked_nixpkgs(installable) if "#" in installable else None
        planned = overrides.get("nixpkgs") or locked_nixpkgs(flake)
        if yours or planned:
            mine = yours or "not pinned in a flake.lock capplan can read"
            said = f" (nixpkgs: yours {mine}, the plan's {planned or 'unknown'})"
            causes = [
                replace(c, words=c.words + said) if c.kind == "nixpkgs-revision" else c
                for c in causes
            ]
    return causes


def _say(text: str) -> None:
    out_console().print(printable(text), markup=False, highlight=False, soft_wrap=True)


def _print(data: dict[str, Any]) -> None:
    for r in data["packages"]:
        where = (
            f"cached at {r['yours_cached_at']}"
            if r["yours_cached_at"]
            else "not in any cache asked"
        )
        _say(f"{r['package']} ({r['name']}): {where}")
        if r["variant"] is None:
            _say(f"  no planned variant runs on {data['gpu']}: {r.get('reason', '')}")
            continue
        if r["same"]:
            _say(f"  it is the plan's {r['variant']}: the same derivation")
            if r["variant_cached_at"]:
                extra = (
                    " (your nix does not substitute from it: add it to nix.settings.substituters)"
                    if r["not_substituted_by_nix"]
                    else ""
                )
                _say(f"  cached at {r['variant_cached_at']}{extra}")
            elif r["failure"]:
                f = r["failure"]
                _say(
                    f"  not cached: its build failed on {f['last']} ({f['count']}x): "
                    f"{f['log_line'] or 'no log line'}"
                )
            else:
                _say(
                    "  not cached: not built yet, or pushed to a cache not asked "
                    "(give it with --cache)"
                )
            continue
        _say(
            f"  differs from the plan's {r['variant']} ({r['walk']['read']} derivation pairs read):"
        )
        for cause in r["causes"]:
            _say(f"  - {cause['words']}")
            if len(cause["trail"]) > 1:
                _say(f"    via {' -> '.join(cause['trail'])}")
    differing = [r for r in data["packages"] if r["variant"] is not None and not r["same"]]
    if not differing:
        return
    _say("nearest cached:")
    for r in differing:
        if r["variant_cached_at"]:
            state = f"cached at {r['variant_cached_at']}"
        elif r.get("failure"):
            state = (
                f"not cached: failed on {r['failure']['last']}: {r['failure']['log_line'] or ''}"
            )
        else:
            state = f"not cached yet: about {r['minutes']:.0f} min to build here"
        _say(f"  {r['variant']} for {data['gpu']} ({state})")
    _say("  in your NixOS configuration (capplan's nixosModules.default):")
    for line in data["module"]:
        _say(f"    {line}")
    for command in data["build"]:
        _say(f"  or: {command}")
