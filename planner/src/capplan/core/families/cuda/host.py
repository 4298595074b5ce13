"""The NVIDIA driver of a non-NixOS host, as Nix-built programs need it. Pure.

nixpkgs links CUDA programs with a RUNPATH of ``/run/opengl-driver/lib`` (``addDriverRunpath``,
pkgs/by-name/ad/addDriverRunpath/package.nix: ``driverLink = "/run/opengl-driver"``); NixOS fills
that folder, other distributions keep the driver's libraries in their own library folder, which
also holds their libc. This module says which of a folder's files are the driver's (and only
those: a Nix program given the host's libc or libstdc++ breaks), which driver version they are,
and writes what a user pastes: a home-manager block (``targets.genericLinux.gpu``, read from
nix-community/home-manager modules/targets/generic-linux/gpu/default.nix at commit 88679124),
tmpfiles rules and link commands. The adapter (adapters/host_driver.py) reads the files.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

__all__ = [
    "DRIVER_LINK",
    "LAYOUTS",
    "HostDriver",
    "Layout",
    "home_manager_block",
    "is_driver_library",
    "link_commands",
    "nvrm_missing",
    "tmpfiles_rules",
    "version_of_name",
    "version_of_nvrm",
]

# What addDriverRunpath writes into the RUNPATH of every CUDA program nixpkgs builds.
DRIVER_LINK = "/run/opengl-driver/lib"


@dataclass(frozen=True, slots=True)
class Layout:
    """Where one kind of host keeps the driver's libraries. ``dedicated``: the folder holds the
    driver's libraries only (WSL2's and JetPack's), so all of it may go on a library path."""

    key: str
    folder: str
    label: str
    dedicated: bool


# First match wins: the dedicated folders come before the distributions' shared ones (a Jetson
# also has usr/lib/aarch64-linux-gnu, which holds its libc).
LAYOUTS: tuple[Layout, ...] = (
    Layout("wsl2", "/usr/lib/wsl/lib", "WSL2 (the Windows driver's libraries)", True),
    Layout("jetson", "/usr/lib/aarch64-linux-gnu/nvidia", "Jetson (JetPack 6)", True),
    Layout("jetson", "/usr/lib/aarch64-linux-gnu/tegra", "Jetson (JetPack 5 and older)", True),
    Layout("debian", "/usr/lib/x86_64-linux-gnu", "Debian/Ubuntu", False),
    Layout("debian", "/usr/lib/aarch64-linux-gnu", "Debian/Ubuntu (arm64)", False),
    Layout("fedora", "/usr/lib64", "Fedora/RHEL", False),
    Layout("arch", "/usr/lib", "Arch Linux", False),
)

# The NVIDIA driver's user-space libraries (the .run installer's and the distributions' driver
# packages' names): CUDA (libcuda, libnvidia-ptxjitcompiler, libnvidia-nvvm, libnvidia-ml,
# libnvidia-gpucomp), video (libnvcuvid, libnvidia-encode), OptiX, the GL/EGL/Vulkan vendor
# libraries, and JetPack's libnvrm*/libnvos/libnvsciipc that its libcuda links.
_DRIVER_NAME = re.compile(
    r"^(?:libcuda|libcudadebugger|libnvidia-[A-Za-z0-9_+-]+|libnvcuvid|libnvoptix"
    r"|libGLX_nvidia|libEGL_nvidia|libGLESv1_CM_nvidia|libGLESv2_nvidia|libvdpau_nvidia"
    r"|libnvrm[A-Za-z0-9_]*|libnvos|libnvsocsys|libnvsciipc|libnvcucompat|libnvdxgdmal"
    r"|libdxcore|libd3d12|libd3d12core|libnvwgf2umx|libnvdxdlkernels)\.so(?:\.[0-9][0-9.]*)?$"
)
# Never put on a Nix program's library path, whatever folder holds them: the C runtime (a
# second libc in one process crashes it) and the compiler's runtime libraries.
_NEVER = re.compile(
    r"^(?:ld-linux[^/]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl"
    r"|libcrypt|libmvec|libBrokenLocale|libstdc\+\+|libgcc_s|libatomic|libgomp|libz)\.so(?:\..*)?$"
)
_LIBRARY = re.compile(r"^lib[A-Za-z0-9_+-]*\.so(?:\.[0-9A-Za-z_.]+)?$")
# A driver release in a file name: libcuda.so.550.54.14, libnvidia-gpucomp.so.570.124.06.
_NAME_VERSION = re.compile(r"\.so\.([0-9]{3,}\.[0-9]{1,3}(?:\.[0-9]{1,3})?)$")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." and the open
# module's "... Open Kernel Module for x86_64  570.124.06  Release Build ...".
_NVRM = re.compile(r"^NVRM version:.*?Kernel Module.*?\s([0-9]+(?:\.[0-9]+){1,3})\s", re.M)
# home-manager's targets.genericLinux.gpu.nvidia.version type: strMatching this.
_HM_VERSION = re.compile(r"^[0-9]{3}\.[0-9]{2,3}\.[0-9]{2}$")
# JetPack's libcuda links these from its own folder (DT_NEEDED of libcuda.so.1.1 on L4T 35/36);
# nixpkgs' cuda_compat libcuda for Jetson needs the host's copies the same way.
_NVRM_NEEDED = ("libnvrm_gpu.so", "libnvrm_mem.so")


def is_driver_library(name: str, *, dedicated: bool) -> bool:
    """Whether the file ``name`` of a driver folder is one of the driver's libraries: by name in a
    distribution's shared folder, any library but the C and compiler runtimes in a dedicated
    one."""
    if _NEVER.match(name):
        return False
    if _DRIVER_NAME.match(name):
        return True
    return dedicated and bool(_LIBRARY.match(name))


def version_of_name(name: str) -> str | None:
    """The driver release a library's file name carries (``libcuda.so.550.54.14``), or None
    (``libcuda.so.1``, WSL2's and JetPack's ``libcuda.so.1.1``)."""
    match = _NAME_VERSION.search(name)
    return match.group(1) if match else None


def version_of_nvrm(text: str) -> str | None:
    """The kernel module's version in /proc/driver/nvidia/version's text, or None."""
    match = _NVRM.search(text)
    return match.group(1) if match else None


def nvrm_missing(names: frozenset[str] | set[str]) -> tuple[str, ...]:
    """Which of the libraries JetPack's libcuda links from its own folder are not there."""
    return tuple(n for n in _NVRM_NEEDED if not any(x.startswith(n) for x in names))


@dataclass(frozen=True, slots=True)
class HostDriver:
    """The driver a host has: its layout, the folder (as the host names it), the version and
    where it was read, the libraries to link (file names in the folder), and what is wrong."""

    layout: Layout
    version: str | None
    version_source: str | None
    libcuda: str  # the file libcuda.so.1 resolves to, as the host names it
    machine: str | None  # the ELF machine of libcuda (x86_64, aarch64)
    libraries: tuple[str, ...]
    other_versions: tuple[str, ...] = ()
    other_folders: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def folder(self) -> str:
        return self.layout.folder

    def to_json(self) -> dict[str, object]:
        return {
            "layout": self.layout.key,
            "label": self.layout.label,
            "folder": self.folder,
            "version": self.version,
            "version_source": self.version_source,
            "libcuda": self.libcuda,
            "machine": self.machine,
            "libraries": list(self.libraries),
            "other_versions": list(self.other_versions),
            "other_folders": list(self.other_folders),
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


def _runfile_arch(driver: HostDriver) -> str:
    return "Linux-aarch64" if driver.machine == "aarch64" else "Linux-x86_64"


def hash_command(version: str, driver: HostDriver) -> str:
    """The command that prints the hash of the driver's .run file (home-manager's
    ``targets.genericLinux.gpu.nvidia.sha256``)."""
    arch = _runfile_arch(driver)
    url = f"https://download.nvidia.com/XFree86/{arch}/{version}/NVIDIA-{arch}-{version}.run"
    return f"nix --extra-experimental-features nix-command store prefetch-file {shlex.quote(url)}"


def home_manager_block(driver: HostDriver) -> tuple[str, str]:
    """(the Nix block to paste into a home-manager configuration, a line saying what to run
    after it). A dedicated folder is put on the session's library path; a distribution's shared
    folder never is (its libc would come with it): there, home-manager builds the same driver
    release from NVIDIA's .run file, and the version must match the kernel module's."""
    if driver.layout.dedicated:
        folder = driver.folder
        block = (
            "# The host's driver libraries, and only those: this folder holds nothing else.\n"
            "home.sessionVariables.LD_LIBRARY_PATH =\n"
            f'  "{folder}\\${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}";\n'
        )
        return block, "then: home-manager switch, and log in again"
    version = driver.version or "VERSION"
    block = (
        "targets.genericLinux.enable = true;\n"
        "targets.genericLinux.gpu = {\n"
        "  enable = true;\n"
        "  nvidia = {\n"
        "    enable = true;\n"
        f'    version = "{version}";\n'
        '    sha256 = "sha256-...";  # the hash the command below prints\n'
        "  };\n"
        "};\n"
    )
    then = (
        f"the hash: {hash_command(version, driver)}; then: home-manager switch, and once "
        "(and after each driver update): sudo $(command -v non-nixos-gpu-setup)"
    )
    if driver.version is None:
        then = "the driver version is unknown here: put the one nvidia-smi prints; " + then
    elif not _HM_VERSION.match(driver.version):
        then = (
            f"home-manager accepts versions like 550.163.01 only, not {driver.version}: use "
            "the tmpfiles rules below instead; " + then
        )
    return block, then


def _targets(driver: HostDriver) -> list[tuple[str, str]]:
    """(link name in /run/opengl-driver/lib, host file it points at), by name: a soname link
    (libcuda.so.1) follows the distribution's own link, so a driver update keeps it right."""
    return [(name, f"{driver.folder}/{name}") for name in driver.libraries]


def tmpfiles_rules(driver: HostDriver) -> str:
    """systemd-tmpfiles rules (tmpfiles.d(5): ``d`` a folder, ``L+`` a symlink replacing what is
    there) that make /run/opengl-driver/lib hold the host's driver libraries, and only those."""
    if driver.layout.dedicated:
        return f"d /run/opengl-driver 0755 root root -\nL+ {DRIVER_LINK} - - - - {driver.folder}\n"
    lines = ["d /run/opengl-driver 0755 root root -", f"d {DRIVER_LINK} 0755 root root -"]
    lines += [f"L+ {DRIVER_LINK}/{name} - - - - {target}" for name, target in _targets(driver)]
    return "\n".join(lines) + "\n"


def link_commands(driver: HostDriver) -> str:
    """The same as shell commands (run as root), for hosts without systemd-tmpfiles."""
    if driver.layout.dedicated:
        return f"mkdir -p /run/opengl-driver\nln -sfn {shlex.quote(driver.folder)} {DRIVER_LINK}\n"
    lines = [f"mkdir -p {DRIVER_LINK}"]
    lines += [
        f"ln -sf {shlex.quote(target)} {DRIVER_LINK}/{shlex.quote(name)}"
        for name, target in _targets(driver)
    ]
    return "\n".join(lines) + "\n"
