"""The `<package>-hwcaps` layout (pkgs/hwcaps_builder.py, issue 23 item 6) with the machine's
real glibc: real shared libraries built with gcc for the generic level and for psABI levels,
laid out by the builder the flake runs, and a real program whose loader picks the best level
this CPU runs (`ld.so --help` says which it supports), or the generic build when masked."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "pkgs" / "hwcaps_builder.py"
LOADER = Path("/lib64/ld-linux-x86-64.so.2")


def _supported() -> list[str]:
    """The glibc-hwcaps levels this machine's loader searches, best first."""
    if not LOADER.exists() or shutil.which("gcc") is None:
        pytest.skip("needs x86-64 glibc (ld-linux-x86-64.so.2) and gcc")
    text = subprocess.run(
        [str(LOADER), "--help"], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"^\s+(x86-64-v\d) \(supported, searched\)", text, re.M)


def _library(folder: Path, label: str) -> Path:
    (folder / "lib").mkdir(parents=True)
    source = folder / "which.c"
    source.write_text(f'const char *which(void) {{ return "{label}"; }}\n')
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libwhich.so.1", "-o",
         str(folder / "lib" / "libwhich.so.1"), str(source)],
        check=True,
    )  # fmt: skip
    (folder / "include").mkdir()
    (folder / "include" / "which.h").write_text("const char *which(void);\n")
    return folder


def _layout(tmp_path: Path, levels: list[str]) -> Path:
    generic = _library(tmp_path / "generic", "generic")
    builds = {level: str(_library(tmp_path / level, level)) for level in levels}
    out = tmp_path / "out"
    env = {
        "out": str(out),
        "generic": str(generic),
        "levels": json.dumps(builds),
        "name": "which-hwcaps",
        "PATH": os.environ.get("PATH", ""),
    }
    proc = subprocess.run(
        [sys.executable, "-IS", str(BUILDER)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return out


def _program(tmp_path: Path, lib: Path) -> Path:
    main = tmp_path / "main.c"
    main.write_text(
        "#include <stdio.h>\nconst char *which(void);\nint main(void) { puts(which()); }\n"
    )
    exe = tmp_path / "main"
    subprocess.run(
        ["gcc", "-o", str(exe), str(main), f"-L{lib}", "-l:libwhich.so.1", f"-Wl,-rpath,{lib}"],
        check=True,
    )
    return exe


def test_the_loader_picks_the_best_level_the_cpu_runs(tmp_path: Path) -> None:
    supported = _supported()
    out = _layout(tmp_path, ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
    assert sorted(os.listdir(out / "lib" / "glibc-hwcaps")) == [
        "x86-64-v2",
        "x86-64-v3",
        "x86-64-v4",
    ]
    assert (out / "include" / "which.h").is_file()  # the rest is the generic build's
    exe = _program(tmp_path, out / "lib")
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip()
    assert got == (supported[0] if supported else "generic")
    # Masking every level (as on a CPU without them) falls back to lib/: the generic build.
    masked = subprocess.run(
        [str(LOADER), "--glibc-hwcaps-mask", "none", str(exe)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert masked == "generic"


def test_only_the_levels_built_are_searched(tmp_path: Path) -> None:
    supported = _supported()
    if "x86-64-v2" not in supported:
        pytest.skip("this CPU does not run x86-64-v2 code")
    out = _layout(tmp_path, ["x86-64-v2"])
    exe = _program(tmp_path, out / "lib")
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip()
    assert got == "x86-64-v2"


def test_a_build_without_shared_libraries_is_refused(tmp_path: Path) -> None:
    generic = tmp_path / "generic"
    (generic / "bin").mkdir(parents=True)
    (generic / "bin" / "gmx").write_text("an executable\n")
    env = {
        "out": str(tmp_path / "out"),
        "generic": str(generic),
        "levels": "{}",
        "name": "gromacs-hwcaps",
    }
    proc = subprocess.run(
        [sys.executable, "-IS", str(BUILDER)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"capplan: gromacs-hwcaps: {generic} has no shared libraries in lib/: glibc-hwcaps "
        "applies to those only"
    )
    assert not (tmp_path / "out").exists()
