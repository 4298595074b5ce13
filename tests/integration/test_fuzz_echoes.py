"""Values capplan echoes (issue 46 "Echoes" and "Encoding", issue 52 item 6).

JSON output (every ``--json``: doctor, failures list, detect, plan, matrix, export; the files
written as JSON too) goes through one encoder, ``cli/output.py``'s ``to_json_text``, with
``ensure_ascii=False``: JSON itself escapes only C0 controls, so DEL, C1 controls (U+009B is CSI
on an 8-bit terminal), U+2028/U+0085 and bidi overrides went out raw, a file name's undecodable
byte (a lone surrogate by surrogateescape) made the output invalid UTF-8, and conda metadata's
``"\\ud800"`` ended doctor in UnicodeEncodeError (exit 1). Here: generated documents through
the encoder, doctor on an environment with hostile conda metadata and file names (real stdout,
in a subprocess), ``failures list --json``, ``export --wheel-name`` and ``ci ... --check``'s
diff of a committed file's bytes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.fuzzing import at_most, derandomized

from capplan.cli.main import cli
from capplan.cli.output import to_json_text
from capplan.errors import ExitCode

# What docs/limits.md's rule lists, as characters that may not reach stdout raw (the JSON
# structure's own newlines aside).
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
HOSTILE = ["\x1b[2J", "\x1b]0;t\x07", "\x7f", "\x85", "\x9b31m", "\u2028", "\u2029", "\u202e",
           "\u2066", "\ud800", "\udbff", "\udc00", "\udc80", "\udcff", "\ud800\udc80", "::error::",
           "\n", "\r", "\t", "\\", '"', "\u00e9", "\U0001f600"]  # fmt: skip

hostile_text = st.lists(
    st.one_of(st.sampled_from(HOSTILE), st.characters(), st.text(max_size=3)), max_size=6
).map("".join)
documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), hostile_text),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(hostile_text, inner, max_size=3)
    ),
    max_leaves=8,
)


def expected(value: Any) -> Any:
    """``value`` as a JSON reader gets it back: a lone surrogate that is no name's byte
    (surrogateescape's U+DC80-U+DCFF) is U+FFFD, everything else whole."""
    if isinstance(value, str):
        return re.sub("[\ud800-\udc7f\udd00-\udfff]", "\ufffd", value)
    if isinstance(value, list):
        return [expected(v) for v in value]
    if isinstance(value, dict):
        return {expected(k): expected(v) for k, v in value.items()}
    return value


@derandomized(300)
@given(documents)
def test_json_output_escapes_what_the_rule_lists(value: Any) -> None:
    text = to_json_text(value)
    text.encode("utf-8")  # valid UTF-8 whatever the values held: no lone surrogate left
    assert RAW.search(text) is None, ascii(text)
    assert json.loads(text) == expected(value)


def test_undecodable_name_bytes_are_kept_whole() -> None:
    name = os.fsdecode(b"lib\xff\x9b\xc2x\x1b.so")
    text = to_json_text({"path": name})
    assert text.isascii() or not RAW.search(text)
    assert "\\udcff" in text and "\\udc9b" in text
    assert os.fsencode(json.loads(text)["path"]) == b"lib\xff\x9b\xc2x\x1b.so"


# -- doctor: hostile conda metadata and file names, through the real stdout --------------------

KERNEL = "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"


@pytest.fixture(scope="module")
def gpu_library(tmp_path_factory: pytest.TempPathFactory, nvcc_bin: Path) -> Path:
    out = tmp_path_factory.mktemp("echo-nvcc")
    (out / "k.cu").write_text(KERNEL)
    lib = out / "libk.so"
    subprocess.run([str(nvcc_bin), "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared",
                    "-gencode", "arch=compute_80,code=sm_80", "-o", str(lib), str(out / "k.cu")],
                   check=True, capture_output=True)  # fmt: skip
    return lib


def _doctor(prefix: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    import capplan  # the capplan under test, wherever it was imported from

    source = Path(capplan.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(source), "NO_COLOR": "1"}
    env.pop("PYTHONIOENCODING", None)
    return subprocess.run(
        [sys.executable, "-m", "capplan", "doctor", os.fsencode(prefix), "--device", "A100",
         "--driver", "580.65.06", "-j", "1", *extra],
        env=env, capture_output=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["\ud800x", "\x1b[2J\u202e\x85\u2028\x9b", "ok\udc80\ud800"])
def test_doctor_with_hostile_conda_and_file_names(
    gpu_library: Path, tmp_path: Path, name: str
) -> None:
    prefix = tmp_path / "conda"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "lib").mkdir()
    shutil.copy(gpu_library, prefix / "lib" / "libk.so")
    odd = os.fsencode(prefix / "lib") + b"/libq\x1b[31m\xff\xc2\x9bx.so"
    shutil.copy(gpu_library, odd)
    meta = {"name": name, "version": "1" + name, "files": ["lib/libk.so"]}
    (prefix / "conda-meta" / "x-1.json").write_text(json.dumps(meta))  # ASCII, "\ud800" escaped
    done = _doctor(prefix, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout.decode("utf-8")  # strict: valid UTF-8
    assert RAW.search(text) is None, ascii(text[:2000])
    data = json.loads(text)
    paths = {os.fsencode(lib["path"]) for p in data["packages"] for lib in p["libraries"]}
    assert odd in paths  # the undecodable name, kept whole
    names = {p["name"] for p in data["packages"] if p["kind"] == "conda"}
    assert names == {expected(name)}
    done = _doctor(prefix)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = done.stdout.decode("utf-8")
    assert RAW.search(shown) is None, ascii(shown[:2000])


# -- failures list --json, export --wheel-name, ci --check ------------------------------------


def run(cwd: Path, *argv: str) -> Any:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with at_most(60):
            return CliRunner().invoke(cli, list(argv), catch_exceptions=True)
    finally:
        os.chdir(old)


def test_failures_list_json_escapes_log_lines(tmp_path: Path) -> None:
    (tmp_path / "build.log").write_bytes(
        "building\n\u202e evil \u2066 x\x7f \x1b[2J\n".encode() + b"\xff\xfe raw\n"
    )
    result = run(tmp_path, "failures", "add", "r.json", "--attr", "torch-sm86", "--drv",
                 "/nix/store/" + "a" * 32 + "-torch.drv", "--system", "x86_64-linux",
                 "--log", "build.log")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    result = run(tmp_path, "failures", "list", "r.json", "--json")
    assert result.exit_code == 0, result.stderr
    assert RAW.search(result.stdout) is None, ascii(result.stdout)
    lines = json.loads(result.stdout)["failures"]
    (entry,) = lines.values()
    assert any("\u202e evil" in line for line in entry["log_tail"])  # kept, as an escape


FLEET = '[fleet]\ngpus = ["RTX 3090", "A100"]\n[packages.torch]\n'
WHEEL = "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl"


@derandomized(20)
@given(st.sampled_from(HOSTILE[:10]), st.integers(0, len(WHEEL) - 4))
def test_wheel_names_holding_controls(tmp_path_factory: Any, bad: str, at: int) -> None:
    folder = tmp_path_factory.mktemp("wheel")
    (folder / "capplan.toml").write_text(FLEET)
    name = WHEEL[:at] + bad + WHEEL[at:]
    result = run(folder, "export", "wheel-variants", "--package", "torch", "--version", "2.9.0",
                 "--wheel-name", name, "--output", "out")  # fmt: skip
    assert result.exit_code == int(ExitCode.INVALID_INPUT), result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("capplan: error: --wheel-name") and RAW.search(line) is None
    assert not (folder / "out").exists()


@derandomized(30)
@given(st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=5)), max_size=8))
def test_check_diff_shows_the_committed_bytes_escaped(tmp_path_factory: Any,
                                                      parts: list[str]) -> None:  # fmt: skip
    folder = tmp_path_factory.mktemp("check")
    (folder / "capplan.toml").write_text(FLEET)
    assert (
        run(folder, "ci", "hydra", "--flake", "github:o/r", "--output", "spec.json").exit_code == 0
    )
    with (folder / "spec.json").open("ab") as handle:
        handle.write("".join(parts).encode("utf-8", "surrogatepass") + b"\xff\n")
    result = run(folder, "ci", "hydra", "--flake", "github:o/r", "--output", "spec.json",
                 "--check")  # fmt: skip
    assert result.exit_code == int(ExitCode.STALE), result.stderr
    assert RAW.search(result.stdout) is None, ascii(result.stdout)


@derandomized(20)
@given(st.lists(st.sampled_from([*HOSTILE[:9], "\u2066", "\u00e9", " "]), min_size=1, max_size=4))
def test_detect_json_escapes_what_nvidia_smi_printed(
    tmp_path_factory: Any, parts: list[str]
) -> None:
    folder = tmp_path_factory.mktemp("smi")
    (folder / "smi.out").write_text(f"NVIDIA A100{''.join(parts)}x, 8.0, 535.104.05\n")
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat '{folder / 'smi.out'}'\n")
    smi.chmod(0o755)
    (folder / "capplan.toml").write_text(FLEET)
    old = Path.cwd()
    os.chdir(folder)
    try:
        with at_most(60):
            result = CliRunner().invoke(cli, ["detect", "--json"], catch_exceptions=True,
                                        env={"CAPPLAN_NVIDIA_SMI": str(smi),
                                             "CAPPLAN_SYSFS_ROOT": str(folder / "none")})  # fmt: skip
    finally:
        os.chdir(old)
    assert result.exit_code in (0, int(ExitCode.NO_GPU)), result.stderr
    assert RAW.search(result.stdout) is None, ascii(result.stdout)
    if result.exit_code == 0:
        assert json.loads(result.stdout)["gpus"]
