"""``capplan cache status`` and ``cache why`` on real Nix (issue 49): variants built against the
stand-in, half of them `nix copy`-ed into a file:// cache served over loopback HTTP, and one
real second configuration per cause (a different capability list, cudaForwardCompat = true,
another CUDA set, a dependency patched by an overlay, a modified stand-in standing for another
nixpkgs revision, another system). Only two builds: comparing derivations needs none."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from nixhelpers import NixRunner, copy_to_binary_cache, serve_binary_cache

from capplan.adapters.failures import record_text
from capplan.cli.main import cli
from capplan.core.planning.failures import FailureRecord

X86 = "legacyPackages.x86_64-linux"
TORCH = "python3.13-torch-2.12.0"
# The fleet's torch-sm86, as overlays/plan.json configures its package set.
PLANNED = ('allowUnfree = true; cudaSupport = true; rocmSupport = false; '
           'cudaCapabilities = [ "8.6" ]; cudaForwardCompat = false;')  # fmt: skip


@pytest.fixture(scope="module")
def cache(nix_repo: NixRunner, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """torch-sm86 and torchvision-sm86 (with their closures: magma, nccl) in the cache;
    onnxruntime-sm86 and cupy not."""
    outs = nix_repo.build([f"{X86}.torch-sm86", f"{X86}.torchvision-sm86"])
    root = tmp_path_factory.mktemp("cache") / "c"
    copy_to_binary_cache(outs.values(), root)
    with serve_binary_cache(root) as url:
        yield url


def _cli(repo: NixRunner, *args: str) -> Result:
    old = Path.cwd()
    os.chdir(repo.root)
    try:
        return CliRunner().invoke(
            cli,
            [*args, "--gpu", "RTX 3090", "--override-input", "nixpkgs", f"path:{repo.standin}"],
            catch_exceptions=False,
        )
    finally:
        os.chdir(old)


def _drv(repo: NixRunner, expression: str, standin: Path | None = None) -> str:
    """A user's own configuration's torch (or other attribute): its .drv path."""
    drv = repo.expr_json(f"(import {standin or repo.standin} {expression}.drvPath")
    assert isinstance(drv, str) and drv.endswith(".drv")
    return drv


def _variant_drv(repo: NixRunner, variant: str) -> str:
    return str(repo.flake(["eval"], f".#{X86}.{variant}.drvPath", "--raw").stdout)


def _user(config: str = PLANNED, overlays: str = "[ ]", system: str = "x86_64-linux",
          attr: str = "python3Packages.torch") -> str:  # fmt: skip
    return f'{{ system = "{system}"; config = {{ {config} }}; overlays = {overlays}; }}).{attr}'


def _cause(repo: NixRunner, drv: str, server: str) -> dict[str, Any]:
    result = _cli(repo, "cache", "why", drv, "--cache", server, "--json")
    assert result.exit_code == 18, result.stderr
    [package] = json.loads(result.stdout)["packages"]
    assert package["variant"] == "torch-sm86" and not package["same"]
    assert package["variant_cached_at"] == server  # the nearest cached thing
    cause: dict[str, Any] = package["causes"][0]
    return cause


def test_status_names_what_is_cached_and_what_will_build(
    nix_repo: NixRunner, cache: str, tmp_path: Path
) -> None:
    onnx_drv = _variant_drv(nix_repo, "onnxruntime-sm86")
    failures = tmp_path / "failures.json"
    record = FailureRecord().add(onnx_drv, "onnxruntime-sm86", "x86_64-linux",
                                 "2026-11-24T20:27:42Z", ["error: nvcc ran out of memory"])  # fmt: skip
    failures.write_text(record_text(record))
    result = _cli(nix_repo, "cache", "status", "--cache", cache, "--failures", str(failures),
                  "--json")  # fmt: skip
    assert result.exit_code == 18, result.stderr
    data = json.loads(result.stdout)
    rows = {r["package"]: r for r in data["packages"]}
    for package in ("torch", "torchvision", "magma", "nccl"):
        assert rows[package]["state"] == "cached" and rows[package]["cached_at"] == cache
    assert rows["cupy"]["state"] == "build" and rows["cupy"]["minutes"] > 0
    onnx = rows["onnxruntime"]
    assert onnx["state"] == "failed" and onnx["drv"] == onnx_drv
    assert onnx["failure"] == {"last": "2026-11-24T20:27:42Z", "count": 1,
                               "log_line": "error: nvcc ran out of memory"}  # fmt: skip
    port = cache.rsplit(":", 1)[1]
    assert data["summary"].startswith(f"magma, nccl, torch, torchvision: from 127.0.0.1:{port}")
    assert (
        "onnxruntime: will build" in data["summary"] and "failed on 2026-11-24" in data["summary"]
    )
    text = _cli(nix_repo, "cache", "status", "--cache", cache, "--failures", str(failures))
    assert text.stdout.splitlines()[0].startswith("magma, nccl, torch, torchvision: from")
    assert "error: nvcc ran out of memory" in text.stdout


def test_the_planned_variant_itself_is_cached(nix_repo: NixRunner, cache: str) -> None:
    result = _cli(nix_repo, "cache", "why", f".#{X86}.torch-sm86", "--cache", cache)
    assert result.exit_code == 0, result.stderr
    assert "the same derivation" in result.stdout and f"cached at {cache}" in result.stdout


def test_a_recorded_failure_shows_in_why(nix_repo: NixRunner, cache: str, tmp_path: Path) -> None:
    drv = _variant_drv(nix_repo, "onnxruntime-sm86")
    failures = tmp_path / "failures.json"
    failures.write_text(record_text(FailureRecord().add(
        drv, "onnxruntime-sm86", "x86_64-linux", "2026-11-24T20:27:42Z", ["error: out of memory"])))  # fmt: skip
    result = _cli(nix_repo, "cache", "why", drv, "--cache", cache, "--failures", str(failures))
    assert result.exit_code == 18, result.stderr
    assert "failed on 2026-11-24T20:27:42Z (1x): error: out of memory" in result.stdout


def test_a_different_capability_list(nix_repo: NixRunner, cache: str) -> None:
    config = PLANNED.replace('[ "8.6" ]', '[ "8.6" "8.9" ]')
    cause = _cause(nix_repo, _drv(nix_repo, _user(config)), cache)
    assert (cause["kind"], cause["derivation"]) == ("capabilities", TORCH)
    assert (cause["attribute"], cause["yours"], cause["planned"]) == (
        "TORCH_CUDA_ARCH_LIST", "8.6;8.9", "8.6")  # fmt: skip


def test_a_flake_attribute_for_another_gpu(nix_repo: NixRunner, cache: str) -> None:
    result = _cli(nix_repo, "cache", "why", f".#{X86}.torch-sm89", "--cache", cache)
    assert result.exit_code == 18, result.stderr
    out = result.stdout
    assert "capability list" in out and "TORCH_CUDA_ARCH_LIST is 8.9 on your side, 8.6" in out
    assert f"torch-sm86 for RTX 3090 (cached at {cache})" in out
    assert 'capplan.gpus = [ "RTX 3090" ];' in out and "capplan.enable = true;" in out
    assert "nix build .#torch-sm86" in out


def test_forward_compat(nix_repo: NixRunner, cache: str) -> None:
    config = PLANNED.replace("cudaForwardCompat = false", "cudaForwardCompat = true")
    cause = _cause(nix_repo, _drv(nix_repo, _user(config)), cache)
    assert (cause["kind"], cause["derivation"]) == ("forward-compat", TORCH)
    assert (cause["yours"], cause["planned"]) == ("true", "false")


def test_another_cuda_set(nix_repo: NixRunner, cache: str) -> None:
    drv = _drv(nix_repo, _user(attr="cudaPackages_12_8.pkgs.python3Packages.torch"))
    cause = _cause(nix_repo, drv, cache)
    assert (cause["kind"], cause["derivation"]) == ("cuda-release", TORCH)
    assert (cause["yours"], cause["planned"]) == ("12.8", "12.9")


def test_a_dependency_patched_by_an_overlay(nix_repo: NixRunner, cache: str) -> None:
    overlay = ('[ (final: prev: { pythonPackagesExtensions = prev.pythonPackagesExtensions ++ '
               '[ (pf: pp: { numpy = pp.numpy.overrideAttrs (old: { '
               'NIX_CFLAGS_COMPILE = "-DCAPPLAN_PATCHED"; }); }) ]; }) ]')  # fmt: skip
    cause = _cause(nix_repo, _drv(nix_repo, _user(overlays=overlay)), cache)
    assert (cause["kind"], cause["derivation"]) == ("overlay", "python3.13-numpy-2.3.2")
    assert cause["attribute"] == "NIX_CFLAGS_COMPILE" and cause["yours"] == "-DCAPPLAN_PATCHED"
    assert cause["trail"] == [TORCH, "python3.13-numpy-2.3.2"]


def test_another_nixpkgs_revision(nix_repo: NixRunner, cache: str, tmp_path: Path) -> None:
    other = tmp_path / "nixpkgs-next"
    shutil.copytree(nix_repo.standin, other)
    recipe = other / "python-packages.nix"
    text = recipe.read_text()
    assert 'numpy = leaf "numpy" "2.3.2";' in text
    recipe.write_text(
        text.replace('numpy = leaf "numpy" "2.3.2";', 'numpy = leaf "numpy" "2.3.3";')
    )
    cause = _cause(nix_repo, _drv(nix_repo, _user(), standin=other), cache)
    assert (cause["kind"], cause["derivation"]) == ("nixpkgs-revision", "python3.13-numpy-2.3.3")
    assert cause["trail"] == [TORCH, "python3.13-numpy-2.3.3"]
    assert "nixpkgs: yours" in cause["words"] and f"path:{nix_repo.standin}" in cause["words"]


def test_another_system(nix_repo: NixRunner, cache: str) -> None:
    cause = _cause(nix_repo, _drv(nix_repo, _user(system="aarch64-linux")), cache)
    assert (cause["kind"], cause["derivation"]) == ("system", TORCH)
    assert (cause["yours"], cause["planned"]) == ("aarch64-linux", "x86_64-linux")


def test_an_installable_that_does_not_evaluate(nix_repo: NixRunner) -> None:
    result = _cli(nix_repo, "cache", "why", f".#{X86}.no-such-package")
    assert result.exit_code == 14
    [line] = result.stderr.strip().splitlines()[-1:]
    assert line.startswith("capplan: error: nix eval failed") and "no-such-package" in line


def test_a_shell_is_searched_for_its_planned_packages(nix_repo: NixRunner, cache: str) -> None:
    """A devShell's closure: the walk finds torchvision (and stops there, not below it at
    torch) and names its own cause; numpy, planned for no GPU, is passed by."""
    config = PLANNED.replace('[ "8.6" ]', '[ "8.6" "8.9" ]')
    shell = (f'let p = import {nix_repo.standin} {{ system = "x86_64-linux"; config = {{ {config} }}; }}; '
             "in (p.mkShell { packages = [ p.python3Packages.torchvision p.python3Packages.numpy ]; })"
             ".drvPath")  # fmt: skip
    drv = nix_repo.expr_json(shell)
    result = _cli(nix_repo, "cache", "why", drv, "--cache", cache, "--json")
    assert result.exit_code == 18, result.stderr
    [package] = json.loads(result.stdout)["packages"]
    assert package["package"] == "torchvision" and package["variant"] == "torchvision-sm86"
    assert package["causes"][0]["kind"] == "capabilities"
    assert package["causes"][0]["derivation"] == "python3.13-torchvision-0.27.0"
