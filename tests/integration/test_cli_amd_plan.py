"""AMD planning through the CLI (issue 16): plan, matrix and explain on mixed fleets, the
``rocm_scope`` spellings (file, ``CAPPLAN_ROCM_SCOPE``, ``--rocm-scope``) and bad input, each
one line with its documented exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capplan.errors import ExitCode

MIXED = """
[fleet]
gpus = ["A100", "MI300X", "Radeon RX 7900 XTX", "Strix Halo"]
[packages.torch]
[packages.magma]
[policy]
system = "x86_64-linux"
"""


def one_line_error(result: Any, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("capplan: error: "), result.stderr
    return str(lines[0])


def write(folder: Path, text: str) -> None:
    (folder / "capplan.toml").write_text(text)


def test_plan_json_lists_amd_gpus_and_variants(capplan_in: Any, tmp_path: Path) -> None:
    write(tmp_path, MIXED)
    result = capplan_in("plan", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [g["target"] for g in data["amd_fleet"]] == ["gfx942", "gfx1100", "gfx1151"]
    variants = {v["name"]: v for v in data["variants"]}
    assert variants["torch-gfx1151"]["gfx_targets"] == ["gfx1151"]
    assert variants["torch-gfx1151"]["vendor"] == "amd"
    assert variants["torch-gfx1151"]["cuda"] is None
    assert variants["torch-sm80"]["vendor"] == "nvidia"
    assert data["rocm_scope"] == "package"


def test_matrix_table_shows_gfx_targets_and_rocm(capplan_in: Any, tmp_path: Path) -> None:
    write(tmp_path, MIXED)
    result = capplan_in("matrix")
    assert result.exit_code == 0, result.stderr
    # The table's row (the bottom line's warnings name torch-gfx942 too).
    row = next(
        line for line in result.stdout.splitlines() if "torch-gfx942 " in line and "│" in line
    )
    assert "gfx942" in row.replace("torch-gfx942", "") and "ROCm" in row
    assert "magma-hip's own target list excludes gfx942" in result.stdout.replace("\n", " ")


@pytest.mark.parametrize(
    ("how", "env", "flag"),
    [
        ("file", {}, ()),
        ("env", {"CAPPLAN_ROCM_SCOPE": "stack"}, ()),
        ("flag", {}, ("--rocm-scope", "stack")),
    ],
)
def test_rocm_scope_from_file_environment_and_flag(
    capplan_in: Any, tmp_path: Path, how: str, env: dict[str, str], flag: tuple[str, ...]
) -> None:
    write(tmp_path, MIXED + ('rocm_scope = "stack"\n' if how == "file" else ""))
    result = capplan_in("matrix", "--json", *flag, env=env)
    assert result.exit_code == 0, result.stderr
    jobs = {j["name"]: j for j in json.loads(result.stdout)["jobs"]}
    assert "rocblas-gfx942" in jobs["torch-gfx942"]["needs"]
    assert "composable_kernel-gfx1100" not in jobs  # refused: no gfx9 target


def test_explain_answers_per_vendor(capplan_cli: Any) -> None:
    result = capplan_cli("explain", "gfx1030", "--device", "RX 6700 XT", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["vendor"], data["target"], data["level"]) == ("amd", "gfx1031", "compatible")
    assert "ISA compatibility" in data["reason"]
    result = capplan_cli("explain", "gfx1100", "--device", "gfx1101", "--json")
    assert json.loads(result.stdout)["level"] == "cannot-run"
    result = capplan_cli("explain", "8.6", "--device", "RTX 3090", "--json")
    assert json.loads(result.stdout)["vendor"] == "nvidia"


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("explain", "8.0", "--device", "MI300X"), ExitCode.INVALID_INPUT, "do not mix"),
        (("explain", "gfx942", "--device", "A100"), ExitCode.INVALID_INPUT, "do not mix"),
        (("explain", "gfx942,8.6", "--device", "MI300X"), ExitCode.INVALID_INPUT, "do not mix"),
        (("explain", "gfx9999", "--device", "MI300X"), ExitCode.INVALID_INPUT, "gfx9999"),
        (("explain", "gfx942", "--device", "MI300Y"), ExitCode.INVALID_INPUT, "MI300X"),
        (("plan", "--gpu", "gfx942:xnack*"), ExitCode.INVALID_INPUT, "xnack"),
        (("plan", "--gpu", "RX 7"), ExitCode.INVALID_INPUT, "ambiguous"),
    ],
)
def test_bad_amd_arguments(
    capplan_cli: Any, args: tuple[str, ...], code: ExitCode, words: str
) -> None:
    assert words in one_line_error(capplan_cli(*args), code)


@pytest.mark.parametrize(
    ("extra", "env", "code", "words"),
    [
        ('rocm_scope = "foo"\n', {}, ExitCode.CONFIG, "rocm_scope"),
        ("", {"CAPPLAN_ROCM_SCOPE": "foo"}, ExitCode.CONFIG, "rocm_scope"),
        ('[packages.cupy]\nextra = ["gfx942"]\n', {}, ExitCode.INVALID_INPUT, "CUDA-only"),
        ('[packages.nccl]\nvendors = ["amd"]\n', {}, ExitCode.INVALID_INPUT, "CUDA-only"),
        ('[packages.torchvision]\nvendors = ["intel"]\n', {}, ExitCode.CONFIG, "vendors"),
    ],
)
def test_bad_amd_settings(
    capplan_in: Any, tmp_path: Path, extra: str, env: dict[str, str], code: ExitCode, words: str
) -> None:
    write(tmp_path, MIXED + extra)  # MIXED ends in [policy]: a bare key lands there
    assert words in one_line_error(capplan_in("plan", env=env), code)


def test_plan_text_says_what_the_amd_libraries_hold(capplan_in: Any, tmp_path: Path) -> None:
    write(tmp_path, MIXED.replace("[packages.magma]", "[packages.magma]\n[packages.torchvision]"))
    result = capplan_in("plan", "--rocm-scope", "stack")
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    section = text[text.index("What the AMD libraries hold") :]
    assert "missing: torch-gfx942: magma-hip:" in section
    assert "no gfx942 code, so magma-backed GPU linear algebra" in section
    assert "on MI300X with torch-gfx942" in section
    assert "miopen-gfx1100 holds gfx1100; built with withComposableKernel = false" in section
    assert "torchvision-gfx942 holds no HIP code" in section
    # Those lines are not repeated among the routine decisions.
    decisions = text[text.index("Decisions") : text.index("What the AMD libraries hold")]
    assert "holds no HIP code" not in decisions


def test_verify_a_variant_without_device_code_is_one_line(capplan_in: Any, tmp_path: Path) -> None:
    write(tmp_path, MIXED.replace("[packages.magma]", "[packages.torchvision]"))
    (tmp_path / "lib.so").write_bytes(b"\x7fELF")
    result = capplan_in("verify", str(tmp_path / "lib.so"), "--variant", "torchvision-gfx942")
    line = one_line_error(result, ExitCode.INVALID_INPUT)
    assert "torchvision-gfx942" in line and "holds no GPU code" in line
