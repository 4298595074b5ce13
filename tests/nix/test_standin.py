"""The stand-in nixpkgs honours the contract (NIXPKGS.md), checked with real `nix eval`.

Expected values come from NIXPKGS.md and from real nixpkgs' own tests (e.g. the flags test in
pkgs/development/cuda-modules/tests/flags.nix), not from the stand-in's code.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from nixhelpers import REPO, NixRunner, count_imports

pytestmark = pytest.mark.nix


def pkgs(config: str = "", system: str = "x86_64-linux") -> str:
    return f'(import standin {{ system = "{system}"; config = {{ {config} }}; }})'


def cuda(caps: list[str], extra: str = "", system: str = "x86_64-linux") -> str:
    listed = " ".join(json.dumps(c) for c in caps)
    return pkgs(
        f"allowUnfree = true; cudaSupport = true; cudaCapabilities = [ {listed} ]; {extra}",
        system,
    )


def failure(runner: NixRunner, expression: str) -> str:
    proc = runner.expr(expression, check=False)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


def test_config_defaults(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let c = {pkgs()}.config; in {{ inherit (c) allowUnfree cudaSupport cudaCapabilities cudaForwardCompat; }}"
    )
    assert got == {
        "allowUnfree": False,
        "cudaSupport": False,
        "cudaCapabilities": [],
        "cudaForwardCompat": True,
    }


def test_default_capability_lists_per_cuda_version(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let p = {pkgs()}; in builtins.mapAttrs (_: s: s.flags.cudaCapabilities) {{"
        " inherit (p) cudaPackages_12_6 cudaPackages_12_8 cudaPackages_12_9 cudaPackages_13_0"
        " cudaPackages_13_1 cudaPackages_13_2 cudaPackages_13_3; }"
    )
    base = ["7.5", "8.0", "8.6", "8.9", "9.0"]
    # NIXPKGS.md section 3: 12.6 -> base; 12.8 adds 10.0 12.0; 12.9 and 13.x add 10.3 12.1.
    assert got["cudaPackages_12_6"] == base
    assert got["cudaPackages_12_8"] == [*base, "10.0", "12.0"]
    for version in ("12_9", "13_0", "13_1", "13_2", "13_3"):
        assert got[f"cudaPackages_{version}"] == [*base, "10.0", "10.3", "12.0", "12.1"]
    # ... and the rule-computed lists agree with the table's default@ columns.
    table = json.loads((REPO / "tests/nixpkgs/cuda-capabilities.json").read_text())
    for version, caps in table["defaultsFromTable"].items():
        assert got["cudaPackages_" + version.replace(".", "_")] == caps


def test_set_aliases_and_pkgs(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let p = {cuda(['8.6'])}; in {{"
        " default = p.cudaPackages.cudaMajorMinorVersion;"
        " v13 = p.cudaPackages_13.cudaMajorMinorVersion;"
        " viaPkgs = p.cudaPackages_12_6.pkgs.cudaPackages.cudaMajorMinorVersion;"
        " torchViaPkgs = p.cudaPackages_12_8.pkgs.python3Packages.torch.cudaPackages.cudaMajorMinorVersion;"
        " }"
    )
    assert got == {
        "default": "12.9",
        "v13": "13.2",
        "viaPkgs": "12.6",
        "torchViaPkgs": "12.8",
    }


def test_flags_formats_match_real_nixpkgs(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let f = {cuda(['7.5', '8.6'], 'cudaForwardCompat = true;')}.cudaPackages.flags; in"
        " { inherit (f) cudaCapabilities cudaForwardCompat realArches virtualArches arches gencode"
        " gencodeString cmakeCudaArchitecturesString; }"
    )
    # Expected values of nixpkgs' own flags test (cuda-modules/tests/flags.nix).
    assert got == {
        "cudaCapabilities": ["7.5", "8.6"],
        "cudaForwardCompat": True,
        "realArches": ["sm_75", "sm_86"],
        "virtualArches": ["compute_75", "compute_86"],
        "arches": ["sm_75", "sm_86", "compute_86"],
        "gencode": [
            "-gencode=arch=compute_75,code=sm_75",
            "-gencode=arch=compute_86,code=sm_86",
            "-gencode=arch=compute_86,code=compute_86",
        ],
        "gencodeString": "-gencode=arch=compute_75,code=sm_75 -gencode=arch=compute_86,code=sm_86"
        " -gencode=arch=compute_86,code=compute_86",
        "cmakeCudaArchitecturesString": "75;86",
    }


def test_forward_compat_is_ptx_of_the_last_element_as_given(
    nix_repo: NixRunner,
) -> None:
    got = nix_repo.expr_json(
        f"let f = {cuda(['8.6', '7.5'])}.cudaPackages.flags; in {{ inherit (f) arches gencode; }}"
    )
    # Not the highest (8.6): the last as given.  Plans must sort their lists.
    assert got["arches"][-1] == "compute_75"
    assert got["gencode"][-1] == "-gencode=arch=compute_75,code=compute_75"


def test_suffixes_are_kept(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"{cuda(['9.0a', '10.0f'], 'cudaForwardCompat = false;')}.cudaPackages.flags.cmakeCudaArchitecturesString"
    )
    assert got == "90a;100f"


def test_unfree_refused_without_allow_unfree(nix_repo: NixRunner) -> None:
    stderr = failure(nix_repo, f"{pkgs('cudaSupport = true;')}.python3Packages.torch.drvPath")
    assert "Refusing to evaluate package" in stderr
    assert "has an unfree license" in stderr
    assert "NIXPKGS_ALLOW_UNFREE" in stderr
    # allowUnfreePredicate is honoured as in check-meta.nix.
    ok = nix_repo.expr_json(
        f"{pkgs('cudaSupport = true; allowUnfreePredicate = _: true;')}.cudaPackages.cudnn.name"
    )
    assert "cudnn" in ok


@pytest.mark.parametrize(
    ("cuda_set", "caps", "message"),
    [
        (
            "cudaPackages_12_6",
            ["10.0"],
            'Requested CUDA capabilities which are too new for CUDA 12.6: ["10.0"]',
        ),
        (
            "cudaPackages_13_0",
            ["6.1", "8.6"],
            'Requested CUDA capabilities which are too old for CUDA 13.0: ["6.1"]',
        ),
        (
            "cudaPackages",
            ["8.7"],
            'Requested pre-SBSA (10.1) Jetson CUDA capabilities (["8.7"]) require computed'
            " NVIDIA hostRedistSystem (linux-x86_64) to be linux-aarch64",
        ),
        (
            "cudaPackages",
            ["10.1"],
            'Requested SBSA (10.1) Jetson CUDA capabilities (["10.1"]) require computed'
            " NVIDIA hostRedistSystem (linux-x86_64) to be linux-sbsa",
        ),
    ],
)
def test_capability_assertions(
    nix_repo: NixRunner, cuda_set: str, caps: list[str], message: str
) -> None:
    stderr = failure(nix_repo, f"{cuda(caps)}.{cuda_set}.cudnn.drvPath")
    set_name = "cudaPackages_12_9" if cuda_set == "cudaPackages" else cuda_set
    assert f"{set_name}.backendStdenv has failed assertions:" in stderr
    assert message in stderr


def test_unknown_capability_fails_as_real_nixpkgs(nix_repo: NixRunner) -> None:
    # backendStdenv.nix indexes the capability table with every requested capability while it
    # builds the too-old list: an unknown one is a missing attribute, not a friendly message.
    stderr = failure(nix_repo, f"{cuda(['9.9'])}.cudaPackages.cudnn.drvPath")
    # Nix 2.8 writes `attribute '9.9' missing`, Nix >= 2.18 quotes the name: `'"9.9"'`.
    assert re.search(r"""attribute '"?9\.9"?' missing""", stderr), stderr
    assert "Requested unrecognized CUDA capabilities" not in stderr


def test_jetson_rules(nix_repo: NixRunner) -> None:
    # Alone on aarch64-linux an Orin (8.7) evaluates ...
    got = nix_repo.expr_json(
        f"{cuda(['8.7'], system='aarch64-linux')}.cudaPackages.flags.realArches"
    )
    assert got == ["sm_87"]
    # ... mixed with a non-Jetson capability it does not.
    stderr = failure(nix_repo, f"{cuda(['8.6', '8.7'], system='aarch64-linux')}.cudaPackages.flags")
    assert (
        'Requested pre-SBSA (10.1) Jetson CUDA capabilities (["8.7"]) cannot be specified with'
        ' other capabilities (["8.6"])' in stderr
    )
    # From CUDA 13, Orin (8.7) and Thor (11.0) use the SBSA toolkit and mix with others.
    got = nix_repo.expr_json(
        f"{cuda(['8.7', '9.0', '11.0'], system='aarch64-linux')}.cudaPackages_13_0.flags.realArches"
    )
    assert got == ["sm_87", "sm_90", "sm_110"]


def test_redistributables_follow_the_redist_system(nix_repo: NixRunner) -> None:
    # On aarch64 a set with a pre-SBSA Jetson capability takes the linux-aarch64 archives
    # (another cuDNN); SBSA sets share theirs whatever the capabilities.
    got = nix_repo.expr_json(
        "let cudnn = caps: ("
        + cuda(["CAPS"], system="aarch64-linux").replace('[ "CAPS" ]', "caps")
        + ").cudaPackages.cudnn; in {"
        ' jetson = (cudnn [ "8.7" ]).outPath == (cudnn [ "9.0" ]).outPath;'
        ' sbsa = (cudnn [ "8.0" ]).outPath == (cudnn [ "9.0" ]).outPath;'
        ' versions = [ (cudnn [ "8.7" ]).version (cudnn [ "9.0" ]).version ];'
        " }"
    )
    assert got["jetson"] is False and got["sbsa"] is True
    assert got["versions"][0] != got["versions"][1]


def test_broken_packages_are_refused(nix_repo: NixRunner) -> None:
    # check-meta.nix refuses meta.broken like unfree. Real magma with dynamic CUDA is broken
    # (magma/generic.nix, nixpkgs issue 239237); torch with CUDA and ROCm is broken.
    stderr = failure(nix_repo, f"{cuda(['8.6'])}.magma.drvPath")
    assert "Refusing to evaluate package 'magma-2.9.0'" in stderr
    assert "is marked as broken" in stderr and "NIXPKGS_ALLOW_BROKEN" in stderr
    stderr = failure(
        nix_repo, f"{cuda(['8.6'], 'rocmSupport = true;')}.python3Packages.torch.drvPath"
    )
    assert "is marked as broken" in stderr
    got = nix_repo.expr_json(
        f"[ {cuda(['8.6'])}.magma-cuda-static.name"
        f" {cuda(['8.6'], 'rocmSupport = true; allowBroken = true;')}.python3Packages.torch.name ]"
    )
    assert got == ["magma-2.9.0", "python3.13-torch-2.12.0"]


def test_cuda_set_pkgs_is_the_set_itself_for_the_default(nix_repo: NixRunner) -> None:
    proc = nix_repo.expr(
        f"{cuda(['8.6'])}.cudaPackages_12_9.pkgs.cudaPackages.cudaMajorMinorVersion"
    )
    assert json.loads(proc.stdout) == "12.9"
    assert count_imports(proc.stderr) == (1, 0)
    proc = nix_repo.expr(
        f"let p = {cuda(['8.6'])}.cudaPackages_12_8.pkgs; in"
        " map (s: s.cudaMajorMinorVersion) [ p.cudaPackages p.cudaPackages_12 p.cudaPackages_12_8 ]"
    )
    assert json.loads(proc.stdout) == ["12.8", "12.8", "12.8"]
    assert count_imports(proc.stderr) == (1, 1)


def test_package_details_as_in_real_nixpkgs(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let p = {cuda(['8.6'])}; in {{"
        " onnx = p.onnxruntime.requiredSystemFeatures;"
        " cupy = builtins.attrNames p.python3Packages.cupy.drvAttrs.record.cudaDependencies;"
        " }"
    )
    # onnxruntime is big-parallel under CUDA; cupy does not take cudnn.
    assert got["onnx"] == ["big-parallel"]
    assert "cudnn" not in got["cupy"] and "nccl" in got["cupy"]


def test_set_exposes_overlays_platforms_and_python_extensions(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        'let p = import standin { localSystem = { system = "x86_64-linux"; }; overlays = ['
        " (final: prev: { pythonPackagesExtensions = prev.pythonPackagesExtensions ++ ["
        ' (pf: pp: { torch = pp.torch.override { gpuTargets = [ "8.6+PTX" ]; }; }) ]; })'
        " ]; config = { allowUnfree = true; cudaSupport = true; }; }; in {"
        " overlays = builtins.length p.overlays;"
        " host = p.stdenv.hostPlatform.system; build = p.stdenv.buildPlatform.system;"
        " torch = p.python3Packages.torch.gpuTargetString;"
        " visionTorch = p.python3Packages.torchvision.torch.gpuTargetString;"
        " }"
    )
    assert got == {
        "overlays": 1,
        "host": "x86_64-linux",
        "build": "x86_64-linux",
        "torch": "8.6+PTX",
        "visionTorch": "8.6+PTX",
    }
    # impure.nix: `system` and `localSystem` are one argument; both at once is an error.
    stderr = failure(
        nix_repo,
        '(import standin { system = "x86_64-linux"; localSystem = { system = "x86_64-linux"; }; })'
        ".stdenv.hostPlatform.system",
    )
    assert "assertion" in stderr


def test_torch_allowlist(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        "{"
        f" dropped = {cuda(['8.6', '10.0f'])}.python3Packages.torch.gpuTargetString;"
        f" ignoresForwardCompat = {cuda(['8.6'], 'cudaForwardCompat = true;')}.python3Packages.torch.gpuTargetString;"
        f' verbatim = ({cuda(["8.6"])}.python3Packages.torch.override {{ gpuTargets = [ "8.6+PTX" "10.0f" ]; }}).gpuTargetString;'
        f" passthru = {cuda(['8.6', '10.0f'])}.python3Packages.torch.cudaCapabilities;"
        f" features = {cuda(['8.6'])}.python3Packages.torch.requiredSystemFeatures;"
        " }"
    )
    assert got == {
        "dropped": "8.6",
        "ignoresForwardCompat": "8.6",
        "verbatim": "8.6+PTX;10.0f",
        "passthru": ["8.6"],
        "features": ["big-parallel"],
    }
    stderr = failure(nix_repo, f"{cuda(['10.0f', '12.1f'])}.python3Packages.torch.drvPath")
    assert "No supported GPU targets specified. Requested GPU targets: 10.0f, 12.1f" in stderr


def test_pkgs_for_cuda_arch(nix_repo: NixRunner) -> None:
    proc = nix_repo.expr(
        f"let p = {pkgs('allowUnfree = true;')}; a = p.pkgsForCudaArch.sm_90a; in {{"
        ' names = builtins.filter (n: n == "sm_100f" || n == "sm_35" || n == "sm_121a") (builtins.attrNames p.pkgsForCudaArch);'
        " config = { inherit (a.config) cudaSupport cudaCapabilities cudaForwardCompat; };"
        " torch = a.python3Packages.torch.gpuTargetString;"
        " }"
    )
    got: dict[str, Any] = json.loads(proc.stdout)
    assert got["names"] == ["sm_100f", "sm_121a", "sm_35"]
    assert got["config"] == {
        "cudaSupport": True,
        "cudaCapabilities": ["9.0a"],
        "cudaForwardCompat": False,
    }
    assert got["torch"] == "9.0a"
    # Only the forced variant was instantiated.
    assert count_imports(proc.stderr) == (1, 1)


def test_capability_independent_paths(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let p = {pkgs('allowUnfree = true;')}; a = p.pkgsForCudaArch.sm_86; b = p.pkgsForCudaArch.sm_89; in {{"
        " cudnn = a.cudaPackages.cudnn.outPath == b.cudaPackages.cudnn.outPath;"
        " nccl = a.cudaPackages.nccl.outPath == b.cudaPackages.nccl.outPath;"
        " magma = a.magma-cuda-static.outPath == b.magma-cuda-static.outPath;"
        " }"
    )
    assert got == {"cudnn": True, "nccl": False, "magma": False}


def test_overlays_final_prev_and_path(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        'let p = import standin { system = "x86_64-linux"; overlays = ['
        ' (final: prev: { a = prev.cudaPackages.cudaMajorMinorVersion; b = final.a + "!"; })'
        ' (final: prev: { a = prev.a + "?"; })'
        " ]; }; in { inherit (p) a b;"
        ' reimport = (import p.path { system = "x86_64-linux"; }).cudaPackages.cudaMajorMinorVersion; }'
    )
    assert got == {"a": "12.9?", "b": "12.9?!", "reimport": "12.9"}


def test_standin_flake_legacy_packages(nix_repo: NixRunner) -> None:
    proc = nix_repo.run(
        [
            "eval",
            "--raw",
            f"path:{nix_repo.standin}#legacyPackages.x86_64-linux.cudaPackages.cudaMajorMinorVersion",
        ]
    )
    assert proc.stdout == "12.9"


def test_override_keeps_the_recipe_arguments_visible(nix_repo: NixRunner) -> None:
    # lib/customisation.nix makeOverridable: `override` is a functor made by mirrorFunctionArgs,
    # so lib.functionArgs lists the recipe's arguments, through .override and .overrideAttrs.
    got = nix_repo.expr_json(
        f"let p = {pkgs()}; t = p.python3Packages.torch; args = f: p.lib.functionArgs f; in {{"
        " plain = args t.override;"
        ' again = args (t.override { gpuTargets = [ "8.6" ]; }).override;'
        " attrs = args (t.overrideAttrs (old: { })).override;"
        " llama = args p.llama-cpp.override; }"
    )
    assert got["plain"]["gpuTargets"] is True and got["plain"]["cudaSupport"] is True
    assert got["plain"]["numpy"] is False
    assert got["again"] == got["plain"] == got["attrs"]
    assert got["llama"]["rocmGpuTargets"] is True


def test_plain_function_args_throws_on_override(nix_repo: NixRunner) -> None:
    # Real nixpkgs: `override` is an attribute set with __functor, which builtins.functionArgs
    # refuses; the stand-in must not be more lenient (a plain lambda would answer `{ }`).
    stderr = failure(nix_repo, f"builtins.functionArgs {pkgs()}.python3Packages.torch.override")
    assert "requires a function" in stderr or "lambda was expected" in stderr, stderr


def test_torch_refuses_cuda_majors_other_than_11_and_12(nix_repo: NixRunner) -> None:
    # torch/source/default.nix brokenConditions "Unsupported CUDA version" (torch 2.7.1, 2.9.1).
    p = cuda(["8.6"])
    got = nix_repo.expr_json(
        f"let p = {p}; broken = s: s.pkgs.python3Packages.torch.meta.broken; in {{"
        " c126 = broken p.cudaPackages_12_6; c129 = broken p.cudaPackages;"
        " c130 = broken p.cudaPackages_13_0; c133 = broken p.cudaPackages_13_3; }"
    )
    assert got == {"c126": False, "c129": False, "c130": True, "c133": True}
    stderr = failure(nix_repo, f"{p}.cudaPackages_13_0.pkgs.python3Packages.torch.drvPath")
    assert "marked as broken" in stderr
