"""Right answers on real fleets, end to end (issue 10): detect per GPU and driver, one Jetson
rule, capability checks everywhere, the embedded default, usability, and bad input that always
ends with a documented exit code."""

from __future__ import annotations

import json
import os
import signal
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from capplan.core.families.cuda import fatbin
from capplan.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "planner" / "src"


def one_line_error(result: object, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr)  # type: ignore[attr-defined]
    lines = [line for line in result.stderr.splitlines() if line.strip()]  # type: ignore[attr-defined]
    assert lines and lines[-1].startswith("capplan: error: "), result.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in result.stderr  # type: ignore[attr-defined]
    return lines[-1]


def fake_smi(folder: Path, csv: str | bytes) -> dict[str, str]:
    out = folder / "smi.out"
    out.write_bytes(csv.encode() if isinstance(csv, str) else csv)
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat '{out}'\n")
    smi.chmod(0o755)
    return {"CAPPLAN_NVIDIA_SMI": str(smi)}


def detect_json(cli: object, env: dict[str, str], *args: str) -> list[dict[str, object]]:
    result = cli("detect", "--json", *args, env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    gpus: list[dict[str, object]] = json.loads(result.stdout)["gpus"]
    return gpus


# -- 1. each GPU its own reason ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "cap"),
    [
        ("Tesla V100-SXM2-32GB, 7.0, 570.124.06", "7.0"),
        ("NVIDIA B200, 10.0, 580.65.06", "10.0"),
        ("NVIDIA GeForce GTX 1080 Ti, 6.1, 570.124.06", "6.1"),
    ],
)
def test_detect_gives_each_gpu_its_own_reason(
    capplan_cli: object, tmp_path: Path, line: str, cap: str
) -> None:
    (gpu,) = detect_json(capplan_cli, fake_smi(tmp_path, line + "\n"))
    how = gpu["how"]["torch"]  # type: ignore[index]
    assert how["level"] == "cannot-run" and how["command"] is None
    assert "Jetson" not in how["reason"] and "8.7" not in how["reason"]
    assert f'add "{cap}" to fleet.gpus' in how["reason"]


# -- 2. drivers too old --------------------------------------------------------------------------
def test_detect_never_passes_a_driver_too_old(capplan_cli: object, tmp_path: Path) -> None:
    env = fake_smi(tmp_path, "NVIDIA A100-SXM4-80GB, 8.0, 450.51.06\n")  # CUDA 11.0 driver
    (gpu,) = detect_json(capplan_cli, env)
    assert gpu["max_cuda_minor_compat"] == "11.0"
    for package in ("torch", "cupy"):
        how = gpu["how"][package]  # type: ignore[index]
        assert how["level"] == "cannot-run" and how["driver_ok"] is False, how
        assert how["command"] is None and how["needs_driver"] == "525.60.13"
        assert "needs driver >= 525.60.13" in how["reason"]
        assert gpu["variants"][package] is None  # type: ignore[index]
    text = capplan_cli("detect", env=env)  # type: ignore[operator]
    assert text.exit_code == 0 and "up to ?" not in text.stdout
    assert "nix build" not in text.stdout


def test_detect_picks_a_cuda_the_driver_runs(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100", "GTX 1080 Ti"]\n[packages.cupy]\n[policy]\ncuda = ["13.0", "12.9"]\n'
    )
    env = fake_smi(tmp_path, "NVIDIA A100-SXM4-80GB, 8.0, 550.54.14\n")  # runs 12.x only
    (gpu,) = detect_json(capplan_in, env)
    assert gpu["variants"]["cupy"] == "cupy-cu129"  # type: ignore[index]
    assert gpu["how"]["cupy"]["driver_ok"] is True  # type: ignore[index]


# -- 3. shared packages per needed CUDA ----------------------------------------------------------
def test_shared_jobs_per_cuda_and_detect_names_them(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100", "GTX 1080 Ti", "V100"]\n[packages.cupy]\n[packages.cudnn]\n'
        '[policy]\ncuda = ["13.0", "12.9"]\n'
    )
    ids = capplan_in("plan", "--print-identifiers").stdout.split()  # type: ignore[operator]
    assert {"cupy", "cupy-cu129", "cudnn", "cudnn-cu129"} <= set(ids)
    env = fake_smi(tmp_path, "NVIDIA GeForce GTX 1080 Ti, 6.1, 570.124.06\n")
    (gpu,) = detect_json(capplan_in, env)
    assert gpu["variants"]["cupy"] == "cupy-cu129"  # type: ignore[index]
    assert gpu["how"]["cupy"]["command"] == "nix build .#cupy-cu129"  # type: ignore[index]


# -- 4. detect and plan agree on a Jetson ----------------------------------------------------------
def test_detect_on_a_jetson_agrees_with_the_plan(capplan_cli: object, tmp_path: Path) -> None:
    csv = (REPO / "tests/data/nvidia-smi/jetson-orin.csv").read_text()
    plan = json.loads(capplan_cli("plan", "--json").stdout)  # type: ignore[operator]
    unserved = {d["package"] for d in plan["unserved"] if d["gpu"] == "Jetson Orin"}
    serving = {
        v["package"]: v["name"]
        for v in plan["variants"]
        if any(s["gpu"] == "Jetson Orin" for s in v["serves"])
    }
    # On the Jetson itself (aarch64-linux): what plan serves it, detect names; what plan leaves
    # unserved, detect does not offer.
    env = {**fake_smi(tmp_path, csv), "CAPPLAN_SYSTEM": "aarch64-linux"}
    (gpu,) = detect_json(capplan_cli, env)
    for package, how in gpu["how"].items():  # type: ignore[attr-defined]
        if package in unserved:
            assert how["command"] is None and how["level"] == "cannot-run", (package, how)
        else:
            assert how["command"] == f"nix build .#{serving[package]}", (package, how)
    assert unserved and set(serving) - unserved  # both kinds occur in the default plan


# -- 5. per-package CUDA pins --------------------------------------------------------------------
@pytest.mark.parametrize("pin", ["11.8", "99.9", "12.x"])
def test_package_cuda_pin_is_validated(capplan_in: object, tmp_path: Path, pin: str) -> None:
    (tmp_path / "capplan.toml").write_text(
        f'[fleet]\ngpus = ["A100"]\n[packages.torch]\ncuda = "{pin}"\n'
    )
    err = one_line_error(capplan_in("plan"), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert pin in err
    if pin != "12.x":
        assert "12.9" in err and "13.0" in err  # the versions that exist


# -- 6. one Jetson rule --------------------------------------------------------------------------
def _fatbin_file(folder: Path, *arches: int) -> Path:
    entries = b""
    for arch in arches:
        head = bytearray(64)
        payload = b"\x7fELF" + bytes(60)
        struct.pack_into("<HHIQ", head, 0, 2, 0x0101, 64, len(payload))
        struct.pack_into("<I", head, 0x1C, arch)
        struct.pack_into("<Q", head, 0x28, 0x11)
        entries += bytes(head) + payload
    path = folder / "code.fatbin"
    path.write_bytes(struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(entries)) + entries)
    return path


def test_one_jetson_rule_everywhere(capplan_cli: object, tmp_path: Path) -> None:
    binary = _fatbin_file(tmp_path, 86)
    explain = capplan_cli("explain", "8.6", "--device", "Jetson AGX Orin", "--json")  # type: ignore[operator]
    assert json.loads(explain.stdout)["level"] == "cannot-run"
    verify = capplan_cli(  # type: ignore[operator]
        "verify", str(binary), "--expect", "8.6", "--device", "Jetson AGX Orin", "--json"
    )
    assert verify.exit_code == int(ExitCode.VERIFY_FAILED)
    assert json.loads(verify.stdout)["device"]["runs"] == "cannot-run"
    limits = capplan_cli("limits", "read", "--binary", str(binary), "--json")  # type: ignore[operator]
    assert limits.exit_code == 0, limits.stderr
    text = limits.stdout
    assert '"8.6"' in text and '"8.9"' in text  # same major, later minor: compatible
    supported = json.loads(text)["supported"]
    assert "8.7" not in supported and "10.1" not in supported  # Jetsons need exact SASS


# -- 7. compute_XY is PTX ------------------------------------------------------------------------
def test_compute_xy_is_a_ptx_target(capplan_cli: object, tmp_path: Path) -> None:
    result = capplan_cli("explain", "compute_86", "--device", "9.0", "--json")  # type: ignore[operator]
    assert result.exit_code == 0 and json.loads(result.stdout)["level"] == "ptx-jit"
    same = capplan_cli("explain", "8.6+PTX", "--device", "9.0", "--json")  # type: ignore[operator]
    assert json.loads(same.stdout)["targets"] == json.loads(result.stdout)["targets"]
    binary = _fatbin_file(tmp_path, 86)
    verify = capplan_cli("verify", str(binary), "--expect", "compute_86", "--json")  # type: ignore[operator]
    assert json.loads(verify.stdout)["missing_ptx"] == ["compute_86"]


# -- 8. unknown capabilities ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ("explain", "99.9", "--device", "8.6"),
        ("explain", "sm_86a", "--device", "8.6"),
        ("explain", "8.6", "--device", "99.9"),
        ("explain", "8.6", "--device", "sm_86a"),
        ("verify", "FILE", "--expect", "99.9"),
        ("verify", "FILE", "--expect", "8.6", "--device", "99.9"),
    ],
)
def test_unknown_capabilities_exit_4(
    capplan_cli: object, tmp_path: Path, args: tuple[str, ...]
) -> None:
    binary = _fatbin_file(tmp_path, 86)
    argv = [str(binary) if a == "FILE" else a for a in args]
    err = one_line_error(capplan_cli(*argv), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert "unknown capability" in err and "sm_86" in err  # the accepted spellings


# -- 9. the embedded default ---------------------------------------------------------------------
def test_embedded_default_plan_outside_the_repository(capplan_in: object) -> None:
    result = capplan_in("plan", "--print-identifiers")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    assert "torch-sm80" in result.stdout.split()
    assert "embedded default plan" in result.stderr


def test_embedded_default_is_the_repository_plan() -> None:
    import tomllib

    packaged = SRC / "capplan" / "default-plan.toml"
    assert packaged.read_bytes() == (REPO / "capplan.toml").read_bytes(), (
        "copy capplan.toml to planner/src/capplan/default-plan.toml"
    )
    pyproject = tomllib.loads((REPO / "planner" / "pyproject.toml").read_text())
    assert "default-plan.toml" in pyproject["tool"]["setuptools"]["package-data"]["capplan"]


def test_broken_pyproject_is_an_error(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool\n")
    err = one_line_error(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    assert "pyproject.toml" in err


# -- 10. --gpu and CAPPLAN_GPUS replace the fleet ----------------------------------------------------
def test_gpu_flag_replaces_the_fleet_and_its_counts(capplan_cli: object) -> None:
    result = capplan_cli("plan", "--gpu", "RTX 3090", "--print-identifiers")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    assert "torch-sm86" in result.stdout.split() and "torch-sm80" not in result.stdout.split()
    env = capplan_cli("plan", "--print-identifiers", env={"CAPPLAN_GPUS": "L4"})  # type: ignore[operator]
    assert env.exit_code == 0 and "torch-sm89" in env.stdout.split()


# -- 11. matrix --json ---------------------------------------------------------------------------
def test_matrix_json_flag(capplan_cli: object) -> None:
    flag = capplan_cli("matrix", "--json")  # type: ignore[operator]
    fmt = capplan_cli("matrix", "--format", "json")  # type: ignore[operator]
    assert flag.exit_code == 0 and flag.stdout == fmt.stdout
    helptext = " ".join(capplan_cli("matrix", "--help").stdout.split())  # type: ignore[operator]
    assert '{"matrices": [' in helptext
    assert "matrices" in (REPO / "docs" / "commands.md").read_text()


# -- 12. closed stdout ---------------------------------------------------------------------------
@pytest.mark.parametrize("args", [("plan",), ("plan", "--print-identifiers"), ("matrix", "--json")])
def test_closed_stdout_exits_0_quietly(args: tuple[str, ...]) -> None:
    import capplan

    src = Path(capplan.__file__).resolve().parents[1]  # the capplan under test
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "100"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "capplan", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == b""


# -- 13. file mode ---------------------------------------------------------------------------------
def test_generate_writes_a_normal_file_mode(capplan_cli: object, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    old = os.umask(0o022)
    try:
        assert capplan_cli("generate", "--output", str(out)).exit_code == 0  # type: ignore[operator]
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        out.chmod(0o640)
        out.write_text("old")
        assert capplan_cli("generate", "--output", str(out)).exit_code == 0  # type: ignore[operator]
        assert stat.S_IMODE(out.stat().st_mode) == 0o640 and out.read_text() != "old"
    finally:
        os.umask(old)


# -- 14. usage errors ------------------------------------------------------------------------------
def test_usage_errors_are_one_line(capplan_cli: object) -> None:
    # Issue 31: click's block (usage, "Try ...", "Error: ...") then our line said it twice.
    result = capplan_cli("plan", "--bogus")  # type: ignore[operator]
    last = one_line_error(result, ExitCode.USAGE)
    assert "--bogus" in last and result.stderr == last + "\n"
    assert "Usage:" not in result.stderr and "Error:" not in result.stderr
    # click's suggestion for a near option, and ours for a near command, stay on the line.
    near = capplan_cli("plan", "--jsn")  # type: ignore[operator]
    assert near.stderr.count("\n") == 1 and "Did you mean '--json'?" in near.stderr
    command = capplan_cli("pla")  # type: ignore[operator]
    assert command.stderr.count("\n") == 1 and "Did you mean" in command.stderr
    assert "'plan'" in command.stderr
    assert one_line_error(command, ExitCode.USAGE).startswith("capplan: error: No such command")
    long = capplan_cli("matrix", "--runners", "x" * 5000)  # type: ignore[operator]
    last = one_line_error(long, ExitCode.USAGE)
    assert len(last) < 400 and all(len(line) < 500 for line in long.stderr.splitlines())


@pytest.mark.parametrize(
    "toml",
    [
        '[fleet]\ngpus = ["{x}"]\n[packages.torch]\n',
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\nexclude = ["{x}"]\n',
        '[fleet]\ngpus = ["A100"]\n[packages."{x}"]\n',
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\n[policy]\n"{x}" = 1\n',
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\n[policy]\nrunners = "{x}"\n',
    ],
)
def test_long_bad_values_are_quoted_in_part(capplan_in: object, tmp_path: Path, toml: str) -> None:
    (tmp_path / "capplan.toml").write_text(toml.replace("{x}", "q" * 5000))
    result = capplan_in("plan")  # type: ignore[operator]
    assert result.exit_code in (int(ExitCode.INVALID_INPUT), int(ExitCode.CONFIG))
    last = one_line_error(result, ExitCode(result.exit_code))
    assert "q" * 150 in last and len(last) < 600, len(last)


# -- 15. help summaries ----------------------------------------------------------------------------
def test_every_command_summary_reads_whole(capplan_cli: object) -> None:
    from capplan.cli.main import COMMANDS

    text = capplan_cli("--help", env={"COLUMNS": "80"}).stdout  # type: ignore[operator]
    section = text.split("Commands:")[1].split("Exit codes")[0]
    lines = [line for line in section.splitlines() if line.strip()]
    assert len(lines) == len(COMMANDS)  # one line each
    for line in lines:
        assert "..." not in line and line.rstrip().endswith("."), line
        assert len(line) <= 80


# -- 16. names stay whole in tables ----------------------------------------------------------------
@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_matrix_table_keeps_names_whole(capplan_in: object, tmp_path: Path, columns: str) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100", "RTX 5090", "GTX 1080 Ti"]\n[packages.torchvision]\n'
        '[packages.cupy]\n[policy]\ncuda = ["13.0", "12.9"]\n'
    )
    names = capplan_in("plan", "--print-identifiers").stdout.split()  # type: ignore[operator]
    table = capplan_in("matrix", env={"COLUMNS": columns})  # type: ignore[operator]
    assert table.exit_code == 0, table.stderr
    cells = {c.strip() for line in table.stdout.splitlines() for c in line.split("│")}
    assert set(names) <= cells
    assert "…" not in table.stdout
    # A table line (borderless at the edges since issue 33) holds "│" between its cells.
    rows = [line for line in table.stdout.splitlines() if "│" in line]
    if columns != "60":
        assert len(rows) == len(names)  # one line per job: needs is a count
    if columns == "200":
        assert max(len(line) for line in table.stdout.splitlines()) <= 200


# -- 17. bad input: documented exit codes ----------------------------------------------------------
@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe\x00\x01binary",
        "[fleet]\n".encode("utf-16"),
        b"\x7fELF\x02\x01\x01\x00\x00\x03\x00>\x00\x80\xff",
    ],
)
def test_config_that_is_not_utf8(capplan_in: object, tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(content)
    for result in (
        capplan_in("plan", "--config", str(bad)),  # type: ignore[operator]
        capplan_in("plan", env={"CAPPLAN_CONFIG": str(bad)}),  # type: ignore[operator]
    ):
        err = one_line_error(result, ExitCode.CONFIG)
        assert str(bad) in err and "offset" in err


def test_deeply_nested_inputs(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text("a = " + "[" * 20000 + "]" * 20000 + "\n")
    one_line_error(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    jobs = tmp_path / "jobs.json"
    jobs.write_text("[" * 100000 + "]" * 100000 + "\n")
    result = capplan_in(  # type: ignore[operator]
        "matrix", "--config", str(REPO / "capplan.toml"), "--skip-cached",
        "--cache", "http://127.0.0.1:9", "--jobs", str(jobs),
    )  # fmt: skip
    one_line_error(result, ExitCode.DATA)


@pytest.mark.parametrize("content", [b"garbage", b"\xff\xfe\x00", b"[" * 100000])
def test_kb_dir_pointing_at_garbage(capplan_cli: object, tmp_path: Path, content: bytes) -> None:
    (tmp_path / "capabilities.json").write_bytes(content)
    for folder in (tmp_path, tmp_path / "missing", Path("/etc/passwd")):
        result = capplan_cli("plan", env={"CAPPLAN_KB_DIR": str(folder)})  # type: ignore[operator]
        one_line_error(result, ExitCode.DATA)


def test_limits_kb_file_that_is_not_utf8(capplan_cli: object, tmp_path: Path) -> None:
    kb = tmp_path / "torch.json"
    kb.write_bytes(b"\xff\xfe\x00binary")
    source = REPO / "tests/data/torch_sources/shape_2_9.py"
    result = capplan_cli(  # type: ignore[operator]
        "limits", "read", "torch", "--file", str(source), "--release", "2.9.0",
        "--update-kb", "--kb", str(kb),
    )  # fmt: skip
    one_line_error(result, ExitCode.DATA)


def test_nvidia_smi_printing_binary(capplan_cli: object, tmp_path: Path) -> None:
    result = capplan_cli("detect", env=fake_smi(tmp_path, b"\xff\xfe\x00\x81\x82garbage\n"))  # type: ignore[operator]
    assert result.exit_code != int(ExitCode.FAILURE)
    assert "internal error" not in result.stderr
    if result.exit_code:
        one_line_error(result, ExitCode(result.exit_code))


def test_torch_source_url_that_is_not_a_url(capplan_cli: object) -> None:
    result = capplan_cli(  # type: ignore[operator]
        "limits", "read", "torch", "--version", "2.4.0",
        env={"CAPPLAN_TORCH_SOURCE_URL": "http://[::1/{version}"},
    )  # fmt: skip
    assert "CAPPLAN_TORCH_SOURCE_URL" in one_line_error(result, ExitCode.INVALID_INPUT)


def test_generate_cannot_write(capplan_cli: object, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for target in (str(blocker / "plan.json"), "/proc/capplan/plan.json", ""):
        err = one_line_error(capplan_cli("generate", "--output", target), ExitCode.WRITE)  # type: ignore[operator]
        assert "cannot write" in err
    assert blocker.read_text() == "x"
    codes = (REPO / "docs" / "exit-codes.md").read_text()
    assert f"| {int(ExitCode.WRITE)} | write" in codes


def test_generate_full_disk_keeps_the_old_file(
    capplan_cli: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "plan.json"
    out.write_text("old")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    err = one_line_error(capplan_cli("generate", "--output", str(out)), ExitCode.WRITE)  # type: ignore[operator]
    assert "No space left on device" in err and str(out) in err
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


# -- 18. garbage is not accepted silently --------------------------------------------------------------
@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ("[policy]\nrunners = true\n", "runners"),
        ('[policy]\nrunners = "4"\n', "runners"),
        ("[fleet.count]\nA100 = true\n", "count"),
        ('[packages.torch]\nattr = "python3Packages.to rch"\n', "Nix attribute"),
        ('[packages.torch]\nattr = "1torch"\n', "Nix attribute"),
        ('[packages.torch]\nattr = "python3Packages..torch"\n', "Nix attribute"),
    ],
)
def test_strict_config_types(capplan_in: object, tmp_path: Path, toml: str, fragment: str) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.cupy]\n' + toml
        if "[fleet" not in toml
        else '[packages.cupy]\n[fleet]\ngpus = ["A100"]\n'
        + toml.replace("[fleet.count]", "[fleet.count]")
    )
    err = one_line_error(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    assert fragment in err


def test_valid_attr_paths_pass(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\nattr = "python3Packages.torch-bin_2\'"\n'
    )
    assert capplan_in("plan").exit_code == 0  # type: ignore[operator]


@pytest.mark.parametrize("value", ["٤", "४", "4.0", "four"])
def test_runners_must_be_ascii_digits(capplan_cli: object, value: str) -> None:
    one_line_error(capplan_cli("matrix", "--runners", value), ExitCode.USAGE)  # type: ignore[operator]
    one_line_error(capplan_cli("matrix", env={"CAPPLAN_RUNNERS": value}), ExitCode.CONFIG)  # type: ignore[operator]


def test_jobs_without_skip_cached(capplan_cli: object, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.json"
    jobs.write_text("")
    err = one_line_error(capplan_cli("matrix", "--jobs", str(jobs)), ExitCode.USAGE)  # type: ignore[operator]
    assert "--skip-cached" in err


def test_inspect_empty_path(capplan_cli: object) -> None:
    one_line_error(capplan_cli("inspect", ""), ExitCode.INVALID_INPUT)  # type: ignore[operator]


def test_generate_check_on_a_missing_file(capplan_cli: object, tmp_path: Path) -> None:
    result = capplan_cli("generate", "--check", "--output", str(tmp_path / "none.json"))  # type: ignore[operator]
    err = one_line_error(result, ExitCode.STALE)
    assert "missing" in err and "stale" not in err


# -- 19. signals during generate -----------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_during_write_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    from capplan.adapters.files import atomic_write_text

    out = tmp_path / "plan.json"
    out.write_text("old")
    real_fsync = os.fsync

    def killed(fd: int) -> None:
        real_fsync(fd)
        os.kill(os.getpid(), sig)

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(SystemExit) as stop:
        atomic_write_text(out, "new")
    assert stop.value.code == 128 + sig
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]
    assert signal.getsignal(sig) is not None  # the previous handler is back


def test_unknown_capability_in_a_fat_group(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\n[policy]\nfat = { g = ["A100", "99.9"] }\n'
    )
    one_line_error(capplan_in("plan"), ExitCode.INVALID_INPUT)  # type: ignore[operator]


def test_plan_and_detect_tables_keep_names_whole(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["RTX 5090", "GTX 1080 Ti"]\n[packages.torchvision]\n[packages.cupy]\n'
        '[policy]\ncuda = ["13.0", "12.9"]\n'
    )
    names = capplan_in("plan", "--print-identifiers").stdout.split()  # type: ignore[operator]
    text = capplan_in("plan", env={"COLUMNS": "40"}).stdout  # type: ignore[operator]
    cells = {c.strip() for line in text.splitlines() for c in line.split("│")}
    assert {n for n in names if n.startswith(("torchvision", "cupy"))} <= cells
    env = {**fake_smi(tmp_path, "NVIDIA GeForce GTX 1080 Ti, 6.1, 570.124.06\n"), "COLUMNS": "40"}
    detect = capplan_in("detect", env=env).stdout  # type: ignore[operator]
    cells = {c.strip() for line in detect.splitlines() for c in line.split("│")}
    assert {"torchvision-sm61-cu129", "cupy-cu129"} <= cells
