"""The flake and the overlay, built with real Nix against the stand-in nixpkgs.

The plan is tests/data/plans/example.json (the example of the plan.json schema), so these
expectations follow the plan, not whatever `capplan generate` last committed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nixhelpers import PLANS, SYSTEM, NixRunner, count_imports

pytestmark = pytest.mark.nix

EXAMPLE = json.loads((PLANS / "example.json").read_text())
BUILT = [
    f"legacyPackages.{SYSTEM}.{name}"
    for name in (
        "torch-sm86",
        "torch-sm61-cu126",
        "torch-fat",
        "torchvision-sm86",
        "cudnn",
        "cupy",
    )
]


@pytest.fixture(scope="module")
def built(nix_example: NixRunner) -> dict[str, tuple[Path, Any]]:
    """Every example variant, built in one `nix build`: attr -> (out path, record)."""
    paths = nix_example.build(BUILT)
    return {
        attr.rsplit(".", 1)[1]: (path, json.loads(path.read_text())) for attr, path in paths.items()
    }


def test_torch_sm86_targets_exactly_86_without_ptx(
    built: dict[str, tuple[Path, Any]],
) -> None:
    record = built["torch-sm86"][1]
    assert record["TORCH_CUDA_ARCH_LIST"] == "8.6"
    assert record["ptx"] == []
    assert record["cuda"] == "12.9"
    assert record["configCudaCapabilities"] == ["8.6"]


def test_non_default_cuda_variant_uses_its_cuda_set(
    built: dict[str, tuple[Path, Any]],
) -> None:
    record = built["torch-sm61-cu126"][1]
    assert record["cuda"] == "12.6"
    assert record["TORCH_CUDA_ARCH_LIST"] == "6.1"
    # Its CUDA libraries come from cudaPackages_12_6, not from the default 12.9 set.
    assert "cuda12.6-cudnn" in record["cudaDependencies"]["cudnn"]
    assert record["cudaDependencies"]["cudnn"] != built["cudnn"][0].as_posix()


def test_fat_variant_has_ptx_only_for_the_highest_capability(
    built: dict[str, tuple[Path, Any]],
) -> None:
    plan = EXAMPLE["variants"]["torch-fat"]
    record = built["torch-fat"][1]
    highest = plan["capabilities"][-1]
    assert record["ptx"] == [highest]
    targets = record["TORCH_CUDA_ARCH_LIST"].split(";")
    assert [t for t in targets if t.endswith("+PTX")] == [f"{highest}+PTX"]
    assert [t.removesuffix("+PTX") for t in targets] == plan["capabilities"]
    # The plan's PTX choice also reached the package set's config (nccl, magma follow it).
    assert record["configCudaForwardCompat"] is True


def test_torchvision_uses_the_same_torch(built: dict[str, tuple[Path, Any]]) -> None:
    torch_path, _ = built["torch-sm86"]
    record = built["torchvision-sm86"][1]
    assert record["torch"] == torch_path.as_posix()
    assert record["TORCH_CUDA_ARCH_LIST"] == "8.6"


def test_capability_independent_cudnn_is_shared(
    built: dict[str, tuple[Path, Any]],
) -> None:
    cudnn_path, cudnn_record = built["cudnn"]
    assert cudnn_record["capabilityIndependent"] is True
    sm86 = built["torch-sm86"][1]["cudaDependencies"]["cudnn"]
    fat = built["torch-fat"][1]["cudaDependencies"]["cudnn"]
    assert sm86 == fat == cudnn_path.as_posix()
    # ... while a capability-dependent library differs between the two variants.
    assert (
        built["torch-sm86"][1]["cudaDependencies"]["nccl"]
        != built["torch-fat"][1]["cudaDependencies"]["nccl"]
    )


def test_cupy_ignores_capabilities(built: dict[str, tuple[Path, Any]]) -> None:
    record = built["cupy"][1]
    assert record["usesCapabilities"] is False
    assert "TORCH_CUDA_ARCH_LIST" not in record and "CMAKE_CUDA_ARCHITECTURES" not in record


def test_evaluating_one_variant_imports_nixpkgs_once(nix_example: NixRunner) -> None:
    proc = nix_example.flake(["eval"], f".#legacyPackages.{SYSTEM}.torch-sm86.drvPath", "--raw")
    imports, instantiations = count_imports(proc.stderr)
    assert (imports, instantiations) == (1, 0), proc.stderr
    assert '"cudaCapabilities":["8.6"]' in proc.stderr
    # A non-default CUDA goes through cudaPackages_12_6.pkgs: one import, one extension of it.
    proc = nix_example.flake(
        ["eval"], f".#legacyPackages.{SYSTEM}.torch-sm61-cu126.drvPath", "--raw"
    )
    assert count_imports(proc.stderr) == (1, 1), proc.stderr
    assert "8.6" not in proc.stderr


def test_variants_with_the_same_config_share_one_import(nix_example: NixRunner) -> None:
    proc = nix_example.flake(
        ["eval"],
        f".#legacyPackages.{SYSTEM}",
        "--apply",
        'ps: [ ps."torch-sm86".drvPath ps."torchvision-sm86".drvPath ]',
        "--json",
    )
    assert count_imports(proc.stderr) == (1, 0), proc.stderr


def test_overlay_in_users_nixpkgs(
    nix_example: NixRunner, built: dict[str, tuple[Path, Any]]
) -> None:
    """`import <nixpkgs> { overlays = [ flake.overlays.default ]; }` gives the same derivations."""
    proc = nix_example.flake(
        ["eval"],
        ".#overlays.default",
        "--impure",
        "--json",
        "--apply",
        f"""overlay:
          let pkgs = import {nix_example.standin} {{ system = "{SYSTEM}"; overlays = [ overlay ]; }};
          in {{
            nested = pkgs.capplan.variants.torch.sm86.outPath;
            flat = pkgs.capplan.packages."torch-sm86".outPath;
            names = builtins.attrNames pkgs.capplan.packages;
            torchSuffixes = builtins.attrNames pkgs.capplan.variants.torch;
            cudnn = pkgs.capplan.variants.cudnn.default.outPath;
            config = pkgs.capplan.configs."torch-fat";
          }}""",
    )
    result = json.loads(proc.stdout)
    assert result["nested"] == result["flat"] == built["torch-sm86"][0].as_posix()
    assert result["cudnn"] == built["cudnn"][0].as_posix()
    assert result["names"] == sorted(EXAMPLE["variants"])
    assert result["torchSuffixes"] == ["fat", "sm61-cu126", "sm86"]
    # Plain data: only the keys capplan sets, and the CUDA version (issue 11).
    assert result["config"] == {
        "allowUnfree": True,
        "cudaSupport": True,
        "rocmSupport": False,
        "cudaCapabilities": ["8.0", "8.6", "8.9", "9.0"],
        "cudaForwardCompat": True,
        "cudaMajorMinorVersion": "12.9",
    }
    # The user's own set, the torch-sm86 instance and the default-capabilities instance (cudnn);
    # torch-fat's config is data, reading it imports nothing.
    assert count_imports(proc.stderr) == (3, 0), proc.stderr


def test_overlay_forces_only_the_variant_asked_for(nix_example: NixRunner) -> None:
    proc = nix_example.flake(
        ["eval"],
        ".#overlays.default",
        "--impure",
        "--raw",
        "--apply",
        f"""overlay:
          (import {nix_example.standin} {{ system = "{SYSTEM}"; overlays = [ overlay ]; }})
            .capplan.variants.torch.sm86.drvPath""",
    )
    assert count_imports(proc.stderr) == (2, 0), proc.stderr
    configs = [line for line in proc.stderr.splitlines() if "capplan-standin: import" in line]
    assert '"cudaCapabilities":[]' in configs[0] and '"cudaCapabilities":["8.6"]' in configs[1]


def test_lib_mk_overlay_takes_any_plan(nix_example: NixRunner) -> None:
    plan = {
        "version": 1,
        "system": SYSTEM,
        "variants": {
            "torch-sm89": {
                "attr": ["python3Packages", "torch"],
                "capabilities": ["8.9"],
                "cuda": "12.9",
                "cuda_set": None,
                "forward_compat": False,
                "gpu_targets": [],
                "independent": False,
                "package": "torch",
            }
        },
    }
    proc = nix_example.flake(
        ["eval"],
        ".#lib",
        "--impure",
        "--raw",
        "--apply",
        f"""lib:
          let
            plan = builtins.fromJSON {json.dumps(json.dumps(plan))};
            pkgs = import {nix_example.standin} {{ system = "{SYSTEM}"; overlays = [ (lib.mkOverlay plan) ]; }};
          in pkgs.capplan.variants.torch.sm89.gpuTargetString""",
    )
    assert proc.stdout == "8.9"


def test_outputs_evaluate_and_mirror_the_plan(nix_example: NixRunner) -> None:
    def ev(output: str, apply: str) -> Any:
        return json.loads(
            nix_example.flake(["eval"], f".#{output}", "--json", "--apply", apply).stdout
        )

    result = {
        "packages": ev("packages", f"o: builtins.attrNames o.{SYSTEM}"),
        "legacyPackages": ev("legacyPackages", "builtins.mapAttrs (_: builtins.attrNames)"),
        "hydra": ev("hydraJobs", "builtins.mapAttrs (_: builtins.attrNames)"),
        "checks": ev("checks", f"o: builtins.attrNames o.{SYSTEM}"),
        "app": ev("apps", f"o: o.{SYSTEM}.default"),
        "devShell": ev("devShells", f"o: o.{SYSTEM}.default.drvPath"),
        "formatter": ev("formatter", f"o: o.{SYSTEM}.meta.mainProgram"),
        "torchFeatures": ev("legacyPackages", f"o: o.{SYSTEM}.torch-sm86.requiredSystemFeatures"),
    }
    variants = sorted(EXAMPLE["variants"])
    # The variants live in legacyPackages (for the plan's system only); packages is the tool.
    assert result["packages"] == ["capplan", "default"]
    assert result["legacyPackages"] == {SYSTEM: variants, "aarch64-linux": []}
    assert result["hydra"] == {
        **{name: [SYSTEM] for name in variants},
        "capplan": ["aarch64-linux", SYSTEM],
    }
    assert result["checks"] == ["capplan", "plan-current", "variants-evaluate"]
    assert result["app"]["type"] == "app"
    assert result["app"]["program"].endswith("/bin/capplan")
    assert result["devShell"].endswith(".drv")
    assert result["formatter"] == "nixfmt"
    assert result["torchFeatures"] == ["big-parallel"]


def test_flake_check_and_variants_evaluate(nix_example: NixRunner) -> None:
    nix_example.flake(["flake", "check"], "--no-build")
    out = nix_example.build([f"checks.{SYSTEM}.variants-evaluate"])
    listed = json.loads(out[f"checks.{SYSTEM}.variants-evaluate"].read_text())
    assert sorted(listed) == sorted(EXAMPLE["variants"])
    assert all(path.endswith(".drv") for path in listed.values())


def test_capplan_package_is_the_planner_project(nix_example: NixRunner) -> None:
    """The stand-in cannot build Python; its record shows what pkgs/capplan.nix asked for."""
    record = nix_example.records([f"packages.{SYSTEM}.capplan"])[f"packages.{SYSTEM}.capplan"]
    assert record["package"] == "capplan"
    assert record["format"] == "pyproject"
    assert len(record["dependencies"]) == 8
    src = Path(record["src"])
    assert (src / "pyproject.toml").is_file()
    assert not any(p.name.endswith(".egg-info") or p.name == "__pycache__" for p in src.rglob("*"))


def test_plan_of_another_version_is_refused(nix_example: NixRunner) -> None:
    proc = nix_example.flake(
        ["eval"],
        ".#lib",
        "--impure",
        "--apply",
        'lib: (lib.mkVariants { nixpkgs = /nonexistent; plan = { version = 2; system = "x"; variants = { }; }; }).packages',
        check=False,
    )
    assert proc.returncode != 0
    assert "plan.json has version 2" in proc.stderr


def test_committed_plan_evaluates(nix_repo: NixRunner) -> None:
    """Whatever `capplan generate` committed: every variant evaluates (flake check, no builds)."""
    nix_repo.flake(["flake", "check"], "--no-build")


def test_other_packages_build_from_flags(nix_more: NixRunner) -> None:
    plan = json.loads((PLANS / "more.json").read_text())["variants"]
    records = {
        attr.rsplit(".", 1)[1]: record
        for attr, record in nix_more.records(
            [f"legacyPackages.{SYSTEM}.{n}" for n in sorted(plan)]
        ).items()
    }
    assert records["magma-sm86-sm90"]["CMAKE_CUDA_ARCHITECTURES"] == "86;90"
    assert records["magma-sm86-sm90"]["MIN_ARCH"] == "860"
    # forward_compat false: no compute_ (PTX) gencode; the "a" suffix is kept.
    assert records["nccl-sm90a"]["NVCC_GENCODE"] == "-gencode=arch=compute_90a,code=sm_90a"
    assert records["onnxruntime-sm89"]["CMAKE_CUDA_ARCHITECTURES"] == "89"
    assert records["torch-sm120-cu128"]["cuda"] == "12.8"
    assert records["torch-sm120-cu128"]["TORCH_CUDA_ARCH_LIST"] == "12.0"
    # A non-default CUDA 13 set (torch refuses CUDA 13: brokenConditions "Unsupported CUDA
    # version"), through cudaPackages_13_2.
    assert records["nccl-sm121-cu132"]["cuda"] == "13.2"
    # torchvision follows torch's allowlisted capabilities: never PTX, even with forward compat.
    assert records["torchvision-fat"]["TORCH_CUDA_ARCH_LIST"] == "8.0;8.6;8.9;9.0"
