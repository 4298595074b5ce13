"""DESIGN.md's architecture, checked on the source: core/ is pure and grouped by theme.

core/ imports no I/O, clock or environment module and nothing from the adapters or the CLI;
its modules live in the six theme sub-packages (families, model, planning, binaries, caches,
export), and networkx stays inside the one graph module. Vendor branches (``vendor == "amd"``)
live only in the modules of a target family (DESIGN.md "As core/ grows: target families"): everything else
asks the family interface (core/families/base.py) and registry (core/families/registry.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import capplan
import capplan.core

CORE = Path(capplan.core.__file__).parent
PACKAGE = Path(capplan.__file__).parent
THEMES = {"families", "model", "planning", "binaries", "caches", "export"}
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


# The modules of one target family, which may branch on their vendor (paths under capplan/).
FAMILY_MODULES = {
    "core/families/cuda/family.py",
    "core/families/rocm/target.py",
    "core/families/rocm/kb.py",
    "core/model/vendors.py",
    "core/model/gpus.py",
    "core/families/cuda/planning.py",
    "core/families/cpu/planning.py",
    "core/families/rocm/planning.py",
    "core/families/rocm/select.py",
    "adapters/detect/amd.py",
    "adapters/detect/cpu.py",  # archspec's CPU vendors ("generic", "GenuineIntel")
    "adapters/detect/nvidia.py",
    "adapters/detect/system.py",
}
# Vendor and family names as code compares them.
VENDOR_WORDS = {"amd", "nvidia", "cuda", "rocm"}


def _is_vendor_operand(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.lower() in VENDOR_WORDS
    if isinstance(node, ast.Attribute):
        return node.attr == "vendor"
    if isinstance(node, ast.Name):
        return node.id == "vendor"
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value == "vendor"
    return False


def _vendor_branches(path: Path) -> list[str]:
    """Comparisons with a vendor name or a ``vendor`` value: ``v.vendor == "amd"``,
    ``"nvidia" in vendors``, ``entry["vendor"] != ...``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(_is_vendor_operand(x) for x in (node.left, *node.comparators))
    ]


def test_vendor_branches_live_in_family_modules() -> None:
    bad: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if "__pycache__" in path.parts or relative in FAMILY_MODULES:
            continue
        bad.extend(f"{relative} {found}" for found in _vendor_branches(path))
    assert bad == []


def test_family_modules_exist() -> None:
    # A renamed family module must be renamed here too, not silently exempt a new file.
    missing = sorted(m for m in FAMILY_MODULES if not (PACKAGE / m).is_file())
    assert missing == []


def test_the_checker_sees_vendor_branches(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'if v.vendor == "amd":\n    pass\n'
        'ok = "nvidia" in user.vendors\n'
        'x = entry["vendor"] != other\n'
        'fine = v.package == "torch" and v.system != "x86_64-linux"\n',
        encoding="utf-8",
    )
    found = _vendor_branches(sample)
    assert [f.split(":")[0] for f in found] == ["line 1", "line 3", "line 4"]
