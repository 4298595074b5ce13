"""The host's NVIDIA driver on disk: where its libraries lie, which version they are, whether a
Nix-built program's loader reaches them, and the private folder ``capplan run`` puts first on
a program's library path. The judgements are the CUDA family's (core/families/cuda/host.py and
reach.py); this module reads files. Every host path is read under ``CAPPLAN_ROOT`` (default
``/``), as detection reads the device tree, so tests use fake roots.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from capplan.adapters.detect.tools import ROOT_ENV
from capplan.adapters.environment import _machine, elf_loader_facts, loader_problem
from capplan.adapters.files import read_bounded
from capplan.core.families.cuda.host import (
    DRIVER_LINK,
    LAYOUTS,
    HostDriver,
    Layout,
    home_manager_block,
    is_driver_library,
    link_commands,
    nvrm_missing,
    tmpfiles_rules,
    version_of_name,
    version_of_nvrm,
)
from capplan.core.families.cuda.reach import (
    LIBCUDA,
    Finding,
    LoaderFacts,
    Place,
    Reach,
    judge,
    search_places,
)
from capplan.errors import NoGpuError, WriteError, shorten

__all__ = [
    "VERSION_FILE",
    "driver_reach",
    "find_host_driver",
    "home_manager_block",
    "host_root",
    "link_commands",
    "private_folder",
    "tmpfiles_rules",
]

VERSION_FILE = "/proc/driver/nvidia/version"
_MAX_VERSION_BYTES = 64 << 10
_MAX_HOPS = 40  # glibc's and Linux's limit on symlinks followed in one lookup (ELOOP)
_STORE = "/nix/store/"


def host_root(environ: Mapping[str, str]) -> Path:
    return Path(environ.get(ROOT_ENV) or "/")


def _under(root: Path, host_path: str) -> Path:
    return root / host_path.lstrip("/")


def _resolve(root: Path, host_path: str) -> tuple[Path | None, str]:
    """(the real path of what ``host_path`` names, every component's symlinks followed as the
    host would: an absolute target is a host path too, looked up under ``root``; its host
    path) or (None, why not: absent, a dangling symlink, a symlink loop)."""
    queue = [p for p in host_path.split("/") if p]
    resolved = "/"
    hops = 0
    while queue:
        part = queue.pop(0)
        if part == ".":
            continue
        if part == "..":
            resolved = posixpath.dirname(resolved)
            continue
        candidate = posixpath.join(resolved, part)
        real = _under(root, candidate)
        try:
            info = os.lstat(real)
        except (FileNotFoundError, NotADirectoryError):
            return None, "a dangling symlink" if hops else "absent"
        except OSError as error:
            return None, f"cannot be read ({error.strerror or error})"
        if not stat.S_ISLNK(info.st_mode):
            resolved = candidate
            continue
        hops += 1
        if hops > _MAX_HOPS:
            return None, "a symlink loop"
        try:
            target = os.readlink(real)
        except OSError as error:
            return None, f"cannot be read ({error.strerror or error})"
        if target.startswith("/"):
            resolved = "/"
        queue[:0] = [p for p in target.split("/") if p]
    return _under(root, resolved), resolved


def _loadable(real: Path) -> tuple[str | None, str | None]:
    """(why the loader cannot load the file at ``real``, or None; its ELF machine)."""
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        return f"cannot be opened ({error.strerror or error})", None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file", None
        problem = loader_problem(fd, info.st_size)
        return problem, _machine(os.pread(fd, 20, 0))
    except OSError as error:
        return f"cannot be read ({error.strerror or error})", None
    finally:
        os.close(fd)


def _kernel_version(root: Path) -> tuple[str | None, str | None]:
    """(the kernel module's version, or None; a note when the file is there but unreadable)."""
    path = _under(root, VERSION_FILE)
    try:
        text = read_bounded(path, _MAX_VERSION_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        return None, None
    except OSError as error:
        return None, f"{VERSION_FILE} cannot be read ({error.strerror or error})"
    version = version_of_nvrm(text)
    if version is None:
        return (
            None,
            f"{VERSION_FILE} names no driver version (its first line: "
            f"{shorten(text.strip().splitlines()[0] if text.strip() else 'empty', 80)!r})",
        )
    return version, None


def _names(real_folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(real_folder))
    except OSError:
        return []


def find_host_driver(environ: Mapping[str, str]) -> HostDriver:
    """The host's driver: the first layout folder (core/families/cuda/host.py ``LAYOUTS``) whose
    libcuda.so.1 the loader can load. NoGpuError (exit 10) when none has one, each folder's
    reason in the line."""
    root = host_root(environ)
    kernel, note = _kernel_version(root)
    usable: list[tuple[Layout, Path, str, str | None]] = []
    why: list[str] = []
    for layout in LAYOUTS:
        folder, _ = _resolve(root, layout.folder)
        if folder is None or not folder.is_dir():
            continue
        real, shown = _resolve(root, f"{layout.folder}/{LIBCUDA}")
        if real is None:
            if shown != "absent":
                why.append(f"{layout.folder}/{LIBCUDA} is {shown}")
            continue
        problem, machine = _loadable(real)
        if problem is not None:
            why.append(f"{layout.folder}/{LIBCUDA} ({shown}): {problem}")
            continue
        if not any(layout.folder == u[0].folder for u in usable):
            usable.append((layout, real, shown, machine))
    if not usable:
        where = "; ".join(why) or "no " + LIBCUDA + " in " + ", ".join(
            dict.fromkeys(x.folder for x in LAYOUTS)
        )
        raise NoGpuError(
            f"no NVIDIA driver libraries found under {shorten(str(root))}: {where}",
            hint="install the NVIDIA driver (its user-space libraries); on WSL2, the Windows "
            "driver; on a Jetson, JetPack",
        )
    layout, _, libcuda, machine = usable[0]
    return _driver(root, layout, libcuda, machine, kernel, [note] if note else [], why, usable)


def _driver(
    root: Path,
    layout: Layout,
    libcuda: str,
    machine: str | None,
    kernel: str | None,
    notes: list[str],
    why: list[str],
    usable: Sequence[tuple[Layout, Path, str, str | None]],
) -> HostDriver:
    named = version_of_name(posixpath.basename(libcuda))
    problems: list[str] = []
    version: str | None
    source: str | None
    if kernel is not None:
        version, source = kernel, VERSION_FILE
        if named is not None and named != kernel:
            problems.append(
                f"{layout.folder}/{LIBCUDA} is driver {named}, the kernel module is {kernel}: "
                "CUDA fails with error 803 (reboot after a driver update, or reinstall the "
                "driver's libraries)"
            )
    else:
        version, source = named, (f"file name {posixpath.basename(libcuda)}" if named else None)
    folder, _ = _resolve(root, layout.folder)
    names = _names(folder) if folder is not None else []
    keep: list[str] = []
    others: set[str] = set()
    for name in names:
        if not is_driver_library(name, dedicated=layout.dedicated):
            continue
        own = version_of_name(name)
        real, target = _resolve(root, f"{layout.folder}/{name}")
        if real is None:
            notes.append(f"{layout.folder}/{name} is {target}: left out")
            continue
        of_target = version_of_name(posixpath.basename(target))
        stale = next((v for v in (own, of_target) if v and version and v != version), None)
        if stale is not None:
            others.add(stale)
            continue
        keep.append(name)
    if layout.key == "jetson":
        missing = nvrm_missing(set(keep))
        if missing:
            problems.append(
                f"JetPack's libcuda links {', '.join(missing)} from {layout.folder}, and it is "
                "not there: libcuda fails to load (install nvidia-l4t-core)"
            )
    if others:
        notes.append(
            f"files of driver {', '.join(sorted(others))} lie beside it in {layout.folder} "
            "(another driver's, left out)"
        )
    notes.extend(f"skipped: {w}" for w in why)
    return HostDriver(
        layout,
        version,
        source,
        libcuda,
        machine,
        tuple(keep),
        tuple(sorted(others)),
        tuple(u[0].folder for u in usable[1:]),
        tuple(problems),
        tuple(notes),
    )


# --- doctor: does a Nix-built program reach the driver? ---------------------------------------


def _facts(path: str, shown: str, static_runtime: bool) -> LoaderFacts | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        interp, rpaths, needed, soname = elf_loader_facts(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    real = os.path.realpath(path)
    # Nix writes DT_RUNPATH (patchelf's default); an old DT_RPATH is read as one too.
    return LoaderFacts(shown, os.path.dirname(real), interp, (), rpaths, needed, soname,
                       real.startswith(_STORE), static_runtime)  # fmt: skip


def _finding(root: Path, place: Place) -> Finding:
    base = root if place.host else Path("/")
    folder, where = _resolve(base, place.folder)
    if folder is None or not folder.is_dir():
        detail = "missing on this host: NixOS fills it, other systems do not"
        return Finding("absent", detail if place.folder == DRIVER_LINK else "no such folder")
    names = _names(folder)
    libc = not where.startswith(_STORE) and "libc.so.6" in names
    real, shown = _resolve(base, f"{where}/{LIBCUDA}")
    if real is None:
        if shown == "absent":
            return Finding("absent", f"holds no {LIBCUDA}", libc=libc)
        return Finding("broken", shown, libc=libc)
    problem, _ = _loadable(real)
    if problem is not None:
        return Finding("broken", problem, libc=libc)
    jetson = any(where.endswith(x.folder) for x in LAYOUTS if x.key == "jetson")
    missing = nvrm_missing(set(names)) if jetson else ()
    return Finding("found", version=version_of_name(posixpath.basename(shown)),
                   nvrm_missing=missing, libc=libc)  # fmt: skip


def driver_reach(
    files: Iterable[tuple[str, str, bool]], environ: Mapping[str, str]
) -> tuple[list[Reach], int]:
    """For each (real path, shown path, holds device code with the runtime linked statically)
    that is Nix-built and needs the driver: where its loader finds libcuda.so.1 here. Returns
    the verdicts and how many files were checked."""
    root = host_root(environ)
    kernel, _ = _kernel_version(root)
    cache = [x.folder for x in LAYOUTS]
    found: dict[Place, Finding] = {}
    out: list[Reach] = []
    checked = 0
    for path, shown, static in files:
        facts = _facts(path, shown, static)
        if facts is None or not facts.nix_built or not facts.needs_driver:
            continue
        checked += 1
        places = search_places(facts, environ.get("LD_LIBRARY_PATH"), cache)
        for place in places:
            if place not in found:
                found[place] = _finding(root, place)
        out.append(judge(facts, places, found, kernel))
    return out, checked


# --- capplan run: a private folder of links to the driver's libraries --------------------------


def _cache_base(environ: Mapping[str, str]) -> Path:
    cache = environ.get("XDG_CACHE_HOME", "")
    if cache.startswith("/"):
        return Path(cache) / "capplan" / "driver"
    home = environ.get("HOME", "")
    if not home.startswith("/"):
        raise WriteError(
            "no folder for capplan's driver links: neither XDG_CACHE_HOME nor HOME is an "
            "absolute path",
            hint="set XDG_CACHE_HOME to a folder you may write",
        )
    return Path(home) / ".cache" / "capplan" / "driver"


def _links(driver: HostDriver, root: Path) -> dict[str, str]:
    """Link name -> the real path it points at (the host file by name, under the root)."""
    return {name: str(_under(root, f"{driver.folder}/{name}")) for name in driver.libraries}


def _matches(folder: Path, links: Mapping[str, str]) -> bool:
    try:
        names = sorted(os.listdir(folder))
        if names != sorted(links):
            return False
        return all(
            os.path.islink(folder / n) and os.readlink(folder / n) == links[n] for n in names
        )
    except OSError:
        return False


def private_folder(driver: HostDriver, environ: Mapping[str, str]) -> Path:
    """The folder of links to the driver's libraries (and nothing else), one per driver version
    and set of files, under $XDG_CACHE_HOME/capplan/driver; checked on each call and made
    again (in a temporary folder renamed into place) when it differs."""
    root = host_root(environ)
    links = _links(driver, root)
    resolved = [f"{n}\t{os.path.realpath(t)}" for n, t in sorted(links.items())]
    digest = hashlib.sha256("\n".join([str(root), *resolved]).encode()).hexdigest()[:16]
    base = _cache_base(environ)
    folder = base / f"{driver.version or 'unversioned'}-{digest}"
    if _matches(folder, links):
        return folder
    temp = base / f".tmp-{folder.name}-{os.getpid()}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir()
        for name, target in sorted(links.items()):
            os.symlink(target, temp / name)
        if os.path.lexists(folder):
            old = base / f".old-{folder.name}-{os.getpid()}"
            os.rename(folder, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(temp, folder)
    except OSError as error:
        shutil.rmtree(temp, ignore_errors=True)
        if _matches(folder, links):  # another run made the same folder meanwhile
            return folder
        raise WriteError(
            f"cannot make the driver links in {shorten(str(base))}: {error.strerror or error}",
            hint="set XDG_CACHE_HOME to a folder you may write",
        ) from None
    if not _matches(folder, links):  # another run replaced it meanwhile with other links
        raise WriteError(f"{shorten(str(folder))} changed while capplan made it",
                         hint="run the command again")  # fmt: skip
    return folder
