"""max_cuda_for_driver: the newest CUDA a driver runs, comparing versions as numbers."""

from __future__ import annotations

import random

import pytest

from capplan.core.families.cuda.drivers import max_cuda_for_driver, version_key
from capplan.errors import DataError, InvalidInputError

# Minimum Linux drivers per CUDA.md: 11.x >= 450.80.02, 12.x >= 525.60.13, 13.x >= 580.
RELEASES = [
    ("11.8", "450.80.02"),
    ("12.0", "525.60.13"),
    ("12.6", "525.60.13"),
    ("12.9", "525.60.13"),
    ("13.0", "580"),
    ("13.2", "580"),
]


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        ("450.80.02", "11.8"),  # exactly the minimum
        ("450.80.01", None),  # just below every minimum
        ("470.82.01", "11.8"),
        ("525.60.13", "12.9"),
        ("525.100.00", "12.9"),  # 100 > 60 numerically, though "100" < "60" as text
        ("535.104.05", "12.9"),
        ("579.99.99", "12.9"),
        ("580", "13.2"),
        ("580.65.06", "13.2"),
        ("1000.1", "13.2"),  # four digits: still numeric
    ],
)
def test_newest_cuda_for_driver(driver: str, expected: str | None) -> None:
    assert max_cuda_for_driver(driver, RELEASES) == expected


def test_order_of_releases_does_not_matter() -> None:
    shuffled = RELEASES[:]
    random.Random(7).shuffle(shuffled)
    assert max_cuda_for_driver("535.104.05", shuffled) == "12.9"


def test_cuda_versions_compare_numerically() -> None:
    releases = [("12.9", "525.60.13"), ("12.10", "525.60.13")]
    assert max_cuda_for_driver("550.54.14", releases) == "12.10"


def test_no_releases() -> None:
    assert max_cuda_for_driver("580.65.06", []) is None


@pytest.mark.parametrize("driver", ["", "N/A", "[N/A]", "535.x", "535..1", "v535"])
def test_bad_driver(driver: str) -> None:
    with pytest.raises(InvalidInputError, match="driver version"):
        max_cuda_for_driver(driver, RELEASES)


def test_bad_release_table() -> None:
    with pytest.raises(DataError, match="CUDA release entry"):
        max_cuda_for_driver("580", [("thirteen", "580")])


def test_version_key_pads() -> None:
    assert version_key("580") == version_key("580.0.0")
    assert version_key("535.104.05") > version_key("535.54.03")
