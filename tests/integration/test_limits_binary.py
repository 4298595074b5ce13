"""`capplan limits read --binary` on a real nvcc-built object (skipped without nvcc)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from capplan.errors import ExitCode

KERNEL = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"


def _cli() -> click.Group:
    """The real `capplan` group (its error handling included)."""
    from capplan.cli.main import cli

    return cli


@pytest.fixture(scope="session")
def sm86_with_ptx90(nvcc_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("nvcc")
    (work / "k.cu").write_text(KERNEL, encoding="utf-8")
    subprocess.run(
        [
            str(nvcc_bin),
            "-c",
            "k.cu",
            "-o",
            "k.o",
            "-gencode=arch=compute_86,code=sm_86",
            "-gencode=arch=compute_90,code=compute_90",
        ],
        cwd=work,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return work / "k.o"


@pytest.mark.nvcc
def test_binary_limits_are_sass_plus_ptx_reach(sm86_with_ptx90: Path) -> None:
    result = CliRunner().invoke(
        _cli(), ["limits", "read", "--binary", str(sm86_with_ptx90), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["sass"] == ["sm_86"] and data["ptx"] == ["compute_90"]
    supported = set(data["supported"])
    # sm_86 runs on 8.6 and later 8.x minors; compute_90 PTX reaches 9.0 and newer majors.
    assert {"8.6", "8.9", "9.0", "10.0", "12.0"} <= supported
    assert not {"7.5", "8.0"} & supported


@pytest.mark.nvcc
def test_binary_table_without_json(sm86_with_ptx90: Path) -> None:
    result = CliRunner().invoke(
        _cli(),
        ["limits", "read", "--binary", str(sm86_with_ptx90)],
        env={"NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.output
    assert "native" in result.output and "ptx-jit" in result.output


def test_binary_that_is_not_elf_is_bad_binary(tmp_path: Path) -> None:
    text = tmp_path / "k.cu"
    text.write_text(KERNEL, encoding="utf-8")
    result = CliRunner().invoke(_cli(), ["limits", "read", "--binary", str(text)])
    assert result.exit_code == ExitCode.BAD_BINARY
    assert "Traceback" not in result.output


def test_binary_excludes_package_and_sources(tmp_path: Path) -> None:
    path = tmp_path / "x.o"
    path.write_bytes(b"\x7fELF")
    result = CliRunner().invoke(_cli(), ["limits", "read", "torch", "--binary", str(path)])
    assert result.exit_code == ExitCode.USAGE
