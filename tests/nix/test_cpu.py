"""CPU levels in Nix (issue 23, items 5 and 6): a CPU-level variant rebuilds only its package,
through the package's own arguments or compiler flags for that one package, never `gcc.arch`
on the whole set; `<package>-hwcaps` lays per-level builds out for glibc-hwcaps.

The plan is made by the real planner from a capplan.toml with `[fleet] cpus` and the real CPU
knowledge base, written with `capplan generate`, and built with real Nix against the stand-in,
whose gromacs and openblas follow the recipes kb/cpu_packages.json cites
(pkgs/applications/science/molecular-dynamics/gromacs/default.nix: `cpuAcceleration`, GMX_SIMD;
pkgs/by-name/op/openblas/package.nix: `target`, `dynamicArch`, a lib/ output).

Issue 30: llama-cpp dispatches its CPU code at run time (`cpuArchDynamicDispatch ? true`), so it
gets one generic build; every CPU-level derivation requires its `gccarch-<arch>` system feature
(make-derivation.nix), so a builder that does not declare it refuses to build it; a CPU-level
gromacs is the CPU gromacs even in a CUDA-enabled set (`enableCuda ? config.cudaSupport`); the
KB's onednn exists in the stand-in, and a package the pinned nixpkgs lacks is one catchable
capplan line.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from nixhelpers import SYSTEM, NixRunner, copy_tree

from capplan.cli.main import cli

pytestmark = pytest.mark.nix

CONFIG = """\
[fleet]
cpus = ["x86-64-v3", "sapphirerapids"]

[packages.gromacs]
[packages.llama-cpp]
[packages.onednn]
[packages.openblas]
"""

# What a builder whose CPU runs both levels declares (ci github sets it after checking the
# runner's /proc/cpuinfo).
FEATURES = ("--option", "extra-system-features", "gccarch-x86-64-v3 gccarch-sapphirerapids")


def _generate(config: Path, output: Path) -> dict[str, Any]:
    result = CliRunner().invoke(
        cli, ["generate", "--config", str(config), "--output", str(output)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.stderr
    plan: dict[str, Any] = json.loads(output.read_text())
    return plan


@pytest.fixture(scope="session")
def nix_cpu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NixRunner, dict[str, Any]]]:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    base = tmp_path_factory.mktemp("repo-cpu")
    copy_tree(base)
    (base / "capplan.toml").write_text(CONFIG)
    plan = _generate(base / "capplan.toml", base / "overlays" / "plan.json")
    yield NixRunner(base), plan


def test_the_plan_has_per_level_variants_of_compile_time_packages_only(
    nix_cpu: tuple[NixRunner, dict[str, Any]],
) -> None:
    _, plan = nix_cpu
    variants = plan["variants"]
    # llama-cpp, onednn and openblas pick their CPU code at run time: one generic build each.
    assert sorted(variants) == [
        "gromacs-sapphirerapids",
        "gromacs-x86-64-v3",
        "llama-cpp",
        "onednn",
        "openblas",
    ]
    assert all(v["vendor"] is None for v in variants.values())
    for generic in ("llama-cpp", "onednn", "openblas"):
        assert variants[generic]["cpu"] is None
    assert variants["gromacs-sapphirerapids"]["cpu"]["gccarch"] == "sapphirerapids"


def _build(runner: NixRunner, names: list[str], *extra: str) -> dict[str, Path]:
    attrs = [f"legacyPackages.{SYSTEM}.{n}" for n in names]
    top = "legacyPackages"
    apply = "o: [ " + " ".join(f"o.{a.split('.', 1)[1]}.outPath" for a in attrs) + " ]"
    outs = json.loads(runner.flake(["eval"], f".#{top}", "--json", "--apply", apply).stdout)
    runner.flake(["build"], *[f".#{a}" for a in attrs], "--no-link", *extra)
    return {n: Path(o) for n, o in zip(names, outs, strict=True)}


def test_nix_build_cpu_variants_rebuild_only_their_package(
    nix_cpu: tuple[NixRunner, dict[str, Any]],
) -> None:
    runner, _ = nix_cpu
    names = ["gromacs-x86-64-v3", "gromacs-sapphirerapids", "llama-cpp", "onednn", "openblas"]
    out = _build(runner, names, *FEATURES)
    gromacs3 = json.loads((out["gromacs-x86-64-v3"] / "bin" / "gmx").read_text())
    gromacs_spr = json.loads((out["gromacs-sapphirerapids"] / "bin" / "gmx").read_text())
    # The package's own argument: GROMACS' SIMD level per CPU target (x86-64-v3 has AVX2 and
    # FMA but no AVX-512; Sapphire Rapids has AVX-512), and the CPU build (enableCuda false).
    assert gromacs3["GMX_SIMD"] == "AVX2_256" and "NIX_CFLAGS_COMPILE" not in gromacs3
    assert gromacs_spr["GMX_SIMD"] == "AVX_512"
    assert gromacs3["enableCuda"] is False and "CMAKE_CUDA_ARCHITECTURES" not in gromacs3
    # The generic builds are nixpkgs' own: the same store paths as the plain set's.
    plain = runner.expr_json(
        f"""let p = import {runner.standin} {{ system = "{SYSTEM}"; }};
            in [ "${{p.llama-cpp}}" "${{p.onednn}}" "${{p.openblas}}" ]"""
    )
    assert [str(out[n]) for n in ("llama-cpp", "onednn", "openblas")] == plain
    # llama-cpp's one build holds every ggml CPU variant and loads the best at run time.
    llama = json.loads(out["llama-cpp"].read_text())
    assert llama["GGML_CPU_ALL_VARIANTS"] is True and llama["GGML_BACKEND_DL"] is True


def test_cpu_level_derivations_require_their_gccarch_feature(
    nix_cpu: tuple[NixRunner, dict[str, Any]],
) -> None:
    """What Hydra and nix-eval-jobs read is the derivation: its requiredSystemFeatures carry
    `gccarch-<arch>` (the recipe's own features kept), and Nix refuses to build it on a builder
    that does not declare the feature."""
    runner, _ = nix_cpu
    got = runner.eval_json(
        f"legacyPackages.{SYSTEM}",
        "--apply",
        """p: {
             spr = p.gromacs-sapphirerapids.requiredSystemFeatures;
             v3 = p.gromacs-x86-64-v3.requiredSystemFeatures;
             generic = p.openblas.requiredSystemFeatures;
             drv = p.gromacs-sapphirerapids.drvPath;
           }""",
    )
    assert got["spr"] == ["gccarch-sapphirerapids"]
    assert got["v3"] == ["gccarch-x86-64-v3"]
    assert got["generic"] == []
    shown = runner.run(["show-derivation", got["drv"]]).stdout
    (drv,) = json.loads(shown).values()
    assert drv["env"]["requiredSystemFeatures"] == "gccarch-sapphirerapids"
    # --rebuild: the output exists from the build test; building it again asks for a builder.
    refused = runner.flake(
        ["build"],
        f".#legacyPackages.{SYSTEM}.gromacs-sapphirerapids",
        "--no-link",
        "--rebuild",
        check=False,
    )
    assert refused.returncode != 0
    assert "gccarch-sapphirerapids" in refused.stderr, refused.stderr


def _nix_string(plan: dict[str, Any]) -> str:
    """The plan as a Nix string for an --apply expression, without its "machine" table (the
    variant builder reads none of it, and the whole plan.json is past Linux's 128 KiB limit on
    one command-line argument)."""
    return json.dumps(json.dumps({k: v for k, v in plan.items() if k != "machine"}))


def test_cpu_level_gromacs_stays_a_cpu_build_in_a_cuda_enabled_set(
    nix_cpu: tuple[NixRunner, dict[str, Any]],
) -> None:
    # gromacs 2026.x: `enableCuda ? config.cudaSupport`. The same plan applied to a set made
    # with cudaSupport = true: plain gromacs there is a CUDA build, the CPU-level variant is not.
    runner, plan = nix_cpu
    got = runner.flake(
        ["eval"],
        ".#lib",
        "--impure",
        "--json",
        "--apply",
        f"""lib: let
              v = lib.mkVariants {{ nixpkgs = {runner.standin}; system = "{SYSTEM}";
                    config = {{ cudaSupport = true; allowUnfree = true; }};
                    plan = builtins.fromJSON {_nix_string(plan)}; }};
              cuda = (import {runner.standin} {{ system = "{SYSTEM}";
                       config = {{ cudaSupport = true; allowUnfree = true; }}; }}).gromacs;
            in {{ variant = v.packages."gromacs-sapphirerapids".drvAttrs.record;
                  plain = cuda.drvAttrs.record; }}""",
    )
    records = json.loads(got.stdout)
    assert records["plain"]["enableCuda"] is True and "CMAKE_CUDA_ARCHITECTURES" in records["plain"]
    assert records["variant"]["enableCuda"] is False
    assert records["variant"]["GMX_SIMD"] == "AVX_512"


def test_a_package_the_pinned_nixpkgs_lacks_is_one_catchable_line(
    nix_cpu: tuple[NixRunner, dict[str, Any]],
) -> None:
    # Nix's own "attribute 'x' missing" escapes builtins.tryEval (it is not a throw): a check
    # that forces every variant would fail as a whole. The variant builder throws instead.
    runner, plan = nix_cpu
    missing = {**plan["variants"]["onednn"], "attr": ["onednn-gone"], "package": "onednn-gone"}
    broken = {**plan, "variants": {"onednn-gone": missing}}
    got = runner.flake(
        ["eval"],
        ".#lib",
        "--impure",
        "--json",
        "--apply",
        f"""lib: let v = lib.mkVariants {{ nixpkgs = {runner.standin}; system = "{SYSTEM}";
                 plan = builtins.fromJSON {_nix_string(broken)}; }};
              in (builtins.tryEval v.packages."onednn-gone".drvPath).success""",
    )
    assert json.loads(got.stdout) is False
    proc = runner.flake(
        ["eval"],
        ".#lib",
        "--impure",
        "--apply",
        f"""lib: (lib.mkVariants {{ nixpkgs = {runner.standin}; system = "{SYSTEM}";
                 plan = builtins.fromJSON {_nix_string(broken)}; }}
              ).packages."onednn-gone".drvPath""",
        check=False,
    )
    assert proc.returncode != 0
    assert "capplan: plan.json asks for onednn-gone, which this nixpkgs does not have" in (
        proc.stderr
    )


def test_variants_evaluate_covers_every_cpu_variant(
    nix_cpu: tuple[NixRunner, dict[str, Any]],
) -> None:
    # The flake's check forces every variant's .drv: onednn (in the CPU knowledge base) is in
    # the stand-in, so the check no longer dies on "attribute 'onednn' missing".
    runner, plan = nix_cpu
    out = runner.build([f"checks.{SYSTEM}.variants-evaluate"])
    listed = json.loads(out[f"checks.{SYSTEM}.variants-evaluate"].read_text())
    assert sorted(listed) == sorted(plan["variants"])


def test_cflags_go_where_the_recipe_keeps_them(nix_cpu: tuple[NixRunner, dict[str, Any]]) -> None:
    # make-derivation.nix refuses NIX_CFLAGS_COMPILE both in `env` and at top level: the
    # variant builder appends where the recipe keeps it, else puts it in `env`.
    runner, _ = nix_cpu
    got = runner.expr_json(
        f"""let
              p = import {runner.standin} {{ system = "{SYSTEM}"; }};
              add = (import {runner.root}/pkgs/variant.nix).addCflags [ "-march=x86-64-v3" ];
              mk = attrs: p.stdenv.mkDerivation ({{ pname = "x"; version = "1"; }} // attrs);
              flags = d: (d.overrideAttrs add).drvAttrs.record.NIX_CFLAGS_COMPILE;
            in {{
              top = flags (mk {{ NIX_CFLAGS_COMPILE = "-O3"; }});
              env = flags (mk {{ env.NIX_CFLAGS_COMPILE = "-g"; }});
              none = flags (mk {{ }});
              kept = ((mk {{ env.FOO = "1"; }}).overrideAttrs add).drvAttrs.record.NIX_CFLAGS_COMPILE;
            }}"""
    )
    assert got == {
        "top": "-O3 -march=x86-64-v3",
        "env": "-g -march=x86-64-v3",
        "none": "-march=x86-64-v3",
        "kept": "-march=x86-64-v3",
    }
    both = runner.expr(
        f"""((import {runner.standin} {{ system = "{SYSTEM}"; }}).stdenv.mkDerivation {{
              pname = "x"; version = "1"; NIX_CFLAGS_COMPILE = "-O3"; env.NIX_CFLAGS_COMPILE = "-g";
            }}).drvPath""",
        check=False,
    )
    assert both.returncode != 0
    assert (
        "The `env` attribute set cannot contain any attributes passed to derivation" in both.stderr
    )


def test_hwcaps_lays_out_per_level_builds(nix_cpu: tuple[NixRunner, dict[str, Any]]) -> None:
    # openblas built per psABI level (its own target argument, DYNAMIC_ARCH off) and laid out
    # for glibc-hwcaps: lib/ is the generic build, lib/glibc-hwcaps/<level>/ each level's.
    runner, plan = nix_cpu
    level = {
        "attr": ["openblas"],
        "capabilities": [],
        "cuda": None,
        "cuda_set": None,
        "forward_compat": False,
        "gpu_targets": [],
        "independent": True,
        "package": "openblas",
        "system": SYSTEM,
        "vendor": None,
    }
    variants = {
        **plan["variants"],
        "openblas-x86-64-v3": level
        | {
            "cpu": {
                "target": "x86-64-v3",
                "arch": "x86_64",
                "mechanism": "override",
                "override": {"target": "HASWELL", "dynamicArch": False},
                "cflags": [],
                "gccarch": "x86-64-v3",
            }
        },
        "openblas-x86-64-v4": level
        | {
            "cpu": {
                "target": "x86-64-v4",
                "arch": "x86_64",
                "mechanism": "override",
                "override": {"target": "SKYLAKEX", "dynamicArch": False, "enableAVX512": True},
                "cflags": [],
                "gccarch": "x86-64-v4",
            }
        },
        "openblas-hwcaps": level
        | {
            "cpu": {
                "hwcaps": {"x86-64-v3": "openblas-x86-64-v3", "x86-64-v4": "openblas-x86-64-v4"}
            }
        },
    }
    (runner.root / "overlays" / "plan.json").write_text(json.dumps({**plan, "variants": variants}))
    try:
        (path,) = _build(
            runner,
            ["openblas-hwcaps"],
            "--option",
            "extra-system-features",
            "gccarch-x86-64-v3 gccarch-x86-64-v4",
        ).values()
    finally:
        (runner.root / "overlays" / "plan.json").write_text(json.dumps(plan))
    generic = json.loads((path / "lib" / "libopenblas.so.0").read_text())
    v3 = json.loads((path / "lib" / "glibc-hwcaps" / "x86-64-v3" / "libopenblas.so.0").read_text())
    v4 = json.loads((path / "lib" / "glibc-hwcaps" / "x86-64-v4" / "libopenblas.so.0").read_text())
    assert (generic["TARGET"], generic["DYNAMIC_ARCH"]) == ("ATHLON", True)
    assert (v3["TARGET"], v3["DYNAMIC_ARCH"]) == ("HASWELL", False)
    assert (v4["TARGET"], v4["NO_AVX512"]) == ("SKYLAKEX", False)
    assert sorted(os.listdir(path / "lib" / "glibc-hwcaps")) == ["x86-64-v3", "x86-64-v4"]
    assert (path / "include" / "cblas.h").is_file()  # the rest is the generic build's


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"cpu": {"target": "x86-64-v3", "mechanism": "gcc-arch", "override": {}, "cflags": []}},
            'cpu.mechanism is "gcc-arch"',
        ),
        (
            {"cpu": {"target": "x86-64-v3", "mechanism": "cflags", "override": {}, "cflags": []}},
            'cpu.mechanism \\"cflags\\" needs compiler flags',
        ),
        ({"cpu": {"hwcaps": {"x86-64-v9": "gromacs-x86-64-v3"}}}, "cpu.hwcaps must map"),
        ({"capabilities": ["8.6"]}, "a CPU-side variant (vendor null) takes no GPU targets"),
        ({"attr": ["rocmPackages", "rocblas"]}, "attr must be a top-level package"),
        (
            {
                "cpu": {
                    "target": "x86-64-v3",
                    "mechanism": "override",
                    "override": {"a": 1},
                    "cflags": [],
                }
            },
            "cpu.gccarch must be GCC's name of the target",
        ),
    ],
)
def test_bad_cpu_data_fails_clearly(
    nix_cpu: tuple[NixRunner, dict[str, Any]], change: dict[str, Any], message: str
) -> None:
    runner, plan = nix_cpu
    variant = plan["variants"]["gromacs-x86-64-v3"] | change
    broken = {**plan, "variants": {"gromacs-x86-64-v3": variant}}
    proc = runner.flake(
        ["eval"],
        ".#lib",
        "--impure",
        "--json",
        "--apply",
        f"""lib: (lib.mkVariants {{ nixpkgs = {runner.standin}; system = "{SYSTEM}";
                 plan = builtins.fromJSON {_nix_string(broken)}; }}
              ).packages."gromacs-x86-64-v3".drvPath""",
        check=False,
    )
    assert proc.returncode != 0
    assert "capplan: plan.json variant gromacs-x86-64-v3:" in proc.stderr
    assert message.replace("\\", "") in proc.stderr.replace("\\", ""), proc.stderr
