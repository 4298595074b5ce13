"""Issue 30, done when: plans for a fleet of MI300X, RX 7900 XTX, a gfx1151 APU, an RTX 4090 and
x86-64-v3 + Sapphire Rapids CPUs, with torch, torchvision, onnxruntime, llama-cpp, gromacs and
magma, in both ROCm scopes: every variant the flake's `legacyPackages` has evaluates against the
stand-in (ROCm 7.2's recipes: MIOpen links composable_kernel by default, composable_kernel is
broken without a gfx9 target), and the plan says what each AMD library really holds.

One `nix eval` per scope evaluates every variant (`builtins.tryEval` of each drvPath, so one
broken variant is named instead of aborting the rest); a failing one is then evaluated alone to
show Nix's message.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nixhelpers import SYSTEM, NixRunner, copy_tree

pytest.importorskip("archspec", reason="archspec (the CPU target database) is not installed")

FLEET = """
[fleet]
gpus = ["MI300X", "Radeon RX 7900 XTX", "gfx1151", "RTX 4090"]
cpus = ["x86-64-v3", "sapphirerapids"]
[packages.torch]
[packages.torchvision]
[packages.onnxruntime]
[packages.llama-cpp]
[packages.gromacs]
[packages.magma]
[policy]
system = "{system}"
rocm_scope = "{scope}"
"""

# Beyond the fleet: gfx9 without MFMA (MI50: MIOpen still links CK), MFMA (MI100),
# RDNA2 with and without a per-target scope (gfx1030, gfx1031), an RDNA3 iGPU, RDNA4, shared
# generic targets, and every ROCm package capplan plans.
WIDE = """
[fleet]
gpus = ["MI50", "MI100", "RX 6800", "RX 6700 XT", "RX 9070 XT", "Radeon 780M", "A100"]
[packages.torch]
[packages.torchvision]
[packages.onnxruntime]
[packages.magma]
[packages.llama-cpp]
[packages.ollama]
[policy]
system = "{system}"
rocm_scope = "{scope}"
share = "compatible"
"""

# Every variant: its drvPath when it evaluates, else null.
EVAL_ALL = (
    "ps: builtins.mapAttrs (n: v: let r = builtins.tryEval v.drvPath; in "
    "if r.success then r.value else null) ps"
)


def _capplan(root: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "capplan", *args, "--config", "capplan.toml"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return proc.stdout


def _runner(factory: pytest.TempPathFactory, name: str, config: str) -> NixRunner:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    root = factory.mktemp(f"repo-{name}")
    copy_tree(root)
    (root / "capplan.toml").write_text(config)
    _capplan(root, "generate")
    return NixRunner(root)


@pytest.fixture(scope="module", params=["package", "stack"])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> NixRunner:
    scope = request.param
    return _runner(tmp_path_factory, f"fleet-{scope}", FLEET.format(system=SYSTEM, scope=scope))


@pytest.fixture(scope="module", params=["package", "stack"])
def wide(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> NixRunner:
    scope = request.param
    return _runner(tmp_path_factory, f"wide-{scope}", WIDE.format(system=SYSTEM, scope=scope))


def _all_evaluate(runner: NixRunner) -> set[str]:
    planned = set(json.loads((runner.root / "overlays" / "plan.json").read_text())["variants"])
    drvs = runner.eval_json(f"legacyPackages.{SYSTEM}", "--apply", EVAL_ALL)
    assert planned <= set(drvs), sorted(planned - set(drvs))
    failed = sorted(n for n in planned if drvs[n] is None)
    messages = {
        n: runner.flake(["eval"], f".#legacyPackages.{SYSTEM}.{n}.drvPath", check=False).stderr[
            -400:
        ]
        for n in failed[:3]
    }
    assert not failed, (failed, messages)
    return planned


def _plan(runner: NixRunner) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_capplan(runner.root, "plan", "--json"))
    return data


def test_every_planned_variant_evaluates(fleet: NixRunner) -> None:
    planned = _all_evaluate(fleet)
    # The fleet's AMD GPUs are all served, in either scope.
    for name in ("torch-gfx942", "torch-gfx1100", "torch-gfx1151", "torch-sm89"):
        assert name in planned


def test_every_variant_of_a_wider_fleet_evaluates(wide: NixRunner) -> None:
    planned = _all_evaluate(wide)
    assert {"torch-gfx906", "torch-gfx1201", "onnxruntime-rocm", "magma-gfx1031"} <= planned
    if _plan(wide)["rocm_scope"] == "stack":
        # MIOpen links CK in every gfx9 scope, MFMA or not.
        assert {"composable_kernel-gfx906", "composable_kernel-gfx908"} <= planned
        assert "composable_kernel-gfx1201" not in planned


def test_the_plan_says_what_each_amd_library_holds(fleet: NixRunner) -> None:
    data = _plan(fleet)
    holds = {
        (d["package"], d["subject"]): d["reason"]
        for d in data["decisions"]
        if d["action"] in ("holds", "gap")
    }
    scope = data["rocm_scope"]
    # magma-hip never holds gfx942, gfx1100 or gfx1151 code, in either scope: said per torch
    # variant in plain words.
    for target, gpu in (("gfx942", "MI300X"), ("gfx1100", "Radeon RX 7900 XTX")):
        reason = holds[("torch", f"torch-{target}: magma-hip")]
        assert f"no {target} code" in reason and "linear algebra" in reason and gpu in reason
    if scope == "stack":
        # MI300X's stack builds composable_kernel (MIOpen links it); RDNA stacks cannot.
        assert "composable_kernel-gfx942" in {v["name"] for v in data["variants"]}
        reason = holds[("miopen", "miopen-gfx1100")]
        assert "withComposableKernel = false" in reason
        assert "links composable_kernel-gfx942" in holds[("miopen", "miopen-gfx942")]
        # onnxruntime follows the scope: one big-parallel build per target.
        variants = {v["name"]: v for v in data["variants"]}
        assert variants["onnxruntime-gfx1100"]["gfx_targets"] == ["gfx1100"]
        assert "onnxruntime-rocm" not in variants
    else:
        reason = holds[("onnxruntime", "onnxruntime-rocm")]
        assert "gfx942" in reason and "gfx1151" in reason
