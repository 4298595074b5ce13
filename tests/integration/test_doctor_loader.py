"""``capplan doctor`` and libraries the dynamic loader cannot load (issue 31).

A truncated ``libtorch_cuda.so`` got "everything runs", exit 0 (its truncation only in the JSON's
``problems``); a 0-byte ``lib*.so`` was skipped and an ELF file with a garbage header counted as
"checked, no GPU code". Each is now a ``cannot-run`` verdict with cause ``unloadable``, a
``cannot load`` line in the text output and exit 16.

The ground truth is the real loader: each damaged file below is first shown to fail in
``dlopen`` (ctypes, in a child process, since a cut segment kills it with SIGBUS), and the
intact file to load, so the tests never assert what capplan merely believes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.adapters.environment import loader_problem
from capplan.errors import ExitCode

DRIVER = "580.65.06"  # CUDA 13.0 GA: runs what nvcc 13 builds
KERNEL = "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"
CUDA_LIB = Path("/usr/local/cuda/lib64")
ZLIB = Path("/lib/x86_64-linux-gnu/libz.so.1")


def _load_end(path: Path) -> int | None:
    """Where the last PT_LOAD segment of ``path`` ends in the file (offset + file size), as
    binutils' readelf reads the program headers; None when readelf is absent or reads none."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    done = subprocess.run(
        [readelf, "-lW", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    ends = [
        int(fields[1], 16) + int(fields[4], 16)
        for fields in (line.split() for line in done.stdout.splitlines())
        if len(fields) >= 5 and fields[0] == "LOAD"
    ]
    return max(ends) if ends else None


def _loads(path: Path) -> bool:
    """Whether the real dynamic loader loads ``path`` (in a child: a cut segment is SIGBUS)."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(CUDA_LIB)}
    done = subprocess.run(
        [sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", str(path)],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode == 0


@pytest.fixture(scope="module")
def gpu_lib(tmp_path_factory: pytest.TempPathFactory, nvcc_bin: Path) -> Path:
    """A library with sm_86 SASS (nvcc 13), the stand-in for libtorch_cuda.so."""
    out = tmp_path_factory.mktemp("loader")
    source = out / "k.cu"
    source.write_text(KERNEL)
    lib = out / "libk_cuda.so"
    subprocess.run(
        [str(nvcc_bin), "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared",
         "-gencode", "arch=compute_86,code=sm_86", "-o", str(lib), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    if not _loads(lib):
        pytest.skip(f"the intact {lib.name} does not load here (no libcudart.so.13 in {CUDA_LIB})")
    return lib


def _env_with(tmp_path: Path, name: str, data: bytes) -> Path:
    site = tmp_path / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / name).write_bytes(data)
    return site


def _doctor(cli: Any, path: Path, *extra: str) -> tuple[int, str, dict[str, Any]]:
    args = ("doctor", str(path), "--device", "RTX 3090", "--driver", DRIVER, *extra)
    text = cli(*args)
    data = cli(*args, "--json")
    for result in (text, data):
        assert "Traceback" not in result.stderr, result.stderr
    assert text.exit_code == data.exit_code
    return text.exit_code, text.stdout, json.loads(data.stdout)


def _cut_inside_a_segment(data: bytes) -> bytes:
    # Half the file: inside the text segment of any real library, pages away from its end.
    return data[: len(data) // 2]


def test_truncated_gpu_library_cannot_load_and_is_exit_16(
    capplan_in: Any, tmp_path: Path, gpu_lib: Path
) -> None:
    whole = gpu_lib.read_bytes()
    site = _env_with(tmp_path, "libk_cuda.so", _cut_inside_a_segment(whole))
    assert not _loads(site / "pkg" / "libk_cuda.so")
    code, text, data = _doctor(capplan_in, site)
    assert code == int(ExitCode.WONT_RUN)
    assert "everything runs" not in text
    assert "cannot load" in text and "libk_cuda.so" in text and "truncated" in text
    (entry,) = data["unloadable"]
    assert entry["path"].endswith("pkg/libk_cuda.so")
    assert entry["reason"].startswith(f"truncated: {len(whole) // 2} bytes")
    (package,) = data["packages"]
    assert [v["cause"] for v in package["verdicts"]] == ["unloadable"]
    assert data["ok"] is False


def test_the_intact_gpu_library_still_runs(capplan_in: Any, tmp_path: Path, gpu_lib: Path) -> None:
    site = _env_with(tmp_path, "libk_cuda.so", gpu_lib.read_bytes())
    code, text, data = _doctor(capplan_in, site)
    assert (code, data["unloadable"], data["ok"]) == (0, [], True)
    assert "everything runs" in text


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "an empty file"),
        (b"\x7fELF" + b"\xff" * 60, "its ELF header is damaged"),
        (b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\x07\x00" + b"\x00" * 46, "damaged"),
        (b"garbage that is no library at all" * 4, "not an ELF file"),
    ],
    ids=["empty", "garbage-header", "zero-header", "not-elf"],
)
def test_empty_or_garbage_library_is_reported(
    capplan_in: Any, tmp_path: Path, data: bytes, why: str
) -> None:
    site = _env_with(tmp_path, "libbroken.so", data)
    assert not _loads(site / "pkg" / "libbroken.so")
    code, text, out = _doctor(capplan_in, site)
    assert code == int(ExitCode.WONT_RUN), text
    assert "no library with GPU code" not in text
    assert f"cannot load {site / 'pkg' / 'libbroken.so'}" in text
    (entry,) = out["unloadable"]
    assert why in entry["reason"]


def test_linker_scripts_and_shell_scripts_are_no_libraries(capplan_in: Any, tmp_path: Path) -> None:
    # A conda prefix's lib/libc.so is a GNU ld script; bin/ holds shell scripts.
    site = _env_with(
        tmp_path,
        "libc.so",
        b"/* GNU ld script\n   Use the shared library.  */\nOUTPUT_FORMAT(elf64-x86-64)\n"
        b"GROUP ( /lib/libc.so.6 /usr/lib/libc_nonshared.a )\n",
    )
    script = site / "pkg" / "run"
    script.write_text("#!/bin/sh\necho this script is long enough to be looked at by doctor\n")
    script.chmod(0o755)
    # Neither is judged (no unloadable library): the folder holds no GPU code, exit 3.
    result = capplan_in("doctor", str(site), "--device", "RTX 3090", "--driver", DRIVER)
    assert result.exit_code == int(ExitCode.NOTHING_TO_DO), result.stderr
    assert "holds no GPU code" in result.stderr and "Traceback" not in result.stderr


def test_truncated_library_in_a_wheel(capplan_in: Any, tmp_path: Path) -> None:
    if not ZLIB.is_file():
        pytest.skip(f"{ZLIB} not on this machine")
    wheel = tmp_path / "broken-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("broken/libz.so.1", _cut_inside_a_segment(ZLIB.read_bytes()))
        archive.writestr("broken/libempty.so", b"")
    code, _text, data = _doctor(capplan_in, wheel)
    assert code == int(ExitCode.WONT_RUN)
    reasons = sorted(entry["reason"].split(":")[0] for entry in data["unloadable"])
    assert reasons == ["an empty file", "truncated"]


# -- generated damage to a real library: what the headers say agrees with the loader ----------
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same 40 cases on every run: CI never meets a new one by chance
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_damaged_copies_of_a_real_library(
    tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    """Cut a real library anywhere inside its loaded part, or overwrite bytes of its ELF and
    program headers: capplan reports no false alarm (a file it calls unloadable never loads),
    and a cut a page or more inside a segment is always reported."""
    if not ZLIB.is_file():
        pytest.skip(f"{ZLIB} not on this machine")
    whole = ZLIB.read_bytes()
    folder = tmp_path_factory.mktemp("damaged")
    path = folder / "libz.so.1"
    if data.draw(st.booleans(), label="cut"):
        cut = data.draw(st.integers(0, len(whole) - 8192), label="cut at")
        damaged = whole[:cut]
    else:
        at = data.draw(st.integers(0, 0x200), label="overwrite at")
        junk = data.draw(st.binary(min_size=1, max_size=16), label="junk")
        damaged = whole[:at] + junk + whole[at + len(junk) :]
    path.write_bytes(damaged)
    fd = os.open(path, os.O_RDONLY)
    try:
        why = loader_problem(fd, len(damaged))
    finally:
        os.close(fd)
    if len(damaged) < len(whole) - 4096:
        assert why is not None and ("truncated" in why or "empty" in why), why
    if why is not None and "segments need" in why:
        # The headers ask for file bytes the file lacks. ld.so maps segments lazily, so a
        # dlopen can still succeed when only a PT_LOAD's offset was damaged (a page touched
        # later is SIGBUS): the claim is checked against binutils' reading of the headers.
        need = int(why.rsplit(" ", 1)[1])
        end = _load_end(path)
        if end is None:
            assert not _loads(path), f"capplan says {why!r}, but the loader loads it"
        else:
            assert end == need > len(damaged), (why, end)
    elif why is not None:
        assert not _loads(path), f"capplan says {why!r}, but the loader loads it"
