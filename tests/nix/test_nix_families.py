"""Issue 32, the Nix side: one file per target family, looked up in a table.

pkgs/families/{cuda,rocm,cpu}.nix each return the same set, and pkgs/families/default.nix is the
table pkgs/variant.nix looks a variant's family up in by its `vendor`. A fourth family is one
file and one line in that table: variant.nix does not change (docs/nix.md, "Adding a family").
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nixhelpers import SYSTEM, NixRunner, copy_tree

pytestmark = pytest.mark.nix

# What variant.nix asks of a family (pkgs/families/default.nix documents each name).
INTERFACE = [
    "check",
    "config",
    "dispatch",
    "instanceKey",
    "machine",
    "name",
    "overlays",
    "ownOutputs",
    "package",
    "packageSet",
    "plainConfig",
    "rank",
    "vendor",
    "vendorText",
]

# The Intel family of the recipe: the CPU family's behaviour under its own vendor (a real one
# would set its own config keys and overlays); one file, found by the table (issue 42).
INTEL = """(import ./cpu.nix) // {
  vendor = "intel";
  vendorText = ''"intel"'';
  rank = 3;
}
"""


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    base = tmp_path_factory.mktemp("repo-families")
    copy_tree(base)
    yield NixRunner(base)


def _plan(variants: dict[str, dict[str, Any]]) -> str:
    plan = {"version": 1, "system": SYSTEM, "systems": [SYSTEM], "variants": variants}
    return json.dumps(json.dumps(plan))


def _generic(package: str, vendor: str | None) -> dict[str, Any]:
    return {
        "attr": [package],
        "capabilities": [],
        "cuda": None,
        "cuda_set": None,
        "forward_compat": False,
        "gpu_targets": [],
        "package": package,
        "system": SYSTEM,
        "vendor": vendor,
        "cpu": None,
    }


def _drv_paths(runner: NixRunner, variants: dict[str, dict[str, Any]]) -> Any:
    return runner.expr_json(
        f"""let
              lib = import (root + "/pkgs/variant.nix");
              v = lib.mkVariants {{ nixpkgs = standin; plan = builtins.fromJSON {_plan(variants)};
                                   system = "{SYSTEM}"; }};
            in builtins.mapAttrs (_: d: builtins.unsafeDiscardStringContext d.drvPath) v.packages"""
    )


def test_every_family_returns_the_same_set(copy: NixRunner) -> None:
    got = copy.expr_json(
        """let t = import (root + "/pkgs/families"); in {
             names = map builtins.attrNames t.all;
             vendors = map (f: f.vendor) t.all;
             unmarked = t.unmarked.vendor;
           }"""
    )
    assert got["names"] == [INTERFACE, INTERFACE, INTERFACE]
    assert got["vendors"] == ["nvidia", "amd", None]
    # Plans written before the `vendor` key are NVIDIA's.
    assert got["unmarked"] == "nvidia"


def test_a_fourth_family_is_one_file(copy: NixRunner) -> None:
    families = copy.root / "pkgs" / "families"
    variants = {"gromacs": _generic("gromacs", None), "gromacs-intel": _generic("gromacs", "intel")}
    # Before: the vendor is refused by name, listing the families the table holds.
    before = copy.expr(
        f"""(import (root + "/pkgs/variant.nix")).checkVariant "gromacs-intel"
              (builtins.fromJSON {json.dumps(json.dumps(variants["gromacs-intel"]))})""",
        check=False,
    )
    assert before.returncode != 0
    assert (
        'capplan: plan.json variant gromacs-intel: vendor is "intel", this overlay reads '
        '"nvidia", "amd" or null (CPU-side) (regenerate overlays/plan.json with '
        "`capplan generate`)"
    ) in before.stderr
    builder = (copy.root / "pkgs" / "variant.nix").read_text()
    table = (families / "default.nix").read_text()
    # The one step: the family's file.  The table finds it (builtins.readDir), no line added.
    (families / "intel.nix").write_text(INTEL)
    try:
        paths = _drv_paths(copy, variants)
        refused = copy.expr(
            f"""(import (root + "/pkgs/variant.nix")).checkVariant "x"
                  (builtins.fromJSON {json.dumps(json.dumps(_generic("gromacs", "apple")))})""",
            check=False,
        )
    finally:
        (families / "intel.nix").unlink()
    assert (copy.root / "pkgs" / "variant.nix").read_text() == builder
    assert (families / "default.nix").read_text() == table
    # The new family builds its variant as the family it borrows from does: the plain set's
    # gromacs, the same derivation.
    assert paths["gromacs-intel"] == paths["gromacs"]
    assert paths["gromacs"].endswith(".drv")
    assert (
        'vendor is "apple", this overlay reads "nvidia", "amd", null (CPU-side) or "intel"'
        in refused.stderr
    )


def test_a_plan_without_vendor_keys_is_cuda(copy: NixRunner) -> None:
    # The unmarked family: a variant without `vendor` (plans before AMD variants) is the same
    # derivation as one that says "nvidia".
    cuda = {
        "attr": ["python3Packages", "torch"],
        "capabilities": ["8.6"],
        "cuda": "12.9",
        "cuda_set": None,
        "forward_compat": False,
        "gpu_targets": [],
        "package": "torch",
        "system": SYSTEM,
    }
    paths = _drv_paths(copy, {"torch-old": cuda, "torch-sm86": cuda | {"vendor": "nvidia"}})
    assert paths["torch-old"] == paths["torch-sm86"]
    assert Path(paths["torch-old"]).name.endswith(".drv")
