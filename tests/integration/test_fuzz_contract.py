"""Issue 31's classes, fuzzed on every run: what capplan echoes, identifiers, CLI values and
the fleet's order.

- the echo function (``capplan.errors.shorten``/``printable``) and ``CapplanError`` on any text:
  nothing a terminal or a CI log acts on survives, and the length is bounded;
- the identifier check on any text: accepted exactly when the value is printable, trimmed and
  of a usable length;
- CLI values laced with control characters, newlines and ``::error::`` in the value slots that
  are echoed: never exit 1, every stderr line free of them, error lines one line and short;
- the fleet in any order: ``plan --json`` gives the same bytes.

Derandomized (the same inputs every run, no example database); each test prints its case
count (``pytest -s``), stated in docs/testing.md.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.cli.main import cli
from capplan.core.model.identifiers import MAX_IDENTIFIER, check_identifier
from capplan.errors import (
    QUOTE_LIMIT,
    CapplanError,
    ExitCode,
    InvalidInputError,
    printable,
    shorten,
)

PROFILE = settings(
    derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)
# What must never reach a terminal or a CI log raw.
ACTIVE = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | set("\u2028\u2029\u202e\u2066")
NASTY = [
    "\x1b]0;pwned\x07",  # OSC: window title
    "\x1b[2J",  # clear the screen
    "\x1b[31m",  # colour
    "\r",
    "\n::error::owned",
    "\n::add-mask::x",
    "\x9b1m",  # C1 CSI
    "\u202e",  # right-to-left override
    "\u2028",
    "\x00",
    "\t",
    "[bold]",
]
hostile = st.lists(
    st.one_of(st.sampled_from(NASTY), st.text(max_size=12)), min_size=1, max_size=6
).map("".join)
any_text = st.one_of(hostile, st.text(max_size=300))


def _active(text: str) -> bool:
    return any(c in ACTIVE for c in text)


# -- the echo function -----------------------------------------------------------------------
def test_the_echo_function_escapes_and_cuts_any_text() -> None:
    cases = itertools.count()

    @settings(PROFILE, max_examples=400)
    @given(any_text, st.integers(min_value=1, max_value=400))
    def check(text: str, limit: int) -> None:
        next(cases)
        shown = printable(text)
        assert not _active(shown)
        assert printable(shown) == shown  # escaping is done once
        if not _active(text):
            assert shown == text  # plain text is echoed as it is
        cut = shorten(text, limit)
        assert not _active(cut) and len(cut) <= limit + 3
        error = CapplanError(f"bad value '{text * 20}'", hint=text)
        line = error.one_line()
        assert not _active(line) and len(line) < 2_100

    check()
    print(f"\nfuzz echo: {next(cases)} texts")


def test_the_identifier_check_accepts_exactly_printable_trimmed_names() -> None:
    cases: Counter[bool] = Counter()

    @settings(PROFILE, max_examples=400)
    @given(st.one_of(any_text, st.from_regex(r"[a-z0-9_]+-linux\.[a-z0-9-]+", fullmatch=True)))
    def check(value: str) -> None:
        usable = (
            0 < len(value) <= MAX_IDENTIFIER
            and printable(value) == value
            and value == value.strip()
        )
        try:
            check_identifier(value, "job attribute", example="x86_64-linux.torch-sm86")
        except InvalidInputError as error:
            assert not usable
            assert not _active(error.one_line()) and len(error.one_line()) < QUOTE_LIMIT + 300
        else:
            assert usable and "\n" not in value
        cases[usable] += 1

    check()
    print(f"\nfuzz identifiers: {sum(cases.values())} values ({cases[True]} accepted)")
    assert cases[True] and cases[False]


# -- CLI values ------------------------------------------------------------------------------
def _slots(value: str) -> list[list[str]]:
    """Commands that echo ``value`` from a flag or argument (no planning where avoidable)."""
    drv = "/nix/store/" + "a" * 32 + "-x.drv"
    return [
        ["gpus", value],
        ["gpus", "--pci", value],
        ["explain", "8.6", "--device", value],
        ["explain", value, "--device", "A100"],
        ["caps", value],
        ["ci", "github", "--cache", value],
        ["ci", "github", "--cache", "c", "--cache-url", value],
        ["ci", "github", "--cache", "c", "--branch", value],
        ["matrix", "--format", "github", "--expect-shards", value],
        ["failures", "add", "rec.json", "--attr", value, "--drv", drv, "--system", "x86_64-linux"],
        ["failures", "add", "rec.json", "--attr", "a.b", "--drv", drv, "--system", value],
        ["doctor", "--driver", value, "--device", "8.6", "."],
        ["plan", "--cuda", value],
        [value],
    ]


def test_cli_values_never_reach_stderr_raw(tmp_path: Path) -> None:
    outcomes: Counter[int] = Counter()
    slots = len(_slots(""))
    runner = CliRunner()

    @settings(PROFILE, max_examples=140)
    @given(hostile, st.integers(min_value=0, max_value=slots - 1))
    def check(value: str, slot: int) -> None:
        argv = _slots(value)[slot]
        if any("\x00" in arg for arg in argv):
            return  # argv cannot hold a NUL
        result = runner.invoke(cli, argv, catch_exceptions=False)
        detail = (argv, result.exit_code, result.stderr[-2000:])
        assert result.exit_code != int(ExitCode.FAILURE), detail
        for line in result.stderr.splitlines():
            assert not _active(line), detail
            assert not line.lstrip().startswith("::"), detail
        if result.exit_code not in (0, int(ExitCode.OK)):
            last = result.stderr.splitlines()[-1] if result.stderr else ""
            if result.exit_code == int(ExitCode.USAGE) and not last.startswith("capplan:"):
                return  # click printing help
            assert last.startswith("capplan: error: ") and len(last) <= 1_200, detail
        outcomes[result.exit_code] += 1

    old = Path.cwd()
    os.chdir(tmp_path)  # outside the repository: the embedded default plan applies
    try:
        check()
    finally:
        os.chdir(old)
    total = sum(outcomes.values())
    print(
        f"\nfuzz CLI values: {total} runs; outcomes by exit code: {dict(sorted(outcomes.items()))}"
    )
    assert total >= 100 and len(outcomes) >= 3, outcomes


# -- the fleet's order -----------------------------------------------------------------------
FLEET = ["A100", "RTX 3090", "L4", "MI300X", "Radeon RX 7900 XTX", "Jetson Orin", "GH200", "8.9"]
CPUS = ["x86-64-v3", "zen4", "sapphirerapids"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_any_order_of_the_fleet_gives_the_same_plan(tmp_path: Path) -> None:
    pytest.importorskip("archspec", reason="archspec (the CPU target database) is not installed")
    runner = CliRunner()
    texts: Counter[str] = Counter()

    def plan_of(gpus: list[str], cpus: list[str]) -> str:
        (tmp_path / "capplan.toml").write_text(
            f"[fleet]\ngpus = {json.dumps(gpus)}\ncpus = {json.dumps(cpus)}\n"
            f'[fleet.count]\n"A100" = 8\n"zen4" = 2\n'
            "[packages.torch]\n[packages.cupy]\n[packages.nccl]\n[packages.gromacs]\n"
            '[policy]\nsystems = ["x86_64-linux", "aarch64-linux"]\n'
        )
        result = runner.invoke(cli, ["plan", "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return result.stdout

    @settings(PROFILE, max_examples=12)
    @given(st.permutations(FLEET), st.permutations(CPUS))
    def check(gpus: list[str], cpus: list[str]) -> None:
        texts[plan_of(list(gpus), list(cpus))] += 1

    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        reference = plan_of(FLEET, CPUS)
        check()
    finally:
        os.chdir(old)
    print(f"\nfuzz fleet order: {sum(texts.values())} permutations, {len(texts)} distinct plan(s)")
    assert list(texts) == [reference]


# -- failure records from another branch's cache --------------------------------------------
def test_a_hostile_failure_record_is_listed_escaped_or_refused(tmp_path: Path) -> None:
    outcomes: Counter[int] = Counter()
    runner = CliRunner()
    drv = "/nix/store/" + "a" * 32 + "-x.drv"

    @settings(PROFILE, max_examples=80)
    @given(
        st.one_of(st.just("x86_64-linux.torch-sm86"), hostile),
        st.lists(hostile, max_size=4),
    )
    def check(attr: str, log_tail: list[str]) -> None:
        record = {
            "format": "capplan-failures",
            "version": 1,
            "failures": {
                drv: {
                    "attr": attr,
                    "system": "x86_64-linux",
                    "since": "2026-01-01T00:00:00Z",
                    "last": "2026-01-01T00:00:00Z",
                    "count": 1,
                    "log_tail": log_tail,
                }
            },
        }
        (tmp_path / "rec.json").write_text(json.dumps(record))
        result = runner.invoke(cli, ["failures", "list", "rec.json"], catch_exceptions=False)
        detail = (attr, log_tail, result.stdout[-2000:], result.stderr[-2000:])
        assert result.exit_code in (0, int(ExitCode.DATA)), detail
        for line in (result.stdout + result.stderr).splitlines():
            assert not _active(line) and not line.lstrip().startswith("::"), detail
        outcomes[result.exit_code] += 1

    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        check()
    finally:
        os.chdir(old)
    print(
        f"\nfuzz records: {sum(outcomes.values())} records; outcomes: {dict(sorted(outcomes.items()))}"
    )
    assert outcomes[0] and outcomes[int(ExitCode.DATA)], outcomes
