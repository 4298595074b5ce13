"""CPU levels in Nix (issue 23, items 5 and 6): a CPU-level variant rebuilds only its package,
through the package's own arguments or compiler flags for that one package, never `gcc.arch`
on the whole set; `<package>-hwcaps` lays per-level builds out for glibc-hwcaps.

The plan is made by the real planner from a capplan.toml with `[fleet] cpus` and the real CPU
knowledge base, written with `capplan generate`, and built with real Nix against the stand-in,
whose gromacs and openblas follow the recipes kb/cpu_packages.json cites
(pkgs/applications/science/molecular-dynamics/gromacs/default.nix: `cpuAcceleration`, GMX_SIMD;
pkgs/by-name/op/openblas/package.nix: `target`, `dynamicArch`, a lib/ output).
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
[packages.openblas]
"""


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
    assert sorted(variants) == [
        "gromacs-sapphirerapids",
        "gromacs-x86-64-v3",
        "llama-cpp-sapphirerapids",
        "llama-cpp-x86-64-v3",
        "openblas",
    ]
    assert all(v["vendor"] is None for v in variants.values())
    assert variants["openblas"]["cpu"] is None  # run-time dispatch: one generic build


def test_nix_build_cpu_variants_rebuild_only_their_package(
    nix_cpu: tuple[NixRunner, dict[str, Any]],
) -> None:
    runner, _ = nix_cpu
    names = ["gromacs-x86-64-v3", "gromacs-sapphirerapids", "llama-cpp-x86-64-v3", "openblas"]
    paths = runner.build([f"legacyPackages.{SYSTEM}.{n}" for n in names])
    out = {a.rsplit(".", 1)[1]: p for a, p in paths.items()}
    gromacs3 = json.loads((out["gromacs-x86-64-v3"] / "bin" / "gmx").read_text())
    gromacs_spr = json.loads((out["gromacs-sapphirerapids"] / "bin" / "gmx").read_text())
    # The package's own argument: GROMACS' SIMD level per CPU target (x86-64-v3 has AVX2 and
    # FMA but no AVX-512; Sapphire Rapids has AVX-512).
    assert gromacs3["GMX_SIMD"] == "AVX2_256" and "NIX_CFLAGS_COMPILE" not in gromacs3
    assert gromacs_spr["GMX_SIMD"] == "AVX_512"
    # Compiler flags for that one package (llama-cpp's recipe fixes its CPU code at build time).
    llama = json.loads(out["llama-cpp-x86-64-v3"].read_text())
    assert llama["NIX_CFLAGS_COMPILE"] == "-march=x86-64-v3 -mtune=generic"
    # The generic build is nixpkgs' own: the same store path as the plain set's openblas.
    plain = runner.expr_json(
        f'"${{(import {runner.standin} {{ system = "{SYSTEM}"; }}).openblas}}"'
    )
    assert str(out["openblas"]) == plain


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
        (path,) = runner.build([f"legacyPackages.{SYSTEM}.openblas-hwcaps"]).values()
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
                 plan = builtins.fromJSON {json.dumps(json.dumps(broken))}; }}
              ).packages."gromacs-x86-64-v3".drvPath""",
        check=False,
    )
    assert proc.returncode != 0
    assert "capplan: plan.json variant gromacs-x86-64-v3:" in proc.stderr
    assert message.replace("\\", "") in proc.stderr.replace("\\", ""), proc.stderr
