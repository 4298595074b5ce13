"""CUDA toolkit versions as a value type (``12.9``, ``13.0``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from capplan.errors import InvalidInputError, shorten

__all__ = ["CudaVersion"]

_VERSION = re.compile(
    r"(?:cuda|cu)?[-_ ]?(?P<major>[0-9]{1,2})\.(?P<minor>[0-9]{1,2})(?:\.[0-9]+)?"
)
_COMPACT = re.compile(r"(?:cuda|cu)[-_ ]?(?P<major>1[0-9])(?P<minor>[0-9])")


@dataclass(frozen=True, slots=True, order=True)
class CudaVersion:
    """A CUDA toolkit major.minor version; orders numerically (12.10 would sort after 12.9)."""

    major: int
    minor: int
    # Derived once: plans key dictionaries by CUDA version and print it once per job.
    text: str = field(init=False, repr=False, compare=False)  # "12.9"
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", f"{self.major}.{self.minor}")
        object.__setattr__(self, "_hash", hash((self.major, self.minor)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Validated from its string spelling where pydantic checks a knowledge-base file."""
        from capplan.core.model.schema_hooks import string_schema

        return string_schema(cls, cls.parse, "a CUDA version string like '12.9'")

    @classmethod
    def parse(cls, text: str) -> CudaVersion:
        """Accept ``12.9``, ``12.9.1`` (patch ignored), ``cuda12.9`` and ``cu129``."""
        raw = text.strip()
        lowered = raw.lower()
        match = _VERSION.fullmatch(lowered) or _COMPACT.fullmatch(lowered)
        if not match:
            raise InvalidInputError(
                f"malformed CUDA version '{shorten(raw)}'",
                hint="write it as MAJOR.MINOR, like 12.9 or 13.0",
            )
        return cls(int(match["major"]), int(match["minor"]))

    def __str__(self) -> str:
        return self.text

    @property
    def set_name(self) -> str:
        """nixpkgs' attribute for this CUDA's package set: ``cudaPackages_12_9``."""
        return f"cudaPackages_{self.major}_{self.minor}"

    @property
    def slug(self) -> str:
        """Variant-name suffix: ``cu129``."""
        return f"cu{self.major}{self.minor}"
