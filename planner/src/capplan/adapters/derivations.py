"""Nix calls of ``capplan cache status`` and ``cache why``: derivations, drvPaths, substituters.

Every call goes through :func:`capplan.runtime.selector.run_bounded` (arguments as a list, a
time limit, an output limit, killed with capplan on SIGINT/SIGTERM). Derivations are read with
``nix derivation show`` on Nix >= 2.15 and ``nix show-derivation`` before it (2.8 has only the
latter; 2.18 warns that it is deprecated).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from capplan.adapters.nix import NIX_FEATURES, nix_eval_json
from capplan.core.caches.drvgraph import Drv, parse_show
from capplan.errors import InvalidInputError, NixError, shorten
from capplan.runtime.selector import Unusable, run_bounded

__all__ = [
    "SHOW_LIMIT",
    "configured_substituters",
    "installable_drv",
    "locked_nixpkgs",
    "nix_version",
    "show_derivations",
]

# One `show` answer: a recursive one over torch's closure is some tens of MB; past this the
# answer is not one capplan should hold in memory (the walk reads levels lazily before it
# asks recursively, so it asks for the part of the closure where the two sides differ only).
SHOW_LIMIT = 128 * 1024 * 1024
SHOW_SECONDS = 300.0
# Paths per call: keeps the command line far below the kernel's argument limit.
_CHUNK = 500
_VERSION = re.compile(r"([0-9]+)\.([0-9]+)")
_DRV = re.compile(r"/[^\s\"']+/[0-9a-df-np-sv-z]{32}-[^/\s]+\.drv")


def _run(args: Sequence[str], *, what: str, limit: int, timeout: float) -> tuple[str, str]:
    command = ["nix", "--extra-experimental-features", NIX_FEATURES, *args]
    done = run_bounded(command, timeout=timeout, limit=limit)
    if isinstance(done, Unusable):
        if done.kind == "missing":
            raise NixError("nix not found", hint="install nix-bin (Debian) or Nix")
        if done.kind == "timeout":
            raise NixError(f"{what} did not finish within {timeout:g} s", hint="check nix runs")
        raise NixError(f"{what} is unusable: {done}", hint="check the Nix installation")
    stdout = done.stdout.decode(errors="replace")
    stderr = done.stderr.decode(errors="replace")
    if done.returncode != 0:
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("error:")]
        said = [ln for ln in lines if ln.removeprefix("error:").strip()]
        first = said[-1] if said else (stderr.strip().splitlines() or ["no error output"])[-1]
        raise NixError(f"{what} failed: {first}", hint="run it by hand with --show-trace")
    return stdout, stderr


@lru_cache(maxsize=1)
def nix_version() -> tuple[int, int]:
    """Nix's (major, minor), from ``nix --version``."""
    stdout, _ = _run(["--version"], what="nix --version", limit=1 << 16, timeout=30.0)
    found = _VERSION.search(stdout)
    if found is None:
        raise NixError(f"nix --version printed {shorten(stdout, 80)!r}", hint="install Nix 2.8+")
    return int(found.group(1)), int(found.group(2))


def _show_command() -> list[str]:
    return ["derivation", "show"] if nix_version() >= (2, 15) else ["show-derivation"]


def show_derivations(paths: Sequence[str], recursive: bool) -> dict[str, Drv]:
    """The derivations of ``paths`` (with ``recursive``, of their closures too)."""
    out: dict[str, Drv] = {}
    for start in range(0, len(paths), _CHUNK):
        chunk = list(paths[start : start + _CHUNK])
        args = [*_show_command(), *(["-r"] if recursive else []), *chunk]
        stdout, _ = _run(args, what="nix derivation show", limit=SHOW_LIMIT, timeout=SHOW_SECONDS)
        try:
            data = json.loads(stdout)
        except (ValueError, RecursionError):
            raise NixError(
                f"nix derivation show printed something that is not JSON: {shorten(stdout, 80)!r}",
                hint="check the nix version (2.8 or newer)",
            ) from None
        out.update(parse_show(data))
    return out


def installable_drv(installable: str, overrides: Mapping[str, str]) -> str:
    """The derivation path of what the user builds: a ``.drv`` path as given, or a flake
    attribute's ``drvPath`` from one ``nix eval``."""
    if installable.endswith(".drv") and installable.startswith("/"):
        if not _DRV.fullmatch(installable):
            raise InvalidInputError(
                f"not a derivation path: {shorten(installable)}",
                hint="give /nix/store/<hash>-<name>.drv or FLAKE#ATTRIBUTE",
            )
        return installable
    if "#" not in installable:
        raise InvalidInputError(
            f"not a flake attribute or .drv path: {shorten(installable)}",
            hint="give FLAKE#ATTRIBUTE (.#torch-sm86, /etc/nixos#nixosConfigurations.host."
            "pkgs.python3Packages.torch) or a .drv path",
        )
    args = [f"{installable}.drvPath", "--no-write-lock-file"]
    for name, ref in sorted(overrides.items()):
        args += ["--override-input", name, ref]
    found = nix_eval_json(args)
    if not isinstance(found, str) or not _DRV.fullmatch(found):
        raise NixError(
            f"{shorten(installable)} has no derivation path (its drvPath is "
            f"{shorten(str(found), 80)!r})",
            hint="name a package, not a set of them",
        )
    return found


def configured_substituters() -> list[str]:
    """The substituters nix itself uses (``nix show-config``, ``nix config show`` on Nix that
    dropped the former)."""
    for args in (["show-config", "--json"], ["config", "show", "--json"]):
        try:
            stdout, _ = _run(args, what="nix " + args[0], limit=1 << 22, timeout=60.0)
        except NixError:
            continue
        try:
            data = json.loads(stdout)
        except (ValueError, RecursionError):
            continue
        value = data.get("substituters", {}) if isinstance(data, dict) else {}
        found = value.get("value") if isinstance(value, dict) else None
        if isinstance(found, list):
            return [str(u) for u in found if isinstance(u, str) and u]
        if isinstance(found, str):
            return found.split()
    raise NixError("cannot read nix's substituters", hint="give the caches with --cache URL")


def locked_nixpkgs(flake: str) -> str | None:
    """The nixpkgs revision a local flake's flake.lock pins (None where it says none)."""
    from capplan.adapters.files import read_bounded

    ref = flake.split("#", 1)[0].split("?", 1)[0]
    ref = ref.removeprefix("path:").removeprefix("git+file://")
    if ":" in ref or not ref:
        return None
    try:
        data = json.loads(read_bounded(Path(ref) / "flake.lock", 1 << 22))
        nodes = data["nodes"]
        name = nodes[data.get("root", "root")]["inputs"]["nixpkgs"]
        node = nodes[name if isinstance(name, str) else name[-1]]
        locked = node["locked"]
        rev = locked.get("rev") or locked.get("narHash")
    except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):
        return None
    return str(rev) if rev else None
