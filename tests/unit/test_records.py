"""``@record`` behaves as ``dataclass(frozen=True, kw_only=True)`` does, without its generated
methods: each generic method of :class:`Record` is checked against the real dataclass of the
same fields, on hand-picked and generated values."""

from __future__ import annotations

import dataclasses
import math
import pickle
from dataclasses import field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capplan.core.families.cuda.kb import CapabilityInfo
from capplan.core.model.records import Record, record


@record
class Mine(Record):
    name: str
    count: int = 3
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict, compare=False)
    hidden: str = field(default="h", repr=False)
    derived: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", f"{self.name}:{self.count}")


# The reference: the standard library's frozen keyword-only dataclass of the very same fields.
Theirs = dataclasses.make_dataclass(
    "Theirs",
    [
        (
            f.name,
            f.type,
            field(
                default=f.default,
                default_factory=f.default_factory,
                init=f.init,
                repr=f.repr,
                compare=f.compare,
            ),
        )
        for f in dataclasses.fields(Mine)
    ],
    namespace={"__post_init__": Mine.__post_init__},
    frozen=True,
    kw_only=True,
)


@record
class Other(Record):
    name: str
    count: int = 3


values = st.fixed_dictionaries(
    {"name": st.text(max_size=5)},
    optional={
        "count": st.integers(-3, 3),
        "tags": st.lists(st.sampled_from("ab"), max_size=2).map(tuple),
        "extra": st.dictionaries(st.sampled_from("xy"), st.integers(0, 2), max_size=2),
        "hidden": st.sampled_from(["h", "i"]),
    },
)


def state(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@given(values, values)
def test_the_same_as_a_frozen_keyword_only_dataclass(a: dict[str, Any], b: dict[str, Any]) -> None:
    mine_a, mine_b = Mine(**a), Mine(**b)
    theirs_a, theirs_b = Theirs(**a), Theirs(**b)
    assert state(mine_a) == state(theirs_a)
    assert (mine_a == mine_b) == (theirs_a == theirs_b)
    assert (mine_a != mine_b) == (theirs_a != theirs_b)
    assert hash(mine_a) == hash(theirs_a)
    assert repr(mine_a) == repr(theirs_a).replace("Theirs(", "Mine(", 1)
    changed = dataclasses.replace(mine_a, count=9)
    assert state(changed) == state(dataclasses.replace(theirs_a, count=9))
    assert pickle.loads(pickle.dumps(mine_a)) == mine_a


def test_defaults_and_factories_are_fresh_per_instance() -> None:
    one, two = Mine(name="a"), Mine(name="b")
    assert one.count == 3 and one.tags == () and one.hidden == "h"
    assert one.extra == {} and one.extra is not two.extra
    assert one.derived == "a:3"
    assert [f.name for f in dataclasses.fields(Mine)] == [
        f.name for f in dataclasses.fields(Theirs)
    ]


def test_only_the_same_class_compares_equal() -> None:
    assert Mine(name="a", count=1) != Other(name="a", count=1)
    assert Mine(name="a").__eq__(Other(name="a")) is NotImplemented
    assert Mine(name="a", extra={"x": 1}) == Mine(name="a", extra={"x": 2})  # compare=False
    assert Mine(name="a", hidden="h") != Mine(name="a", hidden="i")
    nan = Other(name="n", count=math.nan)  # type: ignore[arg-type]
    assert nan == nan  # an item equals itself, as in the tuples dataclass compares


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "Mine.__init__() missing 1 required keyword-only argument: 'name'"),
        ({"name": "a", "colour": 1}, "Mine.__init__() got an unexpected keyword argument 'colour'"),
        ({"name": "a", "derived": "x"}, "unexpected keyword argument 'derived'"),
    ],
)
def test_bad_arguments_are_type_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError) as raised:
        Mine(**kwargs)
    assert message in str(raised.value)
    with pytest.raises(TypeError):
        Theirs(**kwargs)  # the dataclass refuses the same calls


def test_missing_arguments_are_all_named() -> None:
    with pytest.raises(
        TypeError, match="missing 8 required keyword-only arguments: 'arch', 'min_cuda', "
    ):
        CapabilityInfo(capability="8.6")  # type: ignore[call-arg,arg-type]


def test_frozen() -> None:
    item = Mine(name="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.name = "b"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del item.name
    assert item.name == "a"


def test_unhashable_fields_make_an_unhashable_record() -> None:
    @record
    class Holder(Record):
        table: dict[str, int]

    with pytest.raises(TypeError, match="unhashable"):
        hash(Holder(table={}))


def test_only_records_can_be_records() -> None:
    with pytest.raises(TypeError, match="Record subclass"):

        @record
        class Plain:
            name: str
