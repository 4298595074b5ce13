"""AMD GPU targets (``gfx942``, ``gfx90a:xnack-``, ``gfx11-generic``) as a value type.

Groundwork for a second vendor beside CUDA capabilities (issue 16): parsing, one canonical
spelling, a documented order, the KFD ``gfx_target_version`` and ELF ``e_flags`` encodings, and
a ranked compatibility answer. Nothing here touches :mod:`capplan.core.families.cuda.capability` or
the planner.

Facts, with their sources:

- Processor names, ``EF_AMDGPU_MACH`` values and feature bits: LLVM's
  llvm/docs/AMDGPUUsage.rst (tables "AMDGPU Processors", "AMDGPU ELF Header e_flags",
  "AMDGPU Generic Processors") and llvm/include/llvm/BinaryFormat/ELF.h.
- Target-ID syntax ``processor(:feature(+|-))*``: AMDGPUUsage "Target ID"; clang writes the
  features sorted by name (``gfx90a:sramecc+:xnack-``), which is our canonical form.
- KFD ``gfx_target_version`` = major*10000 + minor*100 + stepping (stepping decimal): the Linux
  amdkfd driver (kfd_topology.c), restated in ../shared/ROCM.md.
- Code runs only on the processor it was built for; generic targets run on their members;
  nixpkgs' "Extend HIP ISA compatibility" patches (clr, rocblas, miopen) load gfx1030 code on
  gfx1031/gfx1032 and gfx1010 code on gfx1011/gfx1012 (../shared/ROCM.md). Spoofing the target
  with ``HSA_OVERRIDE_GFX_VERSION`` is unsafe and never an answer here.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from capplan.errors import InvalidInputError, shorten

__all__ = [
    "ACCEPTED_AMD_SPELLINGS",
    "GENERIC_MEMBERS",
    "ISA_COMPATIBLE",
    "MACH_TO_PROCESSOR",
    "PROCESSORS",
    "AmdRunLevel",
    "AmdTarget",
    "AmdVerdict",
    "amd_how_runs",
    "parse_amd_targets",
]

ACCEPTED_AMD_SPELLINGS = (
    "gfx942, GFX1100, gfx90a:xnack-, gfx90a:sramecc+:xnack-, gfx11-generic, gfx9-4-generic"
)

# EF_AMDGPU_MACH_AMDGCN_* (ELF.h / AMDGPUUsage "AMDGPU ELF Header e_flags"): processor -> value.
PROCESSORS: dict[str, int] = {
    "gfx600": 0x020, "gfx601": 0x021, "gfx602": 0x03A,
    "gfx700": 0x022, "gfx701": 0x023, "gfx702": 0x024, "gfx703": 0x025, "gfx704": 0x026,
    "gfx705": 0x03B,
    "gfx801": 0x028, "gfx802": 0x029, "gfx803": 0x02A, "gfx805": 0x03C, "gfx810": 0x02B,
    "gfx900": 0x02C, "gfx902": 0x02D, "gfx904": 0x02E, "gfx906": 0x02F, "gfx908": 0x030,
    "gfx909": 0x031, "gfx90a": 0x03F, "gfx90c": 0x032,
    "gfx940": 0x040, "gfx941": 0x04B, "gfx942": 0x04C, "gfx950": 0x04F,
    "gfx1010": 0x033, "gfx1011": 0x034, "gfx1012": 0x035, "gfx1013": 0x042,
    "gfx1030": 0x036, "gfx1031": 0x037, "gfx1032": 0x038, "gfx1033": 0x039, "gfx1034": 0x03E,
    "gfx1035": 0x03D, "gfx1036": 0x045,
    "gfx1100": 0x041, "gfx1101": 0x046, "gfx1102": 0x047, "gfx1103": 0x044,
    "gfx1150": 0x043, "gfx1151": 0x04A, "gfx1152": 0x055, "gfx1153": 0x058,
    "gfx1200": 0x048, "gfx1201": 0x04E,
    "gfx9-generic": 0x051, "gfx9-4-generic": 0x05F, "gfx10-1-generic": 0x052,
    "gfx10-3-generic": 0x053, "gfx11-generic": 0x054, "gfx12-generic": 0x059,
}  # fmt: skip
MACH_TO_PROCESSOR: dict[int, str] = {mach: name for name, mach in PROCESSORS.items()}

# AMDGPUUsage "AMDGPU Generic Processors": the processors each generic target's code runs on.
GENERIC_MEMBERS: dict[str, tuple[str, ...]] = {
    "gfx9-generic": ("gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"),
    "gfx9-4-generic": ("gfx940", "gfx941", "gfx942", "gfx950"),
    "gfx10-1-generic": ("gfx1010", "gfx1011", "gfx1012", "gfx1013"),
    "gfx10-3-generic": (
        "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
    ),
    "gfx11-generic": (
        "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
    ),
    "gfx12-generic": ("gfx1200", "gfx1201"),
}  # fmt: skip

# nixpkgs' "Extend HIP ISA compatibility" patches (clr, rocblas, miopen; ../shared/ROCM.md):
# code built for the key loads on these processors.
ISA_COMPATIBLE: dict[str, tuple[str, ...]] = {
    "gfx1030": ("gfx1031", "gfx1032"),
    "gfx1010": ("gfx1011", "gfx1012"),
}

# AMDGPUUsage "AMDGPU Processors", column "Target Features Supported".
_XNACK = frozenset(
    {"gfx801", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a",
     "gfx90c", "gfx940", "gfx941", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012",
     "gfx1013", "gfx9-generic", "gfx9-4-generic", "gfx10-1-generic"}
)  # fmt: skip
_SRAMECC = frozenset(
    {"gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx9-4-generic"}
)
_FEATURES = ("sramecc", "xnack")  # clang's canonical (sorted) order

_PROCESSOR = re.compile(r"gfx(?P<major>[0-9]{1,2}?)(?P<minor>[0-9a-f])(?P<step>[0-9a-f])")
_GENERIC = re.compile(r"gfx(?P<major>[0-9]{1,2})(?:-(?P<minor>[0-9]))?-generic")

# e_flags feature selectors, code object v4+ (ELFABIVERSION_AMDGPU_HSA_V4 = 2 and later).
_XNACK_V4 = {0x000: None, 0x100: None, 0x200: False, 0x300: True}
_SRAMECC_V4 = {0x000: None, 0x400: None, 0x800: False, 0xC00: True}
_XNACK_V3, _SRAMECC_V3 = 0x100, 0x200


def _version_parts(processor: str) -> tuple[int, int, int]:
    """(major, minor, stepping) of a processor; generics sort before their members (-1)."""
    generic = _GENERIC.fullmatch(processor)
    if generic:
        return int(generic["major"]), int(generic["minor"] or 0), -1
    match = _PROCESSOR.fullmatch(processor)
    assert match is not None, processor
    return int(match["major"]), int(match["minor"], 16), int(match["step"], 16)


def _feature_rank(value: bool | None) -> int:
    return 0 if value is None else (2 if value else 1)


@dataclass(frozen=True, slots=True)
class AmdTarget:
    """An AMD target ID: a processor (``gfx942``) or generic target, and its features.

    ``xnack``/``sramecc`` are ``None`` ("any": the code runs in either mode), ``True`` (``+``) or
    ``False`` (``-``). Order: by (major, minor, stepping) with a generic target just before its
    first member (gfx11-generic < gfx1100 < gfx1101 < gfx12-generic), then sramecc, then xnack,
    each any < off (-) < on (+).
    """

    processor: str
    xnack: bool | None = None
    sramecc: bool | None = None
    text: str = field(init=False, repr=False, compare=False)
    _key: tuple[int, int, int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.processor not in PROCESSORS:
            raise InvalidInputError(
                f"unknown AMD processor {shorten(self.processor)!r}",
                hint=f"write a gfx target like one of: {ACCEPTED_AMD_SPELLINGS}",
            )
        for name, value, allowed in (
            ("xnack", self.xnack, _XNACK),
            ("sramecc", self.sramecc, _SRAMECC),
        ):
            if value is not None and self.processor not in allowed:
                raise InvalidInputError(
                    f"AMD target {self.processor} has no {name} feature "
                    f"(':{name}{'+' if value else '-'}' given)",
                    hint=f"drop ':{name}...'; only {_feature_owners(allowed)} take it",
                )
        parts = [self.processor]
        for name, value in (("sramecc", self.sramecc), ("xnack", self.xnack)):
            if value is not None:
                parts.append(f"{name}{'+' if value else '-'}")
        object.__setattr__(self, "text", ":".join(parts))
        major, minor, step = _version_parts(self.processor)
        key = (major, minor, step, _feature_rank(self.sramecc), _feature_rank(self.xnack))
        object.__setattr__(self, "_key", key)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Validated from its string spelling where pydantic checks a knowledge-base file."""
        from capplan.core.model.schema_hooks import string_schema

        return string_schema(cls, cls.parse, "a gfx target string like 'gfx942'")

    @classmethod
    def parse(cls, text: str) -> AmdTarget:
        """Parse ``gfx942``, ``GFX90A:xnack-``, ``gfx11-generic``; reject the rest."""
        raw = shorten(text.strip())
        lowered = text.strip().lower()
        processor, *features = lowered.split(":")
        if processor not in PROCESSORS:
            hint = f"write a gfx target like one of: {ACCEPTED_AMD_SPELLINGS}"
            if processor.isalnum() and not processor.startswith("gfx"):
                hint = f"AMD targets start with 'gfx' (gfx{processor}?); {hint}"
            raise InvalidInputError(f"unknown AMD GPU target '{raw}'", hint=hint)
        values: dict[str, bool] = {}
        for feature in features:
            name, sign = feature[:-1], feature[-1:]
            if name not in _FEATURES or sign not in ("+", "-"):
                raise InvalidInputError(
                    f"invalid feature ':{shorten(feature)}' in AMD target '{raw}'",
                    hint="features are :xnack+, :xnack-, :sramecc+ or :sramecc-; "
                    "leave them out for 'any'",
                )
            if name in values:
                raise InvalidInputError(
                    f"feature '{name}' given twice in AMD target '{raw}'",
                    hint="give each feature once",
                )
            values[name] = sign == "+"
        return cls(processor, xnack=values.get("xnack"), sramecc=values.get("sramecc"))

    @classmethod
    def from_kfd(cls, version: int) -> AmdTarget:
        """The processor whose KFD ``gfx_target_version`` is ``version`` (90402 -> gfx942)."""
        if version <= 0:
            raise InvalidInputError(
                f"KFD gfx_target_version {version} names no GPU (0 is a CPU node)",
                hint="give a GPU node's gfx_target_version, e.g. 110000 for gfx1100",
            )
        major, rest = divmod(version, 10000)
        minor, step = divmod(rest, 100)
        if minor > 15 or step > 15:
            raise InvalidInputError(
                f"KFD gfx_target_version {version} is not major*10000+minor*100+stepping",
                hint="e.g. 90010 is gfx90a, 110000 is gfx1100",
            )
        name = f"gfx{major}{minor:x}{step:x}"
        if name not in PROCESSORS:
            raise InvalidInputError(
                f"KFD gfx_target_version {version} is {name}, an AMD processor capplan "
                "does not know",
                hint="update capplan, or report the GPU",
            )
        return cls(name)

    @classmethod
    def from_elf_flags(cls, e_flags: int, abi_version: int = 2) -> AmdTarget:
        """The target an AMDGPU ELF object's ``e_flags`` name (code object v3 and later)."""
        mach = e_flags & 0xFF
        name = MACH_TO_PROCESSOR.get(mach)
        if name is None:
            raise InvalidInputError(
                f"AMDGPU e_flags {e_flags:#x} name processor {mach:#04x}, which capplan "
                "does not know",
                hint="update capplan (EF_AMDGPU_MACH values come from LLVM's AMDGPUUsage)",
            )
        xnack: bool | None
        sramecc: bool | None
        if abi_version >= 2:  # code object v4+: two-bit selectors (unsupported/any/off/on)
            xnack = _XNACK_V4[e_flags & 0x300]
            sramecc = _SRAMECC_V4[e_flags & 0xC00]
        else:  # v3: one bit each, on or off
            xnack = bool(e_flags & _XNACK_V3) if name in _XNACK else None
            sramecc = bool(e_flags & _SRAMECC_V3) if name in _SRAMECC else None
        return cls(
            name,
            xnack=xnack if name in _XNACK else None,
            sramecc=sramecc if name in _SRAMECC else None,
        )

    def __str__(self) -> str:
        return self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __lt__(self, other: AmdTarget) -> bool:
        return self._key < other._key

    def __le__(self, other: AmdTarget) -> bool:
        return self._key <= other._key

    def __gt__(self, other: AmdTarget) -> bool:
        return self._key > other._key

    def __ge__(self, other: AmdTarget) -> bool:
        return self._key >= other._key

    @property
    def is_generic(self) -> bool:
        return self.processor in GENERIC_MEMBERS

    @property
    def base(self) -> AmdTarget:
        """The processor alone, features "any"."""
        return AmdTarget(self.processor)

    @property
    def gfx_target_version(self) -> int | None:
        """KFD's number for this processor (gfx90a -> 90010); ``None`` for generic targets."""
        if self.is_generic:
            return None
        major, minor, step = _version_parts(self.processor)
        return major * 10000 + minor * 100 + step

    @property
    def mach(self) -> int:
        """The ``EF_AMDGPU_MACH`` value in an ELF object's e_flags."""
        return PROCESSORS[self.processor]

    @property
    def generic(self) -> AmdTarget | None:
        """The generic target whose code runs on this processor, if any."""
        for name, members in GENERIC_MEMBERS.items():
            if self.processor in members:
                return AmdTarget(name)
        return None

    @property
    def bundle_id(self) -> str:
        """The HIP offload-bundle entry name clang writes (``hipv4-amdgcn-amd-amdhsa--gfx942``)."""
        return f"hipv4-amdgcn-amd-amdhsa--{self.text}"


def _feature_owners(allowed: frozenset[str]) -> str:
    names = sorted((p for p in allowed if not p.endswith("generic")), key=_version_parts)
    return ", ".join(names)


def parse_amd_targets(values: Iterable[str] | str) -> tuple[AmdTarget, ...]:
    """Sorted, de-duplicated targets from a list or a ``;``/``,``/space separated string."""
    items = re.split(r"[;,\s]+", values) if isinstance(values, str) else list(values)
    return tuple(sorted({AmdTarget.parse(v) for v in items if v.strip()}))


class AmdRunLevel(enum.Enum):
    """How a device runs a build, best first."""

    EXACT = "exact"  # a code object for this very processor (features match)
    COMPATIBLE = "compatible"  # generic target or nixpkgs' ISA-compatibility patches
    CANNOT_RUN = "cannot-run"

    @property
    def rank(self) -> int:
        return {"exact": 0, "compatible": 1, "cannot-run": 2}[self.value]


class AmdVerdict(NamedTuple):
    level: AmdRunLevel
    via: AmdTarget | None
    reason: str


def _features_match(device: AmdTarget, code: AmdTarget) -> str | None:
    """Why ``code``'s features do not fit ``device``, or ``None`` when they do."""
    for name in _FEATURES:
        want = getattr(code, name)
        have = getattr(device, name)
        if want is not None and have is not None and want != have:
            return (
                f"{code} needs {name}{'+' if want else '-'} but the device runs "
                f"{name}{'+' if have else '-'}"
            )
    return None


def amd_how_runs(device: AmdTarget, targets: Sequence[AmdTarget]) -> AmdVerdict:
    """The best way ``device`` runs a build holding code objects for ``targets``.

    Exact processor first, then nixpkgs' ISA-compatibility pairs (native code of a subset ISA),
    then generic targets. Every "no" carries a reason; this never raises.
    """
    if device.is_generic:
        return AmdVerdict(
            AmdRunLevel.CANNOT_RUN,
            None,
            f"{device} is a generic target, not a device; give the GPU's processor",
        )
    mismatch: str | None = None
    for code in sorted(targets):
        if code.processor == device.processor:
            why = _features_match(device, code)
            if why is None:
                return AmdVerdict(AmdRunLevel.EXACT, code, f"code object for {code}")
            mismatch = mismatch or why
    for code in sorted(targets):
        pair = device.processor in ISA_COMPATIBLE.get(code.processor, ())
        if pair and _features_match(device, code) is None:
            return AmdVerdict(
                AmdRunLevel.COMPATIBLE,
                code,
                f"{code.processor} code loads on {device.processor} through nixpkgs' "
                "'Extend HIP ISA compatibility' patches (clr, rocblas, miopen)",
            )
    for code in sorted(targets):
        member = code.is_generic and device.processor in GENERIC_MEMBERS[code.processor]
        if member and _features_match(device, code) is None:
            return AmdVerdict(
                AmdRunLevel.COMPATIBLE,
                code,
                f"generic code object {code} runs on its member {device.processor} "
                "(code object v6, possibly slower than native code)",
            )
    if mismatch is not None:
        return AmdVerdict(AmdRunLevel.CANNOT_RUN, None, mismatch)
    held = ", ".join(str(t) for t in sorted(targets)) or "none"
    return AmdVerdict(
        AmdRunLevel.CANNOT_RUN,
        None,
        f"no code object for {device.processor} (built for: {held}); AMD code runs only on "
        "the processor it was built for (hipErrorNoBinaryForGpu)",
    )
