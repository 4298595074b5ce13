"""nix eval's time limit is a setting (issue 46, runners and limits 2): CAPPLAN_NIX_EVAL_SECONDS
and `--nix-eval-seconds` on the commands that evaluate nixpkgs (`nixpkgs check`, `generate`
when it checks), tried against a nixpkgs that computes forever."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from nixhelpers import REPO

from capplan.cli.main import cli
from capplan.errors import ExitCode

# Three nested folds of 2,000: 8e9 steps, in the memory of one 2,000-element list.
FOREVER = """{ ... }:
let
  range = builtins.genList (i: i) 2000;
  spin = builtins.foldl' (a: i: a + builtins.foldl' (b: j: b + builtins.foldl' (c: k: c + k) 0
    range) 0 range) 0 range;
in
builtins.seq spin { }
"""
FLEET = '[fleet]\ngpus = ["RTX 4090"]\n[packages.torch]\n[policy]\nsystem = "x86_64-linux"\n'
needs_nix = pytest.mark.skipif(
    shutil.which("nix") is None, reason="nix not found on PATH (install Debian's nix-bin)"
)


def _capplan(cwd: Path, *args: str, seconds: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPPLAN_")}
    env.update(PYTHONPATH=str(REPO / "planner" / "src"), NO_COLOR="1")
    if seconds is not None:
        env["CAPPLAN_NIX_EVAL_SECONDS"] = seconds
    return subprocess.run(
        [sys.executable, "-m", "capplan", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def forever(tmp_path: Path) -> Path:
    (tmp_path / "capplan.toml").write_text(FLEET)
    (tmp_path / "np").mkdir()
    (tmp_path / "np" / "default.nix").write_text(FOREVER)
    return tmp_path


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stdout[-2000:] + result.stderr[-2000:]
    (line,) = result.stderr.splitlines()
    assert line.startswith("capplan: error: ") and "Traceback" not in result.stderr
    return line


@needs_nix
@pytest.mark.parametrize("how", ["flag", "environment", "flag over environment"])
def test_a_nixpkgs_that_computes_forever_stops_at_the_limit(forever: Path, how: str) -> None:
    args = ["nixpkgs", "check", "--nixpkgs", "np"]
    flag = ["--nix-eval-seconds", "2"] if how != "environment" else []
    seconds = {"flag": None, "environment": "2", "flag over environment": "1200"}[how]
    line = _one_line(_capplan(forever, *args, *flag, seconds=seconds), ExitCode.NIX)
    assert "nix eval did not finish within 2 s" in line
    assert "CAPPLAN_NIX_EVAL_SECONDS" in line  # the fix names the setting


@pytest.mark.parametrize(
    "value", ["0", "-5", "abc", "1e3", "86401", "\u0664", "", "9" * 40, "9" * 5000]
)
def test_a_limit_that_is_no_whole_number_of_seconds_is_refused(
    forever: Path, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole seconds from 1 to a day; 5,000 digits is a clear line, not Python's int() limit.
    Refused before nix runs (in-process: no nix needed)."""
    monkeypatch.chdir(forever)
    args = ["nixpkgs", "check", "--nixpkgs", "np"]
    for extra, env, code, name in (
        ([], {"CAPPLAN_NIX_EVAL_SECONDS": value}, ExitCode.CONFIG, "CAPPLAN_NIX_EVAL_SECONDS="),
        (["--nix-eval-seconds", value], {}, ExitCode.INVALID_INPUT, "--nix-eval-seconds="),
    ):
        result = CliRunner().invoke(cli, [*args, *extra], env=env)
        assert result.exit_code == code, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith("capplan: error: ") and name in line and len(line) < 1200


def test_generate_takes_the_flag(forever: Path) -> None:
    result = _capplan(forever, "generate", "--nix-eval-seconds", "0")
    assert "--nix-eval-seconds" in _one_line(result, ExitCode.INVALID_INPUT)
    assert _capplan(forever, "generate", "--nix-eval-seconds", "60").returncode == 0
