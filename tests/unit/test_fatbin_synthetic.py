"""The fatbin walk on hand-built containers: flags, compression, validation, windows, verify.

The bytes are written here from the layout in ../shared/CUDA.md (checked against nvcc 13.0
output): a 16-byte container header, then entries with a 64-byte (or longer) header.
"""

from __future__ import annotations

import itertools
import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capplan.core.binaries.buffers import Reader
from capplan.core.families.base import RunLevel
from capplan.core.families.cuda import fatbin
from capplan.core.families.cuda.capability import Capability, Target, parse_targets
from capplan.core.families.cuda.verify import expected_code, verify

PTX, SASS, LTO = 1, 2, 8
BASE_FLAGS = 0x11  # 64-bit | Linux host, as nvcc 13 writes


def entry(
    kind: int,
    arch: int,
    flags: int = BASE_FLAGS,
    payload: bytes = b"\x7fELF" + bytes(60),
) -> bytes:
    header_size = 64
    padded = payload + bytes(-len(payload) % 8)
    head = bytearray(header_size)
    struct.pack_into("<HHIQ", head, 0, kind, 0x0101, header_size, len(padded))
    struct.pack_into("<I", head, 0x1C, arch)
    struct.pack_into("<Q", head, 0x28, flags)
    return bytes(head) + padded


def container(*entries: bytes, version: int = 1, header_size: int = 16) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", fatbin.MAGIC, version, header_size, len(body)) + body


def names(result: fatbin.ScanResult) -> list[str]:
    return [e.name for c in result.containers for e in c.entries]


def test_sass_ptx_lto_and_arch_numbers() -> None:
    buf = b"\0" * 40 + container(entry(SASS, 86), entry(PTX, 90), entry(LTO, 120)) + b"\0" * 8
    result = fatbin.scan(buf)
    assert [c.offset for c in result.containers] == [40]
    assert names(result) == ["sm_86", "compute_90", "lto_120"]
    kinds = [e.kind for e in result.containers[0].entries]
    assert kinds == [fatbin.EntryKind.SASS, fatbin.EntryKind.PTX, fatbin.EntryKind.LTO]
    assert not result.containers[0].partial


@pytest.mark.parametrize(
    ("flags", "arch", "expected"),
    [
        (BASE_FLAGS | fatbin.FLAG_ARCH_SPECIFIC, 90, "sm_90a"),
        (BASE_FLAGS | fatbin.FLAG_FAMILY_SPECIFIC, 100, "sm_100f"),
        (BASE_FLAGS | fatbin.FLAG_FAMILY_SPECIFIC | 0x1000000, 120, "sm_120f"),
        (BASE_FLAGS, 103, "sm_103"),
        (BASE_FLAGS | fatbin.FLAG_ARCH_SPECIFIC, 121, "sm_121a"),
    ],
)
def test_suffix_comes_from_flags(flags: int, arch: int, expected: str) -> None:
    result = fatbin.scan(container(entry(SASS, arch, flags)))
    assert names(result) == [expected]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (BASE_FLAGS, "none"),
        (BASE_FLAGS | fatbin.FLAG_LZ4, "lz4"),
        (BASE_FLAGS | fatbin.FLAG_ZSTD, "zstd"),
    ],
)
def test_compression_flag_is_reported_without_decompressing(flags: int, expected: str) -> None:
    # The payload is not a valid LZ4/zstd stream: listing must not try to decompress it.
    garbage = bytes(range(256)) * 2
    result = fatbin.scan(container(entry(PTX, 80, flags, payload=garbage)))
    (found,) = result.containers[0].entries
    assert found.compression == expected
    assert found.capability == Capability(8, 0)


def test_debug_flag() -> None:
    result = fatbin.scan(container(entry(SASS, 75, BASE_FLAGS | fatbin.FLAG_DEBUG)))
    assert result.containers[0].entries[0].debug


def test_both_suffix_flags_is_not_an_arch() -> None:
    flags = BASE_FLAGS | fatbin.FLAG_ARCH_SPECIFIC | fatbin.FLAG_FAMILY_SPECIFIC
    result = fatbin.scan(container(entry(SASS, 100, flags)))
    assert result.containers == ()
    assert len(result.rejected) == 1


def test_random_data_with_planted_magics_gives_nothing() -> None:
    rng = random.Random(20240501)
    data = bytearray(rng.randbytes(1 << 20))
    for _ in range(300):
        at = rng.randrange(len(data) - 64)
        data[at : at + 4] = fatbin.MAGIC_BYTES
    # Some with a perfect container header but a garbage first entry.
    for _ in range(50):
        at = rng.randrange(len(data) - 64)
        data[at : at + 16] = struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, 4096)
    result = fatbin.scan(bytes(data))
    assert result.containers == ()


@pytest.mark.parametrize(
    "bad",
    [
        container(entry(SASS, 86), version=2),
        container(entry(SASS, 86), header_size=24),
        container(entry(7, 86)),  # unknown kind
        container(entry(SASS, 5)),  # implausible arch
        container(entry(SASS, 990)),  # implausible arch
        struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, 0),  # empty
    ],
)
def test_invalid_headers_are_never_reported(bad: bytes) -> None:
    assert fatbin.scan(b"\0" * 8 + bad + b"\0" * 64).containers == ()


def test_bad_entry_header_size_rejected() -> None:
    good = bytearray(container(entry(SASS, 86)))
    struct.pack_into("<I", good, 16 + 4, 30)  # header size below the 64-byte minimum
    assert fatbin.scan(bytes(good)).containers == ()


def test_bad_second_entry_gives_partial_container_with_first_only() -> None:
    body = bytearray(container(entry(SASS, 86), entry(SASS, 90)))
    second = 16 + len(entry(SASS, 86))
    struct.pack_into("<H", body, second, 5)  # unknown kind
    (found,) = fatbin.scan(bytes(body)).containers
    assert [e.name for e in found.entries] == ["sm_86"]
    assert found.partial
    assert "unknown kind 5" in found.problems[0]


def test_truncated_container_is_partial_and_never_lists_cut_entries() -> None:
    whole = container(entry(SASS, 86), entry(SASS, 90), entry(PTX, 90))
    first_end = 16 + len(entry(SASS, 86))
    for cut in range(first_end, len(whole)):
        result = fatbin.scan(whole[:cut])
        (found,) = result.containers
        assert found.partial
        listed = [e.name for e in found.entries]
        # Only entries whose header and payload fit entirely are listed, in order.
        assert listed == ["sm_86", "sm_90", "compute_90"][: len(listed)]
        for e in found.entries:
            assert e.offset + e.header_size + e.payload_size <= cut


def test_corrupt_size_resumes_scan_at_next_real_container() -> None:
    first = bytearray(container(entry(SASS, 86)))
    struct.pack_into("<Q", first, 8, 1 << 20)  # claims far more than it holds
    second = container(entry(SASS, 120))
    result = fatbin.scan(bytes(first) + second)
    assert names(result) == ["sm_86", "sm_120"]
    assert result.containers[0].partial
    assert not result.containers[1].partial


def test_adjacent_and_padded_containers() -> None:
    buf = container(entry(SASS, 75)) + container(entry(SASS, 80)) + bytes(8)
    buf += container(entry(PTX, 89))
    assert names(fatbin.scan(buf)) == ["sm_75", "sm_80", "compute_89"]


def test_magic_straddling_a_scan_window_and_release_ranges() -> None:
    window = 16 << 20
    blob = container(entry(SASS, 86))
    at = window - 2
    buf = bytearray(window + 4096)
    buf[at : at + len(blob)] = blob
    released: list[tuple[int, int]] = []
    result = fatbin.scan(bytes(buf), release=lambda a, b: released.append((a, b)))
    assert [c.offset for c in result.containers] == [at]
    # Released ranges are increasing, disjoint and cover the whole buffer.
    assert released[0][0] == 0 and released[-1][1] == len(buf)
    for (_, end), (start, _) in itertools.pairwise(released):
        assert start == end


def test_scan_bounds_are_respected() -> None:
    blob = container(entry(SASS, 86))
    buf = blob + blob
    assert len(fatbin.scan(buf, len(blob)).containers) == 1
    # A container cut by `end` is partial, the data past `end` is not read.
    (found,) = fatbin.scan(buf, 0, len(blob) - 8).containers
    assert found.partial and found.entries == ()


# --- headers read through a reader (adapters read them with pread) ------------------------------


def slicing_reader(buf: bytes, log: list[int] | None = None) -> Reader:
    def read(offset: int, size: int) -> bytes:
        if log is not None:
            log.append(offset)
        return buf[offset : offset + size]

    return read


_PIECES = st.one_of(
    st.builds(
        lambda kinds, arch, flags: container(*(entry(k, arch, flags) for k in kinds)),
        st.lists(st.sampled_from([PTX, SASS, LTO, 7]), min_size=1, max_size=3),
        st.sampled_from([5, 75, 86, 90, 100, 120, 990]),
        st.sampled_from([BASE_FLAGS, BASE_FLAGS | fatbin.FLAG_ARCH_SPECIFIC, 0x300011]),
    ),
    st.binary(max_size=40),  # padding or garbage between containers
    st.just(struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, 1 << 20)),  # a corrupt size
)


@given(st.lists(_PIECES, max_size=8), st.data())
def test_a_reader_gives_the_answers_of_the_buffer(pieces: list[bytes], data: st.DataObject) -> None:
    """Reading headers through ``read`` (and taking an adjacent container without a search)
    finds exactly what reading them from the buffer finds, whatever lies in the bytes."""
    buf = b"".join(pieces)
    cut = data.draw(st.integers(0, len(buf)), label="cut")
    start = data.draw(st.integers(0, cut), label="start")
    buf = buf[:cut]
    plain = fatbin.scan(buf, start)
    assert fatbin.scan(buf, start, read=slicing_reader(buf)) == plain


def test_adjacent_containers_are_walked_without_a_search() -> None:
    blobs = [container(entry(SASS, arch), entry(PTX, arch)) for arch in (75, 80, 86, 90)]
    buf = bytes(8) + b"".join(blobs)
    searched: list[int] = []

    def find(needle: bytes, start: int, end: int) -> int:
        searched.append(start)
        return buf.find(needle, start, end)

    read_at: list[int] = []
    result = fatbin.scan(buf, find=find, read=slicing_reader(buf, read_at))
    assert names(result) == [
        f"{kind}_{arch}" for arch in (75, 80, 86, 90) for kind in ("sm", "compute")
    ]
    assert searched == [0]  # only for the first: each next one starts where the last ended
    assert read_at  # every header came through the reader


def test_a_short_read_is_a_cut_entry_not_a_crash() -> None:
    """A file that shrinks after it was mapped: the reader returns fewer bytes than asked."""
    buf = container(entry(SASS, 86), entry(SASS, 90))
    second = 16 + len(entry(SASS, 86))

    def read(offset: int, size: int) -> bytes:
        return buf[offset : min(offset + size, second + 10)]

    (found,) = fatbin.scan(buf, read=read).containers
    assert [e.name for e in found.entries] == ["sm_86"]
    assert found.partial and "runs past the end of the file" in found.problems[0]


# --- verify -------------------------------------------------------------------------------------


def caps(text: str) -> set[Capability]:
    return {Capability.parse(t) for t in text.split()}


def test_expected_code_puts_ptx_only_where_asked() -> None:
    sass, ptx = expected_code(parse_targets("8.6,9.0+PTX"))
    assert sass == (Capability(8, 6), Capability(9, 0))
    assert ptx == (Capability(9, 0),)


def test_verify_exact_match() -> None:
    result = verify(parse_targets("8.6,9.0+PTX"), caps("86 90"), caps("90"))
    assert result.ok and result.matches and result.differences() == []


def test_verify_missing_and_extra() -> None:
    result = verify(parse_targets("8.6,8.9,9.0"), caps("86 90 120"), caps("90"))
    assert not result.ok
    assert result.missing_sass == (Capability(8, 9),)
    assert result.extra_sass == (Capability(12, 0),)
    assert result.extra_ptx == (Capability(9, 0),)
    assert result.missing_ptx == ()
    assert result.differences() == [
        "missing SASS sm_89",
        "extra SASS sm_120",
        "extra PTX compute_90",
    ]


def test_verify_suffix_matters() -> None:
    # sm_90 is not sm_90a: a build that silently drops the suffix fails.
    result = verify([Target(Capability(9, 0, "a"))], caps("90"), set())
    assert result.missing_sass == (Capability(9, 0, "a"),)
    assert result.extra_sass == (Capability(9, 0),)


@pytest.mark.parametrize(
    ("device", "level"),
    [
        ("8.6", RunLevel.NATIVE),
        ("8.9", RunLevel.COMPATIBLE),
        ("12.0", RunLevel.PTX_JIT),
        ("7.5", RunLevel.CANNOT_RUN),
    ],
)
def test_verify_device_levels(device: str, level: RunLevel) -> None:
    result = verify(
        parse_targets("8.6,9.0+PTX"),
        caps("86 90"),
        caps("90"),
        device=Capability.parse(device),
    )
    assert result.verdict is not None and result.verdict.level is level
    assert result.matches
    assert result.ok is (level is not RunLevel.CANNOT_RUN)
    assert result.to_json()["device"]["runs"] == level.value
