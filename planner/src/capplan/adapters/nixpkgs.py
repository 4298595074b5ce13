"""The nixpkgs a user pins: where it is (flake.lock, a path or a flake reference) and what it
says about the facts a plan relies on, read with ONE ``nix eval``.

The Nix expression is a constant; the questions travel as JSON in an environment variable
(``builtins.fromJSON (builtins.getEnv ...)``), never as Nix source.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from capplan.adapters.nix import PARAMS_ENV, nix_eval_json
from capplan.errors import DataError, InvalidInputError, NixError

__all__ = [
    "FOLDER_ENV",
    "NIXPKGS_ANSWER_LIMIT",
    "LockedNixpkgs",
    "evaluate_nixpkgs",
    "locked_nixpkgs",
    "nixpkgs_folder",
    "nixpkgs_reference",
]

FOLDER_ENV = "CAPPLAN_NIXPKGS_FOLDER"
# What the check's nix eval may print (its answer, its warnings): a real nixpkgs answers in tens
# of KB (each recipe's argument names, the CUDA sets, the ROCm scopes), and a 10 MB value where
# a list belongs is still one drift line. A checkout whose attribute names run to tens of
# megabytes was read, decoded and echoed several times over (over 500 MB for a 60 MB answer);
# past this it is refused like any nix past its output limit.
NIXPKGS_ANSWER_LIMIT = 16 * 1024 * 1024

# Everything is read through `or` (a missing attribute is not catchable) and tryEval (a throw
# or meta.broken is): one failing fact never hides the others.
_CHECK_EXPR = """
let
  params = builtins.fromJSON (builtins.getEnv "CAPPLAN_NIX_PARAMS");
  request = params.request;
  # A checkout is imported where it is (no copy of nixpkgs into the store); its path comes
  # as the bytes of its own variable (a name that is not UTF-8, or holds '?', is no flake
  # reference and no JSON string). A flake reference is fetched and locked by getFlake.
  source =
    if params.folder
    then { outPath = /. + builtins.getEnv "CAPPLAN_NIXPKGS_FOLDER"; }
    else builtins.getFlake params.flake;
  system = request.system;
  nixpkgsWith = config: import source.outPath { inherit system config; };
  pkgs = nixpkgsWith { allowUnfree = true; };
  pkgsCuda = nixpkgsWith { allowUnfree = true; cudaSupport = true; };
  try = v: let r = builtins.tryEval v; in if r.success then r.value else null;
  # lib/trivial.nix functionArgs: reads the functor `override` is (mirrorFunctionArgs).
  functionArgs = f:
    if f ? __functor then f.__functionArgs or (functionArgs (f.__functor f))
    else builtins.functionArgs f;
  argsOf = f: ((pkgs.lib or { }).functionArgs or functionArgs) f;
  at = set: path: builtins.foldl'
    (s: n: if s != null && builtins.isAttrs s && s ? ${n} then s.${n} else null) set path;
  argumentsOf = path:
    let p = try (at pkgs path); in
    if p == null || !(builtins.isAttrs p) || !(p ? override) then null
    else try (builtins.attrNames (argsOf p.override));
  isCudaSet = n: builtins.match "cudaPackages_[0-9]+_[0-9]+" n != null;
  torchOn = name:
    if pkgsCuda ? ${name} then
      let p = pkgsCuda.${name}.pkgs or { }; in
      try (((p.python3Packages or { }).torch or { }).meta.broken or false)
    else null;
  db = (pkgs._cuda or { }).db.cudaCapabilityToInfo or { };
  atLeast = a: b: builtins.compareVersions a b >= 0;
  onDefault = info:
    atLeast request.default_cuda (info.minCudaMajorMinorVersion or "0")
    && (info.maxCudaMajorMinorVersion or null == null
      || atLeast info.maxCudaMajorMinorVersion request.default_cuda);
  askedCaps = builtins.filter (c: db ? ${c} && onDefault db.${c})
    (request.torch_capabilities or [ ]);
  torchCaps =
    let
      p = nixpkgsWith {
        allowUnfree = true;
        cudaSupport = true;
        cudaCapabilities = askedCaps;
        cudaForwardCompat = false;
      };
      t = p.python3Packages.torch;
      kept = t.cudaCapabilities
        or (builtins.filter builtins.isString (builtins.split ";" t.gpuTargetString));
    in
    try (builtins.deepSeq kept kept);
  rocm = pkgs.rocmPackages or null;
  scopeTargets = n: try (((rocm.${n} or { }).clr or { }).localGpuTargets or null);
  # A scope's library as the plan builds it: with plan.json's scope_overrides applied the way
  # pkgs/variant.nix applies them (overrideScope, each library's .override).
  withOverrides = s: overrides:
    if overrides == { } then s
    else s.overrideScope (final: prev: builtins.mapAttrs
      (n: args: prev.${n}.override args) overrides);
  evaluates = i:
    let
      s0 = rocm.${i.scope} or null;
      s = if s0 == null || !(builtins.isAttrs s0) then null
        else withOverrides s0 (i.overrides or { });
    in
    if s == null || !(s ? ${i.package}) then null
    else (builtins.tryEval (builtins.seq s.${i.package}.drvPath true)).success;
in
{
  source = {
    rev = source.rev or null;
    narHash = source.narHash or null;
    lastModified = source.lastModified or null;
    version = (pkgs.lib or { }).version or null;
  };
  arguments = builtins.listToAttrs (map (f: {
    name = builtins.concatStringsSep "." f.attr;
    value = argumentsOf f.attr;
  }) request.arguments);
  cuda_sets = builtins.filter isCudaSet (builtins.attrNames pkgs);
  default_cuda = (pkgs.cudaPackages or { }).cudaMajorMinorVersion or null;
  torch_broken = builtins.listToAttrs
    (map (n: { name = n; value = torchOn n; }) (request.torch_cuda or [ ]));
  torch_capabilities =
    if !(request ? torch_capabilities) then null
    else { requested = askedCaps; kept = if askedCaps == [ ] then null else torchCaps; };
  rocm =
    if rocm == null || !(request ? rocm) then null
    else {
      default_targets = try ((rocm.clr or { }).gpuTargets or null);
      scope_names =
        builtins.filter (n: builtins.match "gfx[0-9a-z]+" n != null) (builtins.attrNames rocm);
      scopes = builtins.listToAttrs (map (n: { name = n; value = scopeTargets n; })
        (builtins.filter (n: rocm ? ${n}) (builtins.attrNames request.rocm.scopes)));
      scope_packages = builtins.listToAttrs (map (i: {
        name = "${i.scope}.${i.package}";
        value = evaluates i;
      }) request.rocm.scope_packages);
    };
}
"""


@dataclass(frozen=True)
class LockedNixpkgs:
    """The ``nixpkgs`` input of a flake.lock."""

    reference: str  # a flake reference Nix fetches exactly this revision with
    rev: str | None
    nar_hash: str | None

    def label(self) -> str:
        return self.rev or self.nar_hash or self.reference

    def store_path(self, store_dir: str = "/nix/store") -> str | None:
        """Where Nix keeps this source (``<store>/<hash>-source``), from its narHash; None when
        the lock has none."""
        if self.nar_hash is None or not self.nar_hash.startswith("sha256-"):
            return None
        digest = base64.b64decode(self.nar_hash.removeprefix("sha256-"))
        # libstore makeFixedOutputPath: a recursive sha256 source is makeStorePath("source", ...)
        inner = f"source:sha256:{digest.hex()}:{store_dir}:source"
        full = hashlib.sha256(inner.encode()).digest()
        folded = bytearray(20)
        for i, byte in enumerate(full):
            folded[i % 20] ^= byte
        return f"{store_dir}/{_nix32(bytes(folded))}-source"

    def at_hand(self) -> bool:
        path = self.store_path()
        return path is not None and Path(path).is_dir()


_NIX32 = "0123456789abcdfghijklmnpqrsvwxyz"


def _nix32(data: bytes) -> str:
    length = (len(data) * 8 - 1) // 5 + 1
    out = []
    for n in range(length - 1, -1, -1):
        b = n * 5
        i, j = divmod(b, 8)
        c = (data[i] >> j) | (data[i + 1] << (8 - j) if i + 1 < len(data) else 0)
        out.append(_NIX32[c & 0x1F])
    return "".join(out)


def _query(params: Mapping[str, str | None]) -> str:
    given = [f"{k}={quote(v, safe='')}" for k, v in params.items() if v]
    return ("?" + "&".join(given)) if given else ""


def locked_nixpkgs(lock_file: Path) -> LockedNixpkgs:
    """The ``nixpkgs`` input recorded in ``lock_file``; DataError when it has none."""
    from capplan.adapters.files import read_bounded

    label = str(lock_file)
    try:
        # Bounded and never blocking: a flake.lock that is a FIFO or /dev/zero is refused.
        data = json.loads(read_bounded(lock_file).decode("utf-8"))
        nodes = data["nodes"]
        name = nodes[data.get("root", "root")]["inputs"]["nixpkgs"]
        if not isinstance(name, str):
            raise TypeError("nixpkgs follows another input")
        locked = nodes[name]["locked"]
        kind = locked["type"]
    except FileNotFoundError as exc:
        raise InvalidInputError(
            f"no flake.lock at {label}",
            hint="run in the flake's folder, or pass --nixpkgs PATH|FLAKEREF",
        ) from exc
    except OSError as exc:
        raise DataError(
            f"cannot read {label}: {exc.strerror or exc}", hint="pass --nixpkgs PATH|FLAKEREF"
        ) from exc
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise DataError(
            f"{label} names no nixpkgs input capplan can read ({type(exc).__name__}: {exc})",
            hint="pass --nixpkgs PATH|FLAKEREF",
        ) from exc
    rev, nar_hash = locked.get("rev"), locked.get("narHash")
    if kind in ("github", "gitlab", "sourcehut"):
        ref = f"{kind}:{locked['owner']}/{locked['repo']}/{rev}"
        ref += _query({"narHash": nar_hash})
    elif kind == "path":
        ref = f"path:{locked['path']}" + _query({"narHash": nar_hash})
    elif kind == "git":
        ref = f"git+{locked['url']}" + _query({"rev": rev, "narHash": nar_hash})
    elif kind in ("tarball", "file"):
        ref = f"{kind}+{locked['url']}" + _query({"narHash": nar_hash})
    else:
        raise DataError(
            f"{label}: nixpkgs is locked as type {kind!r}, which capplan does not read",
            hint="pass --nixpkgs PATH|FLAKEREF",
        )
    return LockedNixpkgs(ref, rev, nar_hash)


def _shown(path: str) -> str:
    """A path as text any output takes: bytes that are not UTF-8 written as ``\\xff``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def nixpkgs_folder(given: str) -> Path | None:
    """The nixpkgs checkout ``--nixpkgs`` names (absolute, its bytes kept), or None when
    ``given`` is a flake reference; InvalidInputError (one line) for anything else."""
    path = Path(given).expanduser()
    hint = "give a nixpkgs checkout (a folder with default.nix) or a flake reference"
    try:
        mode: int | None = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as exc:  # a name past NAME_MAX, a folder above it nobody may search, a loop
        raise InvalidInputError(f"--nixpkgs {given}: {exc.strerror}", hint=hint) from None
    if mode is None and not ("/" in given and ":" not in given.split("/", 1)[0]):
        if ":" not in given:
            raise InvalidInputError(
                f"--nixpkgs {given}: neither a folder nor a flake reference",
                hint="give a nixpkgs checkout or a flake reference such as "
                "github:NixOS/nixpkgs/<rev>",
            )
        return None
    if mode is None or not stat.S_ISDIR(mode):
        what = "not a folder " + (
            "(nothing is there)" if mode is None else f"({_kind(path, mode)})"
        )
        raise InvalidInputError(f"--nixpkgs {given}: {what}", hint=hint)
    try:
        inside: int | None = os.stat(path / "default.nix").st_mode
    except (FileNotFoundError, NotADirectoryError):
        inside = None
    except OSError as exc:
        raise InvalidInputError(
            f"--nixpkgs {given}: cannot read its default.nix: {exc.strerror}", hint=hint
        ) from None
    if inside is None:
        raise InvalidInputError(
            f"--nixpkgs {given}: no default.nix in that folder, so it is not nixpkgs",
            hint="give a nixpkgs checkout or a flake reference (github:NixOS/nixpkgs/<rev>)",
        )
    if not stat.S_ISREG(inside):
        raise InvalidInputError(
            f"--nixpkgs {given}: its default.nix is {_kind(path / 'default.nix', inside)}, "
            "not a file, so it is not nixpkgs",
            hint=hint,
        )
    return Path(os.path.realpath(path))


def _kind(path: Path, mode: int) -> str:
    from capplan.adapters.files import special_kind

    return (
        "a folder"
        if stat.S_ISDIR(mode)
        else "a file"
        if stat.S_ISREG(mode)
        else (special_kind(path))
    )


def nixpkgs_reference(given: str) -> str:
    """A flake reference for ``--nixpkgs``: a folder becomes ``path:<absolute folder>`` (as
    shown: pass the folder itself, :func:`nixpkgs_folder`, to :func:`evaluate_nixpkgs`); text
    with a scheme (``github:``, ``path:``, ``git+https:``) is passed to Nix as it is."""
    folder = nixpkgs_folder(given)
    return given if folder is None else f"path:{_shown(str(folder))}"


def evaluate_nixpkgs(
    reference: str,
    request: Mapping[str, Any],
    *,
    folder: Path | None = None,
    offline: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    """nixpkgs' answers to ``request`` (core/planning/nixpkgs_check.py), with one ``nix eval``:
    of the checkout ``folder`` when given (:func:`nixpkgs_folder`), else of the flake
    ``reference``."""
    env = {}
    if folder is None and reference.startswith("path:/") and "?" not in reference:
        folder = Path(reference.removeprefix("path:"))  # a lock's path input: where it is
    if folder is not None:
        env[FOLDER_ENV] = str(folder)
    where = {"folder": folder is not None, "flake": None if folder is not None else reference}
    params = json.dumps({**where, "request": request}, sort_keys=True)
    args = ["--impure", "--expr", _CHECK_EXPR]
    if offline:
        args.insert(0, "--offline")
    answer = nix_eval_json(
        args, env={PARAMS_ENV: params, **env}, timeout=timeout, limit=NIXPKGS_ANSWER_LIMIT
    )
    if not isinstance(answer, dict):
        raise NixError(
            f"nix eval of the nixpkgs check returned {type(answer).__name__}, not an attrset",
            hint="report this bug",
        )
    source = answer.get("source")
    if isinstance(source, dict):
        # Whole, as every JSON output holds a name: a byte that is not UTF-8 is \udcXX there.
        source["path"] = None if folder is None else str(folder)
    return answer
