"""Multi-system flake and overlay (issue 12), with real Nix against the stand-in, on the
committed two-system plan: Jetson Orin and GH200 on aarch64-linux beside x86_64 cards."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nixhelpers import REPO, NixRunner, count_imports

pytestmark = pytest.mark.nix

COMMITTED = json.loads((REPO / "overlays" / "plan.json").read_text())
ARM = "aarch64-linux"
X86 = "x86_64-linux"


def names_of(system: str) -> list[str]:
    return sorted(n for n, v in COMMITTED["variants"].items() if v["system"] == system)


def test_committed_plan_has_both_systems() -> None:
    assert COMMITTED["systems"] == [X86, ARM]
    assert "torch-sm87-aarch64" in names_of(ARM) and "torch-sm86" in names_of(X86)


def test_jetson_torch_drv_path_evaluates_with_one_import(nix_repo: NixRunner) -> None:
    proc = nix_repo.flake(["eval"], f".#legacyPackages.{ARM}.torch-sm87-aarch64.drvPath", "--raw")
    assert proc.stdout.endswith(".drv")
    assert count_imports(proc.stderr) == (1, 0), proc.stderr
    assert f"import system={ARM} " in proc.stderr
    assert '"cudaCapabilities":["8.7"]' in proc.stderr


def test_jetson_torch_goes_without_nccl(nix_repo: NixRunner) -> None:
    # torch/source/default.nix: useSystemNccl = cudaSupport && cudaPackages.nccl.meta.available;
    # nccl's platformAssertions refuse pre-Thor Jetson.
    record: dict[str, Any] = nix_repo.eval_json(
        f"legacyPackages.{ARM}.torch-sm87-aarch64.drvAttrs.record.cudaDependencies"
    )
    assert record["nccl"] is None and record["cudnn"].startswith("/nix/store/")
    grace = nix_repo.eval_json(
        f"legacyPackages.{ARM}.torch-sm90-aarch64.drvAttrs.record.cudaDependencies"
    )
    assert grace["nccl"].startswith("/nix/store/")


def test_each_system_has_only_its_own_variants(nix_repo: NixRunner) -> None:
    legacy = nix_repo.eval_json(
        "legacyPackages", "--apply", "o: builtins.mapAttrs (_: builtins.attrNames) o"
    )
    for system in (ARM, X86):
        variants = sorted(n for n in legacy[system] if not n.endswith("-dispatch"))
        assert variants == names_of(system)
    hydra = nix_repo.eval_json("hydraJobs", "--apply", "builtins.mapAttrs (_: builtins.attrNames)")
    assert hydra["torch-sm87-aarch64"] == [ARM]
    assert hydra["torch-sm86"] == [X86]
    assert hydra["capplan"] == [ARM, X86]
    checks = nix_repo.eval_json("checks", "--apply", "builtins.mapAttrs (_: builtins.attrNames)")
    assert "variants-evaluate" in checks[ARM] and "variants-evaluate" in checks[X86]


def test_overlay_gives_a_package_set_its_own_systems_variants(nix_repo: NixRunner) -> None:
    proc = nix_repo.flake(
        ["eval"],
        ".#overlays.default",
        "--impure",
        "--json",
        "--apply",
        f"""overlay:
          let
            at = system: import {nix_repo.standin} {{ inherit system; overlays = [ overlay ]; }};
          in {{
            arm = builtins.attrNames (at "{ARM}").capplan.packages;
            x86 = builtins.attrNames (at "{X86}").capplan.packages;
            jetson = (at "{ARM}").capplan.variants.torch."sm87-aarch64".drvPath;
          }}""",
    )
    result = json.loads(proc.stdout)
    assert result["arm"] == names_of(ARM)
    assert result["x86"] == names_of(X86)
    assert result["jetson"].endswith(".drv")


def test_standin_refuses_what_real_nixpkgs_refuses(nix_repo: NixRunner) -> None:
    def cuda(system: str, caps: list[str], attr: str) -> Any:
        config = json.dumps({"allowUnfree": True, "cudaSupport": True, "cudaCapabilities": caps})
        return nix_repo.expr(
            f'(import standin {{ system = "{system}"; config = builtins.fromJSON '
            f"{json.dumps(config)}; }}).{attr}.drvPath",
            check=False,
        )

    # nccl: "Pre-Thor Jetson devices (CUDA capabilities < 10.1) are not supported by NCCL".
    refused = cuda(ARM, ["8.7"], "cudaPackages.nccl")
    assert refused.returncode != 0
    assert "not available on the requested hostPlatform" in refused.stderr
    assert cuda(ARM, ["9.0"], "cudaPackages.nccl").returncode == 0
    # A Jetson capability evaluates only on aarch64-linux.
    x86 = cuda(X86, ["8.7"], "python3Packages.torch")
    assert (
        x86.returncode != 0 and "hostRedistSystem (linux-x86_64) to be linux-aarch64" in x86.stderr
    )
