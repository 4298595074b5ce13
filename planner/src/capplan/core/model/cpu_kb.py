"""The CPU knowledge base: a validated, frozen model of ``kb/cpu_packages.json``.

One entry per package: whether it picks its CPU code at run time (``runtime-dispatch``) or
compiles for one level (``compile-time``), how a per-level build gets its target (the package's
own arguments, ``override``, or compiler flags, ``cflags``), and the file that shows it. An
``override`` entry lists the arguments its recipe takes with the values each accepts, and the
rules that pick a value from a target's archspec features (the first rule whose features the
target has wins). Loading lives in :func:`capplan.adapters.cpu_archspec.load_cpu_model`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["CpuOverrideRuleEntry", "CpuPackageEntry", "CpuPackagesFile"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CpuOverrideRuleEntry(_Frozen):
    """A package argument set when the target has every feature in ``features``."""

    features: tuple[str, ...] = Field(min_length=1)  # archspec feature names
    argument: str = Field(min_length=1)
    value: str


class CpuPackageEntry(_Frozen):
    package: str = Field(min_length=1)
    attr: str = Field(min_length=1)
    dispatch: Literal["runtime-dispatch", "compile-time"]
    mechanism: Literal["override", "cflags"]
    reason: str = Field(min_length=1)
    source: str = Field(min_length=1)
    hwcaps: bool
    minutes: float = Field(gt=0)
    size_mb: float = Field(gt=0)
    # mechanism "override": the recipe's arguments and the values each accepts (from source).
    arguments: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    overrides: tuple[CpuOverrideRuleEntry, ...] = ()

    @model_validator(mode="after")
    def _mechanism_fits(self) -> CpuPackageEntry:
        if self.mechanism == "cflags":
            if self.overrides or self.arguments:
                raise ValueError(
                    'mechanism "cflags" takes no overrides or arguments (a per-level build '
                    "gets compiler flags)"
                )
            return self
        if not self.overrides:
            raise ValueError('mechanism "override" needs at least one rule in overrides')
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
        return self


class CpuPackagesFile(_Frozen):
    source: str = Field(min_length=1)
    packages: tuple[CpuPackageEntry, ...]

    @model_validator(mode="after")
    def _unique(self) -> CpuPackagesFile:
        seen: set[str] = set()
        for entry in self.packages:
            if entry.package in seen:
                raise ValueError(f"package '{entry.package}' is listed twice")
            seen.add(entry.package)
        return self
