"""What ``capplan cache status`` and ``cache why`` both gather: this machine's GPUs (detected or
``--gpu``), each planned package's variant for them, the caches to ask and their answers."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from capplan.cli.output import err_console, progress
from capplan.errors import NoGpuError

if TYPE_CHECKING:
    from capplan.core.families.base import Pick
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.config import Config
    from capplan.core.planning.failures import FailureRecord
    from capplan.core.planning.plan import Plan

__all__ = [
    "MachineGpu",
    "caches_to_ask",
    "machine_gpus",
    "module_lines",
    "nix_substitutes_from",
    "picks_for",
    "present_at",
    "read_failure_record",
    "warn",
]


@dataclass(frozen=True)
class MachineGpu:
    """A GPU of this machine (or one ``--gpu`` names): its label, vendor and target."""

    label: str
    vendor: str
    device: object


def warn(text: str) -> None:
    err_console().print(text, markup=False, highlight=False, soft_wrap=True)


def machine_gpus(kb: KnowledgeBase, gpus: Sequence[str]) -> list[MachineGpu]:
    """The GPUs ``--gpu`` names (each as its family reads it; an unknown name is exit 4), else
    those the detectors find (none: exit 10)."""
    if gpus:
        from capplan.core.families.registry import doctor_gpu

        found = [doctor_gpu(kb, text) for text in gpus]
        return [MachineGpu(text, g.vendor, g.device) for text, g in zip(gpus, found, strict=True)]
    from capplan.adapters.families import find_gpus

    detected = find_gpus(kb)
    devices = [d for f in detected for d in f.devices]
    if not devices:
        raise NoGpuError(
            "; ".join(f.missing for f in detected if f.missing) or "no GPU found",
            hint="name the GPUs with --gpu (--gpu 'RTX 3090')",
        )
    return [MachineGpu(d.name, d.vendor, d.target) for d in devices]


def picks_for(
    kb: KnowledgeBase, plan: Plan, config: Config, gpu: MachineGpu, system: str
) -> tuple[Pick, ...]:
    """Each planned package's answer on ``gpu`` (its family's pick, as ``detect`` asks)."""
    from capplan.core.families.base import Machine
    from capplan.core.families.registry import gpu_families

    vendors = {name: package.vendors for name, package in config.packages.items()}
    family = {f.vendor: f for f in gpu_families(kb)}[gpu.vendor]
    return family.pick(plan, Machine(system, gpu.device, None, vendors))


def caches_to_ask(config: Config, flags: Sequence[str]) -> list[str]:
    """The http(s) caches to ask: capplan.toml's ``[cache] substituters`` and ``--cache``, else
    nix's own substituters. Other schemes (s3://, ssh://, file://) are warned about and left
    out: capplan asks caches over HTTP only."""
    from capplan.errors import shorten

    wanted = list(dict.fromkeys([*config.cache.substituters, *flags]))
    if not wanted:
        from capplan.adapters.derivations import configured_substituters

        wanted = configured_substituters()
    urls: list[str] = []
    for url in wanted:
        if url.split("://", 1)[0] in ("http", "https"):
            urls.append(_plain(url))
        else:
            warn(f"warning: cache {shorten(url)} is not http(s): capplan does not ask it")
    return list(dict.fromkeys(urls))


def _plain(url: str) -> str:
    return url.split("?", 1)[0].rstrip("/")


def nix_substitutes_from(url: str) -> bool | None:
    """Whether nix's own substituters include ``url`` (None when nix does not say)."""
    from capplan.adapters.derivations import configured_substituters
    from capplan.errors import NixError

    try:
        return _plain(url) in {_plain(u) for u in configured_substituters()}
    except NixError:
        return None


def present_at(
    paths_of: Mapping[str, Sequence[str]],
    caches: Sequence[str],
    keys: Sequence[str],
    timeout: float = 5.0,
) -> dict[str, dict[str, bool]]:
    """For each name, whether each cache holds all its paths: one bounded query per cache
    (adapters/binary_cache.py: concurrency, per-request time limit, narinfo size limit, the
    token only to its own host)."""
    from capplan.adapters.binary_cache import query_caches

    paths = sorted({p for ps in paths_of.values() for p in ps})
    token = os.environ.get("CAPPLAN_CACHE_TOKEN") or None
    answer: dict[str, dict[str, bool]] = {name: {} for name in paths_of}
    for url in caches:
        with progress(len(paths), f"asking {url}") as bar:
            result = query_caches(
                paths,
                [url],
                trusted_keys=list(keys),
                token=token,
                timeout=timeout,
                on_progress=bar.advance,
            )
        for message in result.warnings:
            warn(f"warning: {message}")
        for name, ps in paths_of.items():
            answer[name][url] = bool(ps) and all(p in result.present for p in ps)
    return answer


def read_failure_record(path: Path | None) -> FailureRecord | None:
    if path is None:
        return None
    from capplan.adapters.failures import read_record

    return read_record(path, missing_ok=True)


def module_lines(gpu_labels: Sequence[str]) -> list[str]:
    """The NixOS module lines that reach the planned variants (capplan's nixosModules.default)."""
    from capplan.cli.machine_lines import nix_string

    gpus = " ".join(nix_string(label) for label in gpu_labels)
    return [
        "imports = [ capplan.nixosModules.default ];",
        "capplan.enable = true;",
        f"capplan.gpus = [ {gpus} ];",
    ]
