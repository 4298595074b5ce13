"""Nix-built CUDA programs on non-NixOS hosts (issue 48): ``capplan run``, ``capplan host`` and
doctor's driver check, on fake host roots (tests/integration/hostroots.py) with a gcc-built
libcuda and a probe linked as nixpkgs links CUDA programs. The ground truth is the real loader:
the probe is run, and what it prints is what the fake driver reports.

Independent of this machine's own /run/opengl-driver: every host path is read under
CAPPLAN_ROOT, and the probe's loader looks for /run/opengl-driver/lib only where the tests put
their driver (a fake root, or a LD_LIBRARY_PATH they name).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.hostroots import (
    DEBIAN,
    NVRM,
    Host,
    build_libcuda,
    build_probe,
    host_loader,
    make_host,
)

VERSION = "550.54.14"
CODES = {"debian": 12040, "wsl2": 12060, "jetson": 12020}


def _capplan(
    *args: str, env: dict[str, str], timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "capplan", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip


def _env(host: Host, tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAPPLAN_")}
    env.pop("LD_LIBRARY_PATH", None)
    env.update(CAPPLAN_ROOT=str(host.root), XDG_CACHE_HOME=str(tmp / "cache"), NO_COLOR="1")
    env.update(extra)
    return env


def _probe_argv(probe: Path) -> list[str]:
    # A Nix glibc never reads /etc/ld.so.cache; the host's ld.so with --inhibit-cache neither.
    return [host_loader(), "--inhibit-cache", str(probe)]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_probe(tmp_path_factory.mktemp("probe"))


def _doctor(probe: Path, env: dict[str, str], *more: str) -> tuple[int, dict[str, Any]]:
    done = _capplan("doctor", "--device", "8.6", "--driver", VERSION, "--cpu", "x86-64-v3",
                    "--json", *more, str(probe), env=env)  # fmt: skip
    assert done.returncode in (0, 16), done.stderr
    return done.returncode, json.loads(done.stdout)["driver_reach"]


# --- the real loader, then capplan run ---------------------------------------------------------


def test_the_probe_alone_finds_no_driver(probe: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run(_probe_argv(probe), env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    if Path("/run/opengl-driver/lib/libcuda.so.1").exists():
        pytest.skip("this machine has /run/opengl-driver/lib/libcuda.so.1 (a NixOS host)")
    assert done.returncode == 3
    assert "libcuda.so.1: cannot open shared object file" in done.stderr


@pytest.mark.parametrize("layout", ["debian", "wsl2", "jetson"])
def test_run_loads_the_host_driver(layout: str, probe: Path, tmp_path: Path) -> None:
    version = None if layout == "wsl2" else VERSION
    host = make_host(tmp_path, layout, version, CODES[layout])
    done = _capplan("run", "--verbose", "--", *_probe_argv(probe), env=_env(host, tmp_path))
    assert (done.returncode, done.stdout) == (0, f"driver {CODES[layout]}\n"), done.stderr
    said = done.stderr.splitlines()[0]
    assert said.startswith(f"capplan: driver {version or 'of unknown version'}")
    assert "/usr/lib/" in said and str(tmp_path / "cache") in said


def test_run_links_the_driver_only(probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path)
    env = _env(host, tmp_path)
    assert _capplan("run", "--", *_probe_argv(probe), env=env).returncode == 0
    (folder,) = (tmp_path / "cache" / "capplan" / "driver").iterdir()
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(
        ["libcuda.so", "libcuda.so.1", f"libcuda.so.{VERSION}", "libnvidia-ml.so.1",
         f"libnvidia-ml.so.{VERSION}"]
    )  # fmt: skip
    for link in folder.iterdir():
        assert Path(os.readlink(link)).parent == host.folder
    # The host folder's libc, libstdc++, libm and libz stay out.
    assert {"libc.so.6", "libstdc++.so.6", "libm.so.6", "libz.so.1"} <= {
        p.name for p in host.folder.iterdir()
    }


def test_run_checks_its_folder_on_each_run(probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path)
    env = _env(host, tmp_path)
    assert _capplan("run", "--", *_probe_argv(probe), env=env).returncode == 0
    (folder,) = (tmp_path / "cache" / "capplan" / "driver").iterdir()
    (folder / "libcuda.so.1").unlink()
    (folder / "libc.so.6").symlink_to(host.folder / "libc.so.6")  # tampered with
    done = _capplan("run", "--", *_probe_argv(probe), env=env)
    assert (done.returncode, done.stdout) == (0, "driver 12040\n"), done.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["libcuda.so", "libcuda.so.1", f"libcuda.so.{VERSION}", "libnvidia-ml.so.1",
         f"libnvidia-ml.so.{VERSION}"]
    )  # fmt: skip
    # A driver update: the new driver gets a folder of its own, and the probe sees it.
    new = "570.124.06"
    build_libcuda(host.folder / f"libcuda.so.{new}", 12080)
    (host.folder / "libcuda.so.1").unlink()
    (host.folder / "libcuda.so.1").symlink_to(f"libcuda.so.{new}")
    (host.root / "proc/driver/nvidia/version").write_text(NVRM.format(v=new))
    done = _capplan("run", "--verbose", "--", *_probe_argv(probe), env=env)
    assert (done.returncode, done.stdout) == (0, "driver 12080\n"), done.stderr
    folders = sorted(p.name for p in (tmp_path / "cache" / "capplan" / "driver").iterdir())
    assert [f.split("-")[0] for f in folders] == [VERSION, new]
    assert f"capplan: driver {new}" in done.stderr


def test_run_passes_exit_codes_and_signals(tmp_path: Path) -> None:
    env = _env(make_host(tmp_path), tmp_path)
    assert _capplan("run", "--", "sh", "-c", "exit 7", env=env).returncode == 7
    killed = _capplan("run", "--", "sh", "-c", "kill -TERM $$", env=env)
    assert killed.returncode == -signal.SIGTERM
    # As a shell reports it: 128 + the signal's number.
    shell = subprocess.run(["sh", "-c", f'"{sys.executable}" -m capplan run -- sh -c "kill -TERM \\$\\$"; echo $?'],
                           env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert shell.stdout.strip() == str(128 + signal.SIGTERM)
    missing = _capplan("run", "--", "no-such-program-48", env=env)
    assert missing.returncode == 127
    assert missing.stderr == "capplan: error: 'no-such-program-48': command not found\n"


def test_run_without_a_driver_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    (root / DEBIAN).mkdir(parents=True)
    env = _env(Host(root, root / DEBIAN, None, 0), tmp_path)
    done = _capplan("run", "--", "true", env=env)
    assert done.returncode == 10
    assert done.stderr.startswith("capplan: error: no NVIDIA driver libraries found under ")
    assert len(done.stderr.splitlines()) == 1


# --- doctor -------------------------------------------------------------------------------------


def test_doctor_will_not_run_without_the_driver_link(probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path)
    code, reach = _doctor(probe, _env(host, tmp_path))
    assert (code, reach["checked"], reach["ok"]) == (16, 1, False)
    (entry,) = reach["files"]
    assert "RUNPATH /run/opengl-driver/lib (missing on this host" in entry["reason"]
    assert "a Nix glibc never reads /etc/ld.so.cache" in entry["reason"]
    assert "capplan run" in entry["fix"] and "capplan host" in entry["fix"]
    text = _capplan("doctor", "--device", "8.6", "--driver", VERSION, "--cpu", "x86-64-v3",
                    str(probe), env=_env(host, tmp_path))  # fmt: skip
    assert text.returncode == 16
    assert "will not run (driver not reachable): " in text.stdout


def test_doctor_runs_with_a_driver_folder_on_ld_library_path(probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path, libc=False)
    env = _env(host, tmp_path, LD_LIBRARY_PATH=str(host.folder))
    code, reach = _doctor(probe, env)
    assert (code, reach["ok"], reach["files"][0]["how"]) == (0, True, "LD_LIBRARY_PATH")
    # The real loader agrees.
    done = subprocess.run(_probe_argv(probe), env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "driver 12040\n")


def test_doctor_refuses_a_host_libc_on_ld_library_path(probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path)  # the folder holds libc.so.6 too, as Debian's does
    code, reach = _doctor(probe, _env(host, tmp_path, LD_LIBRARY_PATH=str(host.folder)))
    assert code == 16
    assert "holds the host's libc.so.6" in reach["files"][0]["reason"]


@pytest.mark.parametrize("layout", ["wsl2", "jetson"])
def test_doctor_on_wsl2_and_jetson(layout: str, probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path, layout, None if layout == "wsl2" else VERSION, CODES[layout])
    assert _doctor(probe, _env(host, tmp_path))[0] == 16
    env = _env(host, tmp_path, LD_LIBRARY_PATH=str(host.folder))
    code, reach = _doctor(probe, env)
    assert (code, reach["ok"]) == (0, True)
    if layout == "jetson":
        (host.folder / "libnvrm_mem.so").unlink()
        code, reach = _doctor(probe, env)
        assert code == 16
        assert "libnvrm_mem.so" in reach["files"][0]["reason"]
        done = subprocess.run(_probe_argv(probe), env=env, capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode == 3 and "libnvrm_mem.so" in done.stderr  # the loader agrees


def _apply_tmpfiles(root: Path, rules: str) -> None:
    """What systemd-tmpfiles makes of ``rules`` (d and L+ lines), under ``root``."""
    for line in rules.splitlines():
        kind, path, *rest = line.split()
        where = root / path.lstrip("/")
        if kind == "d":
            where.mkdir(parents=True, exist_ok=True)
        else:
            assert kind == "L+"
            where.symlink_to(rest[-1])


@pytest.mark.parametrize("layout", ["debian", "wsl2", "jetson"])
def test_host_rules_make_doctor_say_runs(layout: str, probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path, layout, None if layout == "wsl2" else VERSION, CODES[layout])
    env = _env(host, tmp_path)
    done = _capplan("host", "--json", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert not {"libc.so.6", "libstdc++.so.6", "libm.so.6", "libz.so.1"} & set(data["libraries"])
    assert "libcuda.so.1" in data["libraries"]
    _apply_tmpfiles(host.root, data["tmpfiles"])
    code, reach = _doctor(probe, env)
    assert (code, reach["files"][0]["found"]) == (0, "/run/opengl-driver/lib")
    if layout == "debian":
        assert f'version = "{VERSION}";' in data["home_manager"]["block"]
        assert "nix-command store prefetch-file" in data["home_manager"]["then"]
        assert (
            f"Linux-x86_64/{VERSION}/NVIDIA-Linux-x86_64-{VERSION}.run"
            in data["home_manager"]["then"]
        )
    else:
        assert data["tmpfiles"].splitlines()[-1] == (
            f"L+ /run/opengl-driver/lib - - - - /{'usr/lib/wsl/lib' if layout == 'wsl2' else 'usr/lib/aarch64-linux-gnu/nvidia'}"
        )


@pytest.mark.parametrize("layout", ["debian", "wsl2", "jetson"])
def test_home_manager_block_parses(layout: str, tmp_path: Path) -> None:
    nix = shutil.which("nix-instantiate")
    if nix is None:
        pytest.skip("nix-instantiate not found (scripts/setup --dev installs Debian's nix-bin)")
    host = make_host(tmp_path, layout, None if layout == "wsl2" else VERSION, CODES[layout])
    data = json.loads(_capplan("host", "--json", env=_env(host, tmp_path)).stdout)
    done = subprocess.run([nix, "--parse", "-E", "{ ... }: {\n" + data["home_manager"]["block"] + "}"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_doctor_with_a_stale_driver_link(probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path)
    old = "535.104.05"
    build_libcuda(host.folder / f"libcuda.so.{old}", 12020)
    link = host.root / "run/opengl-driver/lib"
    link.mkdir(parents=True)
    (link / "libcuda.so.1").symlink_to(f"/{DEBIAN}/libcuda.so.{old}")
    code, reach = _doctor(probe, _env(host, tmp_path))
    assert code == 16
    assert f"is driver {old}, the kernel module is {VERSION}" in reach["files"][0]["reason"]


def test_a_host_glibc_program_reads_the_cache(tmp_path: Path) -> None:
    """A program with the host's PT_INTERP gets /etc/ld.so.cache, which names the host's
    driver folder: doctor says it runs without /run/opengl-driver/lib."""
    host = make_host(tmp_path)
    code, reach = _doctor(build_probe(tmp_path, nix=False), _env(host, tmp_path))
    assert (code, reach["files"][0]["how"]) == (0, "ld.so.cache")


# --- hostile roots --------------------------------------------------------------------------------


def _host(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _capplan("host", "--json", env=env)


def test_missing_and_garbled_version_files(tmp_path: Path) -> None:
    host = make_host(tmp_path)
    version = host.root / "proc/driver/nvidia/version"
    version.write_bytes(b"\x1b[2Jgarbage\xff\n")
    data = json.loads(_host(_env(host, tmp_path)).stdout)
    assert (data["version"], data["version_source"]) == (VERSION, f"file name libcuda.so.{VERSION}")
    assert any("names no driver version" in n and "\\x1b" in n for n in data["notes"])
    version.unlink()
    data = json.loads(_host(_env(host, tmp_path)).stdout)
    assert (data["version"], data["notes"]) == (VERSION, [])


@pytest.mark.parametrize(
    ("damage", "said"),
    [("loop", "is a symlink loop"), ("not-elf", "not an ELF file"), ("dangling", "dangling")],
)
def test_a_broken_libcuda_is_one_line(damage: str, said: str, tmp_path: Path) -> None:
    host = make_host(tmp_path)
    link = host.folder / "libcuda.so.1"
    link.unlink()
    if damage == "loop":
        link.symlink_to("libcuda.so.1")
    elif damage == "dangling":
        link.symlink_to("libcuda.so.999.1")
    else:
        link.write_text("INPUT(libcuda.so.550)\n")
    for command in (("host",), ("run", "--", "true")):
        done = _capplan(*command, env=_env(host, tmp_path))
        assert done.returncode == 10, done.stderr
        assert len(done.stderr.splitlines()) == 1 and said in done.stderr


def test_two_driver_versions_side_by_side(probe: Path, tmp_path: Path) -> None:
    host = make_host(tmp_path)
    old = "535.104.05"
    build_libcuda(host.folder / f"libcuda.so.{old}", 12020)
    shutil.copy(host.folder / f"libcuda.so.{old}", host.folder / f"libnvidia-ml.so.{old}")
    data = json.loads(_host(_env(host, tmp_path)).stdout)
    assert (data["version"], data["other_versions"]) == (VERSION, [old])
    assert not [n for n in data["libraries"] if old in n]
    done = _capplan("run", "--", *_probe_argv(probe), env=_env(host, tmp_path))
    assert done.stdout == "driver 12040\n"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(version=st.binary(max_size=200), libcuda=st.binary(max_size=200))
def test_hostile_roots_never_exit_1(
    version: bytes, libcuda: bytes, tmp_path: Path, capplan_cli: Any
) -> None:
    root = tmp_path / "hostile"
    shutil.rmtree(root, ignore_errors=True)
    folder = root / DEBIAN
    folder.mkdir(parents=True)
    (folder / "libcuda.so.1").write_bytes(libcuda)
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_bytes(version)
    env = {"CAPPLAN_ROOT": str(root), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = capplan_cli("host", env=env)
    assert result.exit_code in (0, 10), result.output
    if result.exit_code:
        assert result.stderr.count("\n") == 1 and "\x1b" not in result.stderr
