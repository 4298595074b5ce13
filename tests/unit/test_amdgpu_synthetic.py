"""Offload bundles, CCOB headers and AMDGPU ELF headers built byte by byte (core/families/rocm/amdgpu.py).

The layouts follow clang's OffloadBundler.cpp and LLVM's OffloadBundle.h; the tests with real
clang-16 output are in tests/integration/test_inspect_clang.py.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capplan.core.families.rocm.amdgpu import (
    BUNDLE_MAGIC,
    amdgpu_elf_target,
    parse_bundle,
    scan_amd,
    target_from_bundle_id,
)
from capplan.core.families.rocm.target import AmdTarget
from capplan.errors import InvalidInputError

T = AmdTarget.parse


def elf_header(e_flags: int, *, machine: int = 224, osabi: int = 64, abi: int = 2) -> bytes:
    ident = b"\x7fELF" + bytes([2, 1, 1, osabi, abi]) + bytes(7)
    rest = struct.pack("<HHIQQQIHHHHHH", 1, machine, 1, 0, 0, 0, e_flags, 64, 0, 0, 64, 0, 0)
    return ident + rest


def bundle(entries: list[tuple[str, bytes]], *, align: int = 16) -> bytes:
    header = BUNDLE_MAGIC + struct.pack("<Q", len(entries))
    size = len(header) + sum(24 + len(i.encode()) for i, _ in entries)
    offsets = []
    pos = -(-size // align) * align
    for _, payload in entries:
        offsets.append(pos)
        pos = -(-(pos + len(payload)) // align) * align
    for (bundle_id, payload), offset in zip(entries, offsets, strict=True):
        header += struct.pack("<QQQ", offset, len(payload), len(bundle_id)) + bundle_id.encode()
    data = bytearray(header.ljust(offsets[0] if offsets else len(header), b"\0"))
    for (_, payload), offset in zip(entries, offsets, strict=True):
        data[len(data) :] = bytes(offset - len(data))
        data += payload
    return bytes(data)


def ccob(inner: bytes, *, version: int = 3, method: int = 0) -> bytes:
    payload = zlib.compress(inner) if method == 0 else b"\x28\xb5\x2f\xfd" + inner[:16]
    size = {1: 20, 2: 24, 3: 32}[version]
    total = size + len(payload)
    head = b"CCOB" + struct.pack("<HH", version, method)
    if version == 1:
        head += struct.pack("<I", len(inner))
    elif version == 2:
        head += struct.pack("<II", total, len(inner))
    else:
        head += struct.pack("<QQ", total, len(inner))
    return head + struct.pack("<Q", 0x1234) + payload


HIP = [
    ("host-x86_64-unknown-linux-gnu-", b""),
    ("hipv4-amdgcn-amd-amdhsa--gfx1100", elf_header(0x41)),
    ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", elf_header(0x63F)),
]


@pytest.mark.parametrize(
    ("bundle_id", "target"),
    [
        ("hipv4-amdgcn-amd-amdhsa--gfx942", "gfx942"),
        ("hip-amdgcn-amd-amdhsa-gfx906", "gfx906"),
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-"),
        ("hipv4-amdgcn-amd-amdhsa--gfx11-generic", "gfx11-generic"),
        ("openmp-amdgcn-amd-amdhsa--gfx1030", "gfx1030"),
        ("host-x86_64-unknown-linux-gnu-", None),
        ("cuda-nvptx64-nvidia-cuda-sm_80", None),
    ],
)
def test_bundle_ids(bundle_id: str, target: str | None) -> None:
    found = target_from_bundle_id(bundle_id)
    assert (str(found) if found else None) == target


def test_bad_bundle_id_target() -> None:
    with pytest.raises(InvalidInputError):
        target_from_bundle_id("hipv4-amdgcn-amd-amdhsa--gfx9999")


def test_plain_bundle() -> None:
    data = b"junk" * 5 + bundle(HIP) + b"tail"
    (found,) = scan_amd(data, 0, len(data))
    assert found.offset == 20
    assert found.targets == (T("gfx90a:xnack-"), T("gfx1100"))
    assert [e.elf_target for e in found.entries] == [None, T("gfx1100"), T("gfx90a:xnack-")]
    assert found.problems == () and found.compression == "" and found.opened


def test_entry_whose_code_disagrees_with_its_id() -> None:
    data = bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", elf_header(0x41))])
    (found,) = scan_amd(data, 0, len(data))
    assert any("holds code for gfx1100" in p for p in found.problems)


def test_truncated_bundle_is_reported_not_raised() -> None:
    data = bundle(HIP)
    cut = data[: len(data) - 10]
    (found,) = scan_amd(cut, 0, len(cut))
    assert any("runs past the end" in p for p in found.problems)
    header_only = data[:40]
    (partial,) = scan_amd(header_only, 0, len(header_only))
    assert partial.problems


def test_stray_magic_is_ignored() -> None:
    data = b"text mentioning " + BUNDLE_MAGIC + b" in a string table\0" * 3
    assert scan_amd(data, 0, len(data)) == []


@pytest.mark.parametrize("version", [1, 2, 3])
def test_zlib_ccob_is_opened(version: int) -> None:
    inner = bundle(HIP)
    data = b"\0" * 8 + ccob(inner, version=version)
    (found,) = scan_amd(data, 0, len(data))
    assert found.compression == "zlib" and found.version == version and found.opened
    assert found.targets == (T("gfx90a:xnack-"), T("gfx1100"))
    assert found.offset == 8


def test_zstd_ccob_is_recognised_not_opened() -> None:
    data = ccob(bundle(HIP), version=3, method=1)
    (found,) = scan_amd(data, 0, len(data))
    assert found.compression == "zstd" and not found.opened and found.targets == ()


def test_corrupt_ccob() -> None:
    good = ccob(bundle(HIP), version=3)
    broken = good[:40] + bytes(len(good) - 40)
    (found,) = scan_amd(broken, 0, len(broken))
    assert not found.opened and found.problems
    # "CCOB" and a plausible header followed by something that is no zlib or zstd stream.
    for method in (0, 1):
        fake = b"CCOB" + struct.pack("<HHQQQ", 3, method, 64, 100, 0) + b"\x00\x01" * 16
        assert scan_amd(fake, 0, len(fake)) == []
    # A CCOB-looking word with an impossible header is no bundle at all.
    noise = b"CCOB" + struct.pack("<HH", 9, 0) + bytes(40)
    assert scan_amd(noise, 0, len(noise)) == []


def test_amdgpu_elf_headers() -> None:
    code = amdgpu_elf_target(elf_header(0x63F), 0, 64)
    assert code is not None and code.target == T("gfx90a:xnack-") and code.abi_version == 2
    assert amdgpu_elf_target(elf_header(0x63F, machine=62), 0, 64) is None
    unknown = amdgpu_elf_target(elf_header(0xFE), 0, 64)
    assert unknown is not None and unknown.target is None and unknown.problems
    mesa = amdgpu_elf_target(elf_header(0x41, osabi=0), 0, 64)
    assert mesa is not None and mesa.target is None and "not HSA" in mesa.problems[0]
    assert amdgpu_elf_target(b"\x7fELF", 0, 4) is None


def test_parse_bundle_needs_its_magic() -> None:
    assert parse_bundle(b"x" * 64, 0, 64) is None


@given(st.binary(max_size=300), st.integers(0, 3))
def test_scan_never_raises(noise: bytes, where: int) -> None:
    data = bytearray(noise)
    magic = [BUNDLE_MAGIC, b"CCOB", b"", BUNDLE_MAGIC + struct.pack("<Q", 2)][where]
    data[len(data) // 2 : len(data) // 2] = magic
    for found in scan_amd(bytes(data), 0, len(data)):
        assert found.end >= found.offset
        for entry in found.entries:
            assert entry.size >= 0


@given(st.lists(st.sampled_from(["gfx906", "gfx90a", "gfx942", "gfx1030", "gfx1100",
                                 "gfx1151", "gfx1201"]), min_size=1, max_size=5))  # fmt: skip
def test_round_trip_property(names: list[str]) -> None:
    entries = [("host-x86_64-unknown-linux-gnu-", b"")]
    entries += [(f"hipv4-amdgcn-amd-amdhsa--{n}", elf_header(T(n).mach)) for n in names]
    data = bundle(entries)
    (found,) = scan_amd(data, 0, len(data))
    assert found.targets == tuple(sorted({T(n) for n in names}))
    (packed,) = scan_amd(ccob(data), 0, len(ccob(data)))
    assert packed.targets == found.targets
