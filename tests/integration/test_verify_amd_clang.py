"""`capplan verify --expect gfx...` and `--variant torch-gfx942` on AMD code objects Debian's
clang-16 really built.

Skips with the reason when clang-16 / clang-offload-bundler-16 are missing
(``scripts/setup --dev`` installs them). clang-16 knows gfx940 but not gfx942: the gfx942
object is clang's gfx940 object with its EF_AMDGPU_MACH byte set to gfx942 (0x04c; both are
GFX9.4.x, the same ISA), bundled by clang-offload-bundler as ``hipv4-amdgcn-amd-amdhsa--gfx942``.
"""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest
from tests.conftest import llvm16_tool

from capplan.adapters.kb import load_kb
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.target import AmdTarget
from capplan.core.families.rocm.verify import covers, verify_amd
from capplan.errors import ExitCode

T = AmdTarget.parse
# The mixed fleet; onnxruntime reads clr.gpuTargets only (one shared ROCm build).
MIXED = (
    '[fleet]\ngpus = ["A100", "MI300X", "Radeon RX 7900 XTX", "Strix Halo"]\n'
    "[packages.torch]\n[packages.onnxruntime]\n"
)
HOST = "host-x86_64-unknown-linux-gnu"
E_FLAGS = 48  # offset of e_flags in an ELF64 header


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    clang = llvm16_tool("clang")
    bundler = llvm16_tool("clang-offload-bundler")
    out = tmp_path_factory.mktemp("amdverify")
    (out / "k.c").write_text("void k(float *a) { a[0] = 1.0f; }\n")

    def run(*args: str | Path) -> None:
        subprocess.run([str(a) for a in args], check=True, cwd=out, capture_output=True)

    (out / "capplan.toml").write_text(MIXED)
    objects = (("gfx90a:xnack-", "k90a.o"), ("gfx1100", "k1100.o"), ("gfx940", "k940.o"),
               ("gfx90a", "k90a-any.o"))  # fmt: skip
    for cpu, name in objects:
        run(clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={cpu}", "-nogpulib", "-c", "k.c",
            "-o", name)  # fmt: skip
    raw = bytearray((out / "k940.o").read_bytes())
    (flags,) = struct.unpack_from("<I", raw, E_FLAGS)
    assert flags & 0xFF == 0x040  # gfx940
    struct.pack_into("<I", raw, E_FLAGS, (flags & ~0xFF) | 0x04C)  # gfx942
    (out / "k942.o").write_bytes(raw)
    header = subprocess.run(
        [str(llvm16_tool("llvm-readobj")), "--file-headers", str(out / "k942.o")],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    # LLVM reads the field we wrote as e_flags (LLVM 16 has no name for gfx942's value yet).
    assert f"Flags [ (0x{(flags & ~0xFF) | 0x04C:X})" in header

    def bundle(name: str, *entries: tuple[str, str]) -> None:
        targets = ",".join([HOST, *(f"hipv4-amdgcn-amd-amdhsa--{t}" for t, _ in entries)])
        inputs = [f"--input={o}" for _, o in entries]
        run(bundler, "--type=o", f"--targets={targets}", "--input=/dev/null", *inputs,
            f"--output={name}")  # fmt: skip

    bundle("two.bundle", ("gfx1100", "k1100.o"), ("gfx90a:xnack-", "k90a.o"))
    bundle("b942.bundle", ("gfx942", "k942.o"))
    bundle("b90a.bundle", ("gfx90a", "k90a-any.o"))
    bundle("b942-1100.bundle", ("gfx942", "k942.o"), ("gfx1100", "k1100.o"))
    return {p.stem: p for p in out.iterdir()} | {"capplan.toml": out / "capplan.toml"}


def _json(capplan_cli: object, *args: str) -> tuple[int, dict[str, object]]:
    result = capplan_cli("verify", *args, "--json")  # type: ignore[operator]
    return result.exit_code, json.loads(result.stdout)  # type: ignore[no-any-return]


def test_exact_set_passes(capplan_cli: object, built: dict[str, Path]) -> None:
    code, data = _json(capplan_cli, str(built["two"]), "--expect", "gfx90a,gfx1100")
    assert code == 0, data
    assert data["found"] == ["gfx90a:xnack-", "gfx1100"] and data["ok"] is True
    assert (data["vendor"], data["missing"], data["extra"]) == ("amd", [], [])
    # A feature asked for must be there as given.
    code, data = _json(capplan_cli, str(built["k90a"]), "--expect", "gfx90a:xnack-")
    assert code == 0, data
    code, data = _json(capplan_cli, str(built["k90a"]), "--expect", "gfx90a:xnack+")
    assert code == int(ExitCode.VERIFY_FAILED)
    assert (data["missing"], data["extra"]) == (["gfx90a:xnack+"], ["gfx90a:xnack-"])


def test_missing_and_extra_exit_9(capplan_cli: object, built: dict[str, Path]) -> None:
    result = capplan_cli("verify", str(built["two"]), "--expect", "gfx1100,gfx940")  # type: ignore[operator]
    assert result.exit_code == int(ExitCode.VERIFY_FAILED), result.stderr
    err = result.stderr.strip()
    assert err.startswith("capplan: error: ") and "\n" not in err
    assert "missing AMD code gfx940" in err and "extra AMD code gfx90a:xnack-" in err
    code, data = _json(capplan_cli, str(built["k940"]), "--expect", "gfx940,gfx942")
    assert code == int(ExitCode.VERIFY_FAILED)
    assert (data["found"], data["missing"], data["extra"]) == (["gfx940"], ["gfx942"], [])


def test_device_by_model_and_target(capplan_cli: object, built: dict[str, Path]) -> None:
    two = str(built["two"])
    code, data = _json(capplan_cli, two, "--expect", "gfx90a,gfx1100", "--device", "rx 7900 xtx")
    assert code == 0, data
    assert data["device"] == {
        "target": "gfx1100", "runs": "exact", "via": "gfx1100", "reason": "code object for gfx1100"
    }  # fmt: skip
    code, data = _json(capplan_cli, two, "--expect", "gfx90a,gfx1100", "--device", "mi300x")
    assert code == int(ExitCode.VERIFY_FAILED)
    device = data["device"]
    assert isinstance(device, dict) and device["target"] == "gfx942"
    assert device["runs"] == "cannot-run" and "no code object for gfx942" in device["reason"]
    code, data = _json(capplan_cli, two, "--expect", "gfx90a,gfx1100", "--device", "gfx90a")
    assert code == 0 and data["device"]["runs"] == "exact"  # type: ignore[index]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--expect", "gfx9999"), "unknown AMD GPU target 'gfx9999'"),
        (("--expect", "gfx942:xnack*"), "invalid feature ':xnack*'"),
        (("--expect", "gfx942,8.6"), "mixes CUDA and AMD targets"),
        (("--expect", "8.6,gfx90a"), "mixes CUDA and AMD targets"),
        (("--expect", "gfx90a", "--device", "gfx11-generic"), "generic target, not a GPU"),
        (("--expect", "gfx90a", "--device", "mi3000x"), "unknown AMD GPU"),
        (("--expect", "gfx90a", "--jetson"), "--jetson applies to NVIDIA devices only"),
    ],
)
def test_bad_input_is_one_line_exit_4(
    capplan_cli: object, tmp_path: Path, args: tuple[str, ...], fragment: str
) -> None:
    target = tmp_path / "f.o"
    target.write_bytes(b"\0" * 64)
    result = capplan_cli("verify", str(target), *args)  # type: ignore[operator]
    assert result.exit_code == int(ExitCode.INVALID_INPUT), (result.exit_code, result.stderr)
    err = result.stderr.strip()
    assert err.startswith("capplan: error: ") and "\n" not in err and fragment in err


def test_cuda_code_in_an_amd_build_is_extra() -> None:
    outcome = verify_amd([T("gfx90a")], [T("gfx90a:xnack-")], cuda=["sm_80"])
    assert not outcome.ok and outcome.differences() == ["extra CUDA code sm_80"]
    assert covers(T("gfx90a"), T("gfx90a:sramecc+:xnack-"))
    assert not covers(T("gfx90a:sramecc-"), T("gfx90a:sramecc+:xnack-"))
    assert not covers(T("gfx90a"), T("gfx940"))


def _verify(capplan_cli: object, built: dict[str, Path], path: str, *args: str) -> object:
    config = str(built["capplan.toml"])
    return capplan_cli("verify", str(built[path]), "--config", config, *args)  # type: ignore[operator]


def test_gfx942_bundle_passes_torch_gfx942(capplan_cli: object, built: dict[str, Path]) -> None:
    result = _verify(capplan_cli, built, "b942", "--variant", "torch-gfx942", "--json")
    assert result.exit_code == 0, result.stderr  # type: ignore[attr-defined]
    data = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert (data["vendor"], data["expected"], data["found"], data["ok"]) == (
        "amd",
        ["gfx942"],
        ["gfx942"],
        True,
    )
    text = _verify(capplan_cli, built, "b942", "--variant", "torch-gfx942",
                   "--device", "mi300x")  # fmt: skip
    assert text.exit_code == 0, text.stderr  # type: ignore[attr-defined]
    assert "on gfx942: exact: code object for gfx942" in text.stdout  # type: ignore[attr-defined]


def test_gfx90a_bundle_fails_torch_gfx942(capplan_cli: object, built: dict[str, Path]) -> None:
    result = _verify(capplan_cli, built, "b90a", "--variant", "torch-gfx942")
    assert result.exit_code == int(ExitCode.VERIFY_FAILED)  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert err.startswith("capplan: error: ") and "\n" not in err
    assert "missing AMD code gfx942" in err and "extra AMD code gfx90a" in err
    # One more target than planned is extra code, too.
    result = _verify(capplan_cli, built, "b942-1100", "--variant", "torch-gfx942")
    assert result.exit_code == int(ExitCode.VERIFY_FAILED)  # type: ignore[attr-defined]
    assert "extra AMD code gfx1100" in result.stderr  # type: ignore[attr-defined]
    assert "missing" not in result.stderr  # type: ignore[attr-defined]


def test_device_the_variant_does_not_run_on(capplan_cli: object, built: dict[str, Path]) -> None:
    args = ("--variant", "torch-gfx942", "--device", "rx 7900 xtx")
    result = _verify(capplan_cli, built, "b942", *args)
    assert result.exit_code == int(ExitCode.VERIFY_FAILED)  # type: ignore[attr-defined]
    assert "cannot run on gfx1100" in result.stderr  # type: ignore[attr-defined]


def test_shared_rocm_variant_expects_default_targets(
    capplan_cli: object, built: dict[str, Path]
) -> None:
    """onnxruntime reads clr.gpuTargets only: its one shared build holds nixpkgs' default list."""
    kb = load_kb()
    assert kb.part(AmdKnowledgeBase) is not None
    defaults = [str(t) for t in kb.part(AmdKnowledgeBase).nixpkgs_default_targets]
    assert "gfx942" in defaults and len(defaults) > 2
    result = _verify(capplan_cli, built, "b942-1100", "--variant", "onnxruntime-rocm", "--json")
    assert result.exit_code == int(ExitCode.VERIFY_FAILED)  # type: ignore[attr-defined]
    data = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert data["expected"] == defaults
    assert data["missing"] == [t for t in defaults if t not in ("gfx942", "gfx1100")]
    assert data["extra"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--variant", "torch-gfx9421"),
            "no variant 'torch-gfx9421' in the plan (did you mean 'torch-gfx942'",
        ),
        (("--variant", "torch-gfx942", "--jetson"), "--jetson applies to NVIDIA devices only"),
        (("--variant", "torch-gfx942", "--expect", "gfx942"), "give exactly one of --variant"),
        (("--variant", "torch-gfx942", "--device", "8.6"), "'8.6' is a CUDA capability, but"),
        (("--variant", "torch-gfx942", "--device", "rtx 3090"), "is an NVIDIA GPU (8.6), but"),
        (("--variant", "torch-gfx942", "--device", "gfx11-generic"), "is a generic target"),
        (("--variant", "torch-gfx942", "--device", "gfx9999"), "unknown AMD GPU target"),
        (("--variant", "torch-sm80", "--device", "mi300x"), "is an AMD GPU (gfx942), but"),
        (("--variant", "torch-sm80", "--device", "gfx9999"), "unknown AMD GPU target"),
        (("--variant", "torch-sm80", "--device", "bogus"), "unknown GPU or capability 'bogus'"),
    ],
)
def test_variant_bad_input_is_one_line_exit_4(
    capplan_cli: object, built: dict[str, Path], args: tuple[str, ...], message: str
) -> None:
    result = _verify(capplan_cli, built, "b942", *args)
    assert result.exit_code == int(ExitCode.INVALID_INPUT), result.stdout  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert err.startswith("capplan: error: ") and "\n" not in err and message in err
