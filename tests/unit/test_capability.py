"""The capability value type: spellings, canonical form, order, renderings, targets."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capplan.core.families.cuda.capability import (
    Capability,
    Suffix,
    Target,
    parse_capabilities,
    parse_targets,
)
from capplan.errors import InvalidInputError

caps = st.builds(
    Capability,
    major=st.integers(1, 19),
    minor=st.integers(0, 9),
    suffix=st.sampled_from(["", "a", "f"]),
)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("8.6", "8.6"),
        ("86", "8.6"),
        ("sm_86", "8.6"),
        ("sm86", "8.6"),
        ("SM_86", "8.6"),
        ("compute_86", "8.6"),
        ("9.0a", "9.0a"),
        ("sm_90a", "9.0a"),
        ("compute_100f", "10.0f"),
        ("10.0f", "10.0f"),
        ("120", "12.0"),
        ("sm_121a", "12.1a"),
        ("  7.5 ", "7.5"),
    ],
)
def test_every_documented_spelling_parses(text: str, canonical: str) -> None:
    assert str(Capability.parse(text)) == canonical


@given(caps)
def test_round_trips_through_every_rendering(cap: Capability) -> None:
    assert Capability.parse(str(cap)) == cap
    assert Capability.parse(cap.sm) == cap
    assert Capability.parse(cap.compute) == cap
    assert Capability.parse(cap.cmake) == cap
    assert Capability.parse(cap.slug) == cap


@pytest.mark.parametrize(
    "text", ["", "8", "8.6.1", "sm_", "abc", "9.0b", "8,6", "sm_86x", "0.5", "compute-86", "8.10"]
)
def test_rejects_with_the_input_and_accepted_spellings(text: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        Capability.parse(text)
    line = info.value.one_line()
    assert f"'{text.strip()}'" in line
    assert "sm_86" in line and "9.0a" in line  # the accepted spellings are listed
    assert "\n" not in line


def test_ptx_marker_belongs_to_a_target_not_a_capability() -> None:
    with pytest.raises(InvalidInputError, match="build target"):
        Capability.parse("8.6+PTX")


@given(st.text(max_size=12))
def test_arbitrary_text_parses_or_raises_our_error(text: str) -> None:
    try:
        cap = Capability.parse(text)
    except InvalidInputError:
        return
    assert Capability.parse(str(cap)) == cap


# One hand-sorted list: numeric major (10 after 9), then minor, then base < a < f.
HAND_SORTED = [
    "3.0", "3.2", "3.5", "3.7", "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2",
    "7.5", "8.0", "8.6", "8.7", "8.8", "8.9", "9.0", "9.0a", "10.0", "10.0a", "10.0f",
    "10.1", "10.1a", "10.1f", "10.3", "10.3a", "10.3f", "10.7", "10.7a", "10.7f", "11.0",
    "11.0a", "11.0f", "12.0", "12.0a", "12.0f", "12.1", "12.1a", "12.1f",
]  # fmt: skip


def test_total_order_matches_the_hand_sorted_list() -> None:
    parsed = [Capability.parse(t) for t in HAND_SORTED]
    for seed in range(5):
        shuffled = parsed[:]
        random.Random(seed).shuffle(shuffled)
        assert [str(c) for c in sorted(shuffled)] == HAND_SORTED
    for i, a in enumerate(parsed):
        for j, b in enumerate(parsed):
            assert (a < b) == (i < j)
            assert (a <= b) == (i <= j)
            assert (a > b) == (i > j)
            assert (a == b) == (i == j)


def test_renderings_match_nixpkgs_flags() -> None:
    cap = Capability.parse("8.6")
    assert (cap.sm, cap.compute, cap.cmake) == ("sm_86", "compute_86", "86")
    assert cap.gencode() == "-gencode=arch=compute_86,code=sm_86"
    assert cap.gencode(ptx=True) == "-gencode=arch=compute_86,code=compute_86"
    arch = Capability.parse("9.0a")
    assert (arch.sm, arch.cmake) == ("sm_90a", "90a")
    assert arch.gencode() == "-gencode=arch=compute_90a,code=sm_90a"
    assert Capability.parse("10.0f").base == Capability.parse("10.0")


def test_from_sm_decodes_fatbin_numbers() -> None:
    assert Capability.from_sm(90, "a") == Capability.parse("9.0a")
    assert Capability.from_sm(120) == Capability.parse("12.0")
    with pytest.raises(InvalidInputError):
        Capability.from_sm(7)


@given(
    st.lists(
        st.tuples(st.integers(-5, 1300), st.sampled_from(["", "a", "f", "b", "af"])),
        max_size=40,
    )
)
def test_from_sm_made_once_answers_as_made_anew(calls: list[tuple[int, Suffix]]) -> None:
    # from_sm keeps the values it made; any order of calls answers as building anew would, and
    # as parsing nvcc's spelling of the same number does (both refuse sm_1000 and sm_90b).
    for number, suffix in calls + calls:
        try:
            expected: Capability | None = Capability.parse(f"sm_{number}{suffix}")
        except InvalidInputError:
            expected = None
        if expected is not None:
            assert expected == Capability(number // 10, number % 10, suffix)
        try:
            got: Capability | None = Capability.from_sm(number, suffix)
        except InvalidInputError:
            got = None
        assert got == expected
        assert str(got) == str(expected)


def test_targets_parse_ptx_and_lists() -> None:
    targets = parse_targets("8.0, 8.6;9.0+PTX")
    assert [str(t) for t in targets] == ["8.0", "8.6", "9.0+PTX"]
    assert Target.parse("sm_90+ptx") == Target(Capability(9, 0), ptx=True)
    with pytest.raises(InvalidInputError, match=re.escape("'8.6+SASS'")):
        Target.parse("8.6+SASS")
    with pytest.raises(InvalidInputError):
        parse_targets("")
    assert parse_capabilities(["8.6,9.0", "12.0"]) == (
        Capability(8, 6),
        Capability(9, 0),
        Capability(12, 0),
    )
