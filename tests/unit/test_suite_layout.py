"""The suite's own layout: pytest imports test files by basename (no __init__.py in tests/), so
two files of one name in different folders stop the whole collection with 'import file
mismatch'; a run of one folder alone does not show it, this test does."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_name_is_unique() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert len(names) > 100  # the walk found the suite
    assert [name for name, count in names.items() if count > 1] == []
