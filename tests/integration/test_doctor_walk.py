"""doctor's walk of an environment and the processes it starts (issues 46 and 52): what holds no
GPU code is nothing to check (exit 3) whatever the machine, links out of the environment are not
read, the kernel's file systems are not walked, file holes are not searched, pool workers and an
interpreter's background children end with capplan."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.fuzzing import at_most
from tests.integration.test_doctor import cuda_runtime_library

from capplan.adapters import environment, memsearch
from capplan.errors import ExitCode

SRC = Path(environment.__file__).resolve().parents[2]  # the capplan under test
NO_GPU = {"CAPPLAN_SYSFS_ROOT": "/nonexistent", "CAPPLAN_NVML": "0", "PATH": "/usr/bin:/bin"}


def _venv(folder: Path) -> Path:
    """A fresh virtualenv (no pip): its only ELF files are links to the system interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder


@pytest.mark.parametrize("device", [(), ("--device", "8.6")])
def test_an_environment_without_gpu_code_is_nothing_to_check(
    capplan_in: Any, tmp_path: Path, device: tuple[str, ...]
) -> None:
    # Issue 46: exit 10 ("no GPU found") without --device, and "4 ELF files checked" with it.
    venv = _venv(tmp_path / "venv")
    result = capplan_in("doctor", str(venv), *device, env=NO_GPU)
    assert result.exit_code == int(ExitCode.NOTHING_TO_DO), result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("capplan: error: ") and "holds no GPU code, nothing to check" in line
    assert "0 ELF files read" in line  # the interpreter links lead out of the venv


def test_links_out_of_the_environment_are_not_read(capplan_in: Any, tmp_path: Path) -> None:
    # Issue 46: a link into /proc ended in OSError EIO (exit 1).
    lib = tmp_path / "env" / "lib"
    cuda_runtime_library(lib)
    (lib / "libmem.so").symlink_to("/proc/self/mem")
    (lib / "libpython.so.3").symlink_to(os.path.realpath(sys.executable))
    (lib / "libcudart.so").symlink_to("libcudart.so.13")  # inside: the same file, read once
    result = capplan_in(
        "doctor", str(tmp_path / "env"), "--device", "8.6", "--driver", "580.65.06", "--json"
    )
    assert result.exit_code == 0, result.stderr
    import json

    assert json.loads(result.stdout)["scanned"]["files"] == 1


def test_the_kernels_file_systems_are_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    # `doctor /` walked /proc and /sys: EIO, and files that never end.
    entered: list[str] = []

    def walk(top: Any, followlinks: bool = False) -> Iterator[tuple[str, list[str], list[str]]]:
        dirs = ["dev", "proc", "run", "sys", "usr"]
        yield "/", dirs, []
        for name in dirs:
            entered.append(name)

    monkeypatch.setattr(environment.os, "walk", walk)
    assert list(environment._candidates(Path("/"))) == []
    assert entered == ["usr"]


def test_holes_of_a_sparse_file_are_not_searched(tmp_path: Path) -> None:
    path = tmp_path / "sparse"
    with path.open("wb") as handle:
        handle.write(b"\x7fELF" + bytes(4092))
        handle.truncate(64 << 30)
    fd = os.open(path, os.O_RDONLY)
    try:
        extents = memsearch.data_extents(fd, 64 << 30)
    finally:
        os.close(fd)
    if extents == [(0, 64 << 30)]:
        pytest.skip("this file system does not report holes (SEEK_HOLE)")
    assert sum(end - start for start, end in extents) <= 1 << 20, extents


def test_doctor_on_a_sparse_64_gib_library_ends(capplan_in: Any, tmp_path: Path) -> None:
    # Issue 46: a sparse 64 GB file ran past 20 s (minutes: the search read every hole).
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    lib = tmp_path / "libbig.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-x", "c", "-", "-o", str(lib)],
                   input=b"int p(int x) { return x; }", check=True)  # fmt: skip
    os.truncate(lib, 64 << 30)
    cuda_runtime_library(tmp_path)
    with at_most(60, "doctor on a sparse 64 GiB file"):
        result = capplan_in("doctor", str(tmp_path), "--device", "8.6", "-j", "1")
    assert result.exit_code in (0, int(ExitCode.WONT_RUN)), result.stderr


# --- processes ----------------------------------------------------------------------------------

POOL_SCRIPT = textwrap.dedent(
    """
    import sys
    from capplan.adapters.pool import map_files

    def work(path):
        for _ in range(1000):  # a sparse 64 GiB file, read to its end again and again
            with open(path, "rb", buffering=0) as handle:
                while handle.read(8 << 20):
                    pass
        return 0

    if __name__ == "__main__":
        print("ready", flush=True)
        map_files(work, [sys.argv[1]] * 2, [64 << 30] * 2, jobs=2)
    """
)


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with open(task / "children") as handle:
            found.update(int(p) for p in handle.read().split())
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_pool_workers_end_with_capplan(tmp_path: Path, signum: int) -> None:
    # Issue 52: after SIGTERM, doctor's and inspect's workers kept reading at 100% CPU.
    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs /proc to find the workers")
    sparse = tmp_path / "libsparse.so"
    with sparse.open("wb") as handle:
        handle.truncate(64 << 30)
    script = tmp_path / "pool.py"
    script.write_text(POOL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(sparse)], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    workers: set[int] = set()
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        for _ in range(200):
            workers = _children(proc.pid)
            if len(workers) >= 2:
                break
            time.sleep(0.05)
        assert len(workers) >= 2, workers
        os.kill(proc.pid, signum)
        proc.wait(30)
        for _ in range(100):
            if not any(_alive(pid) for pid in workers):
                break
            time.sleep(0.1)
        left = [pid for pid in workers if _alive(pid)]
        assert not left, f"workers left behind after signal {signum}: {left}"
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_interpreter_that_forks_into_the_background(tmp_path: Path) -> None:
    # Issue 46: a python3 on PATH whose background child holds its stdout made doctor wait
    # out the whole 30 s query limit; its child outlived capplan.
    site = tmp_path / "site"
    site.mkdir()
    pid_file = tmp_path / "child.pid"
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho '[\"{site}\"]'\nsleep 120 &\necho $! > {pid_file}\nexit 0\n")
    fake.chmod(0o755)
    with at_most(20, "the interpreter query"):
        sources = environment.default_sources({"PATH": str(fake.parent), "HOME": str(tmp_path)})
    assert [s.path for s in sources] == [site]
    child = int(pid_file.read_text())
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


def test_a_nix_environment_reads_its_links_into_the_store(tmp_path: Path) -> None:
    # A profile or buildEnv is a symlink forest into /nix/store: those links are the
    # environment's; in a plain folder they are not.
    store = Path("/nix/store")
    target = next(iter(sorted(store.glob("*/lib/*.so"))), None) if store.is_dir() else None
    if target is None:
        pytest.skip("no library under /nix/store on this machine")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libk.so").symlink_to(target)
    assert [p for p, _ in environment._candidates(tmp_path, store=True)] == [
        str(tmp_path / "lib" / "libk.so")
    ]
    assert list(environment._candidates(tmp_path)) == []


def test_a_cudart_major_past_pythons_digit_limit_is_no_runtime(
    capplan_in: Any, tmp_path: Path
) -> None:
    # Issue 46: a libcudart.so.<5,000 digits> in DT_NEEDED (and as a SONAME) ended in
    # "ValueError: Exceeds the limit (4300 digits)", exit 1.
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    soname = "libcudart.so." + "9" * 5000
    lib = tmp_path / "env" / "lib"
    lib.mkdir(parents=True)
    source = b"int p(int x) { return x; }"
    subprocess.run([gcc, "-shared", "-fPIC", "-x", "c", "-", "-o", str(lib / "libfake.so"),
                    f"-Wl,-soname,{soname}"], input=source, check=True)  # fmt: skip
    subprocess.run([gcc, "-shared", "-fPIC", "-x", "c", "-", "-o", str(lib / "libuser.so"),
                    "-x", "none", "-Wl,--no-as-needed", str(lib / "libfake.so")],
                   input=source, check=True)  # fmt: skip
    result = capplan_in("doctor", str(tmp_path / "env"), "--device", "8.6")
    assert result.exit_code == int(ExitCode.NOTHING_TO_DO), result.stderr
    assert "2 ELF files read" in result.stderr
