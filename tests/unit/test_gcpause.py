"""gc_paused: the collector is off inside, back on afterwards, and nesting leaves it alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from capplan.core.planning.gcpause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@gc_paused
def _state() -> bool:
    return gc.isenabled()


@gc_paused
def _nested() -> tuple[bool, bool]:
    inner = _state()
    return inner, gc.isenabled()


@gc_paused
def _fails() -> None:
    assert not gc.isenabled()
    raise ValueError("boom")


def test_paused_inside_and_restored_after() -> None:
    assert _state() is False
    assert gc.isenabled()


def test_nested_call_does_not_switch_it_back_on_early() -> None:
    assert _nested() == (False, False)
    assert gc.isenabled()


def test_restored_when_the_call_raises() -> None:
    with pytest.raises(ValueError, match="boom"):
        _fails()
    assert gc.isenabled()


def test_a_caller_that_disabled_it_keeps_it_disabled() -> None:
    gc.disable()
    assert _state() is False
    assert not gc.isenabled()


def test_make_plan_leaves_the_collector_on() -> None:
    from capplan.adapters.kb import load_kb
    from capplan.core.planning.config import config_from_mapping
    from capplan.core.planning.planner import make_plan
    from capplan.errors import InvalidInputError

    kb = load_kb()
    make_plan(
        kb,
        config_from_mapping({"fleet": {"gpus": ["A100"]}, "packages": {"torch": {}}}, origin="t"),
    )
    assert gc.isenabled()
    bad = config_from_mapping(
        {"fleet": {"gpus": ["no such gpu"]}, "packages": {"torch": {}}}, origin="t"
    )
    with pytest.raises(InvalidInputError):
        make_plan(kb, bad)
    assert gc.isenabled()
