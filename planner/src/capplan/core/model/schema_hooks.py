"""How pydantic validates capplan's value types (capabilities, CUDA versions, gfx targets) when it
checks a knowledge-base file: from their string spellings, with the value's own parser.

Each value class's ``__get_pydantic_core_schema__`` calls :func:`string_schema`, which imports
pydantic_core only then: the commands that read the packaged knowledge base without validating
it (``capplan gpus``, ``caps``, ``explain``, ``detect``) never load pydantic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capplan.errors import CapplanError

__all__ = ["string_schema"]


def string_schema(cls: type, parse: Callable[[str], Any], what: str) -> Any:
    """A pydantic-core schema accepting an instance of ``cls`` or a string ``parse`` reads;
    a bad string is a ValueError whose text is the parser's one-line message."""
    from pydantic_core import core_schema

    def validate(value: Any) -> Any:
        if isinstance(value, cls):
            return value
        if not isinstance(value, str):
            raise ValueError(f"expected {what}, got {value!r}")
        try:
            return parse(value)
        except CapplanError as error:
            raise ValueError(error.one_line()) from None

    return core_schema.no_info_plain_validator_function(
        validate, serialization=core_schema.plain_serializer_function_ser_schema(str)
    )
