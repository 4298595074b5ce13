"""AMD GPU detection: KFD sysfs topology nodes and rocminfo output (adapters/detect/amd)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from capplan.adapters.detect.amd import (
    detect_amd_gpus,
    parse_kfd_properties,
    parse_rocminfo,
    read_kfd,
)
from capplan.core.families.rocm.target import AmdTarget
from capplan.errors import ConfigError

T = AmdTarget.parse

ROCMINFO = """ROCk module is loaded
=====================
HSA Agents
==========
*******
Agent 1
*******
  Name:                    AMD EPYC 9654 96-Core Processor
  Marketing Name:          AMD EPYC 9654 96-Core Processor
  Vendor Name:             CPU
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx1100
  Uuid:                    GPU-1234
  Marketing Name:          Radeon RX 7900 XTX
  Vendor Name:             AMD
  Device Type:             GPU
  ISA Info:
    ISA 1
      Name:                    amdgcn-amd-amdhsa--gfx1100
*******
Agent 3
*******
  Name:                    gfx90a
  Marketing Name:
  Device Type:             GPU
*** Done ***
"""


def kfd_node(root: Path, node: str, content: bytes) -> None:
    path = root / "class" / "kfd" / "kfd" / "topology" / "nodes" / node
    path.mkdir(parents=True, exist_ok=True)
    (path / "properties").write_bytes(content)


def fleet(root: Path) -> Path:
    kfd_node(root, "0", b"cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\nvendor_id 0\n")
    kfd_node(root, "1", b"simd_count 1216\ngfx_target_version 90402\nvendor_id 4098\n"
             b"device_id 29857\n")  # fmt: skip
    kfd_node(root, "2", b"gfx_target_version 110000\nvendor_id 4098\ndevice_id 29772\n")
    return root


def test_kfd_reads_gpu_nodes_in_node_order_and_skips_cpu_nodes(tmp_path: Path) -> None:
    root = fleet(tmp_path)
    kfd_node(root, "10", b"gfx_target_version 90010\nvendor_id 4098\n")  # after 2, not after 1
    gpus, notes = read_kfd(root)
    assert [(g.target, g.source, g.pci_id, g.node) for g in gpus] == [
        (T("gfx942"), "kfd", "1002:74a1", "1"),
        (T("gfx1100"), "kfd", "1002:744c", "2"),
        (T("gfx90a"), "kfd", None, "10"),
    ]
    assert notes == []


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "properties empty"),
        (b"\n  \n", "properties empty"),
        (b"\x7fELF\x00\x01\xff", "properties not text"),
        (b"gfx_target_version lots\n", "gfx_target_version is not a number ('lots')"),
        (b"gfx_target_version 1 2\n", "is not 'name value'"),
        (b"vendor_id 4098\n", "lack gfx_target_version"),
        (b"gfx_target_version 999999\nvendor_id 4098\n", "999999 is not major*10000"),
        (b"gfx_target_version 90909\nvendor_id 4098\n", "gfx999, an AMD processor capplan"),
        (b"gfx_target_version 90402\nvendor_id 4318\n", "vendor_id 4318 is not AMD"),
    ],
)
def test_kfd_garbage_skips_the_node_with_a_note(
    tmp_path: Path, content: bytes, fragment: str
) -> None:
    root = fleet(tmp_path)
    kfd_node(root, "3", content)
    gpus, notes = read_kfd(root)
    assert [g.target for g in gpus] == [T("gfx942"), T("gfx1100")]
    (note,) = notes
    assert note.startswith("KFD node 3: ") and note.endswith("; skipped") and fragment in note


def test_kfd_properties_parse() -> None:
    assert parse_kfd_properties(b"a 1\n\nb_c 22\n") == {"a": 1, "b_c": 22}
    with pytest.raises(ValueError, match="not text"):
        parse_kfd_properties(b"a 1\x00")


def test_no_kfd_is_no_gpu_and_no_note(tmp_path: Path) -> None:
    assert read_kfd(tmp_path) == ([], [])


def test_rocminfo_agents() -> None:
    gpus = parse_rocminfo(ROCMINFO)
    assert [(g.name, g.target, g.source) for g in gpus] == [
        ("Radeon RX 7900 XTX", T("gfx1100"), "rocminfo"),
        ("AMD GPU gfx90a", T("gfx90a"), "rocminfo"),
    ]
    assert parse_rocminfo("Agent 1\n  Name: gfx9999\n") == []


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_rocminfo_answers_when_kfd_lists_none(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_text(ROCMINFO)
    fake = _script(tmp_path / "rocminfo", f"cat {out}")
    env = {"CAPPLAN_SYSFS_ROOT": str(tmp_path / "sys"), "CAPPLAN_ROCMINFO": str(fake),
           "PATH": str(tmp_path / "empty")}  # fmt: skip
    gpus, notes = detect_amd_gpus(env=env)
    assert [g.target for g in gpus] == [T("gfx1100"), T("gfx90a")] and notes == []
    # KFD wins when it lists a GPU: rocminfo is not asked.
    fleet(tmp_path / "sys")
    gpus, _ = detect_amd_gpus(env=env)
    assert [g.source for g in gpus] == ["kfd", "kfd"]


def test_failing_rocminfo_is_a_note(tmp_path: Path) -> None:
    fake = _script(tmp_path / "rocminfo", "echo 'ROCk module is NOT loaded'; exit 1")
    env = {"CAPPLAN_SYSFS_ROOT": str(tmp_path), "CAPPLAN_ROCMINFO": str(fake), "PATH": ""}
    assert detect_amd_gpus(env=env) == ([], ["rocminfo exited 1: ROCk module is NOT loaded"])


def test_rocminfo_env_must_name_an_executable(tmp_path: Path) -> None:
    env = {"CAPPLAN_SYSFS_ROOT": str(tmp_path), "CAPPLAN_ROCMINFO": str(tmp_path / "nope")}
    with pytest.raises(ConfigError, match="CAPPLAN_ROCMINFO"):
        detect_amd_gpus(env=env)
