"""DESIGN.md's architecture, checked on the source: core/ is pure and grouped by theme.

core/ imports no I/O, clock or environment module and nothing from the adapters or the CLI;
its modules live in the four theme sub-packages (model, planning, binaries, caches), and
networkx stays inside the one graph module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import capplan.core

CORE = Path(capplan.core.__file__).parent
THEMES = {"model", "planning", "binaries", "caches"}
# Modules that would bring I/O, a clock or the environment into core/.
FORBIDDEN = {
    "os",
    "sys",
    "subprocess",
    "socket",
    "time",
    "datetime",
    "pathlib",
    "shutil",
    "tempfile",
    "random",
    "requests",
    "urllib",
    "http",
    "click",
    "rich",
    "capplan.adapters",
    "capplan.cli",
    "capplan.runtime",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _core_modules() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if "__pycache__" not in p.parts)


def test_core_modules_sit_in_theme_subpackages() -> None:
    loose = [p.name for p in CORE.glob("*.py") if p.name != "__init__.py"]
    assert loose == []
    themes = {p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert themes == THEMES
    for theme in THEMES:
        assert (CORE / theme / "__init__.py").is_file()


def test_core_imports_no_io_and_no_outer_layer() -> None:
    bad: list[str] = []
    for path in _core_modules():
        for name in _imports(path):
            top = {name, name.split(".")[0], ".".join(name.split(".")[:2])}
            if top & FORBIDDEN:
                bad.append(f"{path.relative_to(CORE)} imports {name}")
    assert bad == []


def test_networkx_stays_in_the_graph_module() -> None:
    users = [
        str(p.relative_to(CORE))
        for p in _core_modules()
        if any(n.split(".")[0] == "networkx" for n in _imports(p))
    ]
    assert users == ["planning/graph.py"]


def test_the_checker_sees_forbidden_imports(tmp_path: Path) -> None:
    # The check above must be able to fail: a module importing os is reported.
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom capplan.adapters import files\n", encoding="utf-8")
    assert _imports(sample) == {"os", "capplan.adapters"}
