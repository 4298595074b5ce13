"""Invariants over every entry of kb/torch.json (generated from the real files by
planner/scripts/refresh_torch_kb.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from packaging.version import Version

from capplan.adapters.kb import kb_path, load_kb_file
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.kb import CapabilitiesFile, TorchFile

KB_FILE = kb_path("torch.json")
RAW: list[dict[str, Any]] = json.loads(KB_FILE.read_text(encoding="utf-8"))["releases"]
IDS = [r["version"] for r in RAW]
# From 2.9 the file lists Thor under its CUDA 13 number (11.0) between 10.0a and 10.3: the
# one place the real list is not in nixpkgs' order (major, minor, base < a < f).
UNSORTED_FROM = Version("2.9")


def test_the_file_loads_with_the_kb_model() -> None:
    model = load_kb_file("torch.json", TorchFile)
    assert [r.version for r in model.releases] == IDS
    assert model.source


def test_one_entry_per_minor_release_from_1_13_to_2_14() -> None:
    minors = [(Version(v).major, Version(v).minor) for v in IDS]
    expected = [(1, 13)] + [(2, minor) for minor in range(15)]
    assert minors == expected


@pytest.mark.parametrize("entry", RAW, ids=IDS)
def test_entry_invariants(entry: dict[str, Any]) -> None:
    supported = [Capability.parse(c) for c in entry["supported"]]
    assert supported, "empty supported list"
    assert [str(c) for c in supported] == entry["supported"], "not canonical"
    assert len(set(supported)) == len(supported), "duplicates"
    assert not any(c.suffix == "f" for c in supported), "torch's lists never held f targets"
    for targets in entry["named"].values():
        assert targets
        for target in targets:
            assert Capability.parse(target.removesuffix("+PTX")) in supported
    assert entry["ptx_suffix"] is True
    cuda = [tuple(int(x) for x in c.split(".")) for c in entry["cuda"]]
    assert cuda and cuda == sorted(set(cuda))
    assert f"v{entry['version']} " in entry["source"]


@pytest.mark.parametrize("entry", RAW, ids=IDS)
def test_order_is_nixpkgs_order_where_the_file_was_sorted(
    entry: dict[str, Any],
) -> None:
    supported = [Capability.parse(c) for c in entry["supported"]]
    if Version(entry["version"]) < UNSORTED_FROM:
        assert supported == sorted(supported)
    else:
        assert supported != sorted(supported)
        # Take Thor out and the rest is in order: the file order was kept, not re-sorted.
        rest = [c for c in supported if c.major != 11]
        assert rest == sorted(rest)


def test_every_capability_is_known_to_the_capability_table() -> None:
    known = {
        info.capability for info in load_kb_file("capabilities.json", CapabilitiesFile).capabilities
    }
    for entry in RAW:
        unknown = [c for c in entry["supported"] if Capability.parse(c) not in known]
        assert not unknown, f"torch {entry['version']}: {unknown}"


def test_releases_follow_the_known_history() -> None:
    by_minor = {f"{Version(r['version']).major}.{Version(r['version']).minor}": r for r in RAW}
    # Hopper's 9.0a arrived in 2.2, Blackwell in 2.6, Thor moved from 10.1 to 11.0 in 2.9,
    # Rubin's 10.7 in 2.14.
    assert "9.0a" not in by_minor["2.1"]["supported"] and "9.0a" in by_minor["2.2"]["supported"]
    assert "10.0" not in by_minor["2.5"]["supported"] and "10.0" in by_minor["2.6"]["supported"]
    assert "10.1" in by_minor["2.8"]["supported"] and "10.1" not in by_minor["2.9"]["supported"]
    assert "11.0" in by_minor["2.9"]["supported"]
    assert "10.7" not in by_minor["2.13"]["supported"] and "10.7" in by_minor["2.14"]["supported"]
