"""JSON text: deterministic, valid, the outer two levels indented, one record per line below."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.cli.output import to_json_text

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_values)
def test_round_trips_and_matches_sorted_compact_json(value: Any) -> None:
    text = to_json_text(value)
    assert text.endswith("\n")
    assert json.loads(text) == value
    # Same tokens as json.dumps(sort_keys=True): only the whitespace between them differs.
    flat = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert (
        json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        == flat
    )
    assert to_json_text(value) == text


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([float("inf"), float("-inf"), float("nan")]), st.integers(0, 3))
def test_a_non_finite_number_is_refused_at_any_depth(number: float, depth: int) -> None:
    # Issue 31: a cost of 1e308 summed to inf and plan --json printed Infinity, which is not
    # JSON; such a number is a bug to report (exit 1 with --debug's traceback), never printed.
    value: Any = number
    for _ in range(depth):
        value = {"x": [value]}
    with pytest.raises(ValueError, match="not JSON compliant"):
        to_json_text(value)


def test_one_record_per_line_below_two_levels() -> None:
    doc = {
        "jobs": [{"name": "torch-sm86", "needs": ["magma-sm86"]}, {"name": "cupy", "needs": []}],
        "summary": {"jobs": 2, "baselines": {"naive": {"jobs": 3}}},
        "empty": [],
        "é": "ü",
    }
    assert to_json_text(doc).splitlines() == [
        "{",
        '  "empty": [],',
        '  "jobs": [',
        '    {"name": "torch-sm86", "needs": ["magma-sm86"]},',
        '    {"name": "cupy", "needs": []}',
        "  ],",
        '  "summary": {',
        '    "baselines": {"naive": {"jobs": 3}},',
        '    "jobs": 2',
        "  },",
        '  "é": "ü"',
        "}",
    ]
