"""Issue 42: a fourth family is one folder under core/families, one adapter file, one line in
the registry and one Nix file (pkgs/families/default.nix finds it: no line added there).

A toy family ("toy", GPUs spelled ``toy-<n>``) is added to a copy of the tree that way and
nothing else changes: the copy's planner plans a variant for it beside the CPU family's, writes
its spec into plan.json through the toy's keys.py, ``detect``'s adapters ask its detector, and
Nix evaluates the variant through pkgs/families/toy.nix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nixhelpers import SYSTEM, NixRunner, copy_tree

pytestmark = pytest.mark.nix

FAMILY = {
    "__init__.py": '"""A toy target family (tests/nix/test_toy_family.py)."""\n',
    "spec.py": """
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from capplan.core.model.spec import FamilySpec


@dataclass(frozen=True, slots=True)
class ToySpec(FamilySpec):
    family: ClassVar[str] = "toy"
    targets: tuple[str, ...]

    def order(self) -> tuple[object, ...]:
        return (2, self.targets, True, ())

    def compiled_targets(self) -> int:
        return len(self.targets)

    def dependency_targets(self) -> tuple[object, ...]:
        return self.targets

    def toolkit(self) -> str | None:
        return None
""",
    "keys.py": """
from __future__ import annotations

from typing import Any

from capplan.core.families.toy.spec import ToySpec
from capplan.core.planning.plan import Variant


def _spec(v: Variant) -> ToySpec | None:
    return v.spec if isinstance(v.spec, ToySpec) else None


def toy_nix_keys(v: Variant) -> dict[str, Any]:
    spec = _spec(v)
    return {} if spec is None else {"vendor": v.vendor, "toy": {"targets": list(spec.targets)}}


def toy_plan_keys(v: Variant) -> dict[str, Any]:
    spec = _spec(v)
    return {} if spec is None else {"toy_targets": list(spec.targets)}


def toy_job_keys(v: Variant) -> dict[str, Any]:
    return toy_plan_keys(v)


def toy_table_keys(v: Variant) -> dict[str, str]:
    spec = _spec(v)
    return {} if spec is None else {"targets": ", ".join(spec.targets), "toolkit": "toy"}
""",
    "planning.py": """
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capplan.core.families.base import CostPart, FamilyResult, Machine, Pick, RunLevel, RunsOn
from capplan.core.families.toy.spec import ToySpec
from capplan.core.planning.plan import Plan, Serve, Variant


class ToyFamily:
    name = "toy"
    vendor = "toy"

    def claims(self, text: str) -> bool:
        return text.startswith("toy-")

    def parse(self, text: str) -> str:
        return text

    def sort_key(self, target: str) -> tuple[object, ...]:
        return (target,)

    def label(self, target: str) -> str:
        return target.replace("-", "")

    def runs_on(self, device: str, built: Sequence[str]) -> RunsOn:
        if device in built:
            return RunsOn(RunLevel.NATIVE, "built for it")
        return RunsOn(RunLevel.CANNOT_RUN, "not built for it")

    def pick(self, plan: Plan, machine: Machine) -> tuple[Pick, ...]:
        return ()


class ToyPlanning:
    fallback = False

    def __init__(self, config: Any) -> None:
        self.config = config
        self.family = ToyFamily()
        self.fleet: tuple[str, ...] = ()

    def claims_gpu(self, label: str) -> bool:
        return self.family.claims(label)

    def resolve_fleet(self, labels: Sequence[str]) -> None:
        self.fleet = tuple(labels)

    def fleet_labels(self) -> tuple[str, ...]:
        return self.fleet

    def plan(self, requested: Sequence[str], earlier: FamilyResult) -> FamilyResult:
        result = FamilyResult()
        system = self.config.policy.planned_systems[0]
        for package in requested:
            for target in self.fleet:
                result.variants.append(
                    Variant(
                        name=f"{package}-{self.family.label(target)}",
                        package=package,
                        attr=package,
                        independent=False,
                        fat=False,
                        needs=(),
                        minutes=1.0,
                        size_mb=1.0,
                        big_parallel=False,
                        serves=(Serve(target, RunLevel.NATIVE, "built for it"),),
                        system=system,
                        vendor="toy",
                        spec=ToySpec((target,)),
                    )
                )
        return result

    def costs(self, requested: Sequence[str], result: FamilyResult) -> CostPart:
        return CostPart()

    def plan_part(self) -> None:
        return None
""",
    "entry.py": """
from __future__ import annotations

from typing import Any

FALLBACK = False
DETECTOR = "capplan.adapters.detect.toy:find_devices"


def planning(kb: Any, config: Any, *, others: Any, cpu: Any) -> Any:
    from capplan.core.families.toy.planning import ToyPlanning

    return ToyPlanning(config)
""",
}
DETECTOR = """
from __future__ import annotations

from capplan.core.families.base import Found


def find_devices(kb: object, *, board: bool = True) -> Found:
    return Found((), missing="no toy device here", hint="plug one in")
"""
NIX = """(import ./cpu.nix) // {
  vendor = "toy";
  vendorText = ''"toy"'';
  rank = 3;
}
"""
PLAN = """
import json, sys
from capplan.adapters.families import cpu_model, find_gpus
from capplan.adapters.kb import load_kb
from capplan.core.families.registry import table_keys
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import plan_json
from capplan.core.planning.planner import make_plan

kb = load_kb()
config = config_from_mapping(
    {"fleet": {"gpus": ["toy-1"]}, "packages": {"gromacs": {}}}, origin="test"
)
plan = make_plan(kb, config, cpu=cpu_model())
print(json.dumps({
    "plan": plan_json(plan),
    "tables": {v.name: table_keys(v) for v in plan.variants},
    "missing": [f.missing for f in find_gpus(kb, board=False)],
}))
"""


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    base = tmp_path_factory.mktemp("repo-toy")
    copy_tree(base)
    yield NixRunner(base)


def _add_the_toy_family(root: Path) -> None:
    src = root / "planner" / "src" / "capplan"
    folder = src / "core" / "families" / "toy"
    folder.mkdir()
    for name, text in FAMILY.items():
        (folder / name).write_text(text.lstrip("\n"), encoding="utf-8")
    (src / "adapters" / "detect" / "toy.py").write_text(DETECTOR.lstrip("\n"), encoding="utf-8")
    registry = src / "core" / "families" / "registry.py"
    text = registry.read_text(encoding="utf-8")
    # After ROCm in the table: ROCm's claim leaves a GPU name no GPU family knows to the
    # families after it, so the table's order does not decide who may claim it.
    line = '    "capplan.core.families.rocm",\n'
    assert text.count(line) == 1, "the registry's table changed: update this test's edit"
    registry.write_text(
        text.replace(line, line + '    "capplan.core.families.toy",\n'), encoding="utf-8"
    )
    families = root / "pkgs" / "families"
    (families / "toy.nix").write_text(NIX, encoding="utf-8")


def _plan(root: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(root / "planner" / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", PLAN],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def test_a_fourth_family_plans_a_variant_and_nix_builds_it(copy: NixRunner) -> None:
    _add_the_toy_family(copy.root)
    found = _plan(copy.root)
    variants = found["plan"]["variants"]
    # The toy family planned its variant (the CPU family leaves a package a GPU family builds),
    # and wrote its own spec (and the keys every family writes on every variant) into
    # plan.json.
    assert set(variants) == {"gromacs-toy1"}
    toy = variants["gromacs-toy1"]
    assert toy["vendor"] == "toy" and toy["toy"] == {"targets": ["toy-1"]}
    assert toy["capabilities"] == [] and toy["cpu"] is None and not toy["independent"]
    assert found["tables"]["gromacs-toy1"]["toolkit"] == "toy"
    # detect's adapters ask the toy's detector too, in the table's order.
    assert found["missing"][2] == "no toy device here" and len(found["missing"]) == 3
    # Nix evaluates it through pkgs/families/toy.nix (the CPU family's behaviour under the toy
    # vendor): the plain set's gromacs, as a generic CPU-side build of it is.
    generic = {k: v for k, v in toy.items() if k != "toy"} | {"vendor": None}
    plan = json.dumps(json.dumps(found["plan"] | {"variants": variants | {"gromacs": generic}}))
    paths = copy.expr_json(
        f"""let
              lib = import (root + "/pkgs/variant.nix");
              v = lib.mkVariants {{ nixpkgs = standin; plan = builtins.fromJSON {plan};
                                   system = "{SYSTEM}"; }};
            in builtins.mapAttrs (_: d: builtins.unsafeDiscardStringContext d.drvPath) v.packages"""
    )
    assert paths["gromacs-toy1"].endswith(".drv")
    assert paths["gromacs-toy1"] == paths["gromacs"]
