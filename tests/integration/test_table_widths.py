"""Every command that prints a table, at 40, 80 and 200 columns, never splits a word (issue 46:
at 80 columns, what a pipe gets, `inspect` drew compute_86 as compute_8 / 6).

A word is whatever a table cell or line holds between blanks and the table's rules; the same
command at 1,000 columns (where nothing needs to wrap) gives the words, and each must come out
whole at every width."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import Cli
from tests.unit.test_fatbin_synthetic import container, entry

PTX, SASS = 1, 2
_RULES = re.compile(r"[│┃━╇─┼]+")

MAGMA = Path(__file__).parents[1] / "data" / "magma" / "CMakeLists-hip-excerpt.txt"
TORCH = Path(__file__).parents[1] / "data" / "torch_sources" / "shape_2_9.py"
Setup = Callable[[Path], list[str]]


def _fatbins(root: Path) -> list[str]:
    deep = root / "environments" / "some-project-with-a-long-name" / "lib" / "python3.11"
    deep.mkdir(parents=True)
    body = container(entry(SASS, 86), entry(SASS, 90), entry(PTX, 90), entry(SASS, 120))
    (deep / "libkernels_with_a_long_library_name.so.fatbin").write_bytes(body)
    (root / "k.fatbin").write_bytes(container(entry(SASS, 80)))
    return [str(root / "environments"), str(root / "k.fatbin")]


def _failures(root: Path) -> list[str]:
    record = root / "failures.json"
    drv = "/nix/store/" + "a" * 32 + "-python3.11-torch-2.5.1-with-a-long-derivation-name.drv"
    for attr in ("torch-sm86", "magma-sm86"):
        added = Cli(root)(
            "failures", "add", str(record), "--attr", attr, "--drv", drv, "--system", "x86_64-linux"
        )  # fmt: skip
        assert added.exit_code == 0, added.output
    return ["failures", "list", str(record)]


def _smi(root: Path) -> list[str]:
    smi = root / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\ncat <<'CSV'\nNVIDIA A100-SXM4-80GB, 8.0, 535.104.05\n"
        "NVIDIA GeForce RTX 4090, 8.9, 580.65.06\nCSV\n"
    )
    smi.chmod(0o755)
    return ["detect"]


# Each command that draws a table, with what it needs (doctor's table is left out: every column
# of it is a name, never wrapped, cli/doctor.py).
COMMANDS: dict[str, Setup] = {
    "caps": lambda root: ["caps"],
    "caps --cuda": lambda root: ["caps", "--cuda", "12.9"],
    "gpus": lambda root: ["gpus", "rtx 30"],
    "gpus amd": lambda root: ["gpus", "mi300"],
    "gpus --pci": lambda root: ["gpus", "--pci", "10de:2204"],
    "plan": lambda root: ["plan", "--verbose"],
    "matrix": lambda root: ["matrix", "--needs"],
    "dispatch explain": lambda root: ["dispatch", "explain", "--device", "RTX 3090"],
    "inspect": lambda root: ["inspect", *_fatbins(root)],
    "inspect --entries": lambda root: ["inspect", "--entries", *_fatbins(root)],
    "limits read --binary": lambda root: ["limits", "read", "--binary", _fatbins(root)[1]],
    "limits read magma": lambda root: ["limits", "read", "magma", "--file", str(MAGMA)],
    "limits read torch": lambda root: ["limits", "read", "torch", "--file", str(TORCH)],
    "failures list": _failures,
    "detect": _smi,
}


def _words(text: str) -> set[str]:
    return set(_RULES.sub(" ", text).split())


def _run(root: Path, argv: list[str], columns: int) -> str:
    env = {"COLUMNS": str(columns), "PATH": f"{root}:/usr/bin:/bin"}
    result = Cli(Path(__file__).resolve().parents[2])(*argv, env=env)
    assert result.exit_code == 0, (argv, result.output[-2000:])
    return result.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_table_splits_a_word(name: str, tmp_path: Path) -> None:
    argv = COMMANDS[name](tmp_path)
    wide = _words(_run(tmp_path, argv, 1000))
    for columns in (40, 80, 200):
        text = _run(tmp_path, argv, columns)
        missing = sorted(wide - _words(text))
        assert not missing, f"{name} at {columns} columns split {missing[:8]}:\n{text}"
