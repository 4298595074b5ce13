"""Finding GPU models by loose names."""

from __future__ import annotations

from itertools import pairwise

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.gpus import find_gpus, resolve_device
from capplan.core.families.cuda.kb import nvidia
from capplan.errors import InvalidInputError

GPUS = nvidia(load_kb()).gpus


@pytest.mark.parametrize(
    ("query", "cap"),
    [
        ("a100", "8.0"),
        ("NVIDIA A100-SXM4-80GB", "8.0"),
        ("RTX 3090", "8.6"),
        ("rtx3090", "8.6"),
        ("GeForce RTX 4090", "8.9"),
        ("Tesla V100-SXM2-32GB", "7.0"),
        ("NVIDIA H100 80GB HBM3", "9.0"),
        ("L4", "8.9"),
        ("RTX 5090", "12.0"),
        ("Jetson Orin", "8.7"),
        ("T4", "7.5"),
        ("B200", "10.0"),
        ("DGX Spark", "12.1"),
    ],
)
def test_loose_names_resolve(query: str, cap: str) -> None:
    matches = find_gpus(query, GPUS)
    assert matches, query
    assert matches[0].model.capability == Capability.parse(cap)
    assert resolve_device(query, GPUS)[0] == Capability.parse(cap)


def test_best_match_comes_first() -> None:
    matches = find_gpus("NVIDIA H100 80GB HBM3", GPUS)
    assert matches[0].score == 100.0
    assert all(a.score >= b.score for a, b in pairwise(matches))


def test_capabilities_pass_through() -> None:
    assert resolve_device("sm_86", GPUS) == (Capability(8, 6), None)


def test_unknown_name_suggests_close_ones() -> None:
    with pytest.raises(InvalidInputError) as info:
        resolve_device("RTX 3909", GPUS)
    assert "did you mean" in info.value.one_line()
    assert "'RTX 3909'" in info.value.one_line()
