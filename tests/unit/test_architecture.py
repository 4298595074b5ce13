"""DESIGN.md's architecture, checked on the source: core/ is pure and grouped by theme.

core/ imports no I/O, clock or environment module and nothing from the adapters or the CLI;
its modules live in the six theme sub-packages (families, model, planning, binaries, caches,
export), and networkx stays inside the one graph module. Vendor branches (``vendor == "amd"``)
live only in the modules of a target family (DESIGN.md "As core/ grows: target families"): everything else
asks the family interface (core/families/base.py) and registry (core/families/registry.py).
Outside a family's own package, code imports only those two (known exceptions listed), and no
modules import each other in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import capplan
import capplan.core

CORE = Path(capplan.core.__file__).parent
PACKAGE = Path(capplan.__file__).parent
THEMES = {"families", "model", "planning", "binaries", "caches", "export", "report"}
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
    "core/families/rocm/claim.py",
    "core/families/cuda/gpus.py",
    "core/families/cuda/planning.py",
    "core/families/cpu/planning.py",
    "core/families/cpu/keys.py",
    "core/families/rocm/planning.py",
    "core/families/rocm/select.py",
    "core/families/rocm/machine.py",  # ROCm's names: another family's spelling is its
    "core/families/cpu/machine.py",  # CPU-side builds: no GPU vendor
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


# -- issue 32: one package per target family ------------------------------------------------
# Outside a family's own package (core/families/<f>/, adapters/detect/<f>.py) code reaches the
# families through core/families/base.py and core/families/registry.py only; a family never
# imports another family's modules. The modules below still import a family's own modules
# ("<family>.<module>" under core/families/). Each entry is a known exception, kept exact: the
# test fails when a new import appears and when an exception is cleaned up (remove it here).
KNOWN_FAMILY_IMPORTERS: dict[str, set[str]] = {
    # By design (issue 32): caps and limits are about one family's facts.
    "cli/caps.py": {"cuda.kb", "cuda.version"},
    "cli/limits.py": {"cuda.binary", "cuda.compat", "cuda.kb", "cuda.torch_limits"},
    "cli/limits_magma.py": {"rocm.kb", "rocm.magma_limits"},
    # Every other command goes through the registry and base (verify and plan through the
    # registry, doctor's fixes through the families' pick; doctor's GPUs and driver facts are
    # built by each family's doctor.py through the registry; nixpkgs reads the CPU
    # package file through adapters/kb.py and hands it, with the config's policy.cuda, to the
    # registry's nixpkgs_checks, each family's part of the check; planning's annotations name
    # the archspec adapter and verify's targets as objects, and dispatch resolves its devices
    # itself; dispatch, plan and generate ask the registry's dispatcher, the CUDA family's
    # dispatch.py, for the dispatch outputs' tables).
    # Shared value types and orchestration written in the families' target types
    # (Capability, CudaVersion, AmdTarget): none is left (the plan: a Variant holds one
    # FamilySpec, a Plan one PlanPart per family; the knowledge base: each family's part, read
    # through cuda.kb's nvidia and rocm.kb; the binary walker, adapters/fatbin.py, asks each
    # family's binary reader through the registry, and the KB loader each family's models,
    # issue 42).
}
_DETECT_FAMILY = {"nvidia": "cuda", "amd": "rocm", "cpu": "cpu"}


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _owner(relative: str) -> str | None:
    """The family whose own module this is, if any: a module of its package, its detector, or
    an adapter its entry declares (``ADAPTERS``, read through registry.adapter_owners)."""
    from capplan.core.families import registry

    parts = relative.split("/")
    if parts[:2] == ["core", "families"] and len(parts) > 3:
        return parts[2]
    if parts[:2] == ["adapters", "detect"]:
        return _DETECT_FAMILY.get(parts[2].removesuffix(".py"))
    module = "capplan." + relative.removesuffix(".py").replace("/", ".")
    return registry.adapter_owners().get(module)


def _family_imports(path: Path) -> set[str]:
    """The family modules a file imports, as ``<family>.<module>`` (``<family>`` alone for
    ``from capplan.core.families import cuda``); base and registry are not family modules."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    prefix = "capplan.core.families"
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module in (prefix, *(f"{prefix}.{f}" for f in ("cuda", "rocm", "cpu"))):
                names = [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if not name.startswith(prefix + "."):
                continue
            rest = name[len(prefix) + 1 :].split(".")
            if rest[0] in ("base", "registry"):
                continue
            found.add(".".join(rest[:2]))
    return found


def _cross_family_imports(package: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if "__pycache__" in path.parts or relative == "core/families/registry.py":
            continue
        owner = _owner(relative)
        foreign = {m for m in _family_imports(path) if m.split(".")[0] != owner}
        if foreign:
            found[relative] = foreign
    return found


def test_code_reaches_the_families_through_base_and_registry() -> None:
    assert _cross_family_imports(PACKAGE) == KNOWN_FAMILY_IMPORTERS


def test_caps_and_limits_are_the_only_commands_by_design() -> None:
    # Every family import a command makes is listed; issue 32's done-when: commands other than
    # caps and limits import no family module (a new command goes through the registry).
    commands = {k for k in KNOWN_FAMILY_IMPORTERS if k.startswith("cli/")}
    assert commands == {"cli/caps.py", "cli/limits.py", "cli/limits_magma.py"}
    # Issue 42's done-when: no other exception, and it stays so (a shared module that needs a
    # family's type asks the registry or a base.py protocol instead of joining the list).
    assert set(KNOWN_FAMILY_IMPORTERS) == commands


def _family_adapters() -> set[str]:
    """The modules the registry names as a family's adapters (detectors, the CPU model)."""
    from capplan.core.families import registry

    named = [*registry.gpu_detectors(), registry.cpu_detector(), registry.cpu_adapter()]
    return {name.partition(":")[0] for name in named}


def _adapter_importers(package: Path, adapters: set[str]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if "__pycache__" in path.parts or _owner(relative) is not None:
            continue
        names = {n for n in _imports(path) if n in adapters}
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.update(
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if f"{node.module}.{a.name}" in adapters
                )
        if names:
            found[relative] = names
    return found


def test_commands_reach_family_adapters_through_the_registry() -> None:
    # Issue 42: detect and doctor ask the registry's detectors (adapters/families.py) for GPUs
    # and CPUs, and planning and export its CPU model; no module but a family's own imports a
    # detector or archspec's adapter (the architecture's one exception: system.py re-exports
    # the device-tree reader, the NVIDIA detector's last source, for its old importers).
    adapters = _family_adapters()
    assert adapters == {
        "capplan.adapters.detect.nvidia",
        "capplan.adapters.detect.amd",
        "capplan.adapters.detect.cpu",
        "capplan.adapters.cpu_archspec",
    }
    assert _adapter_importers(PACKAGE, adapters) == {}


def test_declared_family_adapters_are_adapters_of_a_family() -> None:
    # A family's ADAPTERS (registry.adapter_owners) name existing modules under adapters/, each
    # owned by one family of the registry's table; archspec's CPU model is the CPU family's.
    from capplan.core.families import registry

    owners = registry.adapter_owners()
    assert owners["capplan.adapters.cpu_archspec"] == "cpu"
    assert _owner("adapters/cpu_archspec.py") == "cpu"
    for module, family in owners.items():
        relative = module.removeprefix("capplan.").replace(".", "/") + ".py"
        assert relative.startswith("adapters/") and (PACKAGE / relative).is_file(), module
        assert (CORE / "families" / family / "entry.py").is_file(), module


def test_the_checker_sees_adapter_imports(tmp_path: Path) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "detect.py").write_text(
        "def f():\n    from capplan.adapters.detect.amd import detect_amd_gpus\n"
        "from capplan.adapters import cpu_archspec\n"
        "from capplan.adapters.families import find_gpus\n",
        encoding="utf-8",
    )
    assert _adapter_importers(tmp_path, _family_adapters()) == {
        "cli/detect.py": {"capplan.adapters.detect.amd", "capplan.adapters.cpu_archspec"}
    }


def test_the_checker_sees_family_imports(tmp_path: Path) -> None:
    # The rule can fail: a CLI module importing ROCm's picker, and ROCm importing CUDA's rules.
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "x.py").write_text(
        "from capplan.core.families.rocm.select import pick_amd_on_machine\n"
        "from capplan.core.families import cpu\n"
        "from capplan.core.families.base import RunLevel\n"
        "from capplan.core.families.registry import gpu_families\n",
        encoding="utf-8",
    )
    (tmp_path / "core" / "families" / "rocm").mkdir(parents=True)
    (tmp_path / "core" / "families" / "rocm" / "planning.py").write_text(
        "from capplan.core.families.cuda.rules import Rules\n"
        "from capplan.core.families.rocm.kb import AmdKnowledgeBase\n",
        encoding="utf-8",
    )
    assert _cross_family_imports(tmp_path) == {
        "cli/x.py": {"rocm.select", "cpu"},
        "core/families/rocm/planning.py": {"cuda.rules"},
    }


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Each module's imports of the package's modules, lazy ones (inside functions) and those
    under ``if TYPE_CHECKING:`` included: a lazy import hides a circle from Python, and an
    annotation-only one from the interpreter, not from a reader (issue 42: the family interface
    base.py and the plan named each other that way)."""
    modules = {
        _module_name(p, package): p for p in package.rglob("*.py") if "__pycache__" not in p.parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found: set[str] = set()
        todo: list[ast.stmt] = list(tree.body)
        while todo:
            node = todo.pop()
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            for body in ("body", "orelse", "handlers", "finalbody"):
                todo.extend(x for x in getattr(node, body, []) if isinstance(x, ast.stmt))
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    assert _circles(_import_graph(PACKAGE)) == []


def test_the_checker_sees_import_circles(tmp_path: Path) -> None:
    # adapters/kb.py and adapters/amd_kb.py imported each other before issue 32; files.py and
    # amd_kb.py name each other in annotations only, which is a circle too (issue 42).
    package = tmp_path / "capplan"
    (package / "adapters").mkdir(parents=True)
    (package / "adapters" / "kb.py").write_text(
        "def load_kb():\n    from capplan.adapters.amd_kb import load_amd_kb\n", encoding="utf-8"
    )
    (package / "adapters" / "amd_kb.py").write_text(
        "from capplan.adapters.kb import load_kb_file\n"
        "if TYPE_CHECKING:\n    from capplan.adapters.files import x\n",
        encoding="utf-8",
    )
    (package / "adapters" / "files.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from capplan.adapters.amd_kb import y\n",
        encoding="utf-8",
    )
    assert _circles(_import_graph(package)) == [
        ["capplan.adapters.amd_kb", "capplan.adapters.files", "capplan.adapters.kb"]
    ]
    (package / "adapters" / "files.py").write_text("import typing\n", encoding="utf-8")
    assert _circles(_import_graph(package)) == [["capplan.adapters.amd_kb", "capplan.adapters.kb"]]


# -- issue 32: an interface sized to what the families do ------------------------------------
# A family method that implements a protocol method of core/families/base.py with nothing but
# ``return None`` / ``return False`` / ``return []`` / ``pass`` is a stub: the interface asks
# something the family does not do. A method only some families have belongs in a narrower
# protocol (GpuFamily; the planner's optional phases, which it asks only of the families that
# implement them). The list is exact, so a new stub fails the test.
KNOWN_STUBS: set[str] = set()


def _protocol_methods(base: Path) -> set[str]:
    tree = ast.parse(base.read_text(encoding="utf-8"), filename=str(base))
    return {
        f.name
        for c in tree.body
        if isinstance(c, ast.ClassDef) and any("Protocol" in ast.unparse(b) for b in c.bases)
        for f in c.body
        if isinstance(f, ast.FunctionDef)
    }


def _is_stub(f: ast.FunctionDef) -> bool:
    body = [
        s for s in f.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    if len(body) != 1:
        return False
    s = body[0]
    if isinstance(s, ast.Pass):
        return True
    if not isinstance(s, ast.Return):
        return False
    v = s.value
    if v is None or (isinstance(v, ast.Constant) and v.value in (None, False)):
        return True
    return isinstance(v, (ast.List, ast.Tuple)) and not v.elts


def _stubs(families: Path) -> set[str]:
    wanted = _protocol_methods(families / "base.py")
    found: set[str] = set()
    for path in sorted(families.glob("*/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for c in tree.body:
            if not isinstance(c, ast.ClassDef):
                continue
            for f in c.body:
                if isinstance(f, ast.FunctionDef) and f.name in wanted and _is_stub(f):
                    found.add(f"{path.relative_to(families).as_posix()} {c.name}.{f.name}")
    return found


def test_families_implement_no_new_stub_methods() -> None:
    assert _stubs(CORE / "families") == KNOWN_STUBS


def test_the_checker_sees_stub_methods(tmp_path: Path) -> None:
    (tmp_path / "base.py").write_text(
        "class F(Protocol):\n    def limit(self) -> str | None: ...\n"
        "    def pick(self) -> tuple[int, ...]: ...\n",
        encoding="utf-8",
    )
    (tmp_path / "xe").mkdir()
    (tmp_path / "xe" / "family.py").write_text(
        "class XeFamily:\n"
        "    def limit(self) -> str | None:\n        return None  # none\n"
        "    def pick(self) -> tuple[int, ...]:\n        '''Doc.'''\n        return ()\n"
        "    def other(self) -> None:\n        return None\n"
        "class Real:\n    def pick(self) -> tuple[int, ...]:\n        return (1,)\n",
        encoding="utf-8",
    )
    assert _stubs(tmp_path) == {"xe/family.py XeFamily.limit", "xe/family.py XeFamily.pick"}
