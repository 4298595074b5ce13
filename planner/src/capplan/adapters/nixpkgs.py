"""The nixpkgs a user pins: where it is (flake.lock, a path or a flake reference) and what it
says about the facts a plan relies on, read with ONE ``nix eval``.

The Nix expression is a constant; the questions travel as JSON in an environment variable
(``builtins.fromJSON (builtins.getEnv ...)``), never as Nix source.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from capplan.adapters.nix import PARAMS_ENV, nix_eval_json
from capplan.errors import DataError, InvalidInputError, NixError

__all__ = ["LockedNixpkgs", "evaluate_nixpkgs", "locked_nixpkgs", "nixpkgs_reference"]

# Everything is read through `or` (a missing attribute is not catchable) and tryEval (a throw
# or meta.broken is): one failing fact never hides the others.
_CHECK_EXPR = """
let
  params = builtins.fromJSON (builtins.getEnv "CAPPLAN_NIX_PARAMS");
  request = params.request;
  # A checkout is imported where it is (no copy of nixpkgs into the store); a flake
  # reference is fetched and locked by getFlake.
  source =
    if params ? path then { outPath = /. + params.path; } else builtins.getFlake params.flake;
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
    path = params.path or null;
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
    label = str(lock_file)
    try:
        data = json.loads(lock_file.read_text(encoding="utf-8"))
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
    except (OSError, ValueError, KeyError, TypeError) as exc:
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


def nixpkgs_reference(given: str) -> str:
    """A flake reference for ``--nixpkgs``: a folder becomes ``path:<absolute folder>``; text
    with a scheme (``github:``, ``path:``, ``git+https:``) is passed to Nix as it is."""
    path = Path(given).expanduser()
    if path.exists() or ("/" in given and ":" not in given.split("/", 1)[0]):
        if not path.is_dir():
            raise InvalidInputError(
                f"--nixpkgs {given}: not a folder",
                hint="give a nixpkgs checkout (a folder with default.nix) or a flake reference",
            )
        if not (path / "default.nix").is_file():
            raise InvalidInputError(
                f"--nixpkgs {given}: no default.nix in that folder, so it is not nixpkgs",
                hint="give a nixpkgs checkout or a flake reference (github:NixOS/nixpkgs/<rev>)",
            )
        return f"path:{path.resolve()}"
    if ":" not in given:
        raise InvalidInputError(
            f"--nixpkgs {given}: neither a folder nor a flake reference",
            hint="give a nixpkgs checkout or a flake reference such as github:NixOS/nixpkgs/<rev>",
        )
    return given


def evaluate_nixpkgs(
    reference: str,
    request: Mapping[str, Any],
    *,
    offline: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    """nixpkgs' answers to ``request`` (core/planning/nixpkgs_check.py), with one ``nix eval``."""
    where = (
        {"path": reference.removeprefix("path:")}
        if reference.startswith("path:/") and "?" not in reference
        else {"flake": reference}
    )
    params = json.dumps({**where, "request": request}, sort_keys=True)
    args = ["--impure", "--expr", _CHECK_EXPR]
    if offline:
        args.insert(0, "--offline")
    answer = nix_eval_json(args, env={PARAMS_ENV: params}, timeout=timeout)
    if not isinstance(answer, dict):
        raise NixError(
            f"nix eval of the nixpkgs check returned {type(answer).__name__}, not an attrset",
            hint="report this bug",
        )
    return answer
