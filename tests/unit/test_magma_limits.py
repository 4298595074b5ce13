"""magma's VALID_GFXS read from its CMake source (core/families/rocm/magma_limits.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capplan.core.families.rocm.magma_limits import parse_magma_limits
from capplan.core.families.rocm.target import PROCESSORS, AmdTarget
from capplan.errors import DataError, ExitCode

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "magma" / "CMakeLists-hip-excerpt.txt"


def test_real_excerpt() -> None:
    result = parse_magma_limits(FIXTURE.read_text())
    names = [str(t) for t in result.valid]
    assert names[0] == "gfx700" and names[-1] == "gfx1033"
    assert "gfx90c" in names and "gfx906" in names and "gfx908" in names
    # What ROCM.md says magma lacks: no CDNA2/3/4, no RDNA3/4.
    for missing in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1151", "gfx1201"):
        assert missing not in names
    assert result.unknown == ()
    assert len(result.raw) == 25 == len(result.valid)
    assert (
        result.line
        == FIXTURE.read_text()
        .splitlines()
        .index(next(line for line in FIXTURE.read_text().splitlines() if "set(VALID_GFXS" in line))
        + 1
    )


def test_spellings_and_comments() -> None:
    text = """
    # set(VALID_GFXS "600")   <- a comment, not the list
    SET( VALID_GFXS 906 gfx90a;1100 ) # trailing comment
    """
    result = parse_magma_limits(text)
    assert [str(t) for t in result.valid] == ["gfx906", "gfx90a", "gfx1100"]
    assert result.line == 3


def test_unknown_values_are_kept_apart() -> None:
    result = parse_magma_limits('set(VALID_GFXS "906;1250;banana")')
    assert result.valid == (AmdTarget.parse("gfx906"),)
    assert result.unknown == ("1250", "banana")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("project(x)\n", "no `set(VALID_GFXS"),
        ('set(VALID_GFXS "")', "empty"),
        ('set(VALID_GFXS "906")\nset(VALID_GFXS "908")', "2 times"),
        ("set(VALID_GFXS ${OTHER})", "computed"),
        ("set(VALID_GFX 906)", "no `set(VALID_GFXS"),
    ],
)
def test_garbage_is_a_data_error(text: str, fragment: str) -> None:
    with pytest.raises(DataError) as info:
        parse_magma_limits(text)
    assert fragment in info.value.one_line()
    assert info.value.exit_code == ExitCode.DATA


def test_same_list_twice_is_fine() -> None:
    result = parse_magma_limits('set(VALID_GFXS "906")\nset(VALID_GFXS 906)')
    assert [str(t) for t in result.valid] == ["gfx906"]


_processors = st.sampled_from(sorted(p for p in PROCESSORS if not p.endswith("generic")))


@given(st.lists(_processors, min_size=1, max_size=12), st.booleans(), st.booleans())
def test_round_trip_property(names: list[str], quoted: bool, prefixed: bool) -> None:
    values = [n if prefixed else n.removeprefix("gfx") for n in names]
    args = '"' + ";".join(values) + '"' if quoted else " ".join(values)
    result = parse_magma_limits(f"if (X)\n  set( VALID_GFXS {args} )\nendif()\n")
    assert [str(t) for t in result.valid] == [str(t) for t in sorted({AmdTarget(n) for n in names})]
    assert result.raw == tuple(values)
    assert result.line == 2


@given(st.text(max_size=200))
def test_never_crashes(text: str) -> None:
    try:
        result = parse_magma_limits(text)
    except DataError as error:
        assert "\n" not in error.one_line()
    else:
        assert result.raw
