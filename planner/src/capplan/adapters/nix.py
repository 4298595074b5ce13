"""A small runner for ``nix eval --json``.

Arguments always travel as a list (no shell). User data never becomes Nix source: the one Nix
expression here is a constant that reads its parameters from an environment variable with
``builtins.fromJSON (builtins.getEnv ...)``, which is why those evaluations pass ``--impure``.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capplan.core.caches.narinfo import split_store_path
from capplan.errors import CapplanError, ConfigError, NixError, shorten
from capplan.runtime.selector import Unusable, run_bounded

__all__ = [
    "EVAL_SECONDS_ENV",
    "MAX_NIX_EVAL_SECONDS",
    "NIX_EVAL_SECONDS",
    "NIX_FEATURES",
    "PARAMS_ENV",
    "current_system",
    "eval_seconds",
    "flake_output_paths",
    "nix_eval_json",
    "nix_eval_seconds",
]

NIX_FEATURES = "nix-command flakes"
# What one nix eval may print (stdout and stderr together): the largest answer capplan asks
# for, every planned variant's output paths, is a few MB; past this nix is unusable here.
NIX_OUTPUT_LIMIT = 64 * 1024 * 1024
PARAMS_ENV = "CAPPLAN_NIX_PARAMS"
# How long one nix eval may run: the largest capplan asks for (nixpkgs check of a real nixpkgs:
# torch on each CUDA set, every ROCm scope) takes minutes on a cold evaluation cache; a nix
# that hangs (a wedged daemon, a fetch that never ends) is stopped here, not by CI's timeout.
NIX_EVAL_SECONDS = 1200.0
# ... and the setting that changes it (issue 46: CI with a cold cache, or a quick check, sets
# its own), from CAPPLAN_NIX_EVAL_SECONDS or a command's --nix-eval-seconds: whole seconds from
# 1 to a day, read without int() on text of any length (a 5,000-digit value is past Python's
# 4,300-digit limit).
EVAL_SECONDS_ENV = "CAPPLAN_NIX_EVAL_SECONDS"
MAX_NIX_EVAL_SECONDS = 86_400
_SECONDS = re.compile(r"[0-9]{1,6}")


def eval_seconds(text: str, source: str, error: type[CapplanError] = ConfigError) -> int:
    """``text`` as nix eval's time limit in seconds; ``error`` (exit 5 for the environment, 4
    for a flag) naming ``source`` when it is no whole number from 1 to a day."""
    value = text.strip()
    if _SECONDS.fullmatch(value) and 1 <= int(value) <= MAX_NIX_EVAL_SECONDS:
        return int(value)
    raise error(
        f"{source}='{shorten(text)}' is not a whole number of seconds from 1 to "
        f"{MAX_NIX_EVAL_SECONDS:,}",
        hint=f"give nix eval's time limit in seconds, e.g. {source}=3600 "
        f"(default {NIX_EVAL_SECONDS:g})",
    )


def nix_eval_seconds(environ: Mapping[str, str]) -> float:
    """How long one nix eval may run: CAPPLAN_NIX_EVAL_SECONDS, else :data:`NIX_EVAL_SECONDS`."""
    given = environ.get(EVAL_SECONDS_ENV)
    return NIX_EVAL_SECONDS if given is None else float(eval_seconds(given, EVAL_SECONDS_ENV))


# Given the flake's `legacyPackages` attrset (where capplan's flake keeps its variants, as
# nixpkgs does, so that `nix flake show` never forces them), return
# { <attr> = [ <outPath of each output> ] } for the requested attrs, and null for a missing attr
# so Python can name it. Only outPaths are forced: evaluating a variant never builds it, and
# never forces a sibling variant (DESIGN.md).
_OUTPUTS_EXPR = """
legacyPackages:
let
  params = builtins.fromJSON (builtins.getEnv "CAPPLAN_NIX_PARAMS");
  pkgs = legacyPackages.${params.system} or { };
  outputsOf = drv: map (o: drv.${o}.outPath) (drv.outputs or [ "out" ]);
in
builtins.listToAttrs (map (name: {
  inherit name;
  value = if pkgs ? ${name} then outputsOf pkgs.${name} else null;
}) params.attrs)
"""


def current_system() -> str:
    """Nix's system double for this machine (x86_64-linux, aarch64-linux, ...)."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return f"{machine}-{platform.system().lower()}"


# Current nixpkgs aborts on Nix older than 2.18 (lib/minfeatures.nix, checked by nixpkgs'
# default.nix): "This version of Nixpkgs requires an implementation of Nix with the following
# features: ... You are evaluating with Nix 2.8.0, please upgrade".
_NIXPKGS_TOO_NEW = "This version of Nixpkgs requires"
_EVALUATING_WITH = re.compile(r"evaluating with Nix ([0-9][^\s,]*)")


def _nixpkgs_needs_newer_nix(stderr: str) -> NixError | None:
    if _NIXPKGS_TOO_NEW not in stderr:
        return None
    found = _EVALUATING_WITH.search(stderr)
    version = found.group(1) if found else "older than 2.18"
    return NixError(
        f"the pinned nixpkgs needs Nix >= 2.18, this nix is {version}",
        hint="upgrade Nix (capplan's own flake needs only 2.8), or override the nixpkgs input "
        "with an older pin",
    )


def _error_line(stderr: str) -> str:
    """The line of Nix's error output that says what went wrong, under Nix 2.8 and >= 2.18.

    Nix 2.8 prints ``error: <message>`` first, then the position. Nix 2.18 prints a bare
    ``error:`` when the error has a trace, then the ``… while ...`` frames outermost first, and
    the message last as ``error: <message>`` (the innermost error: what a user must read).
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    said = [line for line in errors if line.removeprefix("error:").strip()]
    if errors and errors[0] in said:
        return errors[0]
    if said:
        return said[-1]
    messages = [line for line in lines if not line.startswith(("error:", "…", "trace:"))]
    return messages[0] if messages else "no error output"


def nix_eval_json(
    args: Sequence[str],
    cwd: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    limit: int = NIX_OUTPUT_LIMIT,
) -> Any:
    """Run ``nix eval --json ARGS`` and return the decoded JSON.

    Raises NixError with nix's first error line when it fails, or when nix is not installed,
    or does not finish within ``timeout`` seconds (default: :func:`nix_eval_seconds`), or prints
    more than ``limit`` bytes (stdout and stderr together).
    """
    timeout = nix_eval_seconds(os.environ) if timeout is None else timeout
    command = ["nix", "--extra-experimental-features", NIX_FEATURES, "eval", "--json", *args]
    done = run_bounded(
        command,
        cwd=None if cwd is None else str(cwd),
        env=None if env is None else {**os.environ, **env},
        timeout=timeout,
        limit=limit,
    )
    if isinstance(done, Unusable):
        if done.kind == "missing":
            raise NixError("nix not found", hint="install nix-bin (Debian) or Nix")
        if done.kind == "timeout":
            raise NixError(
                f"nix eval did not finish within {timeout:g} s",
                hint=f"check the flake evaluates, or allow more time ({EVAL_SECONDS_ENV} or "
                "--nix-eval-seconds)",
            )
        raise NixError(f"nix eval is unusable: {done}", hint="check the Nix installation")
    stdout, stderr = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    if done.returncode != 0:
        too_old = _nixpkgs_needs_newer_nix(stderr)
        if too_old is not None:
            raise too_old
        raise NixError(
            f"nix eval failed: {_error_line(stderr)}",
            hint="run the same nix eval by hand with --show-trace",
        )
    try:
        return json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise NixError(
            f"nix eval printed something that is not JSON: {stdout[:80]!r}",
            hint="check the nix version (2.8 or newer)",
        ) from exc


def flake_output_paths(
    flake: str,
    attrs: Sequence[str],
    override_inputs: Mapping[str, str] | None = None,
    *,
    system: str | None = None,
    cwd: Path | None = None,
) -> dict[str, list[str]]:
    """Output store paths of ``legacyPackages.<system>.<attr>`` for each attr, with ONE nix eval.

    ``override_inputs`` maps input names to flake references (``--override-input``).
    """
    names = sorted(set(attrs))
    if not names:
        return {}
    params = json.dumps({"system": system or current_system(), "attrs": names}, sort_keys=True)
    args = [f"{flake}#legacyPackages", "--impure", "--apply", _OUTPUTS_EXPR, "--no-write-lock-file"]
    for name, ref in sorted((override_inputs or {}).items()):
        args += ["--override-input", name, ref]
    result = nix_eval_json(args, cwd=cwd, env={PARAMS_ENV: params})
    if not isinstance(result, dict):
        raise NixError(
            f"nix eval of {flake}#legacyPackages returned {type(result).__name__}, not an attrset",
            hint="check the flake's legacyPackages output",
        )
    missing = [name for name in names if result.get(name) is None]
    if missing:
        raise NixError(
            f"flake {flake} has no legacyPackages.{system or current_system()}.{missing[0]}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            hint="list the flake's packages with `nix flake show`",
        )
    out: dict[str, list[str]] = {}
    for name in names:
        paths = result[name]
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise NixError(f"unexpected outputs for {name}: {paths!r}", hint="report this bug")
        for path in paths:
            try:
                split_store_path(path)
            except CapplanError as exc:
                raise NixError(
                    f"{name} has an output that is not a store path: {path!r}",
                    hint="check the package's outputs",
                ) from exc
        out[name] = list(paths)
    return out
