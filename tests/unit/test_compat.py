"""Where compiled code runs (CUDA.md): exact, minor-compatible, family, PTX JIT, never."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import how_runs, sass_runs_on


def c(text: str) -> Capability:
    return Capability.parse(text)


def runs(device: str, sass: str = "", ptx: str = "", jetson: bool = False) -> RunLevel:
    verdict = how_runs(
        c(device),
        [c(s) for s in sass.split()],
        [c(p) for p in ptx.split()],
        jetson=jetson,
    )
    assert verdict.reason  # every answer explains itself
    return verdict.level


@pytest.mark.parametrize(
    ("device", "sass", "ptx", "jetson", "level"),
    [
        ("8.6", "8.6", "", False, RunLevel.NATIVE),
        ("8.6", "8.0", "", False, RunLevel.COMPATIBLE),  # same major, lower minor
        ("8.9", "8.0 8.6", "", False, RunLevel.COMPATIBLE),
        ("8.0", "8.6", "", False, RunLevel.CANNOT_RUN),  # newer minor never runs
        ("9.0", "8.0 8.6", "", False, RunLevel.CANNOT_RUN),  # SASS never crosses majors
        ("9.0", "8.6", "8.6", False, RunLevel.PTX_JIT),  # PTX crosses majors
        ("8.6", "", "9.0", False, RunLevel.CANNOT_RUN),  # PTX needs a device >= it
        ("9.0", "9.0a", "", False, RunLevel.NATIVE),
        ("10.3", "10.0a", "", False, RunLevel.CANNOT_RUN),  # a: exactly 10.0 only
        ("10.3", "10.0f", "", False, RunLevel.COMPATIBLE),  # f: its family, later minors
        ("10.0", "10.3f", "", False, RunLevel.CANNOT_RUN),
        ("12.0", "10.0f", "", False, RunLevel.CANNOT_RUN),  # families do not cross
        ("10.3", "", "10.0f", False, RunLevel.PTX_JIT),
        ("12.0", "", "10.0f", False, RunLevel.CANNOT_RUN),  # f PTX stays in the family
        ("10.0", "", "9.0a", False, RunLevel.CANNOT_RUN),  # a PTX only on 9.0
        ("9.0", "", "9.0a", False, RunLevel.PTX_JIT),
        ("8.7", "8.7", "", True, RunLevel.NATIVE),
        ("8.7", "8.0", "", True, RunLevel.CANNOT_RUN),  # Jetson: no minor compatibility
        ("8.7", "8.0", "8.0", True, RunLevel.PTX_JIT),
        ("8.6", "", "", False, RunLevel.CANNOT_RUN),
    ],
)
def test_rules(device: str, sass: str, ptx: str, jetson: bool, level: RunLevel) -> None:
    assert runs(device, sass, ptx, jetson) is level


def test_sass_is_preferred_to_ptx_and_exact_to_compatible() -> None:
    verdict = how_runs(c("8.6"), [c("8.0"), c("8.6")], [c("8.6")])
    assert verdict.level is RunLevel.NATIVE and verdict.via == c("8.6")
    verdict = how_runs(c("8.9"), [c("8.0"), c("8.6")], [c("8.9")])
    assert verdict.level is RunLevel.COMPATIBLE and verdict.via == c("8.6")


def test_cannot_run_names_each_reason() -> None:
    verdict = how_runs(c("9.0"), [c("8.6"), c("10.0a")], [])
    assert verdict.level is RunLevel.CANNOT_RUN
    assert "never crosses majors" in verdict.reason and "no PTX" in verdict.reason


caps = st.builds(
    Capability,
    major=st.integers(7, 12),
    minor=st.integers(0, 3),
    suffix=st.sampled_from(["", "a", "f"]),
)


@given(caps.map(lambda x: x.base), st.lists(caps, max_size=5), st.lists(caps, max_size=3), caps)
def test_adding_a_target_never_makes_it_worse(
    device: Capability, sass: list[Capability], ptx: list[Capability], extra: Capability
) -> None:
    before = how_runs(device, sass, ptx).level.rank
    assert how_runs(device, [*sass, extra], ptx).level.rank <= before
    assert how_runs(device, sass, [*ptx, extra]).level.rank <= before


@given(caps, caps.map(lambda x: x.base))
def test_sass_rule_agrees_with_how_runs(sass: Capability, device: Capability) -> None:
    level = how_runs(device, [sass], []).level
    assert (level is not RunLevel.CANNOT_RUN) == sass_runs_on(sass, device)
