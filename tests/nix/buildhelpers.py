"""What the `capplan build` tests share: a repository copy whose stand-in builds can be salted
(fresh derivations each session), made to fail or made slow; and running capplan build.

The stand-in's builder writes the package's record to $out. A copy of the repository (never the
stand-in itself) gets one line more: each builder script starts with what the copy's
tests/nixpkgs/planted.nix returns for the package. Empty, the derivations are the stand-in's own
byte for byte; a comment salts them; `exit 1` plants a failure; `sleep` makes a build slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from nixhelpers import NixRunner, copy_tree

__all__ = ["SRC", "build_env", "by_event", "planted_copy", "run_build"]

SRC = Path(__file__).resolve().parents[2] / "planner" / "src"
_SCRIPT = """''printf '%s\\n' "$record" > "$out"''"""
_NAME = '      name = "${namePrefix}${pname}-${version}";\n'


def planted_copy(dest: Path, planted: str) -> NixRunner:
    """A repository copy in ``dest`` whose builders start with ``planted`` (a Nix function of
    ``{ pname, record }`` returning shell text)."""
    copy_tree(dest)
    stdenv = dest / "tests" / "nixpkgs" / "stdenv.nix"
    text = stdenv.read_text()
    assert text.count(_SCRIPT) == 1 and text.count(_NAME) == 1, "the stand-in's builder moved"
    text = text.replace(_SCRIPT, f"(planted + {_SCRIPT})")
    text = text.replace(
        _NAME,
        _NAME + "      planted = import ./planted.nix { inherit pname; record = fullRecord; };\n",
    )
    stdenv.write_text(text)
    (dest / "tests" / "nixpkgs" / "planted.nix").write_text(planted)
    return NixRunner(dest)


def build_env(extra_config: str = "", *, big_parallel: bool = True) -> dict[str, str]:
    """capplan's environment: this checkout's source, Nix offline with no user settings."""
    # Kept: scripts/nix218 passes its own settings (extra-sandbox-paths) in NIX_CONFIG.
    config = [c for c in [os.environ.get("NIX_CONFIG", "")] if c]
    config.append("substituters =")
    if big_parallel:
        config.append("extra-system-features = big-parallel")
    if extra_config:
        config.append(extra_config)
    env = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "NIX_CONFIG": "\n".join(config),
        "NO_COLOR": "1",
    }
    env.pop("NIXPKGS_ALLOW_UNFREE", None)
    return env


def run_build(
    repo: NixRunner, *args: str, env: dict[str, str] | None = None, timeout: float = 400
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``capplan build --json ARGS`` in ``repo`` against its stand-in; the process and the
    events it printed."""
    argv = [sys.executable, "-m", "capplan", "build", "--json", *args,
            "--override-input", "nixpkgs", f"path:{repo.standin}"]  # fmt: skip
    with subprocess.Popen(
        argv, cwd=repo.root, env=env or build_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as child:  # fmt: skip
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM, not subprocess.run's SIGKILL: capplan stops its nix process groups.
            child.terminate()
            out, err = child.communicate(timeout=60)
    proc = subprocess.CompletedProcess(argv, child.returncode, out, err)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc, events


def by_event(events: list[dict[str, Any]], kind: str) -> list[str]:
    return [e["job"] for e in events if e["event"] == kind]
