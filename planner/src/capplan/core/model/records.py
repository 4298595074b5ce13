"""The base of the knowledge base's records: frozen, keyword-only dataclasses that need no
validation library to build, and that pydantic validates strictly where a file is checked
(:mod:`capplan.core.model.kb_schema`: unknown keys are errors).

``@record`` makes a real dataclass (``dataclasses.fields``, ``replace`` and pydantic see its
fields as usual) but does not let :mod:`dataclasses` write six methods per class: that
generator compiles each one with ``exec``, and for the 30 record classes it cost 11-15 ms of
every command's start. :class:`Record` holds one generic copy of each instead, with the
dataclass behaviour they replace: keyword-only ``__init__`` with defaults, factories and
``__post_init__``; ``__eq__`` and ``__hash__`` over the compared fields, only between instances
of the same class; ``__repr__`` over the shown fields; frozen (assignment raises
``dataclasses.FrozenInstanceError``). tests/unit/test_records.py checks each against
``dataclass(frozen=True, kw_only=True)``.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, dataclass_transform

__all__ = ["MAX_COST", "Record", "check_costs", "record"]

_MISSING: Any = dataclasses.MISSING
_C = TypeVar("_C", bound="type[Record]")


class _Spec:
    """What the generic methods need of one record class, worked out when it is decorated."""

    __slots__ = ("compared", "defaults", "factories", "names", "post_init", "required", "shown")

    def __init__(self, cls: type) -> None:
        fields = dataclasses.fields(cls)
        init = [f for f in fields if f.init]
        self.names = frozenset(f.name for f in init)
        self.required = frozenset(
            f.name for f in init if f.default is _MISSING and f.default_factory is _MISSING
        )
        self.defaults = {f.name: f.default for f in init if f.default is not _MISSING}
        # Factories run for init fields the caller left out and for every init=False field.
        self.factories: tuple[tuple[str, bool, Any], ...] = tuple(
            (f.name, f.init, f.default_factory) for f in fields if f.default_factory is not _MISSING
        )
        self.compared = tuple(f.name for f in fields if f.compare)
        self.shown = tuple(f.name for f in fields if f.repr)
        self.post_init: Callable[[Any], None] | None = getattr(cls, "__post_init__", None)


@dataclass_transform(kw_only_default=True, frozen_default=True)
def record(cls: _C) -> _C:
    """Make ``cls`` (a :class:`Record` subclass) a frozen, keyword-only record."""
    if not issubclass(cls, Record):
        raise TypeError(f"@record needs a Record subclass, not {cls.__qualname__}")
    # Fields with defaults may come before required ones (keyword-only); no slots: making the
    # slotted copy of each class costs start-up time and saves nothing here.
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=True)  # in place
    cls._record_spec = _Spec(cls)
    return cls


class Record:
    """Base of the knowledge-base records; pydantic reads its config when it validates one."""

    __slots__ = ()
    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}
    _record_spec: ClassVar[_Spec]  # set by @record on each record class

    def __init__(self, **values: Any) -> None:
        spec = self._record_spec
        given = values.keys()
        if not (given <= spec.names and given >= spec.required):
            _bad_arguments(type(self), spec, values)
        state = self.__dict__
        state.update(spec.defaults)
        for name, init, factory in spec.factories:
            if not init or name not in values:
                state[name] = factory()
        state.update(values)
        if spec.post_init is not None:
            spec.post_init(self)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        names = self._record_spec.compared
        # Tuples, as the generated __eq__ compares: an item is equal to itself (a NaN too).
        return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in self._record_spec.compared))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._record_spec.shown)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _bad_arguments(cls: type, spec: _Spec, values: dict[str, Any]) -> None:
    """The TypeError a dataclass's generated ``__init__`` raises for the same call."""
    unexpected = sorted(values.keys() - spec.names)
    if unexpected:
        raise TypeError(
            f"{cls.__qualname__}.__init__() got an unexpected keyword argument {unexpected[0]!r}"
        )
    missing = [
        f.name for f in dataclasses.fields(cls) if f.name in spec.required and f.name not in values
    ]
    listed = ", ".join(repr(m) for m in missing)
    plural = "s" if len(missing) > 1 else ""
    raise TypeError(
        f"{cls.__qualname__}.__init__() missing {len(missing)} required keyword-only "
        f"argument{plural}: {listed}"
    )


# A build's minutes or megabytes: a knowledge-base cost beyond this is a typo, and one near
# 1e308 summed over a plan overflowed to inf, which `plan --json` printed as Infinity (not JSON).
MAX_COST = 1e9


def check_costs(owner: object, *names: str) -> None:
    """ValueError unless each field ``names`` of ``owner`` is a number from 0 to MAX_COST."""
    for name in names:
        value = getattr(owner, name)
        if not 0 <= value <= MAX_COST:  # False for NaN too
            raise ValueError(f"{name} is {value!r}: a cost must be from 0 to {MAX_COST:.0e}")
