"""The Nix-built tool (pkgs/capplan.nix) carries exactly the runtime dependencies that
planner/pyproject.toml declares, so `nix run` never misses a module pip would install."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_nix_python_dependencies_match_pyproject() -> None:
    project = tomllib.loads((REPO / "planner" / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!~ \[]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    nix = (REPO / "pkgs" / "capplan.nix").read_text()
    block = re.search(r"pythonDependencies =\s*ps: with ps; \[(.*?)\];", nix, re.S)
    assert block is not None
    listed = {w.lower() for w in block.group(1).split()}
    assert listed == declared
