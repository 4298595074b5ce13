"""Strict configuration: an empty table or a list naming one entry twice is refused, never
accepted silently (issue: "what a new user meets", item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.core.planning.config import config_from_mapping
from capplan.errors import ConfigError, ExitCode

BAD: list[tuple[dict[str, Any], str]] = [
    ({"policy": {"runners": {}}}, "empty table"),
    ({"fleet": {"gpus": ["RTX 3090", "A100", "RTX 3090"]}}, "'RTX 3090' twice"),
    ({"fleet": {"cpus": ["x86-64-v3", "x86-64-v3"]}}, "'x86-64-v3' twice"),
    ({"packages": {"torch": {"vendors": ["nvidia", "nvidia"]}}}, "'nvidia' twice"),
    ({"packages": {"torch": {"exclude": ["8.6", "8.6"]}}}, "'8.6' twice"),
    ({"packages": {"torch": {"extra": ["gfx942", "9.0", "gfx942"]}}}, "'gfx942' twice"),
    ({"policy": {"cuda": ["12.8", "12.8"]}}, "'12.8' twice"),
    ({"policy": {"fat": {"big": ["A100", "A100"]}}}, "fat group 'big' lists 'A100' twice"),
    (
        {"policy": {"runners_os": {"x86_64-linux": ["ubuntu-latest", "ubuntu-latest"]}}},
        "'ubuntu-latest' twice",
    ),
]


@pytest.mark.parametrize(("data", "message"), BAD)
def test_empty_tables_and_repeated_entries_are_config_errors(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        config_from_mapping(data, origin="capplan.toml")
    assert "\n" not in str(info.value)


def test_the_same_lists_without_repeats_are_accepted() -> None:
    config = config_from_mapping(
        {
            "fleet": {"gpus": ["RTX 3090", "A100"], "cpus": ["x86-64-v3", "zen4"]},
            "packages": {"torch": {"vendors": ["nvidia", "amd"], "exclude": ["8.6"]}},
            "policy": {"runners": {"x86_64-linux": 8}, "cuda": ["12.8", "12.6"]},
        },
        origin="capplan.toml",
    )
    assert config.policy.runners_for("x86_64-linux") == 8
    assert config.fleet.gpus == ("A100", "RTX 3090")  # one order, whatever the file's


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(["A100", "a100", "H100", "RTX 3090", "rtx  3090", "8.6", "L4", "l4"]),
        min_size=1,
    )
)
def test_a_fleet_list_is_accepted_exactly_when_it_has_no_repeats(gpus: list[str]) -> None:
    # A repeat is the same name in any case and spacing (issue 31: 16,384 case spellings of
    # "A100" planned as that many GPUs); the list is kept in one order, not the file's.
    data = {"fleet": {"gpus": gpus}}
    keys = [" ".join(gpu.split()).casefold() for gpu in gpus]
    if len(set(keys)) == len(keys):
        got = config_from_mapping(data, origin="x").fleet.gpus
        assert sorted(got) == sorted(gpus)
        assert got == config_from_mapping({"fleet": {"gpus": gpus[::-1]}}, origin="x").fleet.gpus
    else:
        with pytest.raises(ConfigError, match="twice"):
            config_from_mapping(data, origin="x")


def test_cli_says_one_line_and_exits_with_the_config_code(tmp_path: Path, capplan_in: Any) -> None:
    (tmp_path / "capplan.toml").write_text('[fleet]\ngpus = ["A100"]\n[policy]\nrunners = {}\n')
    result = capplan_in("plan")
    assert result.exit_code == ExitCode.CONFIG, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "runners" in lines[0] and "empty table" in lines[0]
