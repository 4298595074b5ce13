"""``capplan cache status``: each planned package's variant for a machine, where it is cached,
what building it costs on the machine's cores, and the bottom line. Pure: the command gathers
the output paths, the caches' answers and the failure record."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from capplan.core.model.kb import REFERENCE_CORES
from capplan.core.planning.failures import Failure

__all__ = ["StatusRow", "bottom_line", "cache_label", "minutes_here"]


def minutes_here(minutes: float, *, compiled: bool, cores: int) -> float:
    """A build's minutes on ``cores`` cores from the knowledge base's minutes on its
    reference builder (core/planning/runners.py: the work is minutes x reference cores, spread
    over the cores there are); a prebuilt redistributable (``compiled`` false) takes as long
    anywhere."""
    if not compiled:
        return minutes
    return minutes * REFERENCE_CORES / max(1, min(cores, REFERENCE_CORES * 8))


def cache_label(url: str) -> str:
    """A cache's short name for the bottom line: lab-cache for https://lab-cache.cachix.org,
    host:port for an address."""
    netloc = url.partition("://")[2].split("/", 1)[0].rpartition("@")[2] or url
    if netloc.startswith("["):  # [::1]:8080
        return netloc
    host = netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host.split(".", 1)[0] if "." in host else host
    return netloc


@dataclass(frozen=True)
class StatusRow:
    """One planned package on this machine: its variant and where its outputs are."""

    package: str
    gpu: str
    variant: str | None  # None: no planned variant runs on this GPU
    outputs: tuple[str, ...] = ()
    drv: str | None = None
    present: Mapping[str, bool] = field(default_factory=dict)  # cache URL -> all outputs there
    minutes: float | None = None  # on this machine's cores, when it must be built
    failure: Failure | None = None
    reason: str = ""  # why no variant runs here

    @property
    def cached_at(self) -> str | None:
        return next((url for url, here in self.present.items() if here), None)

    def state(self) -> str:
        if self.variant is None:
            return "no variant"
        if self.cached_at is not None:
            return "cached"
        if self.failure is not None:
            return "failed"
        return "build"

    def to_json(self) -> dict[str, object]:
        return {
            "package": self.package,
            "gpu": self.gpu,
            "variant": self.variant,
            "state": self.state(),
            "drv": self.drv,
            "outputs": list(self.outputs),
            "caches": dict(self.present),
            "cached_at": self.cached_at,
            "minutes": None if self.minutes is None else round(self.minutes, 1),
            "failure": None
            if self.failure is None
            else {
                "last": self.failure.last,
                "count": self.failure.count,
                "log_line": self.failure.log_tail[-1] if self.failure.log_tail else None,
            },
            "reason": self.reason,
        }


def _join(names: Sequence[str]) -> str:
    return ", ".join(dict.fromkeys(names))


def bottom_line(rows: Sequence[StatusRow]) -> str:
    """ "torch, torchvision: from lab-cache; magma: will build, about 40 min" (a failure with
    its date: "nccl: will build, about 12 min (failed on 2026-11-24)")."""
    by_cache: dict[str, list[str]] = {}
    parts: list[str] = []
    for row in rows:
        where = row.cached_at
        if where is not None:
            by_cache.setdefault(cache_label(where), []).append(row.package)
    for label, names in by_cache.items():
        parts.append(f"{_join(names)}: from {label}")
    for row in rows:
        if row.state() in ("build", "failed"):
            minutes = f", about {row.minutes:.0f} min" if row.minutes is not None else ""
            failed = f" (failed on {row.failure.last[:10]})" if row.failure is not None else ""
            parts.append(f"{row.package}: will build{minutes}{failed}")
        elif row.state() == "no variant":
            parts.append(f"{row.package}: no planned variant runs on {row.gpu}")
    return "; ".join(parts) if parts else "nothing planned for these GPUs"
