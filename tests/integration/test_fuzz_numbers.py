"""Numbers past Python's 4,300-digit limit (issue 46): int() refuses a decimal string of more
digits with a ValueError, which reached the CLI as exit 1. Every integer capplan reads from a
user is driven here with such numbers: a config's integers (``plan``, ``ci``, ``export``), the
integer environment variables (``CAPPLAN_RUNNERS``; ``COLUMNS`` and ``LINES``, which rich
reads; ``CUDA_VISIBLE_DEVICES`` in the dispatch selector) and every integer flag of every
command, found by walking the click commands, so a flag added later is covered too. Each is
one line: exit 5 for the config and its variables, exit 4 for a flag; a terminal size capplan
cannot read is no size at all, as rich has it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.fuzzing import at_most, derandomized

from capplan.cli.main import COMMANDS, cli
from capplan.errors import ExitCode

FLEET = '[fleet]\ngpus = ["RTX 3090", "A100"]\n[packages.torch]\n'
# Where a config holds an integer, and where it holds one no key takes.
PLACES = [
    '[fleet]\ngpus = ["A100"]\n[fleet.count]\nA100 = {n}\n[packages.torch]\n',
    FLEET + "[policy]\nrunners = {n}\n",
    FLEET + "[policy]\nbig_parallel_cores = {n}\n",
    FLEET + "[policy]\nunknown_key = {n}\n",
    '[fleet]\ngpus = ["A100"]\n[packages.torch]\nextra = [{n}]\n',
]
COMMANDS_WITH_CONFIG = [
    ["plan"],
    ["plan", "--json"],
    ["ci", "github", "--cache", "c"],
    ["ci", "hydra", "--flake", "github:o/r"],
    ["export", "wheel-variants", "--package", "torch", "--output", "out"],
    ["matrix", "--json"],
]

# Digit counts about the limit: below it (a number only out of range), at it, and past it.
digits = st.one_of(st.sampled_from([19, 40, 4_300, 4_301, 5_000]), st.integers(4_301, 20_000))
number = st.tuples(digits, st.sampled_from(["9", "1", "0"]), st.booleans()).map(
    lambda t: ("-" if t[2] else "") + "1" + t[1] * (t[0] - 1)
)


def run(cwd: Path, argv: list[str], env: dict[str, str] | None = None) -> Any:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with at_most(60, " ".join(argv)[:200]):
            return CliRunner().invoke(cli, argv, env=env, catch_exceptions=True)
    finally:
        os.chdir(old)


def one_line(result: Any, code: int) -> str:
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(repr(result.exception))
    assert result.exit_code == code, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("capplan: ")]
    errors = [line for line in lines if line.startswith("capplan: error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(errors[0]) < 1_200
    return errors[0]


@derandomized(25)
@given(number=number, place=st.sampled_from(PLACES), argv=st.sampled_from(COMMANDS_WITH_CONFIG))
def test_config_integers_of_any_length(tmp_path_factory: Any, number: str, place: str,
                                       argv: list[str]) -> None:  # fmt: skip
    """A config's integer of any length is a config error (exit 5) or a plan, never exit 1."""
    folder = tmp_path_factory.mktemp("config")
    config = folder / "capplan.toml"
    config.write_text(place.format(n=number))
    result = run(folder, [*argv, "--config", config.name])
    if len(number.lstrip("-")) > 4_300:
        assert "4,300 digits" in one_line(result, int(ExitCode.CONFIG))
    else:
        assert result.exit_code != 1, result.stderr[-2000:]


@pytest.mark.parametrize("count", [40, 4_301, 5_000])
def test_capplan_runners_of_many_digits(tmp_path: Path, count: int) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    result = run(tmp_path, ["plan"], env={"CAPPLAN_RUNNERS": "9" * count})
    line = one_line(result, int(ExitCode.CONFIG))
    assert "CAPPLAN_RUNNERS" in line


@pytest.mark.parametrize(
    "value",
    ["9" * 5_000, "\u00b2", "\u0661\u0662" * 3_000, "0" * 5_000],
    ids=["5000-nines", "superscript-2", "arabic-indic-6000", "5000-zeros"],
)
@pytest.mark.parametrize("name", ["COLUMNS", "LINES"])
def test_terminal_sizes_capplan_cannot_read(capplan_cli: Any, name: str, value: str) -> None:
    """rich reads COLUMNS and LINES with int() whenever str.isdigit() is true of them."""
    result = capplan_cli("plan", env={name: value})
    assert result.exit_code == 0, result.stderr[-2000:]
    assert "build jobs" in result.stdout


@pytest.mark.parametrize(
    "value", ["9" * 5_000, "\u00b2", "0,\u00b2,1"], ids=["5000-nines", "superscript-2", "list"]
)
def test_cuda_visible_devices_past_any_index(value: str) -> None:
    from capplan.runtime.selector import _filter, _visible

    notes: list[str] = []
    gpus = [("GPU-a", (8, 6, "")), ("GPU-b", (9, 0, ""))]
    chosen = _filter(gpus, _visible({"CUDA_VISIBLE_DEVICES": value}), notes)
    assert chosen == ([(8, 6, "")] if value.startswith("0,") else [])


def integer_flags() -> list[tuple[list[str], str, click.ParamType]]:
    """(command path, flag, type) of every integer or float option of every command."""
    found = []

    def walk(path: list[str], command: click.Command) -> None:
        if isinstance(command, click.Group):
            for name, sub in sorted(command.commands.items()):
                walk([*path, name], sub)
            return
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(
                param.type, (click.types.IntParamType, click.types.FloatParamType)
            ):
                found.append((path, max(param.opts, key=len), param.type))

    for name, target in sorted(COMMANDS.items()):
        module, _, attr = target.partition(":")
        walk([name], getattr(importlib.import_module(module), attr))
    return found


FLAGS = integer_flags()


def test_the_walk_finds_the_integer_flags() -> None:
    names = {(" ".join(path), flag) for path, flag, _ in FLAGS}
    assert {("doctor", "--jobs"), ("matrix", "--runners"), ("ci hydra", "--check-interval"),
            ("ci github", "--max-jobs"), ("matrix", "--stage")} <= names  # fmt: skip


@pytest.mark.parametrize(
    ("path", "flag", "kind"), FLAGS, ids=[f"{' '.join(p)} {f}" for p, f, _ in FLAGS]
)
def test_every_integer_flag_past_the_digit_limit(tmp_path: Path, path: list[str], flag: str,
                                                 kind: click.ParamType) -> None:  # fmt: skip
    (tmp_path / "capplan.toml").write_text(FLEET)
    for value in ("9" * 5_000, "-" + "9" * 5_000, "0" * 4_999 + "1" + "0" * 20):
        result = run(tmp_path, [*path, flag, value])
        if isinstance(kind, click.types.IntParamType):
            line = one_line(result, int(ExitCode.INVALID_INPUT))
            assert "digits, more than it may have" in line and flag in line, line
        else:  # a float of 5,000 digits is inf: out of its range, a usage error
            one_line(result, int(ExitCode.USAGE))
