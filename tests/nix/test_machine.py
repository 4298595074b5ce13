"""The machine side (docs/machines.md): a fleet's NixOS / home-manager module and
``lib.overlayFor``, evaluated with nixpkgs' real module system (../shared/nixpkgs-lib,
unmodified) over stubs of only the options the module reads or writes, then the stand-in
nixpkgs imported with the overlays and config the evaluation produced, as NixOS does
(tests/nix/machine_eval.nix). The invariant: each planned package's store path on the machine
is its variant's own (`legacyPackages.<system>.<variant>`, what the cache holds), and every
other path is nixpkgs' default.

The plan is generated here by `capplan generate` from CONFIG (CUDA 8.6, 9.0 and 12.0 and a fat
group of 8.6 and 9.0, ROCm gfx1100, the x86-64-v3 level of gromacs, a [cache] table), so the
test reads what users get.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from nixhelpers import REPO, NixRunner, copy_tree

pytestmark = pytest.mark.nix

pytest.importorskip("archspec", reason="archspec (the CPU target database) is not installed")

# nixpkgs' lib, unmodified (its README): beside the repository, as ../shared.
NIXPKGS_LIB = REPO.parent / "shared" / "nixpkgs-lib" / "lib"

CONFIG = """
[fleet]
gpus = ["RTX 3090", "H100", "RTX 5090", "Radeon RX 7900 XTX"]
cpus = ["x86-64-v3"]

[packages.torch]
[packages.torchvision]
[packages.magma]
[packages.nccl]
[packages.gromacs]

[policy]
system = "x86_64-linux"
fat = { group = ["RTX 3090", "H100"] }

[cache]
substituters = ["https://lab.cachix.org"]
public_keys = ["lab.cachix.org-1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]
"""

# A nixos-facter report's layout (nixos-facter pkg/hwinfo/hardware.go and id.go: ids are
# {"hex": "%04x", "name", "value"}): an RTX 3090 (10de:2204) and an Intel iGPU no family
# builds for.
RTX3090_REPORT: dict[str, Any] = {
    "version": 1,
    "system": "x86_64-linux",
    "hardware": {
        "graphics_card": [
            {
                "index": 42,
                "class_list": ["graphics_card", "pci"],
                "vendor": {"hex": "10de", "name": "nVidia Corporation", "value": 4318},
                "device": {"hex": "2204", "value": 8708},
                "model": "nVidia GA102 [GeForce RTX 3090]",
                "driver": "nvidia",
            },
            {
                "index": 43,
                "vendor": {"hex": "8086", "name": "Intel Corporation", "value": 32902},
                "device": {"hex": "4680", "value": 18048},
                "model": "Intel AlderLake-S GT1",
            },
        ]
    },
}


def _require_lib() -> None:
    if not (NIXPKGS_LIB / "default.nix").is_file():
        pytest.skip(
            f"nixpkgs' lib is not at {NIXPKGS_LIB} (../shared/nixpkgs-lib; a clone on its own)"
        )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    """A copy of the repository whose plan.json `capplan generate` wrote from CONFIG."""
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    _require_lib()
    root = tmp_path_factory.mktemp("machine")
    copy_tree(root)
    (root / "capplan.toml").write_text(CONFIG)
    proc = subprocess.run(
        [sys.executable, "-m", "capplan", "generate"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    yield NixRunner(root)


def _nix_config(runner: NixRunner, name: str, value: Any) -> str:
    """A module's configuration, as Nix reading a JSON file (never Nix text built from data)."""
    path = runner.root / f"machine-config-{name}.json"
    path.write_text(json.dumps(value))
    return f"(builtins.fromJSON (builtins.readFile {path}))"


def _machine(
    runner: NixRunner,
    config: Any,
    body: str,
    *,
    name: str,
    kind: str = "nixos",
    facter: bool = False,
    extra: str = "",
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    expression = (
        f"let e = import {runner.root}/tests/nix/machine_eval.nix {{ root = {runner.root}; "
        f"standin = {runner.standin}; nixpkgsLib = {NIXPKGS_LIB}; kind = {json.dumps(kind)}; "
        f"facter = {'true' if facter else 'false'}; "
        f"config = ({_nix_config(runner, name, config)}){extra}; }}; in {body}"
    )
    return runner.expr(expression, check=check)


def _values(runner: NixRunner, config: Any, body: str, **kw: Any) -> Any:
    return json.loads(_machine(runner, config, body, **kw).stdout)


def _error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode != 0, proc.stdout
    return [
        line.strip().removeprefix("- ") for line in proc.stderr.splitlines() if "capplan:" in line
    ]


PATHS = """{
  torch = e.pkgs.python3Packages.torch.outPath;
  torchvision = e.pkgs.python3Packages.torchvision.outPath;
  CUDA_ONLY
  gromacs = e.pkgs.gromacs.outPath;
  blender = e.pkgs.blender.outPath;
  openblas = e.pkgs.openblas.outPath;
  llama-cpp = e.pkgs.llama-cpp.outPath;
  accelerate = e.pkgs.python3Packages.accelerate.outPath;
  accelerateTorch = map (d: d.outPath) e.pkgs.python3Packages.accelerate.dependencies;
  default = {
    torch = e.default.python3Packages.torch.outPath;
    gromacs = e.default.gromacs.outPath;
    blender = e.default.blender.outPath;
    openblas = e.default.openblas.outPath;
    llama-cpp = e.default.llama-cpp.outPath;
    accelerate = e.default.python3Packages.accelerate.outPath;
    cudaBlender = (import e.default.path {
      system = "x86_64-linux";
      config = { cudaSupport = true; allowUnfree = true; };
    }).blender.outPath;
  };
  variants = builtins.mapAttrs (_: v: v.outPath) e.variants;
  settings = e.settings;
  warnings = e.warnings;
}"""


# magma-cuda-static and nccl are CUDA packages (unfree): asked only where a CUDA variant
# replaces them.
CUDA_PATHS = PATHS.replace(
    "CUDA_ONLY",
    "magma = e.pkgs.magma-cuda-static.outPath; nccl = e.pkgs.cudaPackages.nccl.outPath;",
)
PATHS = PATHS.replace("CUDA_ONLY", "")


def test_cuda_gpu_gets_its_variants_and_nothing_else_changes(fleet: NixRunner) -> None:
    got = _values(
        fleet, {"capplan": {"enable": True, "gpus": ["RTX 3090"]}}, CUDA_PATHS, name="cuda"
    )
    variants = got["variants"]
    assert got["torch"] == variants["torch-sm86"]
    assert got["torchvision"] == variants["torchvision-sm86"]
    assert got["magma"] == variants["magma-sm86"]
    assert got["nccl"] == variants["nccl-sm86"]
    # The dependant is built against the swapped torch (the variant's own path), so it is a
    # new path; everything unplanned keeps nixpkgs' default path, blender too, whose path a
    # system-wide cudaSupport would change.
    assert variants["torch-sm86"] in got["accelerateTorch"]
    assert got["accelerate"] != got["default"]["accelerate"]
    for unplanned in ("gromacs", "blender", "openblas", "llama-cpp"):
        assert got[unplanned] == got["default"][unplanned], unplanned
    assert got["default"]["cudaBlender"] != got["default"]["blender"]
    assert got["torch"] != got["default"]["torch"]
    assert got["settings"] == {
        "extra-substituters": ["https://lab.cachix.org"],
        "extra-trusted-public-keys": [
            "lab.cachix.org-1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
        ],
    }
    assert got["warnings"] == []


def test_variants_are_the_flakes_own_legacy_packages(fleet: NixRunner) -> None:
    """The helper's fleet (mkFleetFlake over the stand-in) is the flake's: the paths agree with
    `nix eval .#legacyPackages...` of the fleet's flake itself."""
    got = _values(fleet, {"capplan": {"enable": True, "gpus": ["8.6"]}}, PATHS, name="flake")
    names = ["torch-sm86", "torch-gfx1100", "gromacs-x86-64-v3"]
    apply = "l: [ " + " ".join(f'l."{n}".outPath' for n in names) + " ]"
    flake = fleet.eval_json("legacyPackages.x86_64-linux", "--apply", apply)
    assert flake == [got["variants"][n] for n in names]
    assert got["torch"] == flake[0]


def test_amd_and_cpu_level_through_the_same_family_files(fleet: NixRunner) -> None:
    got = _values(
        fleet,
        {"capplan": {"enable": True, "gpus": ["Radeon RX 7900 XTX", "x86-64-v4"]}},
        PATHS,
        name="amd-cpu",
    )
    variants = got["variants"]
    assert got["torch"] == variants["torch-gfx1100"]
    assert got["torchvision"] == variants["torchvision-gfx1100"]
    # An x86-64-v4 CPU runs the v3 build, the best level planned.
    assert got["gromacs"] == variants["gromacs-x86-64-v3"] != got["default"]["gromacs"]
    assert variants["torch-gfx1100"] in got["accelerateTorch"]
    # magma and nccl are planned for NVIDIA GPUs only: an AMD machine keeps nixpkgs' own.
    assert got["blender"] == got["default"]["blender"]


def test_facter_report_of_an_rtx_3090_gives_sm86_with_no_name_typed(fleet: NixRunner) -> None:
    report = fleet.root / "facter.json"
    report.write_text(json.dumps(RTX3090_REPORT))
    # nixpkgs' hardware.facter.report holds the decoded report: the module's default.
    got = _values(
        fleet,
        {"capplan": {"enable": True}, "hardware": {"facter": {"report": RTX3090_REPORT}}},
        CUDA_PATHS,
        name="facter-default",
        facter=True,
    )
    assert got["torch"] == got["variants"]["torch-sm86"]
    assert got["magma"] == got["variants"]["magma-sm86"]
    # capplan.facterReport as a path; ids given only as numbers (value) are read too.
    numbers = json.loads(json.dumps(RTX3090_REPORT))
    for card in numbers["hardware"]["graphics_card"]:
        card["vendor"].pop("hex")
        card["device"].pop("hex")
    report.write_text(json.dumps(numbers))
    got = _values(
        fleet,
        {},
        "e.pkgs.python3Packages.torchvision.outPath == e.variants.torchvision-sm86.outPath",
        name="facter-path",
        extra=f" // {{ capplan.enable = true; capplan.facterReport = {report}; }}",
    )
    assert got is True


def test_overlay_for_gives_the_same_paths_without_a_module(fleet: NixRunner) -> None:
    expression = (
        f"let e = import {fleet.root}/tests/nix/machine_eval.nix {{ root = {fleet.root}; "
        f"standin = {fleet.standin}; nixpkgsLib = {NIXPKGS_LIB}; config = {{ }}; }}; "
        f'pkgs = import {fleet.standin} {{ system = "x86_64-linux"; overlays = '
        f'[ (e.fleet.lib.overlayFor {{ gpus = [ "sm_90" ]; }}) ]; }}; in '
        "[ (pkgs.python3Packages.torch.outPath == e.variants.torch-sm90.outPath) "
        "(pkgs.blender.outPath == e.default.blender.outPath) ]"
    )
    assert fleet.expr_json(expression) == [True, True]


def test_home_manager_module_writes_nix_conf_only_with_a_nix_package(fleet: NixRunner) -> None:
    body = "{ torch = e.pkgs.python3Packages.torch.outPath == e.variants.torch-sm86.outPath; settings = e.settings; warnings = e.warnings; }"
    config = {"capplan": {"enable": True, "gpus": ["rtx3090"]}}
    got = _values(fleet, config, body, name="hm", kind="home-manager")
    assert got["torch"] is True
    assert got["settings"] == {}
    assert len(got["warnings"]) == 1 and "set nix.package" in got["warnings"][0]
    got = _values(
        fleet,
        config,
        body,
        name="hm-nix",
        kind="home-manager",
        extra=' // { nix.package = "nix"; }',
    )
    assert got["settings"]["extra-substituters"] == ["https://lab.cachix.org"]
    assert got["warnings"] == []


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"gpus": ["RTX 9999 Ultra"]},
            'capplan: capplan.gpus entry "RTX 9999 Ultra" is no GPU, capability, gfx target or CPU level this plan knows',
        ),
        ({"gpus": "8.6"}, "capplan: capplan.gpus must be a list of strings"),
        (
            {"gpus": ["RTX 3090", "RTX 5090"]},
            'capplan: no variant of magma, nccl, torch and torchvision in this plan serves all of RTX 3090 (8.6) and RTX 5090 (12.0) together: plan one with [policy] fat = { group = [ "RTX 3090", "RTX 5090" ] }',
        ),
        (
            {"gpus": ["A100"]},
            "capplan: no variant of magma, nccl, torch and torchvision in this plan runs on A100 (8.0) (x86_64-linux)",
        ),
        (
            {"facterReport": {"hardware": {"graphics_card": "RTX 3090"}}},
            "capplan: capplan.facterReport: hardware.graphics_card is string, not a list",
        ),
        (
            {
                "facterReport": {
                    "hardware": {
                        "graphics_card": [{"vendor": {"hex": "1002"}, "device": {"hex": "744c"}}]
                    }
                }
            },
            "capplan: the facter report's AMD GPU 1002:744c (1002:744c) is not in capplan's PCI table",
        ),
    ],
    ids=["unknown-gpu", "not-a-list", "two-gpus-no-group", "unserved", "bad-report", "amd-report"],
)
def test_wrong_values_fail_with_one_capplan_line(
    fleet: NixRunner, config: dict[str, Any], expected: str
) -> None:
    module = {"capplan": {"enable": True, **config}}
    body = "e.pkgs.python3Packages.torch.outPath"
    lines = _error_lines(_machine(fleet, module, body, name="bad", check=False))
    assert len(lines) == 1, lines
    assert lines[0].startswith(expected), lines[0]
    # lib.overlayFor (no module system, no assertions) stops with the same line.
    overlay = (
        f"let e = import {fleet.root}/tests/nix/machine_eval.nix {{ root = {fleet.root}; "
        f"standin = {fleet.standin}; nixpkgsLib = {NIXPKGS_LIB}; config = {{ }}; }}; "
        f"args = {_nix_config(fleet, 'overlay', config)}; "
        f'pkgs = import {fleet.standin} {{ system = "x86_64-linux"; overlays = '
        "[ (e.fleet.lib.overlayFor args) ]; }; in pkgs.python3Packages.torch.outPath"
    )
    proc = fleet.expr(overlay, check=False)
    assert proc.returncode != 0
    assert next(ln.strip() for ln in proc.stderr.splitlines() if "capplan:" in ln).endswith(
        lines[0]
    ), proc.stderr


def test_several_gpus_get_the_variant_serving_all_of_them(fleet: NixRunner) -> None:
    got = _values(
        fleet, {"capplan": {"enable": True, "gpus": ["RTX 3090", "H100"]}}, CUDA_PATHS, name="two"
    )
    variants = got["variants"]
    assert got["torch"] == variants["torch-fat-group"]
    assert got["magma"] == variants["magma-fat-group"]
    # An L4 (8.9) runs the 8.6 build (same major, lower minor): one build serves both, and
    # it is the single-capability one, as `capplan detect` prefers.
    got = _values(
        fleet, {"capplan": {"enable": True, "gpus": ["RTX 3090", "L4"]}}, CUDA_PATHS, name="l4"
    )
    assert got["torch"] == got["variants"]["torch-sm86"]


def test_a_machine_of_a_system_the_plan_lacks_is_told_so(fleet: NixRunner) -> None:
    # The plan is x86_64-linux only; an aarch64 machine (a Grace server) gets one line.
    module = {"capplan": {"enable": True, "gpus": ["H100"]}}
    expression = (
        f"let e = import {fleet.root}/tests/nix/machine_eval.nix {{ root = {fleet.root}; "
        f'standin = {fleet.standin}; nixpkgsLib = {NIXPKGS_LIB}; system = "aarch64-linux"; '
        f"config = {_nix_config(fleet, 'aarch64', module)}; }}; in e.pkgs.blender.outPath"
    )
    lines = _error_lines(fleet.expr(expression, check=False))
    assert lines == [
        "capplan: this plan builds nothing for aarch64-linux (it plans x86_64-linux): add "
        '"aarch64-linux" to [policy] systems in capplan.toml and run `capplan generate`, or set '
        'capplan.onUnserved = "default" to keep nixpkgs\' packages'
    ]


def test_no_gpu_named_changes_nothing_and_says_so(fleet: NixRunner) -> None:
    got = _values(fleet, {"capplan": {"enable": True}}, PATHS, name="none")
    assert got["torch"] == got["default"]["torch"]
    assert got["gromacs"] == got["default"]["gromacs"]
    assert got["warnings"] == [
        "capplan: no GPU is named (capplan.gpus is empty and no facter report names one): "
        "nothing changes in this package set"
    ]


def test_unserved_gpu_keeps_nixpkgs_package_with_a_warning_when_asked(fleet: NixRunner) -> None:
    got = _values(
        fleet,
        {"capplan": {"enable": True, "gpus": ["A100"], "onUnserved": "default"}},
        PATHS,
        name="default",
    )
    assert got["torch"] == got["default"]["torch"]
    assert [
        w
        for w in got["warnings"]
        if "capplan: no variant of magma, nccl, torch and torchvision" in w
    ], got["warnings"]


def test_the_flake_has_the_three_machine_outputs(fleet: NixRunner) -> None:
    """capplan's own flake (whose outputs are mkFleetFlake's, as every fleet flake's are)."""
    apply = (
        "o: [ (builtins.attrNames o.nixosModules) (builtins.attrNames o.homeModules) "
        "(builtins.attrNames o.homeManagerModules) (builtins.isFunction o.lib.overlayFor) "
        "(builtins.isFunction o.lib.mkFleetFlake) ]"
    )
    expression = (
        f"let flake = import {fleet.root}/flake.nix; nixpkgs = {{ outPath = {fleet.standin}; "
        f'legacyPackages = {{ x86_64-linux = import {fleet.standin} {{ system = "x86_64-linux"; }}; '
        f'aarch64-linux = import {fleet.standin} {{ system = "aarch64-linux"; }}; }}; }}; '
        f"self = flake.outputs {{ inherit self nixpkgs; }} // {{ outPath = {fleet.root}; }}; "
        f"in ({apply}) self"
    )
    assert fleet.expr_json(expression) == [["default"], ["default"], ["default"], True, True]
