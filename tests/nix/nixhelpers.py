"""Helpers for the tests that run real Nix (Debian's nix-bin, 2.x) against the stand-in nixpkgs.

A flake inside a git work tree sees only tracked files, so every test works on a copy of the
repository's tracked and new (not ignored) files in a temporary folder that is not a git tree
(NIXPKGS.md section 9).  The pinned nixpkgs input is replaced by the stand-in with
`--override-input nixpkgs path:<copy>/tests/nixpkgs`; substituters are off and the lock file is
never written.  Builds are grouped so the whole directory needs only a few Nix invocations.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PLANS",
    "REPO",
    "SYSTEM",
    "NixRunner",
    "copy_to_binary_cache",
    "copy_tree",
    "count_imports",
    "serve_binary_cache",
]

REPO = Path(__file__).resolve().parents[2]
PLANS = REPO / "tests" / "data" / "plans"
CACHE_SERVER = REPO / "tests" / "data" / "cache_server.py"
SYSTEM = "x86_64-linux"
IMPORT_TRACE = "capplan-standin: import "
INSTANTIATE_TRACE = "capplan-standin: instantiate "

# Everything Nix needs to run offline and without touching the user's configuration.
# `extra-system-features big-parallel`: torch keeps nixpkgs' requiredSystemFeatures
# ["big-parallel"]; Nix 2.8 refuses to build it locally when the machine's nix.conf leaves
# that feature out, so the tests declare it instead of depending on the host's settings.
NIX_OPTIONS: tuple[str, ...] = (
    "--extra-experimental-features",
    "nix-command flakes",
    "--option",
    "substituters",
    "",
    "--option",
    "extra-system-features",
    "big-parallel",
)


def count_imports(stderr: str) -> tuple[int, int]:
    """Number of `import nixpkgs` and of in-set re-instantiations the stand-in traced."""
    lines = stderr.splitlines()
    imports = sum(1 for line in lines if IMPORT_TRACE in line)
    instantiations = sum(1 for line in lines if INSTANTIATE_TRACE in line)
    return imports, instantiations


def _repo_files() -> list[Path]:
    """Tracked and untracked-but-not-ignored files, as git would put them in a commit."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [
            p.relative_to(REPO)
            for p in REPO.rglob("*")
            if p.is_file()
            and not any(
                part in {".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"}
                or part.endswith(".egg-info")
                for part in p.relative_to(REPO).parts
            )
        ]
    names = [name for name in out.decode().split("\0") if name]
    return [Path(name) for name in names if (REPO / name).is_file()]


def copy_tree(dest: Path) -> None:
    for rel in _repo_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target)


@dataclass(frozen=True)
class NixRunner:
    """Runs nix in one copy of the repository."""

    root: Path

    @property
    def standin(self) -> Path:
        return self.root / "tests" / "nixpkgs"

    def run(self, args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        # The flake must not see the user's NIXPKGS_ALLOW_UNFREE (the refusal tests rely on it).
        env.pop("NIXPKGS_ALLOW_UNFREE", None)
        proc = subprocess.run(
            ["nix", *NIX_OPTIONS, *args],
            check=False,
            cwd=self.root,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"nix {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def flake(
        self, verb: Sequence[str], *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`nix <verb> .#... --override-input nixpkgs path:<stand-in>`."""
        return self.run(
            [
                *verb,
                *args,
                "--override-input",
                "nixpkgs",
                f"path:{self.standin}",
                "--no-write-lock-file",
            ],
            check=check,
        )

    def build(self, attrs: Sequence[str]) -> dict[str, Path]:
        """Build flake attributes in one invocation; return attr -> output path.

        `nix build --json` does not keep the installables' order, so the output paths come from
        one `nix eval` first (evaluation only), then one build of all of them.  (Nix 2.8's
        `.#` means the default package, not the outputs, hence one eval per top-level output.)
        """
        outs = (
            [self.out_path(a) for a in attrs] if len({a.split(".")[0] for a in attrs}) > 1 else []
        )
        if not outs:
            top = attrs[0].split(".")[0]
            apply = "o: [ " + " ".join(f"o.{a.split('.', 1)[1]}.outPath" for a in attrs) + " ]"
            outs = json.loads(self.flake(["eval"], f".#{top}", "--json", "--apply", apply).stdout)
        proc = self.flake(["build"], *[f".#{a}" for a in attrs], "--no-link", "--json")
        built = {r["outputs"]["out"] for r in json.loads(proc.stdout)}
        assert built == set(outs), (built, outs)
        return {a: Path(o) for a, o in zip(attrs, outs, strict=True)}

    def out_path(self, attr: str) -> str:
        return str(self.flake(["eval"], f".#{attr}.outPath", "--raw").stdout)

    def records(self, attrs: Sequence[str]) -> dict[str, Any]:
        """Build and read the stand-in's JSON records."""
        return {a: json.loads(p.read_text()) for a, p in self.build(attrs).items()}

    def eval_json(self, attr: str, *args: str) -> Any:
        return json.loads(self.flake(["eval"], f".#{attr}", "--json", *args).stdout)

    def expr(self, expression: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`nix eval --impure --json --expr` with `standin` and `root` bound to paths."""
        wrapped = f"let standin = {self.standin}; root = {self.root}; in\n{expression}"
        return self.run(["eval", "--impure", "--json", "--expr", wrapped], check=check)

    def expr_json(self, expression: str) -> Any:
        return json.loads(self.expr(expression).stdout)


def copy_to_binary_cache(paths: Iterable[Path], root: Path) -> set[str]:
    """`nix copy` store paths into a file:// binary cache; returns the narinfo hashes in it."""
    for path in paths:
        subprocess.run(
            ["nix", "--extra-experimental-features", "nix-command flakes", "copy", "--to",
             f"file://{root}", str(path)],
            check=True,
            capture_output=True,
        )  # fmt: skip
    return {p.name.removesuffix(".narinfo") for p in root.glob("*.narinfo")}


@contextmanager
def serve_binary_cache(root: Path) -> Iterator[str]:
    """Serve a binary-cache folder over HTTP on 127.0.0.1 (tests/data/cache_server.py)."""
    proc = subprocess.Popen(
        [sys.executable, str(CACHE_SERVER), "--root", str(root), "--host", "127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        assert port.isdigit(), proc.stderr.read() if proc.stderr else ""
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
