"""The planning configuration (``capplan.toml``), validated by pydantic.

The cascade (built-in defaults -> capplan.toml or ``[tool.capplan]`` -> ``CAPPLAN_*`` environment
-> command-line flags) is assembled by :mod:`capplan.adapters.config`; this module only defines
the shape and turns validation failures into one-line :class:`ConfigError` messages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from capplan.core.suggest import closest
from capplan.errors import ConfigError, shorten

__all__ = [
    "ATTR_NAME",
    "Config",
    "FleetConfig",
    "PackageConfig",
    "PolicyConfig",
    "check_attr_path",
    "config_from_mapping",
]

# Nix's identifier grammar (lexer.l: ID [a-zA-Z_][a-zA-Z0-9_\'\-]*): one attribute name.
ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_'-]*")
_NIX_KEYWORDS = frozenset(
    {"if", "then", "else", "assert", "with", "let", "in", "rec", "inherit", "or"}
)


def check_attr_path(value: str) -> None:
    """Raise ValueError unless ``value`` is a dotted path of Nix identifiers, such as
    ``python3Packages.torch``."""
    shown = value if len(value) <= 200 else value[:200] + "..."
    for part in value.split("."):
        if not ATTR_NAME.fullmatch(part) or part in _NIX_KEYWORDS:
            raise ValueError(
                f"'{shown}' is not a Nix attribute path: '{part[:80]}' is not a Nix identifier "
                "(letters, digits, _, ' and -, not starting with a digit or -)"
            )


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FleetConfig(_Strict):
    """The GPUs to serve: names as nvidia-smi prints them, loose names, or capabilities."""

    gpus: tuple[StrictStr, ...] = Field(default=(), description="GPU names or capabilities")
    count: dict[str, StrictInt] = Field(
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

    attr: StrictStr | None = Field(
        default=None, description="nixpkgs attribute path, e.g. python3Packages.torch"
    )
    exclude: tuple[StrictStr, ...] = Field(default=(), description="capabilities never to build")
    extra: tuple[StrictStr, ...] = Field(
        default=(), description="capabilities to build beyond the fleet"
    )
    cuda: StrictStr | None = Field(default=None, description="pin this package to one CUDA version")

    @field_validator("attr")
    @classmethod
    def _attr(cls, value: str | None) -> str | None:
        if value is not None:
            check_attr_path(value)
        return value


class PolicyConfig(_Strict):
    system: Literal["x86_64-linux", "aarch64-linux"] = "x86_64-linux"
    cuda: tuple[StrictStr, ...] | None = Field(
        default=None,
        description="allowed CUDA versions, preferred first (default: nixpkgs' default first)",
    )
    fat: StrictStr | dict[str, tuple[StrictStr, ...]] = Field(
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
    runners: StrictInt = Field(
        default=4, ge=1, le=10_000, description="CI runners for the schedule"
    )

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


class Config(_Strict):
    fleet: FleetConfig = FleetConfig()
    packages: dict[str, PackageConfig] = Field(default_factory=dict)
    policy: PolicyConfig = PolicyConfig()


def config_from_mapping(data: Mapping[str, Any], *, origin: str) -> Config:
    """Validate a parsed TOML/env mapping; unknown keys get a "did you mean"."""
    try:
        return Config.model_validate(dict(data))
    except ValidationError as error:
        raise _config_error(error, data, origin) from None


def _config_error(error: ValidationError, data: Mapping[str, Any], origin: str) -> ConfigError:
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    dotted = shorten(".".join(loc)) or "(top level)"
    if first["type"] == "extra_forbidden":
        model = _model_at(loc[:-1])
        choices = sorted(model.model_fields) if model else []
        return ConfigError(
            f"{origin}: unknown key '{dotted}'",
            hint=closest(loc[-1], choices, what="key"),
        )
    value = first.get("input")
    shown = (
        f" (got {shorten(repr(value))})"
        if value is not None and not isinstance(value, dict)
        else ""
    )
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
