"""Issue 11: a variant's package set behaves as real nixpkgs' variant sets do.

Checked with real Nix against the stand-in: one nixpkgs instance per variant package set (PTX
torch in the Python set, dependency jobs = the derivations the top package links), the user's
overlays and platforms kept, rocmSupport off, plain-data configs, cheap `nix flake show`, the
default-CUDA assertion, and our own Nix code on Nix 2.8.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nixhelpers import REPO, SYSTEM, NixRunner, copy_tree, count_imports

pytestmark = pytest.mark.nix


def _variant(package: str, attr: list[str], caps: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "attr": attr,
        "capabilities": caps,
        "cuda": "12.9",
        "cuda_set": None,
        "forward_compat": False,
        "gpu_targets": [],
        "independent": False,
        "package": package,
        **extra,
    }


PLAN = {
    "version": 1,
    "system": SYSTEM,
    "variants": {
        "torch-sm86": _variant("torch", ["python3Packages", "torch"], ["8.6"]),
        "magma-sm86": _variant("magma", ["magma-cuda-static"], ["8.6"]),
    },
}


def overlay_eval(
    runner: NixRunner, body: str, plan: dict[str, Any] = PLAN, *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Evaluate BODY with `lib` (the flake's lib) and `plan` bound; --json."""
    return runner.flake(
        ["eval"],
        ".#lib",
        "--impure",
        "--json",
        "--apply",
        f"""lib:
          let plan = builtins.fromJSON {json.dumps(json.dumps(plan))};
              standin = {runner.standin};
          in {body}""",
        check=check,
    )


def test_users_overlays_reach_the_variants(nix_example: NixRunner) -> None:
    # A user's patched magma (an overlay of their set) is what the variants get, as in real
    # pkgsForCudaArch (variants.nix re-imports with the same overlays).
    proc = overlay_eval(
        nix_example,
        f"""let
              patch = final: prev: {{
                magma-cuda-static = final.stdenv.mkDerivation {{
                  pname = "magma-patched";
                  version = "2.9.0";
                  record.package = "magma-patched";
                }};
              }};
              pkgs = import standin {{ system = "{SYSTEM}"; overlays = [ patch (lib.mkOverlay plan) ]; }};
              v = pkgs.capplan.packages;
            in {{
              magma = v."magma-sm86".outPath;
              torchMagma = v."torch-sm86".drvAttrs.record.cudaDependencies.magma;
            }}""",
    )
    got = json.loads(proc.stdout)
    assert got["magma"].endswith("-magma-patched-2.9.0")
    # torch-sm86 links that very magma-sm86 job (one instance for the capability list).
    assert got["torchMagma"] == got["magma"]


def test_overlay_follows_the_sets_platform(nix_example: NixRunner) -> None:
    proc = overlay_eval(
        nix_example,
        """let pkgs = import standin { system = "aarch64-linux"; overlays = [ (lib.mkOverlay plan) ]; };
           in { inherit (pkgs.capplan.packages."torch-sm86") system; }""",
    )
    assert json.loads(proc.stdout) == {"system": "aarch64-linux"}


def test_rocm_support_is_forced_off_and_configs_are_plain_data(nix_example: NixRunner) -> None:
    # torch is meta.broken with CUDA and ROCm on (torch/source/default.nix brokenConditions);
    # real pkgsCuda/pkgsForCudaArch force rocmSupport = false, and so do the variants.  The
    # user's config holds a function: configs must still be plain data.
    proc = overlay_eval(
        nix_example,
        f"""let pkgs = import standin {{
                  system = "{SYSTEM}";
                  config = {{ rocmSupport = true; allowUnfreePredicate = _: true; }};
                  overlays = [ (lib.mkOverlay plan) ];
                }};
           in {{
             drv = pkgs.capplan.packages."torch-sm86".drvPath;
             config = builtins.toJSON pkgs.capplan.configs."torch-sm86";
           }}""",
    )
    got = json.loads(proc.stdout)
    assert got["drv"].endswith(".drv")
    assert json.loads(got["config"]) == {
        "allowUnfree": True,
        "cudaSupport": True,
        "rocmSupport": False,
        "cudaCapabilities": ["8.6"],
        "cudaForwardCompat": False,
        "cudaMajorMinorVersion": "12.9",
    }


def test_default_cuda_is_asserted(nix_example: NixRunner) -> None:
    plan = {
        **PLAN,
        "variants": {"torch-sm86": {**PLAN["variants"]["torch-sm86"], "cuda": "13.0"}},
    }
    proc = overlay_eval(
        nix_example,
        f"""(import standin {{ system = "{SYSTEM}"; overlays = [ (lib.mkOverlay plan) ]; }})
              .capplan.packages."torch-sm86".drvPath""",
        plan,
        check=False,
    )
    assert proc.returncode != 0
    assert (
        "capplan: this plan expects CUDA 13.0 as nixpkgs' default, the pinned nixpkgs has 12.9:"
        " regenerate with capplan generate" in proc.stderr
    )


@pytest.mark.parametrize("json_output", [False, True])
def test_flake_show_imports_nixpkgs_at_most_once_per_system(
    nix_example: NixRunner, json_output: bool
) -> None:
    # packages holds only the tool and legacyPackages is omitted; every Nix lists hydraJobs'
    # leaves in `nix flake show` (src/nix/flake.cc: `type`, `name`, with --json
    # `meta.description`), which the job records answer from the plan. Before issue 34 the
    # committed plan's show imported nixpkgs 15 times (13 variant configs and the default set
    # of each system); now only the default set of each system, for the tool and the devShell.
    proc = nix_example.flake(["flake", "show"], *(["--json"] if json_output else []))
    if json_output:
        shown = json.loads(proc.stdout)
        assert set(shown["packages"][SYSTEM]) == {"capplan", "default"}
        job = shown["hydraJobs"]["torch-sm86"][SYSTEM]
        assert (job["type"], job["name"]) == ("derivation", "torch-sm86")
    else:
        assert "torch-sm86" in proc.stdout and "derivation 'torch-sm86'" in proc.stdout
    said = proc.stdout + proc.stderr  # Nix 2.18 prints "omitted" with the tree, 2.8 on stderr
    assert "omitted" in said and "legacyPackages" in said
    imports = [line for line in proc.stderr.splitlines() if "capplan-standin: import " in line]
    per_system = Counter(re.search(r"system=(\S+)", line).group(1) for line in imports)  # type: ignore[union-attr]
    assert len(imports) == count_imports(proc.stderr)[0]
    assert set(per_system.values()) <= {1}, proc.stderr
    assert not [line for line in imports if '"cudaSupport":true' in line], proc.stderr


@pytest.mark.parametrize("fixture", ["nix_example", "nix_repo"])
def test_hydra_jobs_are_the_variants_for_what_nix_eval_jobs_reads(
    request: pytest.FixtureRequest, fixture: str
) -> None:
    # nix_repo: the committed plan (CUDA on two systems, ROCm, CPU levels, dispatch outputs).
    nix_example: NixRunner = request.getfixturevalue(fixture)
    # nix-eval-jobs reads a job's name, outputs (each output's outPath), drvPath, system and
    # meta (src/drv.cc, PackageInfo): all but the name are the variant's own.
    expression = """jobs: builtins.mapAttrs (name: bySystem: builtins.mapAttrs (system: job: {
        inherit (job) name type drvPath system outputs;
        out = job.outPath;  # (an attrset with outPath would print as that path)
        outPaths = map (o: job.${o}.outPath) job.outputs;
        description = job.meta.description;
      }) bySystem) (builtins.removeAttrs jobs [ "capplan" ])"""
    jobs = nix_example.eval_json("hydraJobs", "--apply", expression)
    legacy = """ps: builtins.mapAttrs (_: d: {
        inherit (d) drvPath system; out = d.outPath; outputs = d.outputs or [ "out" ];
        outPaths = map (o: d.${o}.outPath) (d.outputs or [ "out" ]);
      }) ps"""
    expected = {
        system: nix_example.eval_json(f"legacyPackages.{system}", "--apply", legacy)
        for system in ("x86_64-linux", "aarch64-linux")
    }
    assert {(n, s) for n, by_system in jobs.items() for s in by_system} == {
        (n, s) for s, names in expected.items() for n in names
    }  # every variant and dispatch output, each under its own system
    for name, by_system in jobs.items():
        for system, job in by_system.items():
            real = expected[system][name]
            assert job["name"] == name and job["type"] == "derivation"
            assert {k: job[k] for k in real} == real, name
            assert job["description"] == f"capplan variant {name} ({system})"


def test_nix_build_dot_hash_variant_still_finds_it(nix_example: NixRunner) -> None:
    # `nix build .#torch-sm86` looks in packages, then legacyPackages.
    proc = nix_example.flake(["eval"], ".#torch-sm86.drvPath", "--raw")
    legacy = nix_example.flake(["eval"], f".#legacyPackages.{SYSTEM}.torch-sm86.drvPath", "--raw")
    assert proc.stdout == legacy.stdout and proc.stdout.endswith("-python3.13-torch-2.12.0.drv")


@pytest.fixture(scope="module")
def ptx_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    """A copy whose plan is `capplan generate` with ptx = "newest" for torch, torchvision, nccl."""
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH")
    root = tmp_path_factory.mktemp("repo-ptx")
    copy_tree(root)
    (root / "capplan.toml").write_text(
        '[fleet]\ngpus = ["RTX 3090"]\n'
        "[packages.torch]\n[packages.torchvision]\n[packages.nccl]\n"
        '[policy]\nsystem = "x86_64-linux"\ncuda = ["12.9"]\nptx = "newest"\n'
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "planner" / "src"), "NO_COLOR": "1"}
    subprocess.run(
        [sys.executable, "-m", "capplan", "generate"],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    yield NixRunner(root)


def test_ptx_stack_builds_against_its_own_jobs(ptx_repo: NixRunner) -> None:
    plan = json.loads((ptx_repo.root / "overlays" / "plan.json").read_text())["variants"]
    names = ["torch-sm86", "torchvision-sm86", "nccl-sm86"]
    assert {plan[n]["gpu_targets"] == ["8.6+PTX"] and plan[n]["forward_compat"] for n in names} == {
        True
    }
    attrs = [f"legacyPackages.{SYSTEM}.{n}" for n in names]
    built = ptx_repo.build(attrs)
    records = {a.rsplit(".", 1)[1]: json.loads(p.read_text()) for a, p in built.items()}
    paths = {a.rsplit(".", 1)[1]: p.as_posix() for a, p in built.items()}
    torch = records["torch-sm86"]
    assert torch["TORCH_CUDA_ARCH_LIST"] == "8.6+PTX"
    # torch-sm86 links the nccl-sm86 job, torchvision-sm86 the torch-sm86 job: same paths.
    assert torch["cudaDependencies"]["nccl"] == paths["nccl-sm86"]
    assert records["torchvision-sm86"]["torch"] == paths["torch-sm86"]
    # nccl embeds PTX through cudaForwardCompat; torchvision's own kernels never carry it.
    assert records["nccl-sm86"]["NVCC_GENCODE"].endswith("code=compute_86")
    assert records["torchvision-sm86"]["TORCH_CUDA_ARCH_LIST"] == "8.6"


# Builtins that appeared after Nix 2.8 (Nix release notes 2.9-2.30): our Nix code must not use
# them, so the flake keeps evaluating with Debian's nix-bin 2.8.
_AFTER_2_8 = {
    "addDrvOutputDependencies",
    "break",
    "convertHash",
    "fetchClosure",
    "flakeRefToString",
    "outputOf",
    "parseFlakeRef",
    "readFileType",
    "traceVerbose",
    "warn",
}
# Our Nix code: the flake, the overlay and every file under pkgs/ (the families included).
_OWN_NIX = (
    "flake.nix",
    "overlays/default.nix",
    *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "pkgs").rglob("*.nix")),
)


def _builtins_used(text: str) -> set[str]:
    used = set(re.findall(r"builtins\.([A-Za-z']+)", text))
    for block in re.findall(r"inherit \(builtins\)([^;]*);", text):
        used.update(block.split())
    return used


def test_own_nix_code_needs_only_nix_2_8(nix_repo: NixRunner) -> None:
    used = set().union(*(_builtins_used((REPO / f).read_text()) for f in _OWN_NIX))
    assert used, "the scan found no builtins at all"
    assert not used & _AFTER_2_8
    # On Debian's nix-bin 2.8 (this machine) this is the exact set 2.8 offers.
    available = set(nix_repo.expr_json("builtins.attrNames builtins"))
    assert used <= available, used - available


def test_matrix_says_when_nixpkgs_needs_a_newer_nix(nix_repo: NixRunner, tmp_path: Path) -> None:
    # A nixpkgs that aborts as current nixpkgs' default.nix does on Nix < 2.18
    # (lib/minfeatures.nix); `capplan matrix --skip-cached` evaluates the flake with it.
    fake = tmp_path / "nixpkgs"
    fake.mkdir()
    (fake / "default.nix").write_text(
        "args: abort ''\n  This version of Nixpkgs requires an implementation of Nix with the "
        "following features:\n  - `builtins.nixVersion` reports at least 2.18\n\n"
        "  You are evaluating with Nix ${builtins.nixVersion}, please upgrade:\n''\n"
    )
    (fake / "flake.nix").write_text(
        "{ outputs = { self }: { legacyPackages.x86_64-linux = import ./. { }; }; }\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "planner" / "src"), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "capplan", "matrix", "--cache", "http://127.0.0.1:9",
         "--skip-cached", "--override-input", "nixpkgs", f"path:{fake}"],
        cwd=nix_repo.root, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 14, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "capplan: error: the pinned nixpkgs needs Nix >= 2.18, this nix is 2."
    )
    assert "upgrade Nix" in lines[0]
