"""`capplan nixpkgs check` and generate's nixpkgs stamp, with the real nix against the stand-in
and against copies of it made to drift on purpose (an argument removed, a default target list
changed, composable_kernel broken)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from nixhelpers import REPO

from capplan.adapters.nixpkgs import LockedNixpkgs

pytestmark = pytest.mark.skipif(
    shutil.which("nix") is None, reason="nix not found on PATH (install Debian's nix-bin)"
)

STANDIN = REPO / "tests" / "nixpkgs"
FLEET = """
[fleet]
gpus = ["MI300X", "Radeon RX 7900 XTX", "RTX 4090"]
cpus = ["x86-64-v3", "sapphirerapids"]
[packages.torch]
[packages.magma]
[packages.llama-cpp]
[packages.gromacs]
[policy]
system = "x86_64-linux"
rocm_scope = "stack"
"""


def capplan(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "planner" / "src"), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "capplan", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "capplan.toml").write_text(FLEET)
    return folder


def standin_copy(tmp_path: Path, name: str) -> Path:
    copy = tmp_path / name
    shutil.copytree(STANDIN, copy)
    return copy


def plant(path: Path, pattern: str, replacement: str, count: int = 0) -> None:
    text = path.read_text()
    changed, n = re.subn(pattern, replacement, text, count=count, flags=re.S)
    assert n, f"the drift was not planted: {pattern!r} not in {path.name}"
    path.write_text(changed)


def test_the_stand_in_agrees_with_the_knowledge_base(project: Path) -> None:
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(STANDIN), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["agrees"] is True and data["drift"] == []
    # A checkout is imported where it is (no copy into the store, so no narHash).
    assert data["source"]["path"] == str(STANDIN) and data["source"]["narHash"] is None
    # A flake reference goes through builtins.getFlake, which locks it.
    locked = f"path:{STANDIN}?narHash={quote(_metadata(STANDIN)['locked']['narHash'], safe='')}"
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", locked, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["source"]["narHash"].startswith("sha256-")


def test_a_removed_argument_is_found(project: Path, tmp_path: Path) -> None:
    drifted = standin_copy(tmp_path, "no-gpu-targets")
    # torch's recipe stops taking gpuTargets (every use renamed, so it still evaluates).
    plant(drifted / "torch.nix", r"(?<![.\w])gpuTargets(?!\w)", "gpuTargetList")
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(drifted))
    assert result.returncode == 17, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "torch: recipe argument gpuTargets of python3Packages.torch: knowledge base says it takes"
    )
    assert "gpuTargetList" in lines[0]
    err = [line for line in result.stderr.splitlines() if line.strip()]
    assert err == [err[0]] and err[0].startswith(f"capplan: error: nixpkgs path:{drifted} ")
    assert "disagrees with the knowledge base in 1 fact" in err[0]


def test_a_removed_cpu_argument_is_found(project: Path, tmp_path: Path) -> None:
    drifted = standin_copy(tmp_path, "no-cpu-acceleration")
    plant(drifted / "gromacs.nix", r"(?<![.\w])cpuAcceleration(?!\w)", "simdLevel")
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(drifted), "--json")
    assert result.returncode == 17, result.stdout + result.stderr
    (drift,) = json.loads(result.stdout)["drift"]
    assert drift["package"] == "gromacs"
    assert drift["fact"] == "recipe argument cpuAcceleration of gromacs"
    assert "simdLevel" in drift["nixpkgs"]


def test_a_changed_default_target_list_is_found(project: Path, tmp_path: Path) -> None:
    drifted = standin_copy(tmp_path, "no-gfx1151")
    plant(
        drifted / "rocm-packages.nix",
        r'(defaultGpuTargets = \[[^\]]*?)\s*"gfx1151"',
        r"\1",
        count=1,
    )
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(drifted), "--json")
    assert result.returncode == 17, result.stdout + result.stderr
    drift = json.loads(result.stdout)["drift"]
    default = [d for d in drift if d["fact"] == "default targets (clr.gpuTargets)"]
    assert len(default) == 1, drift
    assert "gfx1151" in default[0]["kb"] and "gfx1151" not in default[0]["nixpkgs"]


def test_a_broken_composable_kernel_is_found(project: Path, tmp_path: Path) -> None:
    drifted = standin_copy(tmp_path, "ck-broken")
    plant(drifted / "rocm-packages.nix", r"meta\.broken = !anyGfx9Target;", "meta.broken = true;")
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(drifted))
    assert result.returncode == 17, result.stdout + result.stderr
    # The MI300X's stack scope (gfx942) holds a gfx9 target: the knowledge base expects it built.
    assert (
        "composable_kernel: rocmPackages.gfx942.composable_kernel: knowledge base says it "
        "evaluates; nixpkgs says it does not evaluate"
    ) in result.stdout.splitlines()


def test_torch_accepting_cuda_13_is_found(project: Path, tmp_path: Path) -> None:
    # The knowledge base keeps torch off CUDA 13 (the 2.7.1/2.9.1 recipes); a pin whose torch
    # accepts 13 (as the 2.13 recipe does) is a drift on the policy's CUDA 13.0.
    (project / "capplan.toml").write_text(FLEET + 'cuda = ["12.9", "13.0"]\n')
    drifted = standin_copy(tmp_path, "torch-cuda-13")
    plant(drifted / "torch.nix", r'"11"\s*"12"', '"11" "12" "13"')
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(drifted))
    assert result.returncode == 17, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "torch: torch on CUDA 13.0: knowledge base says it is meta.broken there; nixpkgs says it "
        "builds there"
    ]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("/nonexistent/nixpkgs", "--nixpkgs /nonexistent/nixpkgs: not a folder"),
        ("nixpkgs-checkout", "neither a folder nor a flake reference"),
    ],
)
def test_a_bad_nixpkgs_is_one_line(project: Path, given: str, message: str) -> None:
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", given)
    assert result.returncode == 4, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert message in result.stderr


def test_a_folder_that_is_not_nixpkgs(project: Path) -> None:
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(project))
    assert result.returncode == 4 and "no default.nix" in result.stderr


def test_a_flake_reference_nix_cannot_fetch_is_a_nix_error(project: Path) -> None:
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", f"path:{project}/missing")
    assert result.returncode == 14, result.stderr
    assert result.stderr.startswith("capplan: error: nix eval failed: error: ")


def _metadata(nixpkgs: Path) -> Any:
    return json.loads(
        subprocess.run(
            ["nix", "--extra-experimental-features", "nix-command flakes", "flake", "metadata",
             "--json", f"path:{nixpkgs}"],
            check=True, capture_output=True, text=True,
        ).stdout
    )  # fmt: skip


def _lock(project: Path, nixpkgs: Path) -> LockedNixpkgs:
    meta = _metadata(nixpkgs)
    nar_hash = meta["locked"]["narHash"]
    lock = {
        "nodes": {
            "nixpkgs": {"locked": {"type": "path", "path": str(nixpkgs), "narHash": nar_hash}},
            "root": {"inputs": {"nixpkgs": "nixpkgs"}},
        },
        "root": "root",
        "version": 7,
    }
    (project / "flake.lock").write_text(json.dumps(lock))
    locked = LockedNixpkgs(f"path:{nixpkgs}", None, nar_hash)
    assert locked.store_path() == meta["path"]  # the store path capplan computes is Nix's
    return locked


def test_generate_stamps_the_checked_revision(project: Path, tmp_path: Path) -> None:
    copy = standin_copy(tmp_path, "pinned")
    locked = _lock(project, copy)
    assert locked.at_hand()
    result = capplan(project, "generate")
    assert result.returncode == 0, result.stderr
    stamp = json.loads((project / "overlays" / "plan.json").read_text())["nixpkgs"]
    assert stamp == {"checked": True, "locked": {"narHash": locked.nar_hash, "rev": None}}
    assert "it agrees" in result.stderr
    # --check never runs the check: the committed stamp of the same revision carries over.
    assert capplan(project, "generate", "--check").returncode == 0


def test_generate_refuses_a_drifted_pin(project: Path, tmp_path: Path) -> None:
    drifted = standin_copy(tmp_path, "pinned-drift")
    plant(drifted / "rocm-packages.nix", r"meta\.broken = !anyGfx9Target;", "meta.broken = true;")
    _lock(project, drifted)
    result = capplan(project, "generate")
    assert result.returncode == 17, result.stderr
    assert not (project / "overlays" / "plan.json").exists()
    assert "rocmPackages.gfx942.composable_kernel" in result.stdout


def test_unchecked_where_the_pin_is_not_at_hand(project: Path, tmp_path: Path) -> None:
    # A pin whose source is not in the store (CI, offline): recorded as unchecked, and
    # `generate --check` agrees with that file on a machine that cannot check either.
    lock = json.loads((REPO / "flake.lock").read_text())
    lock["nodes"]["nixpkgs"]["locked"]["narHash"] = "sha256-" + "A" * 43 + "="
    (project / "flake.lock").write_text(json.dumps(lock))
    result = capplan(project, "generate")
    assert result.returncode == 0, result.stderr
    stamp = json.loads((project / "overlays" / "plan.json").read_text())["nixpkgs"]
    assert stamp["checked"] is False
    assert stamp["locked"]["rev"] == lock["nodes"]["nixpkgs"]["locked"]["rev"]
    assert "not in the store" in result.stderr and "recorded as unchecked" in result.stderr
    assert capplan(project, "generate", "--check").returncode == 0


# ---------------------------------------------------------------------------------------------
# issue 41: every recipe fact is asked; any answer is a drift line or agreement; odd paths work


def test_a_pin_without_cpu_arch_dynamic_dispatch_drifts(project: Path, tmp_path: Path) -> None:
    # capplan plans llama-cpp as one generic build because its recipe dispatches CPU code at
    # run time (cpuArchDynamicDispatch ? true); NixOS/nixpkgs' b5760 recipe has no such
    # argument (kb/cpu_packages.json's source), and a pin like it must not pass in silence.
    drifted = standin_copy(tmp_path, "no-dynamic-dispatch")
    plant(drifted / "llama-cpp.nix", r"(?<![.\w])cpuArchDynamicDispatch(?!\w)", "allVariants")
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(drifted))
    assert result.returncode == 17, result.stdout + result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith(
        "llama-cpp: recipe argument cpuArchDynamicDispatch of llama-cpp: knowledge base says it "
        "takes it; nixpkgs says its arguments are ["
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("[ 86 ]", "[86] (a list, not what this fact is)"),
        ('"8.6"', '"8.6" (a string, not what this fact is)'),
        ('[ "8.6\\n::error::planted" ]', '["8.6\\n::error::planted"] (a list'),
        ('[ (builtins.concatStringsSep "" (builtins.genList (_: "xxxxxxxxxx") 1000000)) ]',
         '["xxxxxxxxxx'),
    ],
    ids=["number", "string", "workflow-command", "10MB"],
)  # fmt: skip
def test_an_answer_of_the_wrong_type_is_one_drift_line(
    project: Path, tmp_path: Path, value: str, shown: str
) -> None:
    # torch's passthru.cudaCapabilities is a list of capability strings in nixpkgs; whatever a
    # pin holds there is one drift line, escaped and cut, never exit 1 or 4.
    drifted = standin_copy(tmp_path, "odd-capabilities")
    plant(
        drifted / "torch.nix",
        r"cudaCapabilities = if cudaSupport then supportedCudaCapabilities else \[ \];",
        f"cudaCapabilities = {value};",
    )
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", str(drifted))
    assert result.returncode == 17, result.stdout + result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith("torch: capability allowlist on CUDA ") and shown in line, line
    assert len(line) < 1200 and "\x1b" not in line
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("name", ["np?x=1", "np#x", "np%20x", b"np\xff\xfe"], ids=repr)
def test_a_checkout_whose_path_is_no_flake_reference_works(
    project: Path, tmp_path: Path, name: str | bytes
) -> None:
    folder = os.fsdecode(os.path.join(os.fsencode(tmp_path), os.fsencode(name)))
    shutil.copytree(STANDIN, folder)
    result = capplan(project, "nixpkgs", "check", "--nixpkgs", folder, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["agrees"] is True
    # The path whole: a byte that is not UTF-8 is \udcXX in the JSON, as in every JSON output.
    assert data["source"]["path"] == folder


@pytest.mark.parametrize(("arguments", "code"), [(12, 17), (20, 14)], ids=["12MB", "20MB"])
def test_huge_attribute_names_are_bounded(
    project: Path, tmp_path: Path, arguments: int, code: int
) -> None:
    """Issue 46 "Memory": a checkout whose torch takes arguments named with 1 MiB each. Up to
    what the check reads from nix (16 MiB) it is one drift line, cut; past it exit 14 in one
    line. Either way capplan's own peak stays near its size without the answer (60 MB of names
    took over 500 MB: read, decoded, parsed, joined and escaped whole, each a copy)."""
    checkout = tmp_path / "huge"
    checkout.mkdir()
    names = ", ".join(f"a{i}{'b' * 1024 * 1024} ? null" for i in range(arguments))
    (checkout / "default.nix").write_text(
        '{ ... }: { lib = { version = "x"; }; python3Packages = { torch = { override = { '
        + names
        + " }: null; }; }; }\n"
    )
    wrapper = (
        # VmHWM, the peak of this program's own memory: ru_maxrss would count the test
        # process it was started from (Linux keeps it across the fork and exec).
        "import atexit, sys\n"
        "hwm = lambda: next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "atexit.register(lambda: sys.stderr.write(f'peak {hwm().split()[1]}\\n'))\n"
        "from capplan.cli.main import main\n"
        "sys.argv = ['capplan', 'nixpkgs', 'check', '--nixpkgs', sys.argv[1]]\n"
        "main()\n"
    )
    import capplan  # the capplan under test, wherever it was imported from

    source = Path(capplan.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(source), "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-c", wrapper, str(checkout)], cwd=project, env=env,
                            capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert result.returncode == code, result.stdout[-2000:] + result.stderr[-2000:]
    *said, peak = result.stderr.splitlines()
    errors = [line for line in said if line.startswith("capplan: error: ")]
    assert len(errors) == 1 and len(errors[0]) < 1200, said
    if code == 14:
        assert "printed more than 16 MiB" in errors[0]
    else:
        (line,) = [x for x in result.stdout.splitlines() if "of python3Packages.torch" in x]
        assert "its arguments are [a0bbbb" in line and len(line) < 1200
    assert int(peak.split()[1]) < 200 * 1024, peak  # KiB
