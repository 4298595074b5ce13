"""Read the configuration cascade: defaults -> capplan.toml / [tool.capplan] -> CAPPLAN_* -> flags.

Where the file is found, in order: ``--config FILE``; ``$CAPPLAN_CONFIG``; ``capplan.toml`` in
the working directory or the nearest parent; ``[tool.capplan]`` of the nearest pyproject.toml.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capplan.adapters.files import read_bounded
from capplan.core.model.suggest import closest
from capplan.errors import CapplanError, ConfigError, shorten

if TYPE_CHECKING:
    from capplan.core.planning.config import Config

# A capplan.toml is a few KB; anything past 1 MiB is not one (and /dev/zero never ends).
MAX_CONFIG_BYTES = 1024 * 1024

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_PLAN",
    "OTHER_ENV",
    "default_plan_path",
    "find_config_file",
    "fleet_lists_cpus",
    "load_config",
]

# Environment variables that set config keys (comma-separated lists where the key is a list).
CONFIG_ENV: dict[str, tuple[str, str]] = {
    "CAPPLAN_GPUS": ("fleet", "gpus"),
    "CAPPLAN_CUDA": ("policy", "cuda"),
    "CAPPLAN_SYSTEM": ("policy", "system"),
    "CAPPLAN_FAT": ("policy", "fat"),
    "CAPPLAN_PTX": ("policy", "ptx"),
    "CAPPLAN_SHARE": ("policy", "share"),
    "CAPPLAN_RUNNERS": ("policy", "runners"),
    "CAPPLAN_ROCM_SCOPE": ("policy", "rocm_scope"),
}
_LISTS = {"CAPPLAN_GPUS", "CAPPLAN_CUDA"}
_INTS = {"CAPPLAN_RUNNERS"}
_INT_DIGITS = 18
# Variables capplan reads that are not config keys.
OTHER_ENV = (
    "CAPPLAN_CACHE_TOKEN",
    # Read by the dispatch selector (capplan/runtime/selector.py) and `capplan dispatch explain`.
    "CAPPLAN_CAPABILITY",
    "CAPPLAN_CONFIG",
    "CAPPLAN_DEBUG",
    "CAPPLAN_DISPATCH_CACHE",
    "CAPPLAN_DISPATCH_DEBUG",
    "CAPPLAN_NIX_EVAL_SECONDS",  # how long one nix eval may run (adapters/nix.py)
    "CAPPLAN_KB_DIR",
    "CAPPLAN_NVIDIA_SMI",
    "CAPPLAN_NVML",
    "CAPPLAN_RETRY_FAILED",  # `capplan matrix --retry-failed` (the workflow's retry_failed input)
    "CAPPLAN_ROCMINFO",  # `capplan detect`: another rocminfo (adapters/detect/amd.py)
    "CAPPLAN_SYSFS_ROOT",
    "CAPPLAN_ROOT",
    "CAPPLAN_TORCH_SOURCE_URL",
)


DEFAULT_PLAN = "default-plan.toml"  # packaged copy of the repository's capplan.toml


def default_plan_path() -> Path:
    """The embedded default plan, shipped inside the Python package (and the Nix-built tool)."""
    return Path(str(resources.files("capplan").joinpath(DEFAULT_PLAN)))


def find_config_file(explicit: Path | None, cwd: Path, environ: Mapping[str, str]) -> Path | None:
    """The config file to read; None when there is none (the embedded default applies)."""
    if explicit is not None:
        return explicit
    if environ.get("CAPPLAN_CONFIG"):
        return Path(environ["CAPPLAN_CONFIG"])
    for folder in (cwd, *cwd.parents):
        for name in ("capplan.toml", "pyproject.toml"):
            candidate = folder / name
            if candidate.is_file() and (name == "capplan.toml" or _has_tool_table(candidate)):
                return candidate
    return None


def _has_tool_table(path: Path) -> bool:
    """Whether a pyproject.toml has [tool.capplan]; a broken one is an error, not skipped."""
    data = _parse_toml(path)
    return isinstance(data.get("tool"), dict) and "capplan" in data["tool"]


def _quote(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _parse_toml(path: Path) -> dict[str, Any]:
    shown = shorten(os.fsdecode(path))  # a path is echoed cut and escaped, like every value
    try:
        raw = read_bounded(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(
            f"config file not found: {shown}", hint="pass an existing file to --config"
        ) from None
    except OSError as error:
        raise ConfigError(
            f"cannot read config file {shown}: {error.strerror or error}",
            hint="pass a readable TOML file",
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{shown} is not UTF-8 text: byte 0x{raw[error.start]:02x} at offset {error.start}",
            hint="save it as UTF-8 TOML",
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        # tomllib's message ends with "(at line L, column C)".
        raise ConfigError(
            f"{shown}: invalid TOML: {error}", hint="fix the TOML syntax there"
        ) from None
    except ValueError:
        # tomllib's int() of an integer past sys.get_int_max_str_digits() (4,300 digits): no
        # value capplan reads is that large.
        raise ConfigError(
            f"{shown}: invalid TOML: an integer of more than 4,300 digits",
            hint="write the number with fewer digits",
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{shown}: invalid TOML: nested too deeply", hint="flatten the nested arrays or tables"
        ) from None


def _read_toml(path: Path) -> dict[str, Any]:
    data = _parse_toml(path)
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        section = tool.get("capplan") if isinstance(tool, dict) else None
        if not isinstance(section, dict):
            raise ConfigError(
                f"{shorten(os.fsdecode(path))} has no [tool.capplan] table",
                hint="add one, or use a capplan.toml",
            )
        return section
    return data


def _from_env(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    layer: dict[str, dict[str, Any]] = {}
    known = sorted([*CONFIG_ENV, *OTHER_ENV])
    for name, value in sorted(environ.items()):
        if not name.startswith("CAPPLAN_"):
            continue
        if name not in CONFIG_ENV:
            if name not in OTHER_ENV:
                raise ConfigError(
                    f"unknown environment variable {shorten(name)}",
                    hint=closest(name, known, what="variable"),
                )
            continue
        section, key = CONFIG_ENV[name]
        parsed: Any = value
        if name in _LISTS:
            parsed = [item.strip() for item in value.split(",") if item.strip()]
        elif name in _INTS:
            if not re.fullmatch(r"[0-9]+", value.strip()):
                raise ConfigError(
                    f"{name}={_quote(value)} is not a whole number written in ASCII digits",
                    hint=f"e.g. {name}=4",
                )
            digits = value.strip().lstrip("0") or "0"
            if len(digits) > _INT_DIGITS:
                # Past every range a setting has (and past 4,300 digits int() refuses it).
                raise ConfigError(
                    f"{name}={_quote(value)} is a number of {len(digits):,} digits, more than "
                    "any setting takes",
                    hint=f"e.g. {name}=4",
                )
            parsed = int(digits)
        layer.setdefault(section, {})[key] = parsed
    return layer


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(
    explicit: Path | None,
    *,
    cwd: Path,
    environ: Mapping[str, str],
    flags: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[Config, Path | None]:
    """The validated config and the file it came from (None: the embedded default plan)."""
    from capplan.core.planning.config import config_from_mapping  # pydantic: only to validate

    path = find_config_file(explicit, cwd, environ)
    if path is None:
        data = _read_toml(default_plan_path())
        origin = "the embedded default plan"
    else:
        data = _read_toml(path)
        origin = str(path)
    env = _from_env(environ)
    if "system" in env.get("policy", {}) and isinstance(data.get("policy"), dict):
        # CAPPLAN_SYSTEM replaces the file's choice of systems, whichever spelling it used.
        data = {**data, "policy": {k: v for k, v in data["policy"].items() if k != "systems"}}
    for layer in (env, {k: dict(v) for k, v in (flags or {}).items() if v}):
        data = _replace_fleet(data, layer)
        data = _merge(data, layer)
    return config_from_mapping(data, origin=origin), path


def _replace_fleet(data: dict[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    """``--gpu`` / ``CAPPLAN_GPUS`` replace the fleet: the counts and systems of GPUs no longer in
    it go."""
    fleet = data.get("fleet")
    new = layer.get("fleet")
    if not isinstance(fleet, dict) or not isinstance(new, Mapping) or "gpus" not in new:
        return data
    gpus = new["gpus"]
    kept = dict(fleet)
    for key in ("count", "systems"):
        table = fleet.get(key)
        if isinstance(table, dict):
            # CPU counts stay: --gpu replaces the GPUs only.
            cpus = fleet.get("cpus") if key == "count" else None
            keep = {g for g in gpus if isinstance(g, str)} if isinstance(gpus, list) else set()
            if isinstance(cpus, list):
                keep |= {c for c in cpus if isinstance(c, str)}
            kept[key] = {k: v for k, v in table.items() if k in keep}
    return {**data, "fleet": kept}


def default_config() -> Config:
    from capplan.core.planning.config import Config

    return Config()


def fleet_lists_cpus(explicit: Path | None, *, cwd: Path, environ: Mapping[str, str]) -> bool:
    """Whether the config file in use lists ``[fleet] cpus``, read without validating it (so
    without pydantic); False when it cannot be read (a broken file is reported where it is
    validated)."""
    try:
        path = find_config_file(explicit, cwd, environ)
        data = _read_toml(path if path is not None else default_plan_path())
    except (CapplanError, OSError):
        return False
    fleet = data.get("fleet")
    return isinstance(fleet, dict) and bool(fleet.get("cpus"))
