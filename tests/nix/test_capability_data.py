"""tests/nixpkgs/cuda-capabilities.json is the committed conversion of the shared TSV."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from nixhelpers import REPO

STANDIN = REPO / "tests" / "nixpkgs"
TSV = REPO.parent / "shared" / "data" / "nixpkgs-cuda-capabilities.tsv"


def _converter() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "update_capabilities", STANDIN / "update-capabilities.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["update_capabilities"] = module
    spec.loader.exec_module(module)
    return module


def test_json_matches_the_table() -> None:
    if not TSV.is_file():
        pytest.skip(f"shared table not found at {TSV}")
    committed = json.loads((STANDIN / "cuda-capabilities.json").read_text())
    assert committed == _converter().convert(TSV)


def test_json_is_sorted_like_nixpkgs() -> None:
    data = json.loads((STANDIN / "cuda-capabilities.json").read_text())
    order = data["allSortedCudaCapabilities"]
    assert sorted(order) == sorted(data["cudaCapabilityToInfo"])

    def key(cap: str) -> tuple[int, int, int]:
        base = cap.rstrip("af")
        major, minor = base.split(".")
        return int(major), int(minor), " af".index(cap[-1] if cap[-1] in "af" else " ")

    assert order == sorted(order, key=key)


def test_converter_writes_atomically(tmp_path: Path) -> None:
    if not TSV.is_file():
        pytest.skip(f"shared table not found at {TSV}")
    out = tmp_path / "caps.json"
    assert _converter().main(["update-capabilities.py", str(TSV), str(out)]) == 0
    assert out.read_text() == (STANDIN / "cuda-capabilities.json").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["caps.json"]
