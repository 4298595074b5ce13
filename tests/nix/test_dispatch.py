"""`<package>-dispatch` outputs with real Nix against the stand-in: one closure, the right variant.

Each test copy gets its own capplan.toml and `capplan generate`s its plan.json there, so the
expectations follow the plan. Running the dispatch output's `bin/python` under a fake sysfs tree
must start the Python environment of the variant for that GPU: the stand-in's environments
export NIX_PYTHONPATH with the store paths of the packages they hold (python-interpreter.nix).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from nixhelpers import NixRunner, copy_tree

from capplan.cli.main import cli

pytestmark = pytest.mark.nix

CONFIG = """
[fleet]
gpus = ["A100", "RTX 3090"]
[packages.torch]
[packages.torchvision]
[packages.cupy]
[dispatch]
fallback = "{fallback}"
"""

# PCI device ids (the PCI ID repository): GA102 RTX 3090, GA100 A100 SXM4 40GB, AD104 L4.
RTX_3090, A100, L4, UNKNOWN = "0x2204", "0x20b0", "0x27b8", "0xffff"


def _generate(root: Path, fallback: str) -> None:
    (root / "capplan.toml").write_text(CONFIG.format(fallback=fallback))
    old = Path.cwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, ["generate"], catch_exceptions=False)
    finally:
        os.chdir(old)
    assert result.exit_code == 0, result.output


def _copy(base: Path, fallback: str) -> NixRunner:
    if not (Path("/usr/bin/python3").is_file()):
        pytest.skip("the stand-in's python3 runs /usr/bin/python3, which this machine lacks")
    copy_tree(base)
    _generate(base, fallback)
    return NixRunner(base)


@pytest.fixture(scope="module")
def dispatch_error(
    tmp_path_factory: pytest.TempPathFactory, nix_bin: str
) -> Iterator[tuple[NixRunner, Path]]:
    nix = _copy(tmp_path_factory.mktemp("dispatch-error"), "error")
    yield nix, _build(nix, "torch-dispatch")


def _build(nix: NixRunner, name: str) -> Path:
    nix.flake(["build"], f".#{name}", "--no-link")
    return Path(nix.out_path(name))


def _sysfs(root: Path, device: str) -> Path:
    folder = root / "bus" / "pci" / "devices" / "0000:01:00.0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vendor").write_text("0x10de\n")
    (folder / "class").write_text("0x030000\n")
    (folder / "device").write_text(device + "\n")
    return root


def _start(out: Path, sysfs: Path) -> subprocess.CompletedProcess[str]:
    code = "import os; print(os.environ['CAPPLAN_DISPATCH_VARIANT'], os.environ['NIX_PYTHONPATH'])"
    return subprocess.run(
        [str(out / "bin" / "python"), "-c", code],
        env={
            "PATH": "/usr/bin:/bin",
            "CAPPLAN_SYSFS_ROOT": str(sysfs),
            "CAPPLAN_NVML": "0",
            "CAPPLAN_NVIDIA_SMI": "/nonexistent/nvidia-smi",
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("device", "variant"),
    [(RTX_3090, "torch-sm86"), (A100, "torch-sm80"), (L4, "torch-sm86")],
    ids=["rtx3090", "a100", "l4-compatible"],
)
def test_bin_python_starts_the_variant_for_the_gpu(
    dispatch_error: tuple[NixRunner, Path], tmp_path: Path, device: str, variant: str
) -> None:
    nix, out = dispatch_error
    done = _start(out, _sysfs(tmp_path, device))
    assert done.returncode == 0, done.stderr
    name, pythonpath = done.stdout.split()
    assert name == variant
    # The environment holds exactly the torch derivation the flake builds as that variant.
    assert pythonpath == nix.out_path(variant)


def test_unknown_gpu_follows_the_error_fallback(
    dispatch_error: tuple[NixRunner, Path], tmp_path: Path
) -> None:
    _, out = dispatch_error
    done = _start(out, _sysfs(tmp_path, UNKNOWN))
    assert done.returncode == 10
    assert "10de:ffff" not in done.stderr.splitlines()[-1]  # the last line is the one error
    assert "no NVIDIA GPU found" in done.stderr and "CAPPLAN_CAPABILITY" in done.stderr


def test_unknown_gpu_follows_a_variant_fallback(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, nix_bin: str
) -> None:
    nix = _copy(tmp_path_factory.mktemp("dispatch-variant"), "torch-sm80")
    out = _build(nix, "torch-dispatch")
    done = _start(out, _sysfs(tmp_path, UNKNOWN))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "torch-sm80"


def test_variants_are_referenced_not_copied(dispatch_error: tuple[NixRunner, Path]) -> None:
    nix, out = dispatch_error
    refs = subprocess.run(
        ["nix-store", "--query", "--references", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    envs = [r for r in refs if r.endswith("-env")]
    assert len(envs) == 2  # the sm80 and sm86 Python environments
    closure = subprocess.run(
        ["nix-store", "--query", "--requisites", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {nix.out_path("torch-sm80"), nix.out_path("torch-sm86")} <= set(closure)
    # The output itself is the wrappers, the selector and its table (source and compiled).
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert size < 256_000


def test_no_dispatch_output_without_per_capability_variants(
    dispatch_error: tuple[NixRunner, Path],
) -> None:
    nix, _ = dispatch_error
    names = nix.eval_json("legacyPackages.x86_64-linux", "--apply", "builtins.attrNames")
    assert "torch-dispatch" in names
    assert "cupy-dispatch" not in names  # cupy is capability-independent: nothing to choose


def test_overlay_exposes_dispatch(dispatch_error: tuple[NixRunner, Path]) -> None:
    nix, _ = dispatch_error
    found = nix.expr_json(
        'let pkgs = import standin { system = "x86_64-linux"; '
        'overlays = [ (import (root + "/overlays")) ]; }; in '
        "{ names = builtins.attrNames pkgs.capplan.dispatch; "
        "drv = pkgs.capplan.dispatch.torch.drvPath; }"
    )
    assert found["names"] == ["torch", "torchvision"]
    assert found["drv"].endswith("-torch-dispatch.drv")


def test_store_optimise_links_files_identical_across_outputs(
    dispatch_error: tuple[NixRunner, Path],
) -> None:
    """`nix-store --optimise` hard-links byte-identical files across store paths (here the
    selector both dispatch outputs carry; in real variants, their host-only libraries)."""
    nix, torch = dispatch_error
    vision = _build(nix, "torchvision-dispatch")
    share = "share/capplan-dispatch/capplan_selector.py"
    assert (torch / share).read_bytes() == (vision / share).read_bytes()
    subprocess.run(["nix-store", "--optimise"], check=True, capture_output=True, timeout=600)
    assert (torch / share).stat().st_ino == (vision / share).stat().st_ino
