"""Validation of knowledge-base files with pydantic, imported only where a file is checked: in
the tests, at ``--update-kb`` time, and for a user's knowledge-base folder (``CAPPLAN_KB_DIR``).

The records are plain dataclasses (:mod:`capplan.core.model.records`); pydantic validates them
through a ``TypeAdapter``, with unknown keys refused, value types read from their spellings
(their ``__get_pydantic_core_schema__``) and each record's ``__post_init__`` checks run.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

__all__ = ["ValidationError", "validate_record"]

T = TypeVar("T")


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def validate_record(model: type[T], data: Any) -> T:
    """``data`` (parsed JSON) as a validated ``model``; a pydantic ValidationError otherwise."""
    adapter = _ADAPTERS.get(model)
    if adapter is None:
        adapter = _ADAPTERS[model] = TypeAdapter(model)
    found: T = adapter.validate_python(data)
    return found
