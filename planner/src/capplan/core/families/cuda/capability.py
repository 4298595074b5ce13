"""CUDA compute capabilities as a value type, and build targets (a capability plus PTX or not).

Raw strings never travel past :meth:`Capability.parse`: every other module handles
:class:`Capability` values, renders them through the properties below, and sorts them with the
documented order (major, minor, then base < ``a`` < ``f``, the order nixpkgs sorts its
capability table in, pkgs/development/cuda-modules/_cuda/db/bootstrap/nvcc.nix).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from capplan.errors import InvalidInputError, shorten

__all__ = [
    "ACCEPTED_SPELLINGS",
    "Capability",
    "Suffix",
    "Target",
    "parse_capabilities",
    "parse_targets",
]

Suffix = Literal["", "a", "f"]
_SUFFIX_RANK: dict[str, int] = {"": 0, "a": 1, "f": 2}

ACCEPTED_SPELLINGS = "8.6, 86, sm_86, sm86, compute_86, 9.0a, sm_90a, compute_100f, 10.0f, 120"

# Dotted form: "8.6", "9.0a", "10.0f". The minor is one digit in every CUDA release so far.
_DOTTED = re.compile(r"(?P<major>[1-9][0-9]?)\.(?P<minor>[0-9])(?P<suffix>[af]?)")
# Compact forms: "86", "sm_86", "sm86", "compute_90a", "120", "sm_100f". The last digit is the
# minor, the rest the major (nvcc's own encoding: sm_120 is 12.0).
_COMPACT = re.compile(r"(?:(?P<kind>sm|compute)_?)?(?P<digits>[1-9][0-9]{1,2})(?P<suffix>[af]?)")


@dataclass(frozen=True, slots=True)
class Capability:
    """A compute capability such as 8.6, 9.0a or 10.0f.

    ``suffix`` is ``""`` (baseline), ``"a"`` (architecture-specific: runs only on exactly this
    capability) or ``"f"`` (family-specific: runs on later minors of the same family).
    """

    major: int
    minor: int
    suffix: Suffix = ""
    # Derived once: planning hashes, sorts and prints capabilities hundreds of thousands of times.
    text: str = field(init=False, repr=False, compare=False)  # canonical spelling: "9.0a"
    _key: tuple[int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.major < 1 or not 0 <= self.minor <= 9 or self.suffix not in _SUFFIX_RANK:
            raise InvalidInputError(
                f"invalid capability parts: major={self.major} minor={self.minor} "
                f"suffix={self.suffix!r}",
                hint=f"write it like one of: {ACCEPTED_SPELLINGS}",
            )
        object.__setattr__(self, "text", f"{self.major}.{self.minor}{self.suffix}")
        object.__setattr__(self, "_key", (self.major, self.minor, _SUFFIX_RANK[self.suffix]))

    def __hash__(self) -> int:
        return hash(self.text)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Validated from its string spelling where pydantic checks a knowledge-base file."""
        from capplan.core.model.schema_hooks import string_schema

        return string_schema(cls, cls.parse, "a capability string like '8.6'")

    @classmethod
    def parse(cls, text: str) -> Capability:
        """Parse any spelling users write; reject the rest with the accepted spellings."""
        raw = shorten(text.strip())
        lowered = text.strip().lower()
        if "+ptx" in lowered:
            raise InvalidInputError(
                f"'{raw}' is a build target, not a capability: '+PTX' belongs to a target",
                hint="give the capability alone (8.6), or use a command that takes targets",
            )
        match = _DOTTED.fullmatch(lowered)
        if match:
            return cls(int(match["major"]), int(match["minor"]), _suffix(match["suffix"]))
        match = _COMPACT.fullmatch(lowered)
        if match:
            digits = match["digits"]
            return cls(int(digits[:-1]), int(digits[-1]), _suffix(match["suffix"]))
        raise InvalidInputError(
            f"unknown capability '{raw}'", hint=f"accepted spellings: {ACCEPTED_SPELLINGS}"
        )

    @classmethod
    def from_sm(cls, number: int, suffix: str = "") -> Capability:
        """From nvcc's decimal SM number (90 -> 9.0, 120 -> 12.0), as fatbin headers store it."""
        return _from_sm(number, suffix)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Capability('{self}')"

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return self._key

    def __lt__(self, other: Capability) -> bool:
        return self._key < other._key

    def __le__(self, other: Capability) -> bool:
        return self._key <= other._key

    def __gt__(self, other: Capability) -> bool:
        return self._key > other._key

    def __ge__(self, other: Capability) -> bool:
        return self._key >= other._key

    @property
    def number(self) -> int:
        """nvcc's SM number: 86 for 8.6, 100 for 10.0 (suffix not included)."""
        return self.major * 10 + self.minor

    @property
    def base(self) -> Capability:
        """The same capability without its a/f suffix."""
        return Capability(self.major, self.minor)

    @property
    def cmake(self) -> str:
        """CMake's CUDA_ARCHITECTURES spelling, suffix kept (nixpkgs' cmakeCudaArchitectures)."""
        return f"{self.number}{self.suffix}"

    @property
    def sm(self) -> str:
        return f"sm_{self.cmake}"

    @property
    def compute(self) -> str:
        return f"compute_{self.cmake}"

    @property
    def slug(self) -> str:
        """Attribute-name spelling used in variant names: ``sm86``, ``sm90a``."""
        return f"sm{self.cmake}"

    def gencode(self, ptx: bool = False) -> str:
        """The nvcc flag nixpkgs' ``cudaPackages.flags.gencode`` emits for this capability.

        nixpkgs (_cuda/lib/flags: mkGencodeFlag) writes ``-gencode=arch=compute_86,code=sm_86``
        for SASS and ``-gencode=arch=compute_86,code=compute_86`` for the forward-compatible PTX.
        """
        code = self.compute if ptx else self.sm
        return f"-gencode=arch={self.compute},code={code}"


# A binary repeats a dozen targets thousands of times (libtorch_cuda.so: 2,975 entries): the
# immutable values are made once each.
@functools.lru_cache(maxsize=1024)
def _from_sm(number: int, suffix: str) -> Capability:
    # The same numbers and suffixes nvcc's spelling takes (sm_10 .. sm_999, then "", "a" or
    # "f"), so from_sm(n, s) is Capability.parse(f"sm_{n}{s}") for every n and lower-case s.
    if not 10 <= number <= 999 or suffix not in _SUFFIX_RANK:
        raise InvalidInputError(
            f"invalid SM number {number}{suffix}", hint="SM numbers are like 86, 90a or 120f"
        )
    return Capability(number // 10, number % 10, _suffix(suffix))


def _suffix(text: str | None) -> Suffix:
    if text == "a":
        return "a"
    if text == "f":
        return "f"
    return ""


@dataclass(frozen=True, slots=True, order=False)
class Target:
    """One build target: SASS for ``capability``, plus PTX for it when ``ptx`` is set."""

    capability: Capability
    ptx: bool = False

    @classmethod
    def parse(cls, text: str) -> Target:
        raw = text.strip()
        shown = shorten(raw)
        head, plus, tail = raw.partition("+")
        if plus and tail.strip().lower() != "ptx":
            raise InvalidInputError(
                f"unknown build target '{shown}'",
                hint="a target is a capability with an optional '+PTX', like 8.6 or 9.0+PTX",
            )
        # nvcc's vocabulary: compute_XY names PTX (code=compute_86), so as a target it is the
        # same as XY+PTX.
        ptx = bool(plus) or head.strip().lower().startswith("compute")
        return cls(Capability.parse(head), ptx=ptx)

    def __str__(self) -> str:
        return f"{self.capability}+PTX" if self.ptx else str(self.capability)

    @property
    def sort_key(self) -> tuple[tuple[int, int, int], int]:
        return (self.capability.sort_key, int(self.ptx))

    def __lt__(self, other: Target) -> bool:
        return self.sort_key < other.sort_key


def parse_targets(text: str | Iterable[str]) -> tuple[Target, ...]:
    """Parse ``"8.6,9.0+PTX"`` (commas, semicolons or spaces) or a list of such strings."""
    items = _split(text)
    if not items:
        raise InvalidInputError("no build targets given", hint="list targets like 8.6,9.0+PTX")
    return tuple(Target.parse(item) for item in items)


def parse_capabilities(text: str | Iterable[str]) -> tuple[Capability, ...]:
    """Parse a list of capabilities written with commas, semicolons or spaces."""
    return tuple(Capability.parse(item) for item in _split(text))


def _split(text: str | Iterable[str]) -> list[str]:
    parts = [text] if isinstance(text, str) else list(text)
    return [item for part in parts for item in re.split(r"[,;\s]+", part) if item]
