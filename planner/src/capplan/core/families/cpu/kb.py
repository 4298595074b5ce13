"""The CPU knowledge base: a validated, frozen model of ``kb/cpu_packages.json``.

One entry per package: whether it picks its CPU code at run time (``runtime-dispatch``) or
compiles for one level (``compile-time``), how a per-level build gets its target (the package's
own arguments, ``override``, or compiler flags, ``cflags``), and the file that shows it. An
``override`` entry lists the arguments its recipe takes with the values each accepts, and the
rules that pick a value from a target's archspec features (the first rule whose features the
target has wins). Loading lives in :func:`capplan.adapters.cpu_archspec.load_cpu_model`.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Literal

from capplan.core.model.identifiers import check_kb_attr, check_kb_name
from capplan.core.model.records import Record, check_costs, record

if TYPE_CHECKING:
    from capplan.core.families.base import ReadsKbFile

__all__ = ["CpuOverrideRuleEntry", "CpuPackageEntry", "CpuPackagesFile", "read_cpu_packages"]


def _non_empty(owner: object, *names: str) -> None:
    for name in names:
        if not getattr(owner, name):
            raise ValueError(f"{name} must not be empty")


@record
class CpuOverrideRuleEntry(Record):
    """A package argument set when the target has every feature in ``features``."""

    features: tuple[str, ...]  # archspec feature names
    argument: str
    value: str

    def __post_init__(self) -> None:
        _non_empty(self, "features", "argument")


@record
class CpuPackageEntry(Record):
    package: str
    attr: str
    dispatch: Literal["runtime-dispatch", "compile-time"]
    mechanism: Literal["override", "cflags"]
    reason: str
    source: str
    hwcaps: bool
    minutes: float
    size_mb: float
    # mechanism "override": the recipe's arguments and the values each accepts (from source).
    arguments: dict[str, tuple[str, ...]] = field(default_factory=dict)
    overrides: tuple[CpuOverrideRuleEntry, ...] = ()
    # mechanism "override": arguments every per-level build also sets, whatever its target
    # (gromacs' enableCuda = false: its recipe reads `enableCuda ? config.cudaSupport`, so a
    # CPU-level build in a CUDA-enabled set would otherwise be a CUDA gromacs).
    always: dict[str, bool] = field(default_factory=dict)
    # Recipe arguments the entry's verdict relies on without setting them (llama-cpp's
    # `cpuArchDynamicDispatch ? true`, which makes it a runtime-dispatch build): `capplan
    # nixpkgs check` asks the pinned nixpkgs that its recipe still takes each.
    relies_on: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _non_empty(self, "package", "attr", "reason", "source")
        for name in ("minutes", "size_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be greater than 0")
        check_costs(self, "minutes", "size_mb")
        if self.mechanism == "cflags":
            if self.overrides or self.arguments or self.always:
                raise ValueError(
                    'mechanism "cflags" takes no overrides, arguments or always (a per-level '
                    "build gets compiler flags)"
                )
            return
        if not self.overrides:
            raise ValueError('mechanism "override" needs at least one rule in overrides')
        for name in self.always:
            if any(rule.argument == name for rule in self.overrides):
                raise ValueError(f"always sets '{name}', which an override rule also sets")
        for rule in self.overrides:
            accepted = self.arguments.get(rule.argument)
            if accepted is None:
                raise ValueError(
                    f"override argument '{rule.argument}' is not one of the recipe's arguments "
                    f"({', '.join(sorted(self.arguments)) or 'none listed'})"
                )
            if rule.value not in accepted:
                raise ValueError(
                    f"override value '{rule.value}' for {rule.argument} is not one the recipe "
                    f"accepts ({', '.join(accepted)})"
                )


@record
class CpuPackagesFile(Record):
    source: str
    packages: tuple[CpuPackageEntry, ...]

    def __post_init__(self) -> None:
        _non_empty(self, "source")
        seen: set[str] = set()
        for entry in self.packages:
            check_kb_name(entry.package, "package")
            check_kb_attr(entry.attr, f"package {entry.package}'s attr")
            if entry.package in seen:
                raise ValueError(f"package '{entry.package}' is listed twice")
            seen.add(entry.package)


def read_cpu_packages(read: ReadsKbFile) -> CpuPackagesFile:
    """The CPU family's package file (``kb/cpu_packages.json``), read through ``read``."""
    return read("cpu_packages.json", CpuPackagesFile)
