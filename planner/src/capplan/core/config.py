"""The planning configuration (``capplan.toml``), validated by pydantic.

The cascade (built-in defaults -> capplan.toml or ``[tool.capplan]`` -> ``CAPPLAN_*`` environment
-> command-line flags) is assembled by :mod:`capplan.adapters.config`; this module only defines
the shape and turns validation failures into one-line :class:`ConfigError` messages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from capplan.core.suggest import closest
from capplan.errors import ConfigError

__all__ = [
    "Config",
    "DispatchConfig",
    "FleetConfig",
    "PackageConfig",
    "PolicyConfig",
    "config_from_mapping",
]

# GitHub Actions runner labels ([policy.runners_os]); capplan.core.workflow checks the same.
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FleetConfig(_Strict):
    """The GPUs to serve: names as nvidia-smi prints them, loose names, or capabilities."""

    gpus: tuple[str, ...] = Field(default=(), description="GPU names or capabilities")
    count: dict[str, int] = Field(
        default_factory=dict, description="optional weights: how many of each GPU"
    )

    @field_validator("count")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        for name, n in value.items():
            if n < 1:
                raise ValueError(f"count for '{name}' must be >= 1, got {n}")
        return value


class PackageConfig(_Strict):
    """Per-package overrides; the package itself must be in the knowledge base."""

    attr: str | None = Field(
        default=None, description="nixpkgs attribute path, e.g. python3Packages.torch"
    )
    exclude: tuple[str, ...] = Field(default=(), description="capabilities never to build")
    extra: tuple[str, ...] = Field(default=(), description="capabilities to build beyond the fleet")
    cuda: str | None = Field(default=None, description="pin this package to one CUDA version")


class PolicyConfig(_Strict):
    system: Literal["x86_64-linux", "aarch64-linux"] = "x86_64-linux"
    cuda: tuple[str, ...] | None = Field(
        default=None,
        description="allowed CUDA versions, preferred first (default: nixpkgs' default first)",
    )
    fat: str | dict[str, tuple[str, ...]] = Field(
        default="none",
        description='"none", "fleet" (one build with every fleet capability), or named groups '
        "of GPUs/capabilities, each one fat build",
    )
    ptx: Literal["none", "newest"] = Field(
        default="none", description='"newest": PTX for the highest capability of each build'
    )
    share: Literal["exact", "compatible"] = Field(
        default="exact",
        description='"exact": one variant per fleet capability; "compatible": fewest variants '
        "giving every GPU native or same-major SASS",
    )
    runners: int = Field(default=4, ge=1, le=10_000, description="CI runners for the schedule")
    runners_os: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="GitHub Actions runs-on labels by Nix system (x86_64-linux, aarch64-linux), "
        'for jobs needing big-parallel (torch) ("big-parallel", or "<system>/big-parallel"); '
        "default: ubuntu-latest, ubuntu-24.04-arm",
    )

    @field_validator("runners_os")
    @classmethod
    def _runners_os(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        systems = ("x86_64-linux", "aarch64-linux")
        keys = {*systems, "big-parallel", *(f"{s}/big-parallel" for s in systems)}
        for key, labels in value.items():
            if key not in keys:
                raise ValueError(f"runners_os key '{key}' must be one of {', '.join(sorted(keys))}")
            if not labels:
                raise ValueError(f"runners_os '{key}' needs at least one runner label")
            for label in labels:
                if not _LABEL.fullmatch(label):
                    raise ValueError(
                        f"runner label '{label}' must be letters, digits, '.', '_' or '-'"
                    )
        return value

    @field_validator("fat")
    @classmethod
    def _fat(cls, value: str | dict[str, tuple[str, ...]]) -> str | dict[str, tuple[str, ...]]:
        if isinstance(value, str) and value not in ("none", "fleet"):
            raise ValueError(
                f'fat must be "none", "fleet" or a table of named groups, got "{value}"'
            )
        if isinstance(value, dict):
            for name, members in value.items():
                if not name.replace("-", "").replace("_", "").isalnum():
                    raise ValueError(f"fat group name '{name}' must be letters, digits, - or _")
                if not members:
                    raise ValueError(f"fat group '{name}' is empty")
        return value


class DispatchConfig(_Strict):
    """What a ``<package>-dispatch`` output does when no planned variant fits the machine."""

    fallback: str = Field(
        default="error",
        description='"error" (one line on stderr and an exit code), "fat" (the package\'s fat '
        'build when the plan has one), or a planned variant name such as "torch-sm86"',
    )


class Config(_Strict):
    fleet: FleetConfig = FleetConfig()
    packages: dict[str, PackageConfig] = Field(default_factory=dict)
    policy: PolicyConfig = PolicyConfig()
    dispatch: DispatchConfig = DispatchConfig()


def config_from_mapping(data: Mapping[str, Any], *, origin: str) -> Config:
    """Validate a parsed TOML/env mapping; unknown keys get a "did you mean"."""
    try:
        return Config.model_validate(dict(data))
    except ValidationError as error:
        raise _config_error(error, data, origin) from None


def _config_error(error: ValidationError, data: Mapping[str, Any], origin: str) -> ConfigError:
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    dotted = ".".join(loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        choices = sorted(model.model_fields) if model else []
        return ConfigError(
            f"{origin}: unknown key '{dotted}'",
            hint=closest(loc[-1], choices, what="key"),
        )
    value = first.get("input")
    shown = f" (got {value!r})" if value is not None and not isinstance(value, dict) else ""
    message = str(first["msg"]).removeprefix("Value error, ")
    return ConfigError(
        f"{origin}: invalid value for '{dotted}'{shown}: {message}",
        hint="see 'capplan schema' for the expected shape",
    )


def _model_at(path: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = Config
    index = 0
    while index < len(path):
        part = path[index]
        if model is Config and part == "packages":
            if index + 1 >= len(path):
                return None
            model = PackageConfig
            index += 2
            continue
        field = model.model_fields.get(part)
        annotation = field.annotation if field else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            index += 1
            continue
        return None
    return model
