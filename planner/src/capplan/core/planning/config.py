"""The planning configuration (``capplan.toml``), validated by pydantic.

The cascade (built-in defaults -> capplan.toml or ``[tool.capplan]`` -> ``CAPPLAN_*`` environment
-> command-line flags) is assembled by :mod:`capplan.adapters.config`; this module only defines
the shape and turns validation failures into one-line :class:`ConfigError` messages.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from capplan.core.model.suggest import closest
from capplan.core.model.systems import AARCH64, SYSTEMS, X86_64
from capplan.core.planning.workflow import CACHE_NAME
from capplan.errors import ConfigError, InvalidInputError, shorten

__all__ = [
    "ATTR_NAME",
    "DEFAULT_SYSTEM",
    "SYSTEMS",
    "CacheConfig",
    "Config",
    "DispatchConfig",
    "FleetConfig",
    "PackageConfig",
    "PolicyConfig",
    "check_attr_path",
    "check_system",
    "config_from_mapping",
    "gpu_system",
]

# GitHub Actions runner labels ([policy.runners_os]); capplan.core.planning.workflow checks
# the same.
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# `gccarch-<arch>` (nixpkgs' system feature of a gcc.arch build), optionally after `<system>/`.
_GCCARCH_KEY = re.compile(
    r"(?:(?:"
    + "|".join(re.escape(s) for s in SYSTEMS)
    + r")/)?gccarch-[A-Za-z0-9][A-Za-z0-9._+-]{0,63}"
)


DEFAULT_SYSTEM = X86_64


def check_system(value: str) -> str:
    """A known Nix system string, or a ValueError naming the closest one."""
    if value not in SYSTEMS:
        # Only a near spelling gets a "did you mean": riscv64-linux is not a typo of anything.
        near = difflib.get_close_matches(value, SYSTEMS, n=1, cutoff=0.8)
        hint = f"; did you mean '{near[0]}'?" if near else ""
        raise ValueError(
            f"unknown system '{shorten(value)}': capplan plans {' and '.join(SYSTEMS)} only "
            f"(nixpkgs' CUDA packages evaluate on no other system){hint}"
        )
    return value


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


def _once(values: tuple[str, ...], what: str, hint: str = "") -> tuple[str, ...]:
    """Refuse a list that names one entry twice: a repeated entry is a typo or a merge slip,
    and saying nothing would hide it."""
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{what} lists '{shorten(value)}' twice: list each entry once{hint}")
        seen.add(value)
    return values


def _gpu_key(label: str) -> str:
    """A GPU label as the name lookup reads it: case and runs of blanks do not matter."""
    return " ".join(label.split()).casefold()


def _cpu_key(label: str) -> str:
    """A CPU label as archspec and the psABI levels are matched: case, and '-' against '_'
    (x86-64-v3 is archspec's x86_64_v3), do not matter."""
    return _gpu_key(label).replace("-", "_")


def _first_key(table: dict[str, Any], label: str, last: str) -> str:
    """The key of ``table`` before ``last`` that names ``label`` (for the "twice" message)."""
    for key in table:
        if key == last:
            break
        if _gpu_key(key) == _gpu_key(label) or _cpu_key(key) == _cpu_key(label):
            return key
    return label


def _fleet_list(values: tuple[str, ...], what: str, key: Callable[[str], str]) -> tuple[str, ...]:
    """A fleet list refusing repeats, spelled alike or not ("A100" and "a100" are one GPU listed
    twice), in one order whatever the file's: the plan is a function of the fleet, not of the
    order it was written in (same fleet, same plan.json bytes)."""
    seen: dict[str, str] = {}
    for value in values:
        first = seen.get(key(value))
        if first is not None:
            also = (
                "" if first == value else f" (as '{shorten(first, 60)}' and '{shorten(value, 60)}')"
            )
            raise ValueError(
                f"{what} lists '{shorten(first)}' twice{also}: list each entry once "
                "(weights go in [fleet] count)"
            )
        seen[key(value)] = value
    return tuple(sorted(values, key=lambda value: (key(value), value)))


class FleetConfig(_Strict):
    """The GPUs to serve: names as nvidia-smi prints them, loose names, or capabilities."""

    gpus: tuple[StrictStr, ...] = Field(default=(), description="GPU names or capabilities")
    cpus: tuple[StrictStr, ...] = Field(
        default=(),
        description="the CPUs of the fleet's machines: x86-64 psABI levels (x86-64-v3) or "
        "microarchitectures as archspec names them (sapphirerapids, zen4, neoverse_v2); "
        "packages that compile for one CPU level get a variant per level",
    )
    count: dict[str, StrictInt] = Field(
        default_factory=dict, description="optional weights: how many of each GPU or CPU"
    )
    systems: dict[str, StrictStr] = Field(
        default_factory=dict,
        description='the system a fleet entry lives on, overriding the KB default ("H100" = '
        '"aarch64-linux" for an H100 in a Grace server)',
    )

    @field_validator("systems")
    @classmethod
    def _systems(cls, value: dict[str, str]) -> dict[str, str]:
        for system in value.values():
            check_system(system)
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _fleet_list(value, "gpus", _gpu_key)

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _fleet_list(value, "cpus", _cpu_key)

    @field_validator("count")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        for name, n in value.items():
            if n < 1:
                raise ValueError(f"count for '{shorten(name)}' must be >= 1, got {n}")
        return value

    @model_validator(mode="after")
    def _count_names(self) -> FleetConfig:
        """``[fleet.count]`` and ``[fleet.systems]`` keys name fleet entries as the lists do:
        case and runs of blanks do not matter ("rtx  3090" counts "RTX 3090"), and for CPUs '-'
        against '_'. Each key is stored as the list spells the entry, so every lookup by
        label finds it; one entry named by two keys is refused like a list naming it twice."""
        spelled = {_gpu_key(g): g for g in self.gpus}
        cpus = {_cpu_key(c): c for c in self.cpus}
        for field in ("count", "systems"):
            table: dict[str, Any] = getattr(self, field)
            renamed: dict[str, Any] = {}
            for key, value in table.items():
                label = spelled.get(_gpu_key(key)) or cpus.get(_cpu_key(key)) or key
                if label in renamed:
                    raise ValueError(
                        f"fleet.{field} names '{shorten(label)}' twice (as "
                        f"'{shorten(_first_key(table, label, key), 60)}' and "
                        f"'{shorten(key, 60)}'): give each entry once"
                    )
                renamed[label] = value
            object.__setattr__(self, field, renamed)  # frozen: set once, while validating
        return self


class PackageConfig(_Strict):
    """Per-package overrides; the package itself must be in the knowledge base."""

    attr: StrictStr | None = Field(
        default=None, description="nixpkgs attribute path, e.g. python3Packages.torch"
    )
    exclude: tuple[StrictStr, ...] = Field(
        default=(), description="capabilities or gfx targets never to build"
    )
    extra: tuple[StrictStr, ...] = Field(
        default=(), description="capabilities or gfx targets to build beyond the fleet"
    )
    cuda: StrictStr | None = Field(default=None, description="pin this package to one CUDA version")
    cpu: Literal["auto", "generic"] = Field(
        default="auto",
        description='"auto": per-level variants when the package compiles for one CPU level '
        '(kb/cpu_packages.json) and the fleet has more than one; "generic": one generic build',
    )
    vendors: tuple[Literal["nvidia", "amd"], ...] | None = Field(
        default=None,
        description='the GPU vendors to build this package for: ["nvidia"], ["amd"] or both '
        "(default: every vendor nixpkgs builds it for; AMD: ROCm gfx targets)",
    )

    @field_validator("attr")
    @classmethod
    def _attr(cls, value: str | None) -> str | None:
        if value is not None:
            check_attr_path(value)
        return value

    @field_validator("exclude", "extra")
    @classmethod
    def _targets(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _once(value, "the target list")

    @field_validator("vendors")
    @classmethod
    def _vendors(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else _once(value, "vendors")


class PolicyConfig(_Strict):
    system: StrictStr | None = Field(
        default=None, description="the one system to plan for (the one-system spelling of systems)"
    )
    systems: tuple[StrictStr, ...] | None = Field(
        default=None,
        description="systems to plan for, the default first (its variants get no name suffix): "
        '["x86_64-linux", "aarch64-linux"]',
    )
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
    rocm_scope: Literal["package", "stack"] = Field(
        default="package",
        description='AMD variants: "package" (only the package rebuilds, with gpuTargets; the '
        'ROCm libraries come from the cache) or "stack" (the package in rocmPackages.<target>: '
        "every target-dependent ROCm library rebuilds for that target)",
    )
    runners_os: dict[str, tuple[StrictStr, ...]] = Field(
        default_factory=dict,
        description="GitHub Actions runs-on labels by Nix system (x86_64-linux, aarch64-linux), "
        'for jobs needing big-parallel (torch) ("big-parallel", or "<system>/big-parallel"), '
        'and for CPU-level jobs ("gccarch-<arch>", or "<system>/gccarch-<arch>": runners whose '
        "CPU runs that level; such a job goes nowhere else); default: ubuntu-latest, "
        "ubuntu-24.04-arm",
    )

    @field_validator("runners_os")
    @classmethod
    def _runners_os(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        keys = {*SYSTEMS, "big-parallel", *(f"{s}/big-parallel" for s in SYSTEMS)}
        for key, labels in value.items():
            # CPU-level jobs go to runners declared for their gccarch-<arch> system feature.
            if key not in keys and not _GCCARCH_KEY.fullmatch(key):
                raise ValueError(
                    f"runners_os key '{key}' must be one of {', '.join(sorted(keys))}, "
                    "gccarch-<arch> or <system>/gccarch-<arch>"
                )
            if not labels:
                raise ValueError(f"runners_os '{key}' needs at least one runner label")
            _once(labels, f"runners_os '{key}'")
            for label in labels:
                if not _LABEL.fullmatch(label):
                    raise ValueError(
                        f"runner label '{label}' must be letters, digits, '.', '_' or '-'"
                    )
        return value

    # GitHub's standard hosted runner for public repositories: ubuntu-latest, 4 CPUs and 16 GB
    # (docs.github.com/en/actions/reference/runners/github-hosted-runners).
    runner_cores: StrictInt = Field(
        default=4,
        ge=1,
        le=4096,
        description="cores of each CI runner: at most this many compiles run at once "
        "(default 4: GitHub's ubuntu-latest for public repositories)",
    )
    runner_memory_gb: StrictFloat | StrictInt = Field(
        default=16,
        gt=0,
        le=65536,
        description="memory of each CI runner in GB: a job runs at most memory / (its "
        "package's peak MB per compile) compiles at once; a job held below runner_cores needs "
        "big-parallel (default 16: GitHub's ubuntu-latest for public repositories; a private "
        "repository's is smaller, docs/configuration.md)",
    )
    # GitHub's hosted Linux runners have about 14 GB of free disk (docs.github.com, "GitHub-
    # hosted runners": 14 GB of SSD), what is left after the image.
    runner_disk_gb: StrictFloat | StrictInt = Field(
        default=14,
        gt=0,
        le=1_048_576,
        description="free disk of each CI runner in GB: a job whose outputs take more needs a "
        "big-parallel runner (default 14: GitHub's hosted runners)",
    )
    # The runners [policy.runners_os] "big-parallel" names (issue 40): a job scheduled there
    # has its minutes stated for them. The defaults are the knowledge base's 16-core reference
    # builder with room for its compiles: assumed, not any runner's published size.
    big_parallel_cores: StrictInt = Field(
        default=16,
        ge=1,
        le=4096,
        description='cores of each big-parallel runner ([policy.runners_os] "big-parallel"; '
        "default 16, the knowledge base's reference builder)",
    )
    big_parallel_memory_gb: StrictFloat | StrictInt = Field(
        default=64,
        gt=0,
        le=65536,
        description="memory of each big-parallel runner in GB (default 64)",
    )
    big_parallel_disk_gb: StrictFloat | StrictInt = Field(
        default=200,
        gt=0,
        le=1_048_576,
        description="free disk of each big-parallel runner in GB (default 200)",
    )
    runners: StrictInt | dict[str, StrictInt] = Field(
        default=4,
        description="CI runners for the schedule: one number (each system's pool), or a table "
        'per system ({ "x86_64-linux" = 8, "aarch64-linux" = 2 })',
    )

    @field_validator("system")
    @classmethod
    def _system(cls, value: str | None) -> str | None:
        return None if value is None else check_system(value)

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if value is None else _once(value, "cuda")

    @field_validator("systems")
    @classmethod
    def _systems(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("systems is empty: list at least one system")
        for system in value:
            check_system(system)
        if len(set(value)) != len(value):
            twice = next(system for i, system in enumerate(value) if system in value[:i])
            raise ValueError(f"systems lists '{shorten(twice)}' twice: list each system once")
        return value

    @field_validator("runners")
    @classmethod
    def _runners(cls, value: int | dict[str, int]) -> int | dict[str, int]:
        if isinstance(value, dict) and not value:
            raise ValueError(
                "runners is an empty table: give one number (runners = 4) or a count per "
                'system (runners = { "x86_64-linux" = 8 })'
            )
        counts = value.values() if isinstance(value, dict) else (value,)
        for system in value if isinstance(value, dict) else ():
            check_system(system)
        for n in counts:
            if not 1 <= n <= 10_000:
                raise ValueError(f"runners must be between 1 and 10000, got {n}")
        return value

    @model_validator(mode="after")
    def _one_spelling(self) -> PolicyConfig:
        if self.system is not None and self.systems is not None:
            raise ValueError(
                'policy sets both system and systems: keep one (system = "..." is the '
                'one-system spelling of systems = ["..."])'
            )
        # A runners table may size a known system that is not planned (CAPPLAN_SYSTEM can
        # narrow the file's systems); unknown system names fail in _runners.
        return self

    @property
    def planned_systems(self) -> tuple[str, ...]:
        """The systems to plan for, the default (unsuffixed) one first."""
        if self.systems is not None:
            return self.systems
        return (self.system or DEFAULT_SYSTEM,)

    def runners_for(self, system: str) -> int:
        """The runner pool size of one system."""
        if isinstance(self.runners, dict):
            return self.runners.get(system, 4)  # a system the table leaves out: the default
        return self.runners

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
                _once(members, f"fat group '{name}'")
        return value


class DispatchConfig(_Strict):
    """What a ``<package>-dispatch`` output does when no planned variant fits the machine."""

    fallback: StrictStr = Field(
        default="error",
        description='"error" (one line on stderr and an exit code), "fat" (the package\'s fat '
        'build when the plan has one), or a planned variant name such as "torch-sm86"',
    )


# A substituter as nix.conf takes it: a store URL of a scheme Nix reads caches from, no blanks
# or controls (nix.conf splits its lists on white space).
_SUBSTITUTER = re.compile(r"(?:https?|file|s3|ssh|ssh-ng|gs)://[!-~]{1,1000}")
# A public key as nix.conf's trusted-public-keys takes it: NAME:BASE64 of an ed25519 key
# (32 bytes, 44 characters with padding); Nix refuses any other length.
_PUBLIC_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,253}:[A-Za-z0-9+/]{43}=")


class CacheConfig(_Strict):
    """The fleet's binary cache: what machines substitute from (the NixOS and home-manager
    modules add these to ``nix.settings``) and what CI pushes to."""

    substituters: tuple[StrictStr, ...] = Field(
        default=(),
        description="binary cache URLs machines substitute from, such as "
        '"https://lab-cache.cachix.org" (nix.conf extra-substituters)',
    )
    public_keys: tuple[StrictStr, ...] = Field(
        default=(),
        description='the keys those caches sign with, "NAME:BASE64" '
        "(nix.conf extra-trusted-public-keys)",
    )
    cachix: StrictStr | None = Field(
        default=None,
        description="the cachix cache CI pushes to (`capplan ci github` without --cache)",
    )

    @field_validator("substituters")
    @classmethod
    def _substituters(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not _SUBSTITUTER.fullmatch(value):
                raise ValueError(
                    f"'{shorten(value)}' is not a binary cache URL (http://, https://, "
                    "file://, s3://, ssh://, ssh-ng:// or gs://, no blanks)"
                )
        return _once(values, "cache.substituters")

    @field_validator("public_keys")
    @classmethod
    def _public_keys(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            if not _PUBLIC_KEY.fullmatch(value):
                raise ValueError(
                    f"'{shorten(value)}' is not a Nix public key (NAME:BASE64 of 32 bytes, "
                    "as `nix key convert-secret-to-public` or cachix prints it)"
                )
        return _once(values, "cache.public_keys")

    @field_validator("cachix")
    @classmethod
    def _cachix(cls, value: str | None) -> str | None:
        if value is not None and not CACHE_NAME.fullmatch(value):
            raise ValueError(
                f"'{shorten(value)}' is not a cachix cache name (lower-case letters, digits and -)"
            )
        return value


class Config(_Strict):
    fleet: FleetConfig = FleetConfig()
    packages: dict[str, PackageConfig] = Field(default_factory=dict)
    policy: PolicyConfig = PolicyConfig()
    dispatch: DispatchConfig = DispatchConfig()
    cache: CacheConfig = CacheConfig()


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


def gpu_system(
    label: str, jetson: bool, model_systems: Sequence[str] | None, config: Config
) -> str:
    """Where a fleet GPU lives: ``fleet.systems`` when set, else the KB model's default (a bare
    capability: aarch64-linux for a Jetson capability, x86_64-linux otherwise)."""
    bare = (AARCH64,) if jetson else (X86_64,)
    possible = tuple(model_systems) if model_systems else bare
    wanted = config.fleet.systems.get(label)
    if wanted is None:
        return possible[0]
    planned = config.policy.planned_systems
    if wanted not in planned:
        raise InvalidInputError(
            f"fleet.systems puts '{label}' on {wanted}, which is not in policy.systems "
            f"({', '.join(planned)})",
            hint=f"add {wanted} to policy.systems or drop the fleet.systems entry",
        )
    # A discrete card can sit in a server of either system; a Jetson module or a Grace
    # superchip brings its own Arm CPU.
    if (jetson or possible == (AARCH64,)) and wanted not in possible:
        kind = "a Jetson module" if jetson else "an Arm (Grace) superchip"
        raise InvalidInputError(
            f"fleet.systems puts '{label}' on {wanted}, but it is {kind} that runs "
            f"{' or '.join(possible)} only",
            hint=f"remove '{label}' from fleet.systems or set it to {possible[0]}",
        )
    return wanted
