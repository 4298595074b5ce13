"""Build knowledge-base records from parsed JSON without a validation library: the packaged
files, which the tests validate with pydantic (tests/kb/test_kb_fastpath.py checks that both
ways give equal records), are read this way on every start.

A small interpreter of the records' annotations: a dataclass is built from a JSON object field
by field, ``tuple[X, ...]`` from a list, ``dict[str, X]`` from an object, ``X | None`` from null
or an X, ``float`` from any number, and the value types (capabilities, CUDA versions, gfx
targets) with their own ``parse``. Anything else is taken as it is.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

__all__ = ["from_json"]

T = TypeVar("T")


def _same(value: Any) -> Any:
    return value


def _value_parser(kind: Any) -> Callable[[str], Any] | None:
    """The ``parse`` of a value type spelled as a string in the files (a capability, a CUDA
    version, a gfx target): a class that gives pydantic its string schema
    (``__get_pydantic_core_schema__``, core/model/schema_hooks.py). Found by that mark rather
    than named, so this shared reader imports no family's target type (issue 42), and a command
    that reads no AMD file never loads the ROCm target module."""
    if isinstance(kind, type) and "__get_pydantic_core_schema__" in vars(kind):
        parse: Callable[[str], Any] | None = getattr(kind, "parse", None)
        return parse
    return None


@cache
def _builder(kind: Any) -> Callable[[Any], Any]:
    """A function turning parsed JSON into ``kind``, made once per annotation (the packaged
    files hold about 15,000 values: each is built without looking at its type again)."""
    parse = _value_parser(kind)
    if parse is not None:
        # The packaged files spell the same few values thousands of times (pci.json: 429
        # models of 20 capabilities); the value types are immutable, so each is parsed once.
        parsed: dict[str, Any] = {}

        def value_type(value: Any) -> Any:
            if isinstance(value, kind):
                return value
            done = parsed.get(value)
            if done is None:
                done = parsed[value] = parse(value)
            return done

        return value_type
    if kind is float:
        return float
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _builder(args[0])
            if item is _same:
                return tuple
            return lambda value: tuple(item(v) for v in value)
        parts = [_builder(a) for a in args]
        return lambda value: tuple(f(v) for f, v in zip(parts, value, strict=True))
    if origin is dict:
        key, item = _builder(args[0]), _builder(args[1])
        return lambda value: {key(k): item(v) for k, v in value.items()}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner = _builder(options[0]) if len(options) == 1 else _same
        if inner is _same:
            return _same
        return lambda value: None if value is None else inner(value)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        # Only the fields whose JSON value needs converting are touched; an unknown key is the
        # constructor's TypeError (the caller then validates the file to name it).
        convert = [
            (f.name, conv)
            for f in dataclasses.fields(kind)
            if f.init and (conv := _builder(_field_type(kind, f))) is not _same
        ]

        def build(value: Any) -> Any:
            given = dict(value)
            for name, conv in convert:
                if name in given:
                    given[name] = conv(given[name])
            return kind(**given)

        return build
    return _same


def _field_type(kind: type, field: dataclasses.Field[Any]) -> Any:
    """A field's type: ``from __future__ import annotations`` leaves the annotation as written,
    resolved here in the record's module as ``typing.get_type_hints`` does."""
    if isinstance(field.type, str):
        return _annotation(kind.__module__, field.type)
    return field.type


@cache
def _annotation(module: str, spelled: str) -> Any:
    """Each spelling resolved once (61 distinct among the KB's 196 fields), where
    ``get_type_hints`` compiles every field's again and the base class's too: 0.6 ms instead of
    3.3 at each start."""
    # The module is loaded already (it defined the record): import_module only looks it up.
    namespace = vars(importlib.import_module(module))
    return eval(spelled, namespace)  # capplan's own source, never data


def from_json(model: type[T], data: Any) -> T:
    """``data`` as a ``model`` record, trusted (no type checks beyond what building needs)."""
    kind: Any = model  # classes are hashable; mypy sees type[T] as possibly not
    built: T = _builder(kind)(data)
    return built
