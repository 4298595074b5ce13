"""Issue 16 item 4: AMD ROCm in the stand-in nixpkgs and ROCm variants built from plan.json.

Expected values come from real nixpkgs (pkgs/development/rocm-modules/default.nix and
clr/hipblaslt/composable_kernel, pkgs/by-name/ma/magma/package.nix,
pkgs/development/python-modules/torch/source/default.nix, pkgs/top-level/variants.nix) as
restated in shared/ROCM.md, not from the stand-in's code.  The variant tests use the
hand-written plan tests/data/plans/rocm.json (AMD variants beside CUDA ones).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nixhelpers import PLANS, SYSTEM, NixRunner, count_imports

pytestmark = pytest.mark.nix

# clr/default.nix passthru.gpuTargets (ROCM.md "Default targets").
DEFAULT_TARGETS = [
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1030",
    "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1200", "gfx1201",
]  # fmt: skip
# torch: the default list minus gfx1010 and gfx1012 (PyTorch's official ROCm wheels' set).
TORCH_DEFAULT = [t for t in DEFAULT_TARGETS if t not in ("gfx1010", "gfx1012")]
ROCM_PLAN: dict[str, Any] = json.loads((PLANS / "rocm.json").read_text())


def rocm(extra: str = "") -> str:
    return (
        f'(import standin {{ system = "{SYSTEM}"; config = {{ rocmSupport = true; {extra} }}; }})'
    )


def failure(runner: NixRunner, expression: str) -> str:
    proc = runner.expr(expression, check=False)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


# --- the stand-in ---------------------------------------------------------------------------


def test_llama_cpp_and_ollama_read_rocm_gpu_targets(nix_repo: NixRunner) -> None:
    """pkgs/by-name/ll/llama-cpp and ol/ollama: rocmGpuTargets defaults to the scope's list
    (clr.localGpuTargets or clr.gpuTargets); ollama falls back to CPU with CUDA and ROCm both on."""
    both = f'(import standin {{ system = "{SYSTEM}"; config = {{ rocmSupport = true;'
    both += " cudaSupport = true; allowUnfree = true; }; })"
    got = nix_repo.expr_json(
        f"let p = {rocm()}; b = {both}; in {{"
        " llama = p.llama-cpp.drvAttrs.record.CMAKE_HIP_ARCHITECTURES;"
        " scoped = p.rocmPackages.gfx1100.clr.localGpuTargets;"
        " ollama = p.ollama.drvAttrs.record.AMDGPU_TARGETS;"
        ' narrowed = (p.ollama.override { rocmGpuTargets = [ "gfx942" ]; })'
        ".drvAttrs.record.AMDGPU_TARGETS;"
        " fallback = { inherit (b.ollama.drvAttrs.record) enableCuda enableRocm; };"
        " }"
    )
    assert got["llama"] == ";".join(DEFAULT_TARGETS) == got["ollama"]
    assert got["scoped"] == ["gfx1100"]
    assert got["narrowed"] == "gfx942"
    assert got["fallback"] == {"enableCuda": False, "enableRocm": False}


def test_default_targets_and_torch_default_arch(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let p = {rocm()}; t = p.python3Packages.torch; in {{"
        " clr = p.rocmPackages.clr.gpuTargets;"
        # The argument is null by default: the passthru attribute is absent, so
        # `clr.localGpuTargets or clr.gpuTargets` falls back (clr/default.nix optionalAttrs).
        " hasLocal = p.rocmPackages.clr ? localGpuTargets;"
        " arch = t.gpuTargetString; env = t.drvAttrs.record.PYTORCH_ROCM_ARCH;"
        " rocmSupport = t.rocmSupport; cudaSupport = t.cudaSupport;"
        " plainRocm = p.config.rocmSupport; plainDefault = (import standin {"
        f' system = "{SYSTEM}"; }}).config.rocmSupport;'
        " }"
    )
    assert got["clr"] == DEFAULT_TARGETS
    assert got["hasLocal"] is False
    assert got["arch"] == ";".join(TORCH_DEFAULT) == got["env"]
    assert len(TORCH_DEFAULT) == 15
    assert (got["rocmSupport"], got["cudaSupport"]) == (True, False)
    assert (got["plainRocm"], got["plainDefault"]) == (True, False)


def test_torch_gpu_targets_are_used_verbatim(nix_repo: NixRunner) -> None:
    # No validation: nixpkgs passes gpuTargets through (ROCM.md "torch").
    got = nix_repo.expr_json(
        f'({rocm()}.python3Packages.torch.override {{ gpuTargets = [ "gfx942" "gfx9999" ]; }})'
        ".gpuTargetString"
    )
    assert got == "gfx942;gfx9999"


def test_torch_with_rocm_and_pkgs_rocm(nix_repo: NixRunner) -> None:
    # python-packages.nix torchWithRocm in a plain set; variants.nix pkgsRocm.
    got = nix_repo.expr_json(
        f'let p = import standin {{ system = "{SYSTEM}"; }};'
        " t = p.python3Packages.torchWithRocm; r = p.pkgsRocm; in {"
        " arch = t.gpuTargetString; rocm = t.rocmSupport; cuda = t.cudaSupport;"
        " set = [ r.config.rocmSupport r.config.cudaSupport ];"
        " }"
    )
    assert got == {
        "arch": ";".join(TORCH_DEFAULT),
        "rocm": True,
        "cuda": False,
        "set": [True, False],
    }


def test_per_target_and_family_scopes(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let p = {rocm()}; r = p.rocmPackages;"
        " arch = s: (p.python3Packages.torch.override { rocmPackages = s; }).gpuTargetString;"
        ' scopes = builtins.filter (n: builtins.match "gfx.*" n != null) (builtins.attrNames r);'
        " in {"
        " inherit scopes;"
        " gfx942 = arch r.gfx942; gfx11 = arch r.gfx11; gfx10 = arch r.gfx10;"
        " local = r.gfx9.clr.localGpuTargets;"
        " nested = r.gfx942 ? gfx1100;"
        " }"
    )
    assert sorted(got["scopes"]) == sorted([*DEFAULT_TARGETS, "gfx9", "gfx10", "gfx11", "gfx12"])
    # torch in rocmPackages.gfx942 targets gfx942 only: the scope's localGpuTargets.
    assert got["gfx942"] == "gfx942"
    assert got["gfx11"] == "gfx1100;gfx1101;gfx1102;gfx1150;gfx1151"
    # gfx10 = [gfx1010 gfx1030]: torch still drops gfx1010.
    assert got["gfx10"] == "gfx1030"
    assert got["local"] == ["gfx906", "gfx908", "gfx90a", "gfx942"]
    # Per-target scopes are attributes of the outer set only (default.nix).
    assert got["nested"] is False


def test_target_dependent_libraries_differ_independent_ones_do_not(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let r = {rocm()}.rocmPackages;"
        " same = n: r.${n}.outPath == r.gfx942.${n}.outPath && r.${n}.outPath == r.gfx11.${n}.outPath;"
        " names = n: [ r.${n}.name r.gfx942.${n}.name r.gfx11.${n}.name ];"
        " in {"
        ' independent = map same [ "clr" "rocminfo" "hipcc" "rocm-runtime" "rocm-comgr" ];'
        ' dependent = map same [ "rocblas" "hipblaslt" "miopen" "hipblas" ];'
        ' rocblas = names "rocblas"; hipblaslt = names "hipblaslt";'
        " ck = [ r.composable_kernel.name r.gfx942.composable_kernel.name ];"
        " targets = [ r.rocblas.gpuTargets r.gfx942.rocblas.gpuTargets ];"
        " }"
    )
    assert got["independent"] == [True] * 5
    assert got["dependent"] == [False] * 4
    # `<pname>${clr.gpuArchSuffix}`: "-" + the scope's targets joined by "-".
    assert got["rocblas"] == [
        "rocblas-7.2.3",
        "rocblas-gfx942-7.2.3",
        "rocblas-gfx1100-gfx1101-gfx1102-gfx1150-gfx1151-7.2.3",
    ]
    assert got["hipblaslt"][1] == "hipblaslt-gfx942-7.2.3"
    assert got["ck"] == ["composable_kernel-7.2.3", "composable_kernel-gfx942-7.2.3"]
    assert got["targets"] == [DEFAULT_TARGETS, ["gfx942"]]


def test_hipblaslt_shim_without_a_supported_target(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let r = {rocm()}.rocmPackages; f = s: {{"
        " inherit (s.hipblaslt) supportsTargetArches;"
        " inherit (s.hipblaslt.drvAttrs.record) GPU_TARGETS HIPBLASLT_ENABLE_DEVICE; };"
        " in { gfx1030 = f r.gfx1030; gfx942 = f r.gfx942; gfx9 = f r.gfx9; }"
    )
    # gfx1030 is not in hipblaslt's list: built for gfx1200 only, device code off.
    assert got["gfx1030"] == {
        "supportsTargetArches": False,
        "GPU_TARGETS": "gfx1200",
        "HIPBLASLT_ENABLE_DEVICE": False,
    }
    assert got["gfx942"] == {
        "supportsTargetArches": True,
        "GPU_TARGETS": "gfx942",
        "HIPBLASLT_ENABLE_DEVICE": True,
    }
    assert got["gfx9"]["GPU_TARGETS"] == "gfx908;gfx90a;gfx942"


def test_composable_kernel_is_broken_without_a_gfx9_target(nix_repo: NixRunner) -> None:
    stderr = failure(nix_repo, f"{rocm()}.rocmPackages.gfx1100.composable_kernel.drvPath")
    assert "Refusing to evaluate package 'composable_kernel-gfx1100-7.2.3'" in stderr
    assert "is marked as broken" in stderr
    # ROCm 7.x MIOpen links CK whatever the targets (withComposableKernel ? true,
    # miopen/default.nix), so MIOpen, and torch through it, fail in a scope without gfx9 ...
    for expr in ("r.gfx1100.miopen.drvPath", "(torch r.gfx1100).drvPath"):
        stderr = failure(
            nix_repo,
            f"let p = {rocm()}; r = p.rocmPackages;"
            " torch = s: p.python3Packages.torch.override { rocmPackages = s; };"
            f" in {expr}",
        )
        assert "composable_kernel-gfx1100-7.2.3' in" in stderr and "marked as broken" in stderr
    # ... unless the scope's MIOpen is built without it (what capplan's stack scope does).
    got = nix_repo.expr_json(
        f"let p = {rocm()}; r = p.rocmPackages;"
        " noCk = r.gfx1100.overrideScope (f: prev: {"
        " miopen = prev.miopen.override { withComposableKernel = false; }; });"
        " torch = s: (p.python3Packages.torch.override { rocmPackages = s; }).drvAttrs.record.rocmDependencies;"
        " in {"
        " gfx942 = builtins.isString r.gfx942.composable_kernel.drvPath;"
        # torch vendors CK when the scope's CK has no MFMA target.
        " gfx1100 = (torch noCk).composable_kernel;"
        " miopen1100 = noCk.miopen.drvAttrs.record.dependencies.composable_kernel;"
        " ckOff = noCk.miopen.drvAttrs.record.MIOPEN_USE_COMPOSABLEKERNEL;"
        # A gfx9 scope without MFMA (gfx906): MIOpen links the scope's CK, torch vendors it.
        " miopen906 = builtins.isString r.gfx906.miopen.drvAttrs.record.dependencies.composable_kernel;"
        " torch906 = (torch r.gfx906).composable_kernel;"
        " }"
    )
    assert got == {
        "gfx942": True,
        "gfx1100": None,
        "miopen1100": None,
        "ckOff": False,
        "miopen906": True,
        "torch906": None,
    }


def test_migraphx_reads_the_default_list_and_links_the_scopes_miopen(
    nix_repo: NixRunner,
) -> None:
    # migraphx/default.nix: gpuTargets ? clr.gpuTargets (not the scope's list); it links the
    # scope's MIOpen, so a scope without gfx9 needs MIOpen without composable_kernel for it too.
    stderr = failure(nix_repo, f"{rocm()}.rocmPackages.gfx1100.migraphx.drvPath")
    assert "composable_kernel-gfx1100-7.2.3' in" in stderr and "marked as broken" in stderr
    got = nix_repo.expr_json(
        f"let r = {rocm()}.rocmPackages;"
        " noCk = r.gfx1100.overrideScope (f: prev: {"
        " miopen = prev.miopen.override { withComposableKernel = false; }; });"
        " in { inScope = noCk.migraphx.drvAttrs.record.GPU_TARGETS;"
        ' miopen = noCk.migraphx.drvAttrs.record.dependencies.miopen == "${noCk.miopen}"; }'
    )
    assert got == {"inScope": ";".join(DEFAULT_TARGETS), "miopen": True}


def test_magma_hip_targets_and_throw(nix_repo: NixRunner) -> None:
    got = nix_repo.expr_json(
        f"let p = {rocm()}; in {{"
        " default = p.magma-hip.drvAttrs.record.GPU_TARGET;"
        ' custom = (p.magma-hip.override { gpuTargets = [ "1030" "942" ]; }).drvAttrs.record.GPU_TARGET;'
        # magma reads clr.gpuTargets, never the scope's localGpuTargets.
        " inScope = (p.magma-hip.override { rocmPackages = p.rocmPackages.gfx942; }).drvAttrs.record.GPU_TARGET;"
        " plain = (import standin {"
        f' system = "{SYSTEM}"; }}).magma-hip.drvAttrs.record.rocmSupport;'
        " }"
    )
    # clr.gpuTargets ∩ magma's VALID_GFXS.
    assert got["default"] == "900,906,908,1010,1030"
    assert got["custom"] == "1030"
    assert got["inScope"] == "900,906,908,1010,1030"
    assert got["plain"] is True
    stderr = failure(
        nix_repo, f'({rocm()}.magma-hip.override {{ gpuTargets = [ "942" ]; }}).drvPath'
    )
    assert "No supported GPU targets specified. Requested GPU targets: 942" in stderr
    # Real nixpkgs intersects the argument as given with the un-prefixed list.
    stderr = failure(
        nix_repo, f'({rocm()}.magma-hip.override {{ gpuTargets = [ "gfx1030" ]; }}).drvPath'
    )
    assert "No supported GPU targets specified. Requested GPU targets: gfx1030" in stderr


def test_cuda_and_rocm_torch_is_refused(nix_repo: NixRunner) -> None:
    stderr = failure(
        nix_repo,
        f"({rocm('allowUnfree = true;')}.python3Packages.torch.override"
        " { cudaSupport = true; }).drvPath",
    )
    assert "Refusing to evaluate package 'python3.13-torch-2.12.0'" in stderr
    assert "is marked as broken" in stderr


# --- ROCm variants from plan.json -------------------------------------------------------------


def _rocm_paths(records: dict[str, Any], name: str) -> dict[str, Any]:
    deps: dict[str, Any] = records[name]["rocmDependencies"]
    return deps


@pytest.mark.parametrize(
    ("gpu", "scope"), [("MI50", "gfx906"), ("MI100", "gfx908"), ("MI300X", "gfx942")]
)
def test_stack_plan_rebuilds_composable_kernel_where_the_scope_links_it(
    nix_repo: NixRunner, gpu: str, scope: str
) -> None:
    # torch links rocmPackages.composable_kernel itself only with an MFMA target
    # (vendorComposableKernel in torch/source/default.nix), but ROCm 7.x MIOpen, which torch
    # links, takes the scope's CK whatever its gfx9 targets (withComposableKernel ? true): the
    # stack plan has a CK job exactly where the stand-in's torch closure holds one.
    from capplan.adapters.kb import load_kb
    from capplan.core.planning.config import config_from_mapping
    from capplan.core.planning.planner import make_plan

    linked = nix_repo.expr_json(
        f"let p = {rocm()}; s = p.rocmPackages.{scope}; in"
        " ((p.python3Packages.torch.override { rocmPackages = s; }).drvAttrs.record"
        ".rocmDependencies.composable_kernel != null"
        " || s.miopen.drvAttrs.record.dependencies.composable_kernel != null)"
    )
    config = config_from_mapping(
        {"fleet": {"gpus": [gpu]}, "packages": {"torch": {}}, "policy": {"rocm_scope": "stack"}},
        origin="test",
    )
    plan = make_plan(load_kb(), config)
    torch = plan.variant(f"torch-{scope}")
    assert torch is not None
    assert linked is True
    assert f"composable_kernel-{scope}" in torch.needs


def test_rocm_variants_build_from_the_plan(nix_rocm: NixRunner) -> None:
    names = [
        "torch-gfx942",
        "torchvision-gfx942",
        "torch-gfx1100",
        "magma-gfx1030",
        "onnxruntime-rocm",
        "rocblas-rocm",
        "torch-sm86",
    ]
    paths = nix_rocm.build([f"legacyPackages.{SYSTEM}.{n}" for n in names])
    records = {a.rsplit(".", 1)[1]: json.loads(Path(p).read_text()) for a, p in paths.items()}
    outs = {a.rsplit(".", 1)[1]: str(p) for a, p in paths.items()}

    t942 = records["torch-gfx942"]
    assert t942["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert (t942["rocmSupport"], t942["cudaSupport"]) == (True, False)
    assert t942["cudaCapabilities"] == []
    assert "TORCH_CUDA_ARCH_LIST" not in t942 and "cudaDependencies" not in t942
    # torchvision of the same instance builds against torch-gfx942's torch.
    assert records["torchvision-gfx942"]["torch"] == outs["torch-gfx942"]

    # "package" scope: the default scope's libraries (all targets, the cache's ones).
    d942 = _rocm_paths(records, "torch-gfx942")
    assert d942["rocblas"].endswith("-rocblas-7.2.3")
    assert d942["rocblas"] == outs["rocblas-rocm"]
    # "stack" scope: every target-dependent library of rocmPackages.gfx1100.
    t1100 = records["torch-gfx1100"]
    assert t1100["PYTORCH_ROCM_ARCH"] == "gfx1100"
    d1100 = _rocm_paths(records, "torch-gfx1100")
    assert d1100["rocblas"].endswith("-rocblas-gfx1100-7.2.3")
    assert d1100["hipblaslt"].endswith("-hipblaslt-gfx1100-7.2.3")
    for lib in ("rocblas", "hipblaslt", "miopen", "hipblas", "magma"):
        assert d1100[lib] != d942[lib], lib
    # Target-independent ones are shared by both stacks.
    for lib in ("clr", "rocminfo", "rocm-runtime", "rocm-comgr"):
        assert d1100[lib] == d942[lib], lib

    # magma-hip with its own spelling of the targets.
    assert records["magma-gfx1030"]["GPU_TARGET"] == "1030"
    # The shared ROCm job: the plain ROCm set, every default target.
    assert records["onnxruntime-rocm"]["CMAKE_HIP_ARCHITECTURES"] == ";".join(DEFAULT_TARGETS)
    # The CUDA variant beside them is unchanged.
    assert records["torch-sm86"]["TORCH_CUDA_ARCH_LIST"] == "8.6"
    assert records["torch-sm86"]["cudaSupport"] is True


def test_stack_variant_magma_is_built_against_the_scope(nix_rocm: NixRunner) -> None:
    # The stack variant's magma-hip is the one of its instance: built against the gfx1100
    # scope's hipblas (no second ROCm stack in the closure), still for clr.gpuTargets ∩ magma's.
    built = nix_rocm.build([f"legacyPackages.{SYSTEM}.torch-gfx1100"])
    torch = json.loads(next(iter(built.values())).read_text())
    magma = json.loads(Path(torch["rocmDependencies"]["magma"]).read_text())
    assert magma["rocmDependencies"]["hipblas"] == torch["rocmDependencies"]["hipblas"]
    assert magma["GPU_TARGET"] == "900,906,908,1010,1030"


def test_amd_variants_share_instances(nix_rocm: NixRunner) -> None:
    # torch-gfx942 and torchvision-gfx942: one instance; onnxruntime-rocm (no overrides)
    # another; torch-gfx1100 (scope gfx1100) a third.
    proc = nix_rocm.flake(
        ["eval"],
        f".#legacyPackages.{SYSTEM}",
        "--json",
        "--apply",
        'v: map (n: v.${n}.drvPath) [ "torch-gfx942" "torchvision-gfx942" ]',
    )
    assert count_imports(proc.stderr) == (1, 0)
    proc = nix_rocm.flake(
        ["eval"],
        f".#legacyPackages.{SYSTEM}",
        "--json",
        "--apply",
        'v: map (n: v.${n}.drvPath) [ "torch-gfx942" "onnxruntime-rocm" "torch-gfx1100" "rocblas-rocm" ]',
    )
    assert count_imports(proc.stderr) == (3, 0)


def test_amd_configs_and_flake_outputs(nix_rocm: NixRunner) -> None:
    got = nix_rocm.eval_json(
        "lib",
        "--impure",
        "--apply",
        f"""lib: let v = lib.mkVariants {{
              nixpkgs = {nix_rocm.standin}; plan = lib.plan; system = "{SYSTEM}"; }};
            in {{ inherit (v.configs) "torch-gfx942" "torch-gfx1100" "torch-sm90"; }}""",
    )
    assert got["torch-gfx942"] == {
        "cudaSupport": False,
        "rocmSupport": True,
        "rocmScope": "package",
        "rocmScopeAttr": None,
        "gpuTargets": ["gfx942"],
    }
    assert got["torch-gfx1100"]["rocmScope"] == "stack"
    assert got["torch-gfx1100"]["rocmScopeAttr"] == "gfx1100"
    # "vendor": "nvidia" with "rocm": null reads as a plan without those keys.
    assert got["torch-sm90"]["cudaCapabilities"] == ["9.0"]
    jobs = nix_rocm.eval_json("hydraJobs", "--apply", "builtins.attrNames")
    for name in ROCM_PLAN["variants"]:
        assert name in jobs


def test_nix_build_torch_gfx942(nix_rocm: NixRunner) -> None:
    # The issue's command, through legacyPackages (as for CUDA variants).
    proc = nix_rocm.flake(["build"], ".#torch-gfx942", "--no-link", "--json")
    out = json.loads(proc.stdout)[0]["outputs"]["out"]
    record = json.loads(Path(out).read_text())
    assert record["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert record["cudaCapabilities"] == [] and record["cudaSupport"] is False


def _eval_plan(runner: NixRunner, plan: dict[str, Any], tail: str) -> Any:
    """`lib.mkVariants` on ``plan`` (passed as JSON, read with builtins.fromJSON), then ``tail``
    on its result ``v``."""
    return runner.flake(
        ["eval"],
        ".#lib",
        "--impure",
        "--json",
        "--apply",
        f"""lib: let plan = builtins.fromJSON {json.dumps(json.dumps(plan))};
                     v = lib.mkVariants {{ nixpkgs = {runner.standin}; inherit plan; system = "{SYSTEM}"; }};
                 in {tail}""",
        check=False,
    )


def _eval_variant(runner: NixRunner, variants: dict[str, Any], name: str) -> Any:
    return _eval_plan(runner, {**ROCM_PLAN, "variants": variants}, f'v.packages."{name}".drvPath')


@pytest.mark.parametrize(
    ("rocm_change", "message"),
    [
        (
            {"scope": "foo"},
            'capplan: plan.json variant torch-gfx942: rocm.scope is "foo", this overlay reads'
            ' "package" or "stack"',
        ),
        (
            {"scope": "stack", "scope_attr": "gfx9999"},
            'capplan: plan.json variant torch-gfx942: rocm.scope_attr "gfx9999" is not a'
            " per-target scope of this nixpkgs' rocmPackages",
        ),
        (
            {"scope": "stack", "scope_attr": "clr"},
            'capplan: plan.json variant torch-gfx942: rocm.scope_attr "clr" is not a per-target scope',
        ),
        (
            {"scope": "stack", "scope_attr": None},
            'capplan: plan.json variant torch-gfx942: rocm.scope "stack" needs rocm.scope_attr',
        ),
        (
            {"overrides": {"no-such-package": ["gfx942"]}},
            'capplan: plan.json variant torch-gfx942: rocm.overrides names "no-such-package"',
        ),
        (
            {"overrides": {"torch": "gfx942"}},
            "capplan: plan.json variant torch-gfx942: rocm.overrides must map package names",
        ),
        (
            {"arguments": {"llama-cpp": "rocmGpuTargets"}},
            "capplan: plan.json variant torch-gfx942: rocm.arguments must map names of"
            " rocm.overrides",
        ),
        (
            # magma-hip's recipe has no rocmGpuTargets: said plainly, before Nix's "called with
            # unexpected argument" (or, for a recipe with `...`, nothing at all).
            {
                "overrides": {"torch": ["gfx942"], "magma-hip": ["942"]},
                "arguments": {"magma-hip": "rocmGpuTargets"},
            },
            "capplan: plan.json variant torch-gfx942: magma-hip's recipe takes no argument"
            ' rocmGpuTargets (it takes ["config",',
        ),
        (
            {"arguments": {"torch": 3}},
            "capplan: plan.json variant torch-gfx942: rocm.arguments must map names of"
            " rocm.overrides",
        ),
        (
            {"scope_overrides": {"miopen": {"withComposableKernel": "no"}}},
            "capplan: plan.json variant torch-gfx942: rocm.scope_overrides must map ROCm"
            " library names to objects of boolean arguments",
        ),
        (
            {"scope_overrides": {"miopen": {"withComposableKernel": False}}},
            'capplan: plan.json variant torch-gfx942: rocm.scope_overrides needs rocm.scope "stack"',
        ),
        (
            {
                "scope": "stack",
                "scope_attr": "gfx942",
                "scope_overrides": {"no-such-library": {"x": False}},
            },
            'capplan: plan.json variant torch-gfx942: rocm.scope_overrides names "no-such-library",'
            " which rocmPackages.gfx942 does not have",
        ),
    ],
)
def test_bad_rocm_data_fails_clearly(
    nix_rocm: NixRunner, rocm_change: dict[str, Any], message: str
) -> None:
    variant = ROCM_PLAN["variants"]["torch-gfx942"]
    bad = {**variant, "rocm": {**variant["rocm"], **rocm_change}}
    variants = {"torch-gfx942": bad, "torch-sm86": ROCM_PLAN["variants"]["torch-sm86"]}
    proc = _eval_variant(nix_rocm, variants, "torch-gfx942")
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    # The bad variant fails alone: its CUDA sibling still evaluates.
    assert _eval_variant(nix_rocm, variants, "torch-sm86").returncode == 0


def test_bad_vendor_fails_clearly(nix_rocm: NixRunner) -> None:
    variant = {**ROCM_PLAN["variants"]["torch-sm86"], "vendor": "intel"}
    proc = _eval_variant(nix_rocm, {"torch-sm86": variant}, "torch-sm86")
    assert proc.returncode != 0
    assert (
        'capplan: plan.json variant torch-sm86: vendor is "intel", this overlay reads'
        ' "nvidia", "amd" or null (CPU-side)' in proc.stderr
    )


def test_nvidia_variant_with_rocm_data_fails_clearly(nix_rocm: NixRunner) -> None:
    variant = {**ROCM_PLAN["variants"]["torch-sm86"], "rocm": {"scope": "package"}}
    proc = _eval_variant(nix_rocm, {"torch-sm86": variant}, "torch-sm86")
    assert proc.returncode != 0
    assert "capplan: plan.json variant torch-sm86: an NVIDIA variant has rocm" in proc.stderr


def test_overlay_builds_amd_variants_in_a_rocm_set(nix_rocm: NixRunner) -> None:
    # Through lib.mkOverlay in a user's CUDA set: the AMD variant's instance is that set's config
    # with CUDA off and ROCm on (real pkgsRocm), so torch is not CUDA+ROCm broken; the CUDA
    # variant beside it keeps rocmSupport off.
    got = nix_rocm.eval_json(
        "lib",
        "--impure",
        "--apply",
        f"""lib: let pkgs = import {nix_rocm.standin} {{
                  system = "{SYSTEM}";
                  config = {{ cudaSupport = true; allowUnfree = true; }};
                  overlays = [ (lib.mkOverlay lib.plan) ];
                }};
                r = n: pkgs.capplan.packages.${{n}}.drvAttrs.record;
            in {{ amd = r "torch-gfx942"; cuda = r "torch-sm86"; }}""",
    )
    rec = got["amd"]
    assert rec["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert (rec["cudaSupport"], rec["rocmSupport"]) == (False, True)
    assert got["cuda"]["TORCH_CUDA_ARCH_LIST"] == "8.6"


def test_dispatch_refuses_amd_variants(nix_rocm: NixRunner) -> None:
    plan = {
        **ROCM_PLAN,
        "dispatch": {"packages": {"torch": {"variants": [{"name": "torch-gfx942"}]}}},
    }
    proc = _eval_plan(nix_rocm, plan, "builtins.attrNames v.dispatch")
    assert proc.returncode != 0
    assert (
        "capplan: plan.json dispatch lists the AMD variant torch-gfx942; dispatch wrappers are"
        " CUDA-only" in proc.stderr
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rocm": None}, 'vendor "amd" needs a "rocm" object, got null'),
        ({"gpu_targets": ["gfx942"]}, "an AMD variant takes its targets from rocm.overrides"),
        (
            {"rocm": {"scope": "package", "scope_attr": "gfx942", "targets": [], "overrides": {}}},
            'rocm.scope "package" takes no rocm.scope_attr, got "gfx942"',
        ),
        (
            {
                "rocm": {
                    "scope": "package",
                    "scope_attr": None,
                    "targets": "gfx942",
                    "overrides": {},
                }
            },
            'rocm.targets must be a list of strings, got "gfx942"',
        ),
    ],
)
def test_bad_amd_variant_fails_clearly(
    nix_rocm: NixRunner, change: dict[str, Any], message: str
) -> None:
    variant = {**ROCM_PLAN["variants"]["torch-gfx942"], **change}
    proc = _eval_variant(nix_rocm, {"torch-gfx942": variant}, "torch-gfx942")
    assert proc.returncode != 0
    assert f"capplan: plan.json variant torch-gfx942: {message}" in proc.stderr, proc.stderr
