"""``capplan doctor`` on a real torch 2.14.1 + NVIDIA cu13 environment, on small nvcc-built
libraries for the rules' edge cases, and with bad input.

Expected verdicts are NVIDIA's documented facts (../shared/CUDA.md), stated at each test, never
the program's own earlier output:

- CUDA 13.0 dropped every capability below 7.5 (Maxwell, Pascal, Volta): a CUDA 13 build holds
  neither SASS nor PTX those GPUs run (PTX compute_XY JITs only to devices >= X.Y).
- PyTorch's CUDA 13 wheels are built for Turing through Blackwell (TORCH_CUDA_ARCH_LIST of the
  cu130 builds starts at 7.5), so an Ampere, Ada, Hopper or Blackwell GPU runs them from SASS.
- A library linking libcudart.so.13 needs a CUDA 13.x driver, >= 580 (minor-version
  compatibility minimum). A CUDA 12.2 driver (535) and a CUDA 12.8 driver (570) cannot run it;
  580.65.06 (CUDA 13.0 GA) can.
- PTX emitted by CUDA 13.0 has ISA version 9.0 and needs driver >= 580.65.06 to JIT.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.errors import ExitCode

WHEELS = {
    "torch": "/opt/pypi-more/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    "cublas": "/opt/pypi-more/files/nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl",
    "runtime": "/opt/pypi/files/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64."
    "manylinux_2_17_x86_64.whl",
    "curand": "/opt/pypi-more/files/nvidia_curand-10.4.0.35-py3-none-manylinux_2_27_x86_64.whl",
    "nvrtc": "/opt/pypi-more/files/nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux2010_x86_64."
    "manylinux_2_12_x86_64.whl",
    "nccl": "/opt/pypi-more/files/nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl",
    "cudnn": "/opt/pypi-more/files/nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
}
_WANTED = re.compile(r"(\.so(\.[0-9]+)*$)|(\.dist-info/(RECORD|METADATA)$)")
DRIVER_13_0 = "580.65.06"
DRIVER_12_8 = "570.124.06"
DRIVER_12_2 = "535.104.05"


@pytest.fixture(scope="session")
def real_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site-packages with torch 2.14.1 and NVIDIA's cu13 wheels: only the libraries and the
    dist-info RECORDs are unpacked (built once per session)."""
    missing = [w for w in WHEELS.values() if not Path(w).is_file()]
    if missing:
        pytest.skip(f"wheels not on this machine: {', '.join(missing)}")
    site = tmp_path_factory.mktemp("doctor-env") / "site-packages"
    for wheel in WHEELS.values():
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if _WANTED.search(info.filename):
                    archive.extract(info, site)
    return site


def _doctor(cli: Any, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    result = cli("doctor", *args, "--json", env=env)
    assert "Traceback" not in result.stderr
    assert result.exit_code in (0, int(ExitCode.WONT_RUN)), result.stderr
    return result.exit_code, json.loads(result.stdout)


def _package(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in data["packages"] if p["name"] == name)


# -- real environment: GPUs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "arch"),
    [("A100", "Ampere"), ("RTX 4090", "Ada"), ("H100 SXM", "Hopper"), ("B200", "Blackwell"),
     ("RTX 5090", "Blackwell")],
)  # fmt: skip
def test_cuda13_environment_runs_on_turing_and_newer(
    capplan_cli: Any, real_env: Path, device: str, arch: str
) -> None:
    # CUDA 13 supports >= 7.5 and torch's cu130 wheels carry SASS from sm_75 on: every package
    # runs from SASS (native or same-major compatible), never only through PTX, with a 13.0 driver.
    code, data = _doctor(capplan_cli, str(real_env), "--device", device, "--driver", DRIVER_13_0)
    assert code == 0
    assert data["ok"] is True
    assert data["gpus"][0]["arch"] == arch
    names = {p["name"] for p in data["packages"]}
    assert {"torch", "nvidia-cublas", "nvidia-cudnn-cu13", "nvidia-nccl-cu13"} <= names
    for package in data["packages"]:
        # nvidia-cuda-runtime holds no device code: it "runs" (its libcudart.so.13 on a 580 driver)
        allowed = (
            ("runs",) if package["name"] == "nvidia-cuda-runtime" else ("native", "compatible")
        )
        assert package["verdicts"][0]["level"] in allowed, package["name"]
    torch = _package(data, "torch")
    assert torch["cuda_majors"] == [13]
    cuda_lib = next(lib for lib in torch["libraries"] if lib["path"].endswith("libtorch_cuda.so"))
    assert cuda_lib["verdicts"][0]["level"] in ("native", "compatible")


@pytest.mark.parametrize(("device", "cap"), [("GTX 1080", "6.1"), ("V100", "7.0")])
def test_cuda13_environment_cannot_run_on_pascal_or_volta(
    capplan_cli: Any, real_env: Path, device: str, cap: str
) -> None:
    # CUDA 13.0 dropped Pascal and Volta: no SASS for sm_6x/sm_70, and its PTX (compute_75 and up)
    # never JITs down to an older device. The fix is a CUDA 12 build (12.9 is the newest with them).
    code, data = _doctor(capplan_cli, str(real_env), "--device", device, "--driver", DRIVER_13_0)
    assert code == int(ExitCode.WONT_RUN)
    assert data["ok"] is False
    assert data["gpus"][0]["capability"] == cap
    for name in ("torch", "nvidia-cublas", "nvidia-cudnn-cu13", "nvidia-nccl-cu13"):
        verdict = _package(data, name)["verdicts"][0]
        assert verdict["level"] == "cannot-run", name
        assert verdict["cause"] == "dropped-arch", name
        assert "CUDA 13 dropped" in verdict["reason"]
        assert "CUDA 12" in verdict["fix"]
    torch_fix = _package(data, "torch")["verdicts"][0]["plan"]
    assert torch_fix is not None and f"torch-sm{cap.replace('.', '')}" in torch_fix
    # The variant that fleet entry adds must come from CUDA 12 (13 has no code for the GPU).
    assert "(CUDA 12." in torch_fix


def test_table_groups_by_package_and_names_the_fix(capplan_cli: Any, real_env: Path) -> None:
    result = capplan_cli("doctor", str(real_env), "--device", "GTX 1080", "--driver", DRIVER_13_0)
    assert result.exit_code == int(ExitCode.WONT_RUN)
    out = result.stdout
    assert "torch 2.14.1 (CUDA 13)" in out
    assert "libtorch_cuda.so" in out
    assert "nix build .#torch-sm61" in out
    assert "exit 16" in out


# -- real environment: drivers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "runs"),
    [(DRIVER_12_2, False), (DRIVER_12_8, False), (DRIVER_13_0, True), ("590.44.01", True)],
)
def test_cuda13_runtime_needs_a_cuda13_driver(
    capplan_cli: Any, real_env: Path, driver: str, runs: bool
) -> None:
    # libcudart.so.13 needs a 13.x driver (>= 580): 535 (CUDA 12.2) and 570 (12.8) fail with
    # "CUDA driver version is insufficient for CUDA runtime version"; 580 and later run it.
    code, data = _doctor(capplan_cli, str(real_env), "--device", "A100", "--driver", driver)
    torch = _package(data, "torch")["verdicts"][0]
    runtime = _package(data, "nvidia-cuda-runtime")["verdicts"][0]
    if runs:
        assert code == 0
        assert torch["level"] == "native"
        return
    assert code == int(ExitCode.WONT_RUN)
    for verdict in (torch, runtime):
        assert verdict["level"] == "cannot-run"
        assert verdict["cause"] == "driver-runtime"
        assert ">= 580" in verdict["fix"]
    assert data["driver"]["runs_cuda"].startswith("12.")


def test_cuda13_venv_on_an_h100_needs_a_580_driver(capplan_cli: Any, real_env: Path) -> None:
    # Issue 38: torch (cu13) with NVIDIA's cu13 wheels, laid out as pip installs them (the real
    # wheels' libraries and RECORDs; doctor reads nothing else). On a real H200 with 580.159.04
    # such an environment ran everything; with 570 (CUDA 12.x) libcudart.so.13 cannot start.
    result = capplan_cli("doctor", str(real_env), "--device", "H100", "--driver", "580.159.04")
    assert result.exit_code == 0, result.stdout
    assert "runs any CUDA 13.x" in result.stdout
    result = capplan_cli("doctor", str(real_env), "--device", "H100", "--driver", "570.172.08")
    assert result.exit_code == int(ExitCode.WONT_RUN)
    assert "driver 570.172.08" in result.stdout
    assert "fix: NVIDIA driver >= 580.65.06" in result.stdout


def test_torch_on_a_t4_runs_partly(capplan_cli: Any, real_env: Path) -> None:
    # torch 2.14.1 cu130: libtorch_cuda.so has sm_75 in every container, libtorch_cuda_linalg.so
    # (MAGMA) starts at sm_80. torch runs on a T4 except MAGMA-backed linalg: "partly", naming
    # the library and what uses it; the exit code stays 16 (a library the program may call
    # cannot run; docs/exit-codes.md).
    code, data = _doctor(capplan_cli, str(real_env), "--device", "T4", "--driver", "580.159.04")
    assert code == int(ExitCode.WONT_RUN)
    torch = _package(data, "torch")
    verdict = torch["verdicts"][0]
    assert verdict["level"] == "partly" and verdict["cause"] == "device-code"
    assert "libtorch_cuda_linalg.so" in verdict["reason"] and "MAGMA" in verdict["reason"]
    levels = {
        lib["path"].rsplit("/", 1)[-1]: lib["verdicts"][0]["level"] for lib in torch["libraries"]
    }
    assert levels["libtorch_cuda.so"] == "native"
    assert levels["libtorch_cuda_linalg.so"] == "cannot-run"
    # The other packages run on a T4 (CUDA 13 keeps Turing).
    for package in data["packages"]:
        if package["name"] != "torch":
            assert package["verdicts"][0]["level"] in ("native", "compatible", "runs"), package


def test_wheel_is_checked_without_installing(capplan_cli: Any) -> None:
    wheel = Path(WHEELS["runtime"])
    if not wheel.is_file():
        pytest.skip(f"{wheel} not on this machine")
    code, data = _doctor(capplan_cli, str(wheel), "--device", "L4", "--driver", DRIVER_12_2)
    assert code == int(ExitCode.WONT_RUN)
    (package,) = data["packages"]
    assert package["name"] == "nvidia-cuda-runtime" and package["kind"] == "wheel"
    assert package["libraries"][0]["soname"] == "libcudart.so.13"
    assert package["libraries"][0]["path"].startswith(f"{wheel}!")


# -- synthetic libraries built with nvcc ---------------------------------------------------------

KERNEL = "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"
BUILDS = {
    # name: nvcc -gencode arguments
    "ptx_only": ["arch=compute_80,code=compute_80"],
    "sm90a": ["arch=compute_90a,code=sm_90a"],
    "sm100f": ["arch=compute_100f,code=sm_100f"],
    "sm86": ["arch=compute_86,code=sm_86"],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, nvcc_bin: Path) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("doctor-nvcc")
    source = out / "k.cu"
    source.write_text(KERNEL)
    libs = {}
    for name, codes in BUILDS.items():
        lib = out / name / f"lib{name}.so"
        lib.parent.mkdir()
        flags = [a for c in codes for a in ("-gencode", c)]
        subprocess.run(
            [str(nvcc_bin), "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", *flags,
             "-o", str(lib), str(source)],
            check=True, capture_output=True,
        )  # fmt: skip
        libs[name] = lib
    return libs


def _one(cli: Any, lib: Path, device: str, driver: str = DRIVER_13_0) -> tuple[int, dict[str, Any]]:
    code, data = _doctor(cli, str(lib), "--device", device, "--driver", driver)
    (package,) = data["packages"]
    (library,) = package["libraries"]
    return code, library


def test_ptx_only_runs_through_jit_with_its_size(capplan_in: Any, built: dict[str, Path]) -> None:
    # compute_80 PTX JITs on any device >= 8.0; nvcc 13.0 emits PTX ISA 9.0.
    code, lib = _one(capplan_in, built["ptx_only"], "RTX 4090")
    assert code == 0
    (ptx,) = lib["ptx"]
    assert ptx["arch"] == "compute_80" and ptx["isa"] == "9.0" and ptx["size"] > 0
    verdict = lib["verdicts"][0]
    assert verdict["level"] == "ptx-jit" and verdict["via"] == "compute_80"
    assert re.search(r"JIT-compiles [0-9.]+ k?B of compute_80 PTX", verdict["reason"])


def test_ptx_needs_a_driver_that_knows_its_isa(capplan_in: Any, built: dict[str, Path]) -> None:
    # PTX ISA 9.0 (CUDA 13.0) with a 570 driver: error 222 "unsupported PTX version". (The
    # library also links libcudart.so.13; the PTX check is made directly on the core below.)
    code, lib = _one(capplan_in, built["ptx_only"], "A100", DRIVER_12_8)
    assert code == int(ExitCode.WONT_RUN)
    assert lib["verdicts"][0]["level"] == "cannot-run"
    # PTX compute_80 cannot JIT down to 7.5 (T4): no SASS and no PTX it can use.
    code, lib = _one(capplan_in, built["ptx_only"], "T4")
    assert code == int(ExitCode.WONT_RUN)
    assert lib["verdicts"][0]["cause"] == "device-code"


@pytest.mark.parametrize(
    ("name", "device", "level"),
    [
        ("sm90a", "H100 SXM", "native"),  # sm_90a runs on exactly 9.0
        ("sm90a", "B200", "cannot-run"),  # arch-specific: never on another capability
        ("sm100f", "B300", "compatible"),  # family 10.x, minor 3 >= 0
        ("sm100f", "RTX 5090", "cannot-run"),  # 12.0 is another family
        ("sm86", "RTX 4090", "compatible"),  # same major, lower minor
        ("sm86", "Jetson AGX Orin", "cannot-run"),  # Jetson 8.7: exact SASS only
        ("sm86", "MI300X", "cannot-run"),  # CUDA code, and the only GPU is an AMD one
    ],
)
def test_rule_edge_cases(
    capplan_in: Any, built: dict[str, Path], name: str, device: str, level: str
) -> None:
    _, lib = _one(capplan_in, built[name], device)
    assert lib["verdicts"][0]["level"] == level, lib["verdicts"][0]["reason"]


def test_mixed_cuda_majors_are_reported(
    capplan_in: Any, built: dict[str, Path], tmp_path: Path
) -> None:
    # A copy of a real nvcc library whose DT_NEEDED string is patched to libcudart.so.12 (same
    # length): one environment then links both CUDA runtimes.
    env = tmp_path / "env"
    (env / "a").mkdir(parents=True)
    (env / "b").mkdir()
    shutil.copy(built["sm86"], env / "a" / "liba.so")
    data = (built["sm86"]).read_bytes()
    assert b"libcudart.so.13" in data
    (env / "b" / "libb.so").write_bytes(data.replace(b"libcudart.so.13", b"libcudart.so.12"))
    code, report = _doctor(capplan_in, str(env), "--device", "A10", "--driver", DRIVER_12_8)
    assert report["mixed_cuda_majors"] == {"12": ["env/b"], "13": ["env/a"]}
    levels = {p["name"]: p["verdicts"][0]["cause"] for p in report["packages"]}
    assert levels == {"env/a": "driver-runtime", "env/b": None}
    assert code == int(ExitCode.WONT_RUN)


def test_core_ptx_isa_driver_rule() -> None:
    from capplan.core.binaries.doctor import Library, Ptx, diagnose
    from capplan.core.families.cuda.capability import Capability
    from capplan.core.families.cuda.doctor import NvidiaGpu, nvidia_driver

    # It links CUDA 12's runtime (which a 570 driver runs), so only its ISA 9.0 PTX needs more:
    # without that link the ISA says a CUDA 13 build, and the runtime's check would come first.
    lib = Library("libx.so", "x", ptx=(Ptx(Capability.parse("8.0"), (9, 0), 1 << 20),),
                  needed=("libcudart.so.12",))  # fmt: skip
    gpu = NvidiaGpu("A100", Capability.parse("8.0"))
    tables = ({13: "580.65.06", 12: "525.60.13"}, {"13.0": "580.65.06", "12.8": "570.26"})
    old = diagnose([lib], {}, [gpu], nvidia_driver("570.124.06", *tables)).cells["libx.so"][0]
    assert old.level == "cannot-run" and old.cause == "driver-ptx" and "222" in old.reason
    new = diagnose([lib], {}, [gpu], nvidia_driver("580.65.06", *tables)).cells["libx.so"][0]
    assert new.level == "ptx-jit" and "1.0 MB" in new.reason


# -- bad input -----------------------------------------------------------------------------------


def _one_line(result: Any, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr)
    err = result.stderr.strip().splitlines()[-1]
    assert err.startswith("capplan: error: ")
    assert "Traceback" not in result.stderr
    return err


def test_missing_path_is_exit_4(capplan_in: Any, tmp_path: Path) -> None:
    err = _one_line(capplan_in("doctor", str(tmp_path / "nope"), "--device", "A100"),
                    ExitCode.INVALID_INPUT)  # fmt: skip
    assert "nope" in err


def test_not_a_library_or_fifo_is_exit_12(capplan_in: Any, tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert "notes.txt" in _one_line(
        capplan_in("doctor", str(text), "--device", "A100"), ExitCode.BAD_BINARY
    )
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _one_line(capplan_in("doctor", str(fifo), "--device", "A100"), ExitCode.BAD_BINARY)
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    _one_line(capplan_in("doctor", str(broken), "--device", "A100"), ExitCode.BAD_BINARY)


def test_no_gpu_and_no_device_is_a_clear_message(capplan_in: Any, tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    env = {"CAPPLAN_SYSFS_ROOT": str(sysfs), "CAPPLAN_NVML": "0", "PATH": "/usr/bin:/bin"}
    if shutil.which("nvidia-smi", path=env["PATH"]) or Path("/proc/driver/nvidia/gpus").exists():
        pytest.skip("this machine has an NVIDIA driver")
    # An environment with GPU code (a CUDA runtime), so that the GPUs are what is missing.
    cuda_runtime_library(tmp_path / "lib")
    err = _one_line(capplan_in("doctor", str(tmp_path), env=env), ExitCode.NO_GPU)
    assert "--device" in err


def cuda_runtime_library(folder: Path) -> Path:
    """A shared object whose SONAME is libcudart.so.13 (gcc): GPU code for doctor's purpose."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / "libcudart.so.13"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(lib), "-Wl,-soname,libcudart.so.13"],
        input=b"int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }",
        check=True,
    )
    return lib


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.one_of(
    st.text(max_size=20),
    st.sampled_from(["535", "535.104.05", "0", "0.0", "abc", "5.3.5.1.2", "١٢٣", "-1", "580.", ""]),
))  # fmt: skip
def test_driver_values_never_crash(capplan_in: Any, tmp_path: Path, text: str) -> None:
    result = capplan_in("doctor", str(tmp_path), "--device", "A100", "--driver", text)
    # A valid value reaches the scan of an empty folder: no GPU code, nothing to check (3).
    allowed = (int(ExitCode.NOTHING_TO_DO), int(ExitCode.INVALID_INPUT), int(ExitCode.USAGE))
    assert result.exit_code in allowed, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if result.exit_code:
        assert result.stderr.strip().splitlines()[-1].startswith("capplan: error: ")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.one_of(
    st.text(max_size=20),
    st.sampled_from(["RTX 9999", "sm_86a", "99.9", "gfx9999", "rtx", "", "A100", "8.6", "gfx942"]),
))  # fmt: skip
def test_device_values_never_crash(capplan_in: Any, tmp_path: Path, text: str) -> None:
    result = capplan_in("doctor", str(tmp_path), "--device", text)
    allowed = (int(ExitCode.NOTHING_TO_DO), int(ExitCode.INVALID_INPUT), int(ExitCode.USAGE))
    assert result.exit_code in allowed, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if result.exit_code:
        assert result.stderr.strip().splitlines()[-1].startswith("capplan: error: ")


# -- environments: conda, Nix store, the default python3, AMD code objects ------------------------


def test_conda_prefix_groups_by_conda_package(
    capplan_in: Any, built: dict[str, Path], tmp_path: Path
) -> None:
    prefix = tmp_path / "conda"
    (prefix / "conda-meta").mkdir(parents=True)
    (prefix / "lib").mkdir()
    shutil.copy(built["sm90a"], prefix / "lib" / "libk.so")
    meta = {"name": "mykernels", "version": "1.2", "files": ["lib/libk.so"]}
    (prefix / "conda-meta" / "mykernels-1.2-h0.json").write_text(json.dumps(meta))
    code, data = _doctor(capplan_in, str(prefix), "--device", "H100 SXM", "--driver", DRIVER_13_0)
    assert code == 0
    (package,) = data["packages"]
    assert (package["name"], package["version"], package["kind"]) == ("mykernels", "1.2", "conda")
    assert package["libraries"][0]["path"] == f"{prefix}/lib/libk.so"


def test_nix_store_path_is_one_package_named_by_its_store_name(
    capplan_in: Any, built: dict[str, Path], tmp_path: Path
) -> None:
    tool = shutil.which("nix-store")
    if tool is None or not os.access("/nix/store", os.W_OK):
        pytest.skip("nix-store not on PATH or the Nix store is not writable here")
    tree = tmp_path / "kernels-sm86-1.0"
    (tree / "lib").mkdir(parents=True)
    shutil.copy(built["sm86"], tree / "lib" / "libk.so")
    added = subprocess.run([tool, "--add", str(tree)], check=True, capture_output=True, text=True)
    store_path = added.stdout.strip()
    assert store_path.startswith("/nix/store/")
    code, data = _doctor(capplan_in, store_path, "--device", "RTX 3090", "--driver", DRIVER_13_0)
    assert code == 0
    (package,) = data["packages"]
    assert (package["name"], package["kind"]) == ("kernels-sm86-1.0", "nix")
    assert data["sources"] == [{"path": store_path, "kind": "nix"}]
    # A folder inside the store path: the same store path's closure, the same package.
    code, data = _doctor(capplan_in, f"{store_path}/lib", "--device", "RTX 3090")
    assert [p["name"] for p in data["packages"]] == ["kernels-sm86-1.0"]


def test_default_environment_is_the_python3_on_path(
    capplan_in: Any, built: dict[str, Path], tmp_path: Path
) -> None:
    # A python3 on PATH whose site-packages holds one distribution with an sm_86 library.
    venv = tmp_path / "venv"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    found = subprocess.run(
        [str(venv / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    site = Path(found)
    (site / "kern").mkdir(parents=True)
    shutil.copy(built["sm86"], site / "kern" / "libk.so")
    (site / "kern-0.1.dist-info").mkdir()
    (site / "kern-0.1.dist-info" / "RECORD").write_text("kern/libk.so,,\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "CONDA_PREFIX": "", "HOME": str(tmp_path)}
    result = capplan_in("doctor", "--device", "Jetson AGX Orin", "--json", env=env)
    assert result.exit_code == int(ExitCode.WONT_RUN), result.stderr
    assert f"checking {site} (site-packages of {venv / 'bin' / 'python3'})" in result.stderr
    data = json.loads(result.stdout)
    kern = _package(data, "kern")
    assert kern["kind"] == "pip" and kern["version"] == "0.1"
    # Jetson Orin (8.7) is promised no minor-version SASS compatibility: sm_86 does not run.
    assert kern["verdicts"][0]["level"] == "cannot-run"


def test_amd_code_objects_against_amd_gpus(capplan_in: Any, tmp_path: Path) -> None:
    from tests.conftest import llvm16_tool

    clang = llvm16_tool("clang")
    (tmp_path / "k.c").write_text("void k(float *a) { a[0] = 1.0f; }\n")
    lib = tmp_path / "k1100.o"
    subprocess.run(
        [str(clang), "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-nogpulib", "-c",
         str(tmp_path / "k.c"), "-o", str(lib)],
        check=True, capture_output=True,
    )  # fmt: skip
    # A code object for gfx1100 runs on gfx1100 (RX 7900 XTX), not on gfx942 (MI300X); on an
    # NVIDIA GPU it is another vendor's code, which is no failure by itself.
    code, data = _doctor(capplan_in, str(lib), "--device", "gfx1100", "--device", "MI300X",
                         "--device", "A100")  # fmt: skip
    levels = [v["level"] for v in data["packages"][0]["verdicts"]]
    assert levels == ["native", "cannot-run", "other-vendor"]
    assert code == int(ExitCode.WONT_RUN)
    # With no AMD GPU at all, AMD code runs nowhere: that is a failure, not "another vendor".
    code, data = _doctor(capplan_in, str(lib), "--device", "A100")
    verdict = data["packages"][0]["verdicts"][0]
    assert (verdict["level"], verdict["cause"]) == ("cannot-run", "vendor")
    assert code == int(ExitCode.WONT_RUN)


def test_worker_processes_do_not_change_the_answer(capplan_cli: Any, real_env: Path) -> None:
    # Files are read by forked workers, largest first; the report keeps its order and content.
    args = (str(real_env), "--device", "RTX 3090", "--device", "V100", "--driver", DRIVER_12_8)
    one = capplan_cli("doctor", *args, "--json", "--jobs", "1")
    two = capplan_cli("doctor", *args, "--json", "--jobs", "3")
    assert one.exit_code == two.exit_code == int(ExitCode.WONT_RUN)
    assert one.stdout == two.stdout


@pytest.mark.parametrize("value", ["0", "-1", "x", "\u0664", "257", ""])
def test_bad_jobs_is_a_usage_error(capplan_in: Any, tmp_path: Path, value: str) -> None:
    result = capplan_in("doctor", str(tmp_path), "--device", "A100", "--jobs", value)
    _one_line(result, ExitCode.USAGE)


def test_cuda_environment_on_an_amd_gpu_names_the_rocm_variant(
    capplan_cli: Any, real_env: Path
) -> None:
    # A CUDA build holds no AMD code objects; capplan.toml's fleet lists the MI300X (gfx942), so
    # the plan's ROCm variant of torch for it is the fix. nccl is CUDA-only (RCCL is AMD's).
    code, data = _doctor(capplan_cli, str(real_env), "--device", "MI300X")
    assert code == int(ExitCode.WONT_RUN)
    torch = _package(data, "torch")["verdicts"][0]
    assert (torch["level"], torch["cause"]) == ("cannot-run", "vendor")
    assert torch["plan"] == "nix build .#torch-gfx942"
    assert "CUDA-only" in _package(data, "nvidia-nccl-cu13")["verdicts"][0]["plan"]


def test_detected_gpus_and_driver_without_device(
    capplan_cli: Any, real_env: Path, tmp_path: Path
) -> None:
    # nvidia-smi (a fixture in NVIDIA's documented CSV format) reports an A100 on driver 535 and
    # a GTX 1080: the detected driver (CUDA 12.2) cannot run libcudart.so.13; --driver overrides it.
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\ncat <<'CSV'\nNVIDIA A100-SXM4-80GB, 8.0, 535.104.05\n"
        "NVIDIA GeForce GTX 1080, 6.1, 535.104.05\nCSV\n"
    )
    smi.chmod(0o755)
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    env = {
        "PATH": f"{tmp_path}:/usr/bin:/bin",
        "CAPPLAN_NVML": "0",
        "CAPPLAN_SYSFS_ROOT": str(sysfs),
    }
    code, data = _doctor(capplan_cli, str(real_env), env=env)
    assert code == int(ExitCode.WONT_RUN)
    assert [g["capability"] for g in data["gpus"]] == ["8.0", "6.1"]
    assert data["driver"] == {
        "version": "535.104.05",
        "source": "detected",
        "runs_cuda": "12.x",
    }  # any 12.x (issue 38)
    a100, gtx = _package(data, "torch")["verdicts"]
    assert a100["cause"] == "driver-runtime" and gtx["cause"] == "dropped-arch"
    code, data = _doctor(capplan_cli, str(real_env), "--driver", DRIVER_13_0, env=env)
    assert data["driver"]["source"] == "--driver"
    assert _package(data, "torch")["verdicts"][0]["level"] == "native"
