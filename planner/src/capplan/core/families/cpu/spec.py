"""The CPU family's spec of a variant: the CPU target (a level or microarchitecture) it is
built for and how (the package's options, compiler flags, or glibc-hwcaps' per-level builds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from capplan.core.model.spec import FamilySpec

__all__ = ["CpuSpec"]


@dataclass(frozen=True, slots=True)
class CpuSpec(FamilySpec):
    """How a CPU variant is built (plan.json ``cpu``): for one target through the package's
    own options (``mechanism = "override"``) or compiler flags (``"cflags"``), or, for a
    ``<package>-hwcaps`` variant, the per-level builds laid out in ``lib/glibc-hwcaps``."""

    family: ClassVar[str] = "cpu"

    target: str | None  # None: a hwcaps variant
    arch: str
    mechanism: str  # "override", "cflags" or "hwcaps"
    override: tuple[tuple[str, object], ...] = ()  # package argument -> its JSON value
    cflags: tuple[str, ...] = ()
    hwcaps: tuple[tuple[str, str], ...] = ()  # psABI level -> the variant built for it
    # GCC's name of the target (nixpkgs' gcc.arch): the `gccarch-<arch>` system feature the
    # build requires; None for a hwcaps variant.
    gccarch: str | None = None
    # The instruction-set features (/proc/cpuinfo names) the build's code may use: what a CI
    # runner's CPU must have before it declares the gccarch feature.
    features: tuple[str, ...] = ()

    def order(self) -> tuple[object, ...]:
        # Beside generic builds, by name (a CPU-side package has no GPU family's variant).
        return (0, (), True, ())

    def compiled_targets(self) -> int:
        # Host code only: one build per target (a hwcaps layout copies its levels' builds).
        return 0 if self.target is None else 1

    def dependency_targets(self) -> tuple[object, ...]:
        return ()

    def toolkit(self) -> str | None:
        # Built with the system's own compilers.
        return None
