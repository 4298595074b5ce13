"""capplan inspect's peak memory does not grow with the file size (issue 20).

A sparse file holds a fatbin container at each end and holes in between; reading the holes
fills page-cache pages that count towards a process's RSS while they stay mapped, so a reader
that keeps its mapping resident peaks near the file size. Each size is inspected in a fresh
subprocess whose own peak RSS (VmHWM, printed by the child) is compared.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from capplan.core.families.cuda import fatbin

CHILD = """
import json, resource, sys
from pathlib import Path

import pytest
from capplan.adapters.fatbin import inspect_paths
from capplan.core.families.cuda.binary import cuda_code
reports = cuda_code(inspect_paths([Path(sys.argv[1])]))
print(json.dumps({
    "sass": sorted(str(c) for r in reports for c in r.sass),
    "containers": sum(r.containers for r in reports),
    # VmHWM: this program's own peak (ru_maxrss would count the test process it came from,
    # which Linux keeps across fork and exec).
    "rss_kib": int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]),
}))
"""


def _container(arch: int) -> bytes:
    head = bytearray(64)
    payload = b"\x7fELF" + bytes(60)
    struct.pack_into("<HHIQ", head, 0, 2, 0x0101, 64, len(payload))
    struct.pack_into("<I", head, 0x1C, arch)
    struct.pack_into("<Q", head, 0x28, 0x11)
    body = bytes(head) + payload
    return struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(body)) + body


def _sparse(path: Path, size: int, head: bytes) -> Path:
    first, last = _container(80), _container(90)
    with path.open("wb") as handle:
        handle.write(head + first)
        handle.seek(size - len(last))
        handle.write(last)
    return path


def _child(path: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


# A raw fatbin stream, and a file that sniffs as ELF but has no readable section table (searched
# whole for NVIDIA containers and AMD bundles).
@pytest.mark.parametrize("head", [b"", b"\x7fELF" + bytes(60)], ids=["fatbin", "elf"])
def test_peak_memory_does_not_grow_with_file_size(tmp_path: Path, head: bytes) -> None:
    small = _child(_sparse(tmp_path / "small.bin", 1 << 20, head))
    large = _child(_sparse(tmp_path / "large.bin", 1 << 30, head))
    # Both containers are found in both files: the whole file was read, not just its head.
    assert small["sass"] == large["sass"] == ["8.0", "9.0"]
    assert small["containers"] == large["containers"] == 2
    grown_mib = (int(str(large["rss_kib"])) - int(str(small["rss_kib"]))) / 1024
    # 1 GiB more file; a reader keeping pages resident would grow by about that much.
    assert grown_mib < 64, f"peak RSS grew by {grown_mib:.0f} MiB for 1 GiB more file"
