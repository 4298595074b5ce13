"""The base of the knowledge base's records: frozen, keyword-only dataclasses that need no
validation library to build, and that pydantic validates strictly where a file is checked
(:mod:`capplan.core.model.kb_schema`: unknown keys are errors)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["Record", "record"]

# A record: frozen, keyword-only (fields with defaults may come before required ones); no
# slots: making the slotted copy of each class costs start-up time and saves nothing here.
record = dataclass(frozen=True, kw_only=True)


class Record:
    """Base of the knowledge-base records; pydantic reads its config when it validates one."""

    __slots__ = ()
    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}
