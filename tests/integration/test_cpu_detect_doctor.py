"""CPU levels in `capplan detect` and `capplan doctor` (issue 23, item 7).

detect reads /proc/cpuinfo under CAPPLAN_ROOT (captures of real machines in tests/data/cpuinfo)
and recommends each package's per-level build; doctor reads the x86-64 level an ELF records as
needed (GNU_PROPERTY_X86_ISA_1_NEEDED, written by `ld -z x86-64-vN` on real gcc-built
libraries here) and calls a library the CPU lacks the level for "cannot run", naming the
missing features; a library recording no level is "unknown", never guessed.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.adapters.detect.cpu import detect_cpu, parse_cpuinfo
from capplan.adapters.environment import elf_x86_isa_needed
from capplan.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
CPUINFO = REPO / "tests" / "data" / "cpuinfo"

PLAN = """\
[fleet]
cpus = ["x86-64-v3", "sapphirerapids"]
[packages.gromacs]
[packages.llama-cpp]
[packages.numpy]
"""


@pytest.mark.parametrize(
    ("capture", "name", "arch", "level"),
    [
        ("haswell", "haswell", "x86_64", "x86-64-v3"),
        ("sapphirerapids", "sapphirerapids", "x86_64", "x86-64-v4"),
        ("zen4", "zen4", "x86_64", "x86-64-v4"),
        ("neoverse_v2", "neoverse_v2", "aarch64", None),
    ],
)
def test_real_cpuinfo_captures_name_their_microarchitecture(
    capture: str, name: str, arch: str, level: str | None
) -> None:
    found = parse_cpuinfo((CPUINFO / f"{capture}.txt").read_text())
    assert found is not None
    assert (found.microarchitecture, found.arch, found.level) == (name, arch, level)


def test_this_machine_reads_as_archspec_reads_it() -> None:
    import archspec.cpu

    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(
            f"archspec's host() is compared on x86_64 and aarch64, not {platform.machine()}"
        )
    found, why = detect_cpu(Path("/"))
    assert found is not None, why
    assert found.microarchitecture.replace("-", "_") == archspec.cpu.host().name


def test_cpuinfo_that_is_no_regular_file_or_no_known_cpu_is_a_note(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    os.mkfifo(tmp_path / "proc" / "cpuinfo")
    found, why = detect_cpu(tmp_path)
    assert found is None and "FIFO" in why
    (tmp_path / "proc" / "cpuinfo").unlink()
    (tmp_path / "proc" / "cpuinfo").write_text("processor\t: 0\ncpu\t\t: POWER9 (raw)\n")
    found, why = detect_cpu(tmp_path)
    assert found is None and "neither an x86_64 nor an aarch64" in why


def _run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CAPPLAN_")}
    environ.update(env, NO_COLOR="1", PATH="/usr/bin:/bin")
    return subprocess.run(
        [sys.executable, "-m", "capplan", *args],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _root(tmp_path: Path, capture: str) -> Path:
    root = tmp_path / f"root-{capture}"
    (root / "proc").mkdir(parents=True)
    shutil.copy(CPUINFO / f"{capture}.txt", root / "proc" / "cpuinfo")
    return root


NO_GPU = {"CAPPLAN_NVML": "0", "CAPPLAN_SYSFS_ROOT": "/nonexistent-sysfs"}


@pytest.mark.parametrize(
    ("capture", "gromacs"),
    [
        ("sapphirerapids", "gromacs-sapphirerapids"),
        ("haswell", "gromacs-x86-64-v3"),
        ("zen4", "gromacs-x86-64-v3"),  # Zen 4 runs v3 code, not Sapphire Rapids code
    ],
)
def test_detect_recommends_the_level_build_the_cpu_runs(
    tmp_path: Path, capture: str, gromacs: str
) -> None:
    (tmp_path / "capplan.toml").write_text(PLAN)
    env = {**NO_GPU, "CAPPLAN_ROOT": str(_root(tmp_path, capture))}
    proc = _run("detect", "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["gpus"] == []
    assert data["cpu"]["microarchitecture"] == capture
    # numpy and llama-cpp (cpuArchDynamicDispatch) pick their CPU code at run time: one generic
    # build each, so detect recommends no per-level build of them.
    assert data["cpu"]["variants"] == {"gromacs": gromacs}
    assert data["cpu"]["how"]["gromacs"]["command"] == f"nix build .#{gromacs}"
    text = _run("detect", env=env, cwd=tmp_path)
    assert text.returncode == 0 and f"use {gromacs}" in text.stdout


def test_detect_with_no_gpu_and_no_cpu_builds_is_still_no_gpu(tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text('[fleet]\ngpus = ["A100"]\n[packages.torch]\n')
    env = {**NO_GPU, "CAPPLAN_ROOT": str(_root(tmp_path, "haswell"))}
    proc = _run("detect", env=env, cwd=tmp_path)
    assert proc.returncode == ExitCode.NO_GPU and "no NVIDIA GPU found" in proc.stderr


# -- the ELF note and doctor ------------------------------------------------------------------


def _library(folder: Path, name: str, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc (Debian's build-essential)")
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "f.c"
    source.write_text("int f(int x) { return x * 3; }\n")
    out = folder / name
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, str(source), "-o", str(out)], check=True)
    source.unlink()
    return out


def _level(path: Path) -> str | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        return elf_x86_isa_needed(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_the_recorded_level_of_real_libraries(tmp_path: Path, level: str) -> None:
    if platform.machine() != "x86_64":
        pytest.skip("ld -z x86-64-vN marks x86-64 objects only")
    marked = _library(tmp_path, "libmarked.so", f"-Wl,-z,{level}")
    plain = _library(tmp_path, "libplain.so")
    assert _level(marked) == level
    assert _level(plain) is None  # no note: the level is unknown, not baseline


def _note_elf(wide: bool, order: str, bits: int) -> bytes:
    """A minimal ELF whose one PT_GNU_PROPERTY segment holds an ISA-needed property."""
    align = 8 if wide else 4
    prop = struct.pack(order + "III", 0xC0008002, 4, bits) + b"\0" * (-12 % align)
    note = struct.pack(order + "III", 4, len(prop), 5) + b"GNU\0" + prop
    ehsize, phentsize = (64, 56) if wide else (52, 32)
    note_at = ehsize + phentsize
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if order == "<" else 2, 1]) + b"\0" * 9
    if wide:
        header = struct.pack(order + "HHIQQQIHHHHHH", 3, 62, 1, 0, ehsize, 0, 0, ehsize,
                             phentsize, 1, 64, 0, 0)  # fmt: skip
        phdr = struct.pack(order + "IIQQQQQQ", 0x6474E553, 4, note_at, note_at, note_at,
                           len(note), len(note), 8)  # fmt: skip
    else:
        header = struct.pack(order + "HHIIIIIHHHHHH", 3, 3, 1, 0, ehsize, 0, 0, ehsize,
                             phentsize, 1, 40, 0, 0)  # fmt: skip
        phdr = struct.pack(order + "IIIIIIII", 0x6474E553, note_at, note_at, note_at,
                           len(note), len(note), 4, 4)  # fmt: skip
    return ident + header + phdr + note


@pytest.mark.parametrize("wide", [True, False], ids=["ELF64", "ELF32"])
@pytest.mark.parametrize("order", ["<", ">"], ids=["little", "big"])
@pytest.mark.parametrize(
    ("bits", "level"), [(1, "x86-64"), (3, "x86-64-v2"), (7, "x86-64-v3"), (15, "x86-64-v4")]
)
def test_synthetic_notes_of_every_class_and_byte_order(
    tmp_path: Path, wide: bool, order: str, bits: int, level: str
) -> None:
    path = tmp_path / "lib.so"
    path.write_bytes(_note_elf(wide, order, bits))
    assert _level(path) == level


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 200))
def test_damaged_notes_never_raise(
    tmp_path_factory: pytest.TempPathFactory, noise: bytes, at: int
) -> None:
    data = bytearray(_note_elf(True, "<", 7))
    data[at : at + len(noise)] = noise
    path = tmp_path_factory.mktemp("elf") / "lib.so"
    path.write_bytes(bytes(data))
    assert _level(path) in (None, "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")


@pytest.fixture
def env_with_levels(tmp_path: Path) -> Path:
    if platform.machine() != "x86_64":
        pytest.skip("ld -z x86-64-vN marks x86-64 objects only")
    lib = tmp_path / "env" / "lib"
    _library(lib, "libfast.so", "-march=x86-64-v3", "-Wl,-z,x86-64-v3")
    _library(lib, "libplain.so")
    return tmp_path / "env"


def test_doctor_refuses_a_library_built_for_a_level_the_cpu_lacks(env_with_levels: Path) -> None:
    proc = _run("doctor", "--device", "8.6", "--cpu", "x86-64-v2", "--json", str(env_with_levels),
                env={}, cwd=env_with_levels)  # fmt: skip
    assert proc.returncode == ExitCode.WONT_RUN, proc.stderr
    cpu = json.loads(proc.stdout)["cpu"]
    assert (cpu["name"], cpu["level"], cpu["source"]) == ("x86-64-v2", "x86-64-v2", "--cpu")
    assert (cpu["libraries_recording_level"], cpu["libraries_without_level"]) == (1, 1)
    (bad,) = cpu["cannot_run"]
    assert bad["path"].endswith("libfast.so") and bad["needs"] == "x86-64-v3"
    assert bad["cause"] == "cpu-level" and "lacks" in bad["reason"] and "avx2" in bad["reason"]


@pytest.mark.parametrize("cpu", ["haswell", "x86-64-v3", "sapphirerapids"])
def test_doctor_passes_a_cpu_that_runs_the_level(env_with_levels: Path, cpu: str) -> None:
    proc = _run("doctor", "--device", "8.6", "--cpu", cpu, str(env_with_levels), env={},
                cwd=env_with_levels)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"CPU {cpu} (--cpu" in proc.stdout


def test_doctor_reads_the_cpu_under_capplan_root(env_with_levels: Path, tmp_path: Path) -> None:
    lib = env_with_levels / "lib"
    _library(lib, "libavx512.so", "-march=x86-64-v4", "-Wl,-z,x86-64-v4")
    env = {"CAPPLAN_ROOT": str(_root(tmp_path, "haswell"))}
    proc = _run("doctor", "--device", "8.6", "--json", str(env_with_levels), env=env,
                cwd=env_with_levels)  # fmt: skip
    assert proc.returncode == ExitCode.WONT_RUN, proc.stderr
    cpu = json.loads(proc.stdout)["cpu"]
    assert cpu["name"] == "haswell" and cpu["source"] == "detected"
    assert [b["path"].rsplit("/", 1)[1] for b in cpu["cannot_run"]] == ["libavx512.so"]
    assert "avx512f" in cpu["cannot_run"][0]["reason"]


@pytest.mark.parametrize("bad", ["saphirerapids", "power9", "", "x86-64-v9"])
def test_doctor_bad_cpu_is_one_line_exit_4(env_with_levels: Path, bad: str) -> None:
    proc = _run("doctor", "--device", "8.6", "--cpu", bad, str(env_with_levels), env={},
                cwd=env_with_levels)  # fmt: skip
    assert proc.returncode == ExitCode.INVALID_INPUT, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["flags", "Features", "vendor_id", "CPU implementer", "CPU part",
                             "model name", "processor", "x"]),
            st.text(max_size=60),
        ),
        max_size=8,
    ),
    st.booleans(),
)  # fmt: skip
def test_any_cpuinfo_text_is_a_cpu_or_none_never_an_exception(
    fields: list[tuple[str, str]], blank_first: bool
) -> None:
    text = ("\n" if blank_first else "") + "\n".join(f"{k}\t: {v}" for k, v in fields)
    found = parse_cpuinfo(text)
    assert found is None or found.arch in ("x86_64", "aarch64")


def test_a_many_core_cpuinfo_is_read_by_its_first_block(tmp_path: Path) -> None:
    # 256 processors of a Sapphire Rapids: about 400 KB, more than any small read limit.
    block = (CPUINFO / "sapphirerapids.txt").read_text().strip() + "\n\n"
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(block * 256)
    assert (tmp_path / "proc" / "cpuinfo").stat().st_size > 300_000
    found, why = detect_cpu(tmp_path)
    assert found is not None and found.microarchitecture == "sapphirerapids", why
