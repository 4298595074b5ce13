"""Fake non-NixOS hosts for ``capplan host``, ``run`` and doctor's driver check (issue 48).

A root holds /proc/driver/nvidia/version and a driver folder with a gcc-built libcuda (soname
libcuda.so.1, exporting cuInit and cuDriverGetVersion) in the layout of a Debian, WSL2 or Jetson
host, beside the libc-like files a real folder holds. The probe is linked as nixpkgs links CUDA
programs: RUNPATH /run/opengl-driver/lib (addDriverRunpath), and a Nix glibc's interpreter
(/nix/store/...-glibc/lib/ld-linux-x86-64.so.2), so it counts as Nix-built; it runs through the
host's ld.so with --inhibit-cache, which, like a Nix glibc, never reads /etc/ld.so.cache.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "hosts"
NIX_INTERP = "/nix/store/00000000000000000000000000000000-glibc-2.40-66/lib/ld-linux-x86-64.so.2"
NVRM = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Thu Feb 22 01:44:30 UTC 2024\n"
DEBIAN = "usr/lib/x86_64-linux-gnu"
WSL = "usr/lib/wsl/lib"
JETSON = "usr/lib/aarch64-linux-gnu/nvidia"


def gcc() -> str:
    found = shutil.which("gcc")
    if found is None:
        pytest.skip("gcc not installed (Debian's build-essential)")
    return found


def host_loader() -> str:
    """The host's own ld.so (PT_INTERP of this Python), which runs the Nix-linked probe."""
    from capplan.adapters.environment import elf_loader_facts

    fd = os.open(os.path.realpath(shutil.which("python3") or "/usr/bin/python3"), os.O_RDONLY)
    try:
        interp = elf_loader_facts(fd)[0]
    finally:
        os.close(fd)
    if interp is None or not Path(interp).exists():
        pytest.skip("no dynamic loader found for python3")
    return interp


def _cc(*args: str | Path) -> None:
    subprocess.run([gcc(), *map(str, args)], check=True, capture_output=True, timeout=120)


def build_probe(where: Path, *, nix: bool = True) -> Path:
    probe = where / ("probe" if nix else "probe-host")
    args: list[str | Path] = ["-o", probe, DATA / "probe.c", "-ldl",
                              "-Wl,--enable-new-dtags,-rpath,/run/opengl-driver/lib"]  # fmt: skip
    if nix:
        args.append(f"-Wl,--dynamic-linker={NIX_INTERP}")
    _cc(*args)
    return probe


def build_libcuda(target: Path, code: int, *, needs_nvrm: Path | None = None) -> None:
    args: list[str | Path] = ["-shared", "-fPIC", f"-DCAPPLAN_FAKE_VERSION={code}",
                              "-Wl,-soname,libcuda.so.1", "-o", target,
                              DATA / "fake_libcuda.c"]  # fmt: skip
    if needs_nvrm is not None:
        args += [f"-L{needs_nvrm}", "-Wl,--no-as-needed", "-l:libnvrm_gpu.so", "-l:libnvrm_mem.so"]
    _cc(*args)


@dataclass(frozen=True)
class Host:
    root: Path
    folder: Path  # the driver folder, as a real path under the root
    version: str | None
    code: int  # what the fake cuDriverGetVersion reports


def stub(path: Path) -> None:
    """A 32-bit ELF shared object header: named like the host's libc, it stands for one, and a
    64-bit loader passes over it ("wrong ELF class"), so a process whose LD_LIBRARY_PATH
    names the fake folder (capplan itself, in the tests) still starts."""
    head = b"\x7fELF\x01\x01\x01" + bytes(9)
    head += struct.pack("<HHIIIIIHHHHHH", 3, 3, 1, 0, 52, 0, 0, 52, 32, 0, 40, 0, 0)
    path.write_bytes(head + bytes(64))


def make_host(
    where: Path,
    layout: str = "debian",
    version: str | None = "550.54.14",
    code: int = 12040,
    *,
    libc: bool = True,
) -> Host:
    """A fake host root of ``layout`` (debian, wsl2, jetson); ``libc``: the Debian folder holds
    libc.so.6, libstdc++.so.6 and others beside the driver, as a real one does."""
    root = where / f"root-{layout}"
    folder = root / {"debian": DEBIAN, "wsl2": WSL, "jetson": JETSON}[layout]
    folder.mkdir(parents=True)
    if layout == "debian":
        assert version is not None
        build_libcuda(folder / f"libcuda.so.{version}", code)
        (folder / "libcuda.so.1").symlink_to(f"libcuda.so.{version}")
        (folder / "libcuda.so").symlink_to("libcuda.so.1")
        shutil.copy(folder / f"libcuda.so.{version}", folder / f"libnvidia-ml.so.{version}")
        (folder / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{version}")
        if libc:  # what else a distribution's folder holds: never to be linked
            for name in ("libc.so.6", "libstdc++.so.6", "libm.so.6", "libz.so.1"):
                stub(folder / name)
    elif layout == "wsl2":
        build_libcuda(folder / "libcuda.so.1.1", code)
        (folder / "libcuda.so.1").symlink_to("libcuda.so.1.1")
        shutil.copy(folder / "libcuda.so.1.1", folder / "libdxcore.so")
        # WSL2's folder sits beside the distribution's own, which holds its libc.
        (root / DEBIAN).mkdir(parents=True)
        stub(root / DEBIAN / "libc.so.6")
    else:
        for name in ("libnvrm_gpu.so", "libnvrm_mem.so"):
            _cc("-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", folder / name, DATA / "nvrm.c")
        build_libcuda(folder / "libcuda.so.1.1", code, needs_nvrm=folder)
        (folder / "libcuda.so.1").symlink_to("libcuda.so.1.1")
        (folder / "libcuda.so").symlink_to("libcuda.so.1")
        (root / "etc").mkdir()
        (root / "etc" / "nv_tegra_release").write_text("# R36 (release), REVISION: 4.0\n")
    if version is not None and layout != "wsl2":
        proc = root / "proc" / "driver" / "nvidia"
        proc.mkdir(parents=True)
        (proc / "version").write_text(NVRM.format(v=version))
    return Host(root, folder, version, code)
