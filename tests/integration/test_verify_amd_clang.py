"""`capplan verify --expect gfx...` on AMD code objects Debian's clang-16 really built.

Skips with the reason when clang-16 / clang-offload-bundler-16 are missing
(``scripts/setup --dev`` installs them). clang-16 knows gfx940 but not gfx942.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.conftest import llvm16_tool

from capplan.core.binaries.amd_verify import covers, verify_amd
from capplan.core.model.amd import AmdTarget
from capplan.errors import ExitCode

T = AmdTarget.parse


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    clang = llvm16_tool("clang")
    bundler = llvm16_tool("clang-offload-bundler")
    out = tmp_path_factory.mktemp("amdverify")
    (out / "k.c").write_text("void k(float *a) { a[0] = 1.0f; }\n")

    def run(*args: str | Path) -> None:
        subprocess.run([str(a) for a in args], check=True, cwd=out, capture_output=True)

    for cpu, name in (("gfx90a:xnack-", "k90a.o"), ("gfx1100", "k1100.o"), ("gfx940", "k940.o")):
        run(clang, "-target", "amdgcn-amd-amdhsa", f"-mcpu={cpu}", "-nogpulib", "-c", "k.c",
            "-o", name)  # fmt: skip
    run(
        bundler, "--type=o",
        "--targets=host-x86_64-unknown-linux-gnu,hipv4-amdgcn-amd-amdhsa--gfx1100,"
        "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-",
        "--input=/dev/null", "--input=k1100.o", "--input=k90a.o", "--output=two.bundle",
    )  # fmt: skip
    return {"k90a": out / "k90a.o", "k940": out / "k940.o", "two": out / "two.bundle"}


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
