"""adapters/memsearch.py: the C library's memmem gives exactly ``bytes.find``'s answers."""

from __future__ import annotations

import mmap
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.adapters import memsearch
from capplan.adapters.memsearch import finder, map_file

# Few distinct bytes, so needles really occur (and overlap) in the data.
data_st = st.binary(min_size=1, max_size=300).map(lambda b: bytes(x % 4 for x in b))
needle_st = st.binary(min_size=1, max_size=9).map(lambda b: bytes(x % 4 for x in b))
bound_st = st.integers(min_value=0, max_value=320)


def _uses_memmem() -> bool:
    return bool(memsearch._lookup_memmem())


@settings(max_examples=300, deadline=None)
@given(data_st, needle_st, bound_st, bound_st)
def test_same_answers_as_bytes_find(data: bytes, needle: bytes, start: int, end: int) -> None:
    expected = data.find(needle, start, end)
    with finder(data) as find:
        assert find(needle, start, end) == expected
    buffer = bytearray(data)
    with finder(buffer) as find:
        assert find(needle, start, end) == expected
    buffer.append(0)  # the export was released: the bytearray can be resized again


@settings(max_examples=60, deadline=None)
@given(data_st, st.lists(st.tuples(needle_st, bound_st, bound_st), min_size=1, max_size=8))
def test_mapped_file(data: bytes, searches: list[tuple[bytes, int, int]]) -> None:
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.flush()
        with map_file(handle) as mapped, finder(mapped) as find:
            for needle, start, end in searches:
                assert find(needle, start, end) == data.find(needle, start, end)
        assert mapped.closed  # the block let the mapping close


def test_a_read_only_mapping_is_searched_with_its_own_find(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"xxCCOBxx")
    with (
        path.open("rb") as handle,
        mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m,
        finder(m) as find,
    ):
        assert find(b"CCOB", 0, 8) == 2 and find(b"CCOB", 3, 8) == -1
        # Not addressable from ctypes: the mapping's own method answers.
        assert getattr(find, "__self__", None) is m


def test_copy_on_write_mapping_leaves_the_file_alone(tmp_path: Path) -> None:
    if not _uses_memmem():
        pytest.skip("this C library has no memmem: searches fall back to mmap.find")
    path = tmp_path / "data"
    path.write_bytes(b"\x50\xed\x55\xba" * 4)
    with path.open("rb") as handle, map_file(handle) as mapped, finder(mapped) as find:
        assert find(b"\x55\xba\x50", 0, 16) == 2
    assert path.read_bytes() == b"\x50\xed\x55\xba" * 4


_PAGE = 4096


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 63), st.binary(min_size=1, max_size=64)), max_size=6),
    st.lists(st.tuples(needle_st, st.integers(0, 64 * _PAGE)), min_size=1, max_size=6),
)
def test_a_sparse_file_gives_the_same_answers(
    chunks: list[tuple[int, bytes]], searches: list[tuple[bytes, int]]
) -> None:
    # Data at page-aligned offsets (some at a page's end, so a needle can cross into a hole),
    # holes between: searching only the data extents answers as bytes.find does.
    with tempfile.TemporaryFile() as handle:
        handle.truncate(64 * _PAGE)
        for page, data in chunks:
            at = page * _PAGE + (_PAGE - len(data) if page % 2 else 0)
            handle.seek(at)
            handle.write(bytes(x % 4 for x in data))
        handle.flush()
        handle.seek(0)
        whole = handle.read()
        with map_file(handle) as mapped, finder(mapped, handle.fileno()) as find:
            for needle, start in searches:
                assert find(needle, start, len(whole)) == whole.find(needle, start)
