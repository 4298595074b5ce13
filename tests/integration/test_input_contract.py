"""Issue 31's input contract for what capplan echoes and how it reports errors.

Every echoed value goes through one function (``capplan.errors.shorten``: control characters
escaped, then cut), every error is one line, and an identifier is checked in one place
(``capplan.core.model.identifiers``). Each test here failed on the commit the issue was fixed
from (c9356a3).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capplan.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
DRV = "/nix/store/" + "a" * 32 + "-torch.drv"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31m\r\x9b1m\u202e"


def one_line(result: object, code: ExitCode) -> str:
    """The whole of stderr: one ``capplan: error:`` line, with exit ``code``."""
    assert result.exit_code == int(code), (result.exit_code, result.stderr)  # type: ignore[attr-defined]
    err: str = result.stderr  # type: ignore[attr-defined]
    assert err.startswith("capplan: error: ") and err.count("\n") == 1, err[:2000]
    return err


def no_controls(text: str) -> bool:
    """Nothing a terminal or a CI log would act on: no ESC, CR, C1 or bidi override, and no
    line that starts (after blanks) with a GitHub workflow command."""
    bad = any(c in text for c in "\x1b\r\x07\x9b\u202e")
    command = any(line.lstrip().startswith("::") for line in text.splitlines())
    return not bad and not command


# -- cut: a long value gives a readable line -------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ("gpus", "A" * 100_000),
        ("ci", "github", "--cache", "a" * 100_000),
        ("ci", "github", "--cache", "cache", "--cache-url", "http://x/" + "%" * 100_000),
    ],
    ids=["gpus", "ci-cache", "ci-cache-url"],
)
def test_a_long_value_is_cut_in_the_error_line(capplan_cli: object, args: tuple[str, ...]) -> None:
    err = one_line(capplan_cli(*args), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert len(err) < 1_200  # it was 100,069 and 100,125 characters


def test_a_long_policy_system_is_cut(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        f'[fleet]\ngpus = ["A100"]\n[packages.torch]\n[policy]\nsystems = ["{"x" * 50_000}"]\n'
    )
    err = one_line(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    assert len(err) < 1_200 and "unknown system" in err


def test_a_repeated_policy_system_is_named_once(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\n[policy]\n'
        'systems = ["x86_64-linux", "aarch64-linux", "x86_64-linux"]\n'
    )
    err = one_line(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    assert "'x86_64-linux' twice" in err


# -- escaped: control characters never reach the terminal or the CI log --------------------------
def test_an_error_line_escapes_control_characters(capplan_cli: object) -> None:
    err = one_line(capplan_cli("gpus", "RTX" + HOSTILE), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert no_controls(err) and "\\x1b]0;pwned\\x07" in err


def test_failures_add_refuses_a_newline_in_the_attribute(
    capplan_in: object, tmp_path: Path
) -> None:
    attr = "x86_64-linux.torch-sm86\n::error::the build was tampered with"
    result = capplan_in(  # type: ignore[operator]
        "failures", "add", "rec.json", "--attr", attr, "--drv", DRV, "--system", "x86_64-linux"
    )
    err = one_line(result, ExitCode.INVALID_INPUT)
    assert no_controls(err) and "control character" in err
    assert not (tmp_path / "rec.json").exists()


@pytest.mark.parametrize("attr", ["a\tb", "a\x1b[2Jb", " a", "a\u2028b", ""])
def test_failures_add_refuses_other_unusable_attributes(capplan_in: object, attr: str) -> None:
    result = capplan_in(  # type: ignore[operator]
        "failures", "add", "rec.json", "--attr", attr, "--drv", DRV, "--system", "x86_64-linux"
    )
    assert no_controls(one_line(result, ExitCode.INVALID_INPUT))


def _poisoned_record(path: Path) -> None:
    """A record as another branch's cache could hold it: a log line made to act."""
    path.write_text(
        json.dumps(
            {
                "format": "capplan-failures",
                "version": 1,
                "failures": {
                    DRV: {
                        "attr": "x86_64-linux.torch-sm86",
                        "system": "x86_64-linux",
                        "since": "2026-01-01T00:00:00Z",
                        "last": "2026-01-01T00:00:00Z",
                        "count": 1,
                        "log_tail": ["fine", HOSTILE + "\n::error::owned [bold]x[/bold]"],
                    }
                },
            }
        )
    )


def test_failures_list_escapes_a_poisoned_log_line(capplan_in: object, tmp_path: Path) -> None:
    _poisoned_record(tmp_path / "rec.json")
    result = capplan_in("failures", "list", "rec.json")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    assert no_controls(result.stdout) and "\\x1b]0;pwned" in result.stdout
    assert "[bold]x[/bold]" in result.stdout.replace("\n", "")  # shown, not read as markup


def test_detect_escapes_a_jetson_model(capplan_cli: object, tmp_path: Path) -> None:
    tree = tmp_path / "root" / "proc" / "device-tree"
    tree.mkdir(parents=True)
    (tree / "model").write_bytes(b"NVIDIA Jetson AGX Orin" + HOSTILE.encode()[:23] + b"\0")
    (tree / "compatible").write_bytes(b"nvidia,p3701-0005\0nvidia,tegra234\0")
    env = {
        "PATH": str(tmp_path),
        "CAPPLAN_SYSTEM": "aarch64-linux",
        "CAPPLAN_ROOT": str(tmp_path / "root"),
    }
    result = capplan_cli("detect", env=env)  # type: ignore[operator]
    assert result.exit_code in (0, int(ExitCode.NO_GPU)), result.stderr
    assert no_controls(result.stdout) and no_controls(result.stderr)


# -- the error contract ---------------------------------------------------------------------
def test_bare_capplan_prints_the_whole_help(capplan_cli: object) -> None:
    result = capplan_cli()  # type: ignore[operator]
    assert result.exit_code == int(ExitCode.USAGE)
    text = result.stdout + result.stderr
    for name in ("caps", "plan", "verify"):  # it stopped after "caps List CUDA capabilities"
        assert f"  {name} " in text
    assert "wont-run" in text  # the exit-code epilog, the help's last part


def test_dispatch_explain_reports_its_failure_on_stderr(capplan_cli: object) -> None:
    result = capplan_cli("dispatch", "explain", "--device", "3.5", "--package", "torch")  # type: ignore[operator]
    err = one_line(result, ExitCode.INFEASIBLE)  # the table on stdout, and the line
    assert "torch-dispatch would start nothing" in err and "3.5" in err
    assert "torch" in result.stdout
    as_json = capplan_cli("dispatch", "explain", "--device", "3.5", "--json")  # type: ignore[operator]
    err = one_line(as_json, ExitCode.INFEASIBLE)
    assert "more package(s)" in err and json.loads(as_json.stdout)["dispatch"]


# -- garbage accepted -----------------------------------------------------------------------
def test_matrix_refuses_a_stage_the_plan_lacks(capplan_cli: object) -> None:
    result = capplan_cli("matrix", "--format", "github", "--stage", "99")  # type: ignore[operator]
    err = one_line(result, ExitCode.INVALID_INPUT)
    assert "--stage 99" in err and result.stdout == ""
    for flags in (("--stage", "0"), ("--stage", "0", "--shards")):
        ok = capplan_cli("matrix", "--format", "github", *flags)  # type: ignore[operator]
        assert ok.exit_code == 0 and json.loads(ok.stdout)


@pytest.mark.parametrize("layout", ["garbage", "1,,2", "0", "1,2,", "-1", ""])
def test_expect_shards_garbage_is_invalid_input(capplan_cli: object, layout: str) -> None:
    result = capplan_cli("matrix", "--format", "github", "--expect-shards", layout)  # type: ignore[operator]
    assert "is not a layout" in one_line(result, ExitCode.INVALID_INPUT)


def test_expect_shards_of_another_layout_is_still_stale(capplan_cli: object) -> None:
    result = capplan_cli("matrix", "--format", "github", "--expect-shards", "9,9")  # type: ignore[operator]
    one_line(result, ExitCode.STALE)


@pytest.mark.parametrize("flags", [("--failures", "rec.json", "--offline"),
                                   ("--skip-cached", "--cache", "http://127.0.0.1:9")])  # fmt: skip
@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_jobs_file_is_an_error(
    capplan_in: object, tmp_path: Path, flags: tuple[str, ...], content: str
) -> None:
    (tmp_path / "capplan.toml").write_text('[fleet]\ngpus = ["A100"]\n[packages.torch]\n')
    (tmp_path / "jobs.jsonl").write_text(content)
    result = capplan_in("matrix", "--jobs", "jobs.jsonl", *flags)  # type: ignore[operator]
    err = result.stderr.splitlines()[-1]
    assert result.exit_code == int(ExitCode.DATA) and "holds no jobs" in err


@pytest.mark.parametrize("port", ["0", "99999", "65536", "00000"])
def test_a_cache_url_port_out_of_range_is_refused(capplan_cli: object, port: str) -> None:
    url = f"http://127.0.0.1:{port}"
    result = capplan_cli("ci", "github", "--cache", "c", "--cache-url", url)  # type: ignore[operator]
    assert "port" in one_line(result, ExitCode.INVALID_INPUT)


def test_a_cache_url_with_a_valid_port_is_taken(capplan_cli: object, tmp_path: Path) -> None:
    out = tmp_path / "wf.yml"
    result = capplan_cli(  # type: ignore[operator]
        "ci",
        "github",
        "--cache",
        "c",
        "--cache-url",
        "http://127.0.0.1:65535",
        "--output",
        str(out),
    )
    assert result.exit_code == 0, result.stderr
    assert "127.0.0.1:65535" in out.read_text()


@pytest.mark.parametrize("command", [("plan",), ("matrix",), ("generate", "--check")])
def test_an_unknown_dispatch_fallback_is_a_config_error(
    capplan_in: object, tmp_path: Path, command: tuple[str, ...]
) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\n[dispatch]\nfallback = "nosuch"\n'
    )
    err = one_line(capplan_in(*command), ExitCode.CONFIG)  # type: ignore[operator]
    assert "dispatch.fallback names 'nosuch'" in err


def test_a_planned_dispatch_fallback_is_taken(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["A100"]\n[packages.torch]\n[dispatch]\nfallback = "torch-sm80"\n'
    )
    assert capplan_in("plan").exit_code == 0  # type: ignore[operator]


NO_GPU_ENV = {"CAPPLAN_NVML": "0", "CAPPLAN_NVIDIA_SMI": "/nonexistent", "PATH": "/nonexistent"}


def test_doctor_refuses_an_empty_path(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "lib.so").write_bytes(b"\x7fELF")
    result = capplan_in("doctor", "", "--device", "8.6")  # type: ignore[operator]
    assert "PATH is empty" in one_line(result, ExitCode.INVALID_INPUT)


def test_doctor_says_no_such_file_before_no_gpu(capplan_in: object, tmp_path: Path) -> None:
    env = {**NO_GPU_ENV, "CAPPLAN_SYSFS_ROOT": str(tmp_path)}
    result = capplan_in("doctor", str(tmp_path / "missing"), env=env)  # type: ignore[operator]
    assert "no such file or directory" in one_line(result, ExitCode.INVALID_INPUT)


@pytest.mark.parametrize("command", [("inspect",), ("verify", "--expect", "8.6")])
def test_a_long_missing_path_is_echoed_cut(
    command: tuple[str, ...], capplan_in: object, tmp_path: Path
) -> None:
    # A 1,000-character path gave a 1,057-character line (the message cut only at its own
    # limit): a path is a value, echoed cut and escaped like every other.
    missing = tmp_path / ("x" * 200) / ("y" * 200) / ("z" * 200) / (HOSTILE + "w" * 200)
    result = capplan_in(command[0], str(missing), *command[1:])  # type: ignore[operator]
    err = one_line(result, ExitCode.INVALID_INPUT)
    assert "no such file or directory" in err and len(err) < 400 and no_controls(err), err


# -- determinism and valid output -------------------------------------------------------------
FLEET = ["A100", "RTX 3090", "L4", "MI300X", "Radeon RX 7900 XTX", "Jetson Orin", "GH200"]


def _fleet_toml(gpus: list[str], cpus: list[str]) -> str:
    return (
        f"[fleet]\ngpus = {json.dumps(gpus)}\ncpus = {json.dumps(cpus)}\n"
        "[packages.torch]\n[packages.cupy]\n[packages.nccl]\n"
        '[policy]\nsystems = ["x86_64-linux", "aarch64-linux"]\n'
    )


def test_plan_json_does_not_follow_the_fleet_order(capplan_in: object, tmp_path: Path) -> None:
    outputs = set()
    for gpus, cpus in [(FLEET, ["x86-64-v3", "zen4"]), (FLEET[::-1], ["zen4", "x86-64-v3"])]:
        (tmp_path / "capplan.toml").write_text(_fleet_toml(gpus, cpus))
        result = capplan_in("plan", "--json")  # type: ignore[operator]
        assert result.exit_code == 0, result.stderr
        outputs.add(result.stdout)
    assert len(outputs) == 1  # fleet lists, cupy's and AMD variants' serves, decision texts


@pytest.mark.parametrize(
    ("what", "entries"),
    [
        ("gpus", ["A100", "a100"]),
        ("gpus", ["RTX 3090", "rtx   3090"]),
        ("cpus", ["x86-64-v3", "X86_64_V3"]),
    ],
)
def test_a_fleet_entry_in_two_spellings_is_a_repeat(
    capplan_in: object, tmp_path: Path, what: str, entries: list[str]
) -> None:
    (tmp_path / "capplan.toml").write_text(
        f"[fleet]\n{what} = {json.dumps(entries)}\n[packages.torch]\n[packages.gromacs]\n"
    )
    err = one_line(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    assert f"{what} lists '{entries[0]}' twice" in err


def test_many_case_spellings_of_one_gpu_are_refused(capplan_in: object, tmp_path: Path) -> None:
    # 2**14 spellings of "A100" planned as that many GPUs (37 s); they are one GPU repeated.
    import itertools

    letters = [(c.lower(), c.upper()) if c.isalpha() else (c,) for c in "nvidia tesla a100 sxm"]
    spellings = ["".join(p) for p in itertools.islice(itertools.product(*letters), 16_384)]
    assert len(spellings) == 16_384
    (tmp_path / "capplan.toml").write_text(
        f"[fleet]\ngpus = {json.dumps(spellings)}\n[packages.torch]\n"
    )
    err = one_line(capplan_in("plan"), ExitCode.CONFIG)  # type: ignore[operator]
    assert "twice" in err and len(err) < 1_200


def test_a_huge_knowledge_base_cost_is_refused(capplan_cli: object, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    source = REPO / "planner/src/capplan/kb"
    for item in source.iterdir():
        if item.suffix == ".json":
            (kb / item.name).write_bytes(item.read_bytes())
    packages = json.loads((kb / "packages.json").read_text())
    packages["packages"]["torch"]["cost"]["base_minutes"] = 1e308
    (kb / "packages.json").write_text(json.dumps(packages))
    result = capplan_cli("plan", "--json", env={"CAPPLAN_KB_DIR": str(kb)})  # type: ignore[operator]
    assert "Infinity" not in result.stdout
    err = one_line(result, ExitCode.DATA)
    assert "base_minutes" in err and "torch" in err


def test_an_unwritable_output_is_documented_under_one_code(capplan_cli: object) -> None:
    # docs/exit-codes.md listed it under 4 and 15; the writer answers 15.
    result = capplan_cli("generate", "--output", "/proc/no-such-dir/plan.json")  # type: ignore[operator]
    assert result.exit_code == int(ExitCode.WRITE)
    rows = {}
    for line in (REPO / "docs/exit-codes.md").read_text().splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip().isdigit():
            rows[int(cells[1])] = cells[2]
    claims = [code for code, text in rows.items() if "cannot be written" in text]
    assert claims == [int(ExitCode.WRITE)] or all(
        "is 15" in rows[code] for code in claims if code != int(ExitCode.WRITE)
    )


def test_no_text_line_starts_a_workflow_command(capplan_cli: object, tmp_path: Path) -> None:
    # A GPU name nvidia-smi printed lands at a line's start in detect's text output.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '::error::owned, 8.6, 550.54.14'\n")
    smi.chmod(0o755)
    env = {"CAPPLAN_NVML": "0", "CAPPLAN_NVIDIA_SMI": str(smi), "CAPPLAN_SYSFS_ROOT": str(tmp_path)}
    result = capplan_cli("detect", env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    assert "\\x3a:error::owned" in result.stdout
    assert no_controls(result.stdout) and no_controls(result.stderr)


def test_a_wrapped_line_never_starts_a_workflow_command(
    capplan_cli: object, tmp_path: Path
) -> None:
    # rich wraps a long line at a blank: padding the name puts "::error::" at the start of the
    # next line for one of these widths.
    smi = tmp_path / "nvidia-smi"
    env = {"CAPPLAN_NVML": "0", "CAPPLAN_NVIDIA_SMI": str(smi), "CAPPLAN_SYSFS_ROOT": str(tmp_path)}
    for pad in range(80, 100):  # COLUMNS=100 (conftest): the wrap comes at 85-95
        smi.write_text(f"#!/bin/sh\necho 'RTX {'x' * pad} ::error::owned, 8.6, 550.54.14'\n")
        smi.chmod(0o755)
        result = capplan_cli("detect", env=env)  # type: ignore[operator]
        assert result.exit_code == 0, result.stderr
        assert no_controls(result.stdout), (pad, result.stdout)


def _record_with(log_line: str) -> dict[str, object]:
    return {
        "format": "capplan-failures",
        "version": 1,
        "failures": {
            DRV: {
                "attr": "x86_64-linux.torch-sm86",
                "system": "x86_64-linux",
                "since": "2026-01-01T00:00:00Z",
                "last": "2026-01-01T00:00:00Z",
                "count": 1,
                "log_tail": [log_line],
            }
        },
    }
