"""Issue 16, done when: capplan plans a mixed NVIDIA + AMD fleet and real Nix builds what it
planned against the stand-in nixpkgs (tests/nixpkgs, its ROCm model from ../shared/ROCM.md).

The plan.json here is written by `capplan generate` from a config, not by hand, so this checks
the planner and pkgs/variant.nix together: the names, the ROCm package set each variant is
built in, and what the built torch records (PYTORCH_ROCM_ARCH, no CUDA).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nixhelpers import SYSTEM, NixRunner, copy_tree

MIXED = ["A100", "MI300X", "Radeon RX 7900 XTX", "Strix Halo"]


def _generate(root: Path, gpus: list[str], packages: str, policy: str = "") -> Path:
    """`capplan generate` in a copy of the repository, from a capplan.toml made for the test."""
    names = ", ".join(json.dumps(g) for g in gpus)
    (root / "capplan.toml").write_text(
        f'[fleet]\ngpus = [{names}]\n{packages}\n[policy]\nsystem = "{SYSTEM}"\n{policy}\n'
    )
    subprocess.run(
        [sys.executable, "-m", "capplan", "generate", "--config", "capplan.toml"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return root / "overlays" / "plan.json"


def _plan_json(root: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "capplan", "plan", "--config", "capplan.toml", "--json"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    root = tmp_path_factory.mktemp("repo-mixed")
    copy_tree(root)
    _generate(root, MIXED, "[packages.torch]\n[packages.torchvision]\n[packages.magma]\n")
    yield NixRunner(root)


def test_mixed_fleet_plans_and_evaluates_one_variant_per_gpu(mixed: NixRunner) -> None:
    plan = json.loads((mixed.root / "overlays" / "plan.json").read_text())
    torch = sorted(n for n in plan["variants"] if n.startswith("torch-"))
    assert torch == ["torch-gfx1100", "torch-gfx1151", "torch-gfx942", "torch-sm80"]
    names = mixed.eval_json(f"legacyPackages.{SYSTEM}", "--apply", "builtins.attrNames")
    assert {"torch-sm80", "torch-gfx942", "torch-gfx1100", "torch-gfx1151"} <= set(names)
    assert "magma-gfx942" not in names and "magma-sm80" in names


def test_torch_gfx942_builds_for_gfx942_without_cuda(mixed: NixRunner) -> None:
    paths = mixed.build(
        [f"legacyPackages.{SYSTEM}.torch-gfx942", f"legacyPackages.{SYSTEM}.torch-sm80"]
    )
    records = {a.rsplit(".", 1)[1]: json.loads(p.read_text()) for a, p in paths.items()}
    amd = records["torch-gfx942"]
    assert amd["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert (amd["rocmSupport"], amd["cudaSupport"]) == (True, False)
    assert amd["cudaCapabilities"] == []
    cuda = records["torch-sm80"]
    assert cuda["cudaSupport"] is True and "PYTORCH_ROCM_ARCH" not in cuda
    # `nix build .#torch-gfx942` (the flake's own spelling) gives the same store path.
    proc = mixed.flake(["build"], ".#torch-gfx942", "--no-link", "--json")
    assert json.loads(proc.stdout)[0]["outputs"]["out"] == str(
        paths[f"legacyPackages.{SYSTEM}.torch-gfx942"]
    )


def test_magma_hip_for_gfx942_is_reported_excluded(mixed: NixRunner) -> None:
    data = _plan_json(mixed.root)
    unserved = {(u["package"], u["gpu"]): u["reason"] for u in data["unserved"]}
    reason = unserved[("magma", "MI300X")]
    assert "magma-hip" in reason and "gfx942" in reason
    excluded = {
        (d["package"], d["subject"]): d["reason"]
        for d in data["decisions"]
        if d["action"] == "excluded"
    }
    assert "gfx942" in excluded[("torch", "magma-hip:gfx942")]
    # What the planner says is what nixpkgs does: magma-hip for gfx942 throws.
    proc = mixed.expr(
        "let pkgs = import standin { config.rocmSupport = true; }; "
        'in (pkgs.magma-hip.override { gpuTargets = [ "942" ]; }).drvPath',
        check=False,
    )
    assert proc.returncode != 0 and "No supported GPU targets specified" in proc.stderr


def test_stack_scope_and_magma_for_an_accepted_target(tmp_path: Path) -> None:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    copy_tree(tmp_path)
    _generate(
        tmp_path,
        ["MI300X", "RX 6800"],
        "[packages.torch]\n[packages.magma]\n",
        'rocm_scope = "stack"',
    )
    runner = NixRunner(tmp_path)
    names = ["torch-gfx942", "rocblas-gfx942", "torch-gfx1030", "magma-gfx1030"]
    paths = runner.build([f"legacyPackages.{SYSTEM}.{n}" for n in names])
    out = {a.rsplit(".", 1)[1]: p for a, p in paths.items()}
    records = {n: json.loads(p.read_text()) for n, p in out.items() if n.startswith("torch")}
    # Stack: torch-gfx942 links rocmPackages.gfx942's rocBLAS, the very rocblas-gfx942 job.
    assert records["torch-gfx942"]["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert records["torch-gfx942"]["rocmDependencies"]["rocblas"] == str(out["rocblas-gfx942"])
    assert "-rocblas-gfx942-" in str(out["rocblas-gfx942"])
    # magma-gfx1030 ("1030", as magma spells it) is the magma torch-gfx1030 links.
    assert records["torch-gfx1030"]["rocmDependencies"]["magma"] == str(out["magma-gfx1030"])
    assert records["torch-gfx1030"]["PYTORCH_ROCM_ARCH"] == "gfx1030"


def test_llama_cpp_and_ollama_get_rocm_gpu_targets(tmp_path: Path) -> None:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    copy_tree(tmp_path)
    _generate(tmp_path, ["A100", "MI300X"], "[packages.llama-cpp]\n[packages.ollama]\n")
    runner = NixRunner(tmp_path)
    names = ["llama-cpp-gfx942", "ollama-gfx942", "llama-cpp-sm80", "ollama-sm80"]
    records = {
        a.rsplit(".", 1)[1]: json.loads(p.read_text())
        for a, p in runner.build([f"legacyPackages.{SYSTEM}.{n}" for n in names]).items()
    }
    assert records["llama-cpp-gfx942"]["CMAKE_HIP_ARCHITECTURES"] == "gfx942"
    assert records["llama-cpp-gfx942"]["cudaSupport"] is False
    assert records["ollama-gfx942"]["AMDGPU_TARGETS"] == "gfx942"
    assert (records["ollama-gfx942"]["enableRocm"], records["ollama-gfx942"]["enableCuda"]) == (
        True,
        False,
    )
    assert records["llama-cpp-sm80"]["CMAKE_CUDA_ARCHITECTURES"] == "80"
    assert records["ollama-sm80"]["CMAKE_CUDA_ARCHITECTURES"] == "80"
    assert "AMDGPU_TARGETS" not in records["ollama-sm80"]
