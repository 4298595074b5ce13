"""Can a Nix-built program's loader find the NVIDIA driver (``libcuda.so.1``) here? Pure.

The loader's search, as glibc's elf/dl-load.c does it for a name without a slash (and as
``dlopen`` does for the object that calls it): DT_RPATH when there is no DT_RUNPATH,
``LD_LIBRARY_PATH``, DT_RUNPATH (``$ORIGIN`` is the object's folder), then ``/etc/ld.so.cache``
and the default folders, which a Nix glibc never reads (its ld.so knows only its own store
path). Which glibc an object gets is its program's ``PT_INTERP``: under /nix/store, Nix's.

Nix-built, for this check: a ``PT_INTERP`` under /nix/store, a file under /nix/store, or a
RUNPATH holding /run/opengl-driver/lib (what nixpkgs' ``addDriverRunpath`` writes) or a /nix/store
folder. It needs the driver when ``libcuda.so.1`` is in its DT_NEEDED, its RUNPATH holds
/run/opengl-driver/lib (addDriverRunpath marks exactly the objects that load the driver), it is
the CUDA runtime (``libcudart.so.N``, which dlopens libcuda), or it holds device code with the
runtime linked statically. The adapter (adapters/host_driver.py) says what each folder holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from capplan.core.families.cuda.host import DRIVER_LINK

__all__ = ["LIBCUDA", "Finding", "LoaderFacts", "Place", "Reach", "judge", "search_places"]

LIBCUDA = "libcuda.so.1"
_STORE = "/nix/store/"
_FIX = (
    "run it with 'capplan run -- PROGRAM', or make /run/opengl-driver/lib hold the host's "
    "driver libraries ('capplan host' prints the rules)"
)


@dataclass(frozen=True, slots=True)
class LoaderFacts:
    """What the loader reads from one ELF file: its interpreter, RPATH (used only without a
    RUNPATH), RUNPATH, DT_NEEDED and SONAME; where it lies; whether it holds device code with
    the CUDA runtime linked statically."""

    path: str  # as shown to the user
    folder: str  # its real folder ($ORIGIN)
    interp: str | None
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    needed: tuple[str, ...]
    soname: str | None
    in_store: bool
    static_runtime: bool

    @property
    def nix_built(self) -> bool:
        paths = (*self.rpath, *self.runpath)
        return (
            self.in_store
            or (self.interp or "").startswith(_STORE)
            or any(p == DRIVER_LINK or p.startswith(_STORE) for p in paths)
        )

    @property
    def needs_driver(self) -> bool:
        return (
            LIBCUDA in self.needed
            or DRIVER_LINK in (*self.rpath, *self.runpath)
            or (self.soname or "").startswith("libcudart.so")
            or self.static_runtime
        )

    @property
    def host_glibc(self) -> bool:
        """Whether its loader is the host's (a program whose PT_INTERP is outside /nix/store);
        a library without PT_INTERP runs in a Nix program when Nix built it."""
        return self.interp is not None and not self.interp.startswith(_STORE)


@dataclass(frozen=True, slots=True)
class Place:
    """A folder the loader looks in: as it names it, why it looks there, and whether it is a
    host path (looked up under CAPPLAN_ROOT) or this process's own (LD_LIBRARY_PATH, $ORIGIN,
    /nix/store)."""

    folder: str
    how: str
    host: bool


@dataclass(frozen=True, slots=True)
class Finding:
    """What a folder holds under the name libcuda.so.1: ``found`` a loadable file, ``absent``,
    or ``broken`` (why in ``detail``); for a found one, its driver version (from its file name)
    and the JetPack libraries missing beside it."""

    state: str
    detail: str = ""
    version: str | None = None
    nvrm_missing: tuple[str, ...] = ()
    libc: bool = False  # the folder holds a libc.so.6 (a distribution's library folder)


@dataclass(frozen=True, slots=True)
class Reach:
    path: str
    ok: bool
    found: str | None
    how: str | None
    reason: str
    fix: str | None

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "ok": self.ok,
            "found": self.found,
            "how": self.how,
            "reason": self.reason,
            "fix": self.fix,
        }


def _expand(entry: str, origin: str) -> str | None:
    """An RPATH/RUNPATH entry with $ORIGIN replaced; None for one the loader cannot use here
    (a relative folder, another dynamic string token such as $LIB or $PLATFORM)."""
    for token in ("${ORIGIN}", "$ORIGIN"):
        entry = entry.replace(token, origin)
    if "$" in entry or not entry.startswith("/"):
        return None
    return entry


def _own(folder: str, derived: bool) -> bool:
    """Whether ``folder`` is looked up as it is (not under CAPPLAN_ROOT)."""
    return derived or folder.startswith(_STORE)


def search_places(
    facts: LoaderFacts, ld_library_path: str | None, cache_folders: Sequence[str]
) -> tuple[Place, ...]:
    """The folders the loader searches for libcuda.so.1, in its order."""
    places: list[Place] = []
    if not facts.runpath:
        for entry in facts.rpath:
            folder = _expand(entry, facts.folder)
            if folder is not None:
                places.append(Place(folder, "RPATH", not _own(folder, "ORIGIN" in entry)))
    for entry in (ld_library_path or "").split(":"):
        if entry.startswith("/"):
            places.append(Place(entry, "LD_LIBRARY_PATH", False))
    for entry in facts.runpath:
        folder = _expand(entry, facts.folder)
        if folder is not None:
            places.append(Place(folder, "RUNPATH", not _own(folder, "ORIGIN" in entry)))
    if facts.host_glibc:
        places.extend(Place(folder, "ld.so.cache", True) for folder in cache_folders)
    return tuple(places)


def judge(
    facts: LoaderFacts,
    places: Sequence[Place],
    findings: Mapping[Place, Finding],
    kernel: str | None,
) -> Reach:
    """Where the loader finds libcuda.so.1 for ``facts``, and whether that driver runs here
    (its version is the kernel module's ``kernel``; on a Jetson, its libnvrm* beside it)."""
    if not facts.host_glibc:
        # LD_LIBRARY_PATH and a RUNPATH folder come before the program's own glibc (nixpkgs'
        # addDriverRunpath puts /run/opengl-driver/lib first): a host libc.so.6 there is loaded
        # with Nix's ld.so, and the two must be the same glibc ("version GLIBC_2.xx not found",
        # "symbol lookup error").
        for place in places:
            if findings.get(place, Finding("absent")).libc:
                return Reach(facts.path, False, place.folder, place.how,
                             f"{place.how} {place.folder} holds the host's libc.so.6, which the "
                             "loader takes before the program's own (Nix) glibc: the two do not "
                             "mix, it fails to start", _FIX)  # fmt: skip
    skipped: list[str] = []
    for place in places:
        finding = findings.get(place, Finding("absent"))
        where = f"{place.how} {place.folder}"
        if finding.state == "broken":
            # glibc's open_verify refuses a file it cannot map and goes on with the next folder.
            skipped.append(f"{LIBCUDA} in {where} is skipped: {finding.detail}")
            continue
        if finding.state != "found":
            continue
        if finding.nvrm_missing:
            return Reach(facts.path, False, place.folder, place.how,
                         f"{LIBCUDA} found in {where}, but the JetPack libraries it links are not "
                         f"beside it ({', '.join(finding.nvrm_missing)}): it fails to load",
                         "install JetPack's nvidia-l4t-core, which holds them")  # fmt: skip
        if kernel and finding.version and finding.version != kernel:
            return Reach(facts.path, False, place.folder, place.how,
                         f"{LIBCUDA} found in {where} is driver {finding.version}, the kernel "
                         f"module is {kernel}: CUDA fails with error 803 'system has unsupported "
                         "display driver / cuda driver combination'",
                         "point it at the running driver's libraries ('capplan host'), or "
                         "'capplan run -- PROGRAM'")  # fmt: skip
        return Reach(facts.path, True, place.folder, place.how,
                     f"the loader finds {LIBCUDA} in {where}", None)  # fmt: skip
    looked = [_said(p, findings) for p in places] or ["nowhere (no RUNPATH, no LD_LIBRARY_PATH)"]
    reason = f"the loader finds no {LIBCUDA}: it looks in {'; '.join(looked)}"
    if not facts.host_glibc:
        reason += "; a Nix glibc never reads /etc/ld.so.cache"
    if skipped:
        reason += "; " + "; ".join(skipped)
    return Reach(facts.path, False, None, None, reason, _FIX)


def _said(place: Place, findings: Mapping[Place, Finding]) -> str:
    finding = findings.get(place, Finding("absent"))
    text = f"{place.how} {place.folder}"
    if place.folder == DRIVER_LINK and finding.detail:
        return f"{text} ({finding.detail})"
    return text
