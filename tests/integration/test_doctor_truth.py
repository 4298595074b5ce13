"""Issue 38: doctor's verdict is the one the driver would give, on libraries nvcc 13 builds here
and on real wheels, for ten GPUs and five drivers.

The expected verdicts are computed below by ``expected`` from NVIDIA's documented rules and from
what each artifact holds (its nvcc flags, or for a real wheel the facts stated beside it), never
from doctor's own output:

- SASS ``sm_XY`` runs on X.Z with Z >= Y; ``sm_XYa`` only on X.Y; ``sm_XYf`` within its family
  (same major, minor >= Y); PTX ``compute_XY`` JITs on any device >= X.Y (CUDA C++ Programming
  Guide, "Binary Compatibility" and "PTX Compatibility"; ../shared/CUDA.md).
- CUDA 13 dropped compute capabilities below 7.5; a CUDA 13 build with no code for a V100 is
  "dropped-arch" (CUDA 13.0 release notes).
- A CUDA N build needs a driver of N's minor-version compatibility minimum (12.x >= 525.60.13,
  13.x >= 580.65.06; CUDA Compatibility guide, release notes Table 2), whether cudart is linked
  dynamically, statically (nvcc's default) or dlopened.
- A driver older than the GPU does not know it: Blackwell (B200, RTX 5090) needs R570 (570.26,
  CUDA 12.8's driver, release notes Table 3), whatever the code.
- An x86_64 library never loads on a Jetson (an aarch64 host), whatever SASS it holds.
- A cubin with no kernel and PTX whose entries are empty launch nothing: such a library "runs"
  (no GPU code of its own) wherever its driver runs its CUDA major.

Real wheels come from /opt/pypi*/files or are fetched once with ``pip download`` into the test
cache (tests skip with the reason when a wheel cannot be had); only the named members are
unpacked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from capplan.errors import ExitCode

CACHE = Path(tempfile.gettempdir()) / "capplan-test-cache" / "wheels"
ROOTS = (Path("/opt/pypi-more/files"), Path("/opt/pypi/files"), CACHE)

GPUS = {  # --device name -> capability
    "H100": "9.0",
    "A100": "8.0",
    "RTX 3090": "8.6",
    "L4": "8.9",
    "RTX 4090": "8.9",
    "B200": "10.0",
    "RTX 5090": "12.0",
    "T4": "7.5",
    "V100": "7.0",
    "Jetson AGX Orin": "8.7",
}
DRIVERS = ("580.159.04", "575.57.08", "570.172.08", "550.163.01", "535.261.03")
# The first driver that knows the GPU (kb/capabilities.json, CUDA 12.8 release notes Table 3).
GPU_DRIVER = {"B200": "570.26", "RTX 5090": "570.26"}
MAJOR_DRIVER = {12: "525.60.13", 13: "580.65.06"}
ARM_HOSTS = {"Jetson AGX Orin"}

KERNEL = """\
__global__ void scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0f + 1.0f;
}
extern "C" void launch(float *x, int n) { scale<<<(n + 255) / 256, 256>>>(x, n); }
"""
# Device code with nothing to launch: a __device__ variable only (a cubin with no .text), and a
# kernel that only returns (PTX ``.entry nop() { ret; }``, like cuDNN's nopHardwareDetection).
NO_KERNEL = '__device__ int counter[4];\nextern "C" int get(void) { return 0; }\n'
EMPTY_KERNEL = '__global__ void nop() {}\nextern "C" void launch(void) { nop<<<1, 1>>>(); }\n'


def _g(arch: str, code: str) -> list[str]:
    return ["-gencode", f"arch={arch},code={code}"]


# name: (source, nvcc flags, facts). Facts: SASS and PTX capabilities, the CUDA major, and
# whether the library has nothing to launch.
BUILDS: dict[str, tuple[str, list[str], dict[str, Any]]] = {
    "sass86": (KERNEL, _g("compute_86", "sm_86"), {"sass": ["8.6"]}),
    "ptx80": (KERNEL, _g("compute_80", "compute_80"), {"ptx": ["8.0"]}),
    "sm90a": (KERNEL, _g("compute_90a", "sm_90a"), {"sass": ["9.0a"]}),
    "sm100f": (KERNEL, _g("compute_100f", "sm_100f"), {"sass": ["10.0f"]}),
    "fat_ptx": (
        KERNEL,
        [
            *_g("compute_75", "sm_75"),
            *_g("compute_80", "sm_80"),
            *_g("compute_90", "[sm_90,compute_90]"),
        ],
        {"sass": ["7.5", "8.0", "9.0"], "ptx": ["9.0"]},
    ),
    "fat_noptx": (
        KERNEL,
        [*_g("compute_75", "sm_75"), *_g("compute_80", "sm_80"), *_g("compute_90", "sm_90")],
        {"sass": ["7.5", "8.0", "9.0"]},
    ),
    "zstd80": (
        KERNEL,
        ["--compress-mode=size", *_g("compute_80", "[sm_80,compute_80]")],
        {"sass": ["8.0"], "ptx": ["8.0"]},
    ),
    "plain80": (
        KERNEL,
        ["--compress-mode=none", *_g("compute_80", "[sm_80,compute_80]")],
        {"sass": ["8.0"], "ptx": ["8.0"]},
    ),
    "lz4_86": (
        KERNEL,
        [
            "--compress-mode=speed",
            "-Xfatbin=-compress-all",
            *_g("compute_86", "[sm_86,compute_86]"),
        ],
        {"sass": ["8.6"], "ptx": ["8.6"]},
    ),
    "nokernel": (NO_KERNEL, _g("compute_80", "sm_80"), {"stub": True}),
    "nokernel_lz4": (
        NO_KERNEL,
        ["--compress-mode=speed", "-Xfatbin=-compress-all", *_g("compute_80", "sm_80")],
        {"stub": True},
    ),
    "emptyptx": (EMPTY_KERNEL, _g("compute_80", "compute_80"), {"stub": True}),
}

# Real wheels: (wheel file name, member, facts). The facts are the libraries' documented or
# measured contents (cuobjdump --list-elf agrees), stated here, not read back from doctor.
WHEELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    # nvidia-cufft 12.0.0.61 (CUDA 13): libcufftw holds one 1,904-byte sm_75 cubin without a
    # kernel; the FFTW API calls libcufft. It runs on every GPU (issue 38, checked on an H200).
    "cufftw13": (
        "nvidia_cufft-12.0.0.61-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "nvidia/cu13/lib/libcufftw.so.12",
        {"stub": True, "major": 13},
    ),
    # nvidia-cufft-cu12 11.4.1.4 (CUDA 12): an 872-byte sm_52 cubin without a kernel.
    "cufftw12": (
        "nvidia_cufft_cu12-11.4.1.4-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "nvidia/cufft/lib/libcufftw.so.11",
        {"stub": True, "major": 12},
    ),
    # nvidia-cusparse 12.9.4.2 (CUDA 13): built for sm_75 and up; 34 containers left from a CUDA
    # 12.8 build carry sm_70 beside 121 that hold sm_75 without it: CUDA 13 removed Volta.
    "cusparse": (
        "nvidia_cusparse-12.9.4.2-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "nvidia/cu13/lib/libcusparse.so.12",
        {"sass": ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"], "major": 13},
    ),
    # cupy-cuda13x 14.2.0: cudart 13.2 linked statically (no DT_NEEDED says CUDA 13).
    "cupy_thrust": (
        "cupy_cuda13x-14.2.0-cp311-cp311-manylinux2014_x86_64.whl",
        "cupy/cuda/thrust.cpython-311-x86_64-linux-gnu.so",
        {
            "sass": ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0f", "12.0f"],
            "ptx": ["12.0"],
            "major": 13,
        },
    ),
    # Its runtime module has no device code but cudart 13 linked statically (libcudart_static
    # symbols); only the distribution's name says 13: it needs a 13.x driver all the same.
    "cupy_runtime": (
        "cupy_cuda13x-14.2.0-cp311-cp311-manylinux2014_x86_64.whl",
        "cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so",
        {"stub": True, "major": 13},
    ),
    # jax-cuda13-plugin: dlopens CUDA 13 through RPATH $ORIGIN/../nvidia/cu13/lib.
    "jax_linalg": (
        "jax_cuda13_plugin-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl",
        "jax_cuda13_plugin/_linalg.so",
        {"sass": ["7.5", "8.0", "9.0", "10.0", "11.0", "12.0"], "ptx": ["12.0"], "major": 13},
    ),
    # Per-arch kernel sets that must raise no false alarm (rule 5 of issue 38).
    "cublasLt": (
        "nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl",
        "nvidia/cu13/lib/libcublasLt.so.13",
        {"sass": ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0"], "major": 13},
    ),
    "curand": (
        "nvidia_curand-10.4.0.35-py3-none-manylinux_2_27_x86_64.whl",
        "nvidia/cu13/lib/libcurand.so.10",
        {"sass": ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"], "major": 13},
    ),
    "nccl": (
        "nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl",
        "nvidia/nccl/lib/libnccl.so.2",
        {"sass": ["7.5", "8.0", "9.0", "10.0", "12.0"], "major": 13},
    ),
    "cudnn_engines": (
        "nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
        "nvidia/cudnn/lib/libcudnn_engines_runtime_compiled.so.9",
        {"sass": ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"], "major": 13},
    ),
    # cuDNN 9.24's libcudnn_ext.so.9 holds only cubins without a kernel (70 of them, up to
    # 16 kB each): no GPU code of its own.
    "cudnn_ext": (
        "nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
        "nvidia/cudnn/lib/libcudnn_ext.so.9",
        {"stub": True, "major": 13},
    ),
}
# Fetched with pip download when not on disk (about 0.5 GB together).
FETCH = {
    "cufftw12": "nvidia-cufft-cu12==11.4.1.4",
    "cupy_runtime": "cupy-cuda13x==14.2.0",
    "cusparse": "nvidia-cusparse==12.9.4.2",
    "cupy_thrust": "cupy-cuda13x==14.2.0",
    "jax_linalg": "jax-cuda13-plugin==0.10.2",
}


def _cap(text: str) -> tuple[int, int, str]:
    suffix = text[-1] if text[-1] in "af" else ""
    major, minor = text.rstrip("af").split(".")
    return int(major), int(minor), suffix


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def _code(facts: dict[str, Any], device: str) -> str | None:
    """'sass', 'ptx-jit' or None: what of the library runs on the device (NVIDIA's rules)."""
    major, minor, _ = _cap(device)
    for sass in facts.get("sass", ()):
        s_major, s_minor, suffix = _cap(sass)
        exact = (s_major, s_minor) == (major, minor)
        if (suffix == "a" and exact) or (suffix != "a" and s_major == major and minor >= s_minor):
            return "sass"
    for ptx in facts.get("ptx", ()):
        p_major, p_minor, _ = _cap(ptx)
        if (major, minor) >= (p_major, p_minor):
            return "ptx-jit"
    return None


def expected(facts: dict[str, Any], gpu: str, driver: str) -> str:
    major = facts.get("major", 13)  # every nvcc build here is CUDA 13.0
    cap = GPUS[gpu]
    if gpu in ARM_HOSTS:
        return "cannot-run:machine"
    if gpu in GPU_DRIVER and _key(driver) < _key(GPU_DRIVER[gpu]):
        return "cannot-run:driver-gpu"
    if not facts.get("stub") and _code(facts, cap) is None:
        dropped = major >= 13 and _key(cap) < (7, 5)
        return "cannot-run:" + ("dropped-arch" if dropped else "device-code")
    if _key(driver) < _key(MAJOR_DRIVER[major]):
        return "cannot-run:driver-runtime"
    if facts.get("stub"):
        return "runs"
    return str(_code(facts, cap))


def _said(verdict: dict[str, Any]) -> str:
    level = verdict["level"]
    if level in ("native", "compatible"):
        return "sass"
    if level == "cannot-run":
        return f"cannot-run:{verdict['cause']}"
    return str(level)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory, nvcc_bin: Path) -> dict[str, Path]:
    """Every nvcc build as a shared library (cudart static, nvcc's default), in one folder."""
    out = tmp_path_factory.mktemp("doctor-truth")
    libs = {}
    for name, (source, flags, _) in BUILDS.items():
        cu = out / f"{name}.cu"
        cu.write_text(source)
        lib = out / "env" / f"lib{name}.so"
        lib.parent.mkdir(exist_ok=True)
        subprocess.run(
            [str(nvcc_bin), "-shared", "-Xcompiler", "-fPIC", *flags, "-o", str(lib), str(cu)],
            check=True, capture_output=True,
        )  # fmt: skip
        libs[name] = lib
    return libs


def _wheel(name: str) -> Path | None:
    file = WHEELS[name][0]
    for root in ROOTS:
        if (root / file).is_file():
            return root / file
    spec = FETCH.get(name)
    if spec is None:
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d"]
    try:
        subprocess.run([*pip, str(CACHE), spec], check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError):
        return None
    return CACHE / file if (CACHE / file).is_file() else None


@pytest.fixture(scope="module")
def wheel_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The real libraries that could be had, each unpacked alone from its wheel."""
    out = tmp_path_factory.mktemp("doctor-wheels")
    libs = {}
    for name, (_, member, _) in WHEELS.items():
        wheel = _wheel(name)
        if wheel is None:
            continue
        with zipfile.ZipFile(wheel) as archive:
            # The member and its distribution's RECORD, as in a site-packages: doctor groups
            # the library into its package by RECORD, whose name may say the CUDA major.
            records = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
            for item in (member, *records):
                archive.extract(item, out / name)
        libs[name] = out / name / member
    return libs


def _run(cli: Any, paths: list[Path], driver: str) -> dict[str, Any]:
    devices = [a for gpu in GPUS for a in ("--device", gpu)]
    result = cli("doctor", *map(str, paths), *devices, "--driver", driver, "--json")
    assert "Traceback" not in result.stderr
    assert result.exit_code in (0, int(ExitCode.WONT_RUN)), result.stderr
    return dict(json.loads(result.stdout))


def _mismatches(
    data: dict[str, Any], by_path: dict[str, str], facts: dict[str, dict[str, Any]], driver: str
) -> list[str]:
    labels = [g["label"] for g in data["gpus"]]
    assert len(labels) == len(GPUS)
    seen = set()
    wrong = []
    for package in data["packages"]:
        for lib in package["libraries"]:
            name = next((n for p, n in by_path.items() if lib["path"].endswith(p)), None)
            if name is None:
                continue
            seen.add(name)
            for gpu, verdict in zip(GPUS, lib["verdicts"], strict=True):
                want = expected(facts[name], gpu, driver)
                if _said(verdict) != want:
                    wrong.append(f"{name} on {gpu} with {driver}: doctor {_said(verdict)}, "
                                 f"driver {want} ({verdict['reason']})")  # fmt: skip
    missing = set(by_path.values()) - seen
    assert not missing, f"doctor did not judge {sorted(missing)}"
    return wrong


@pytest.mark.parametrize("driver", DRIVERS)
def test_nvcc_builds_get_the_drivers_verdict(
    capplan_in: Any, artifacts: dict[str, Path], driver: str
) -> None:
    data = _run(capplan_in, [artifacts["sass86"].parent], driver)
    by_path = {f"/lib{name}.so": name for name in BUILDS}
    facts = {name: BUILDS[name][2] for name in BUILDS}
    wrong = _mismatches(data, by_path, facts, driver)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("driver", DRIVERS)
def test_real_wheels_get_the_drivers_verdict(
    capplan_in: Any, wheel_libs: dict[str, Path], driver: str
) -> None:
    if not wheel_libs:
        pytest.skip("none of the wheels is on this machine or obtainable with pip download")
    # Each library's folder as a site-packages (its RECORD names the package, as pip installs).
    roots = sorted(
        path.parents[len(Path(WHEELS[n][1]).parts) - 1] for n, path in wheel_libs.items()
    )
    data = _run(capplan_in, roots, driver)
    by_path = {f"/{name}/{WHEELS[name][1]}": name for name in wheel_libs}
    facts = {name: WHEELS[name][2] for name in wheel_libs}
    wrong = _mismatches(data, by_path, facts, driver)
    assert not wrong, "\n".join(wrong)


def test_every_real_wheel_was_had(wheel_libs: dict[str, Path]) -> None:
    missing = sorted(set(WHEELS) - set(wheel_libs))
    if missing:
        pytest.skip(f"not on this machine and not obtainable with pip download: {missing}")


def test_stub_library_says_it_has_no_gpu_code(capplan_in: Any, artifacts: dict[str, Path]) -> None:
    result = capplan_in("doctor", str(artifacts["nokernel"]), "--device", "A100",
                        "--driver", DRIVERS[0], "--json")  # fmt: skip
    assert result.exit_code == 0, result.stdout
    (package,) = json.loads(result.stdout)["packages"]
    (lib,) = package["libraries"]
    assert lib["sass"] == [] and lib["ptx"] == []
    assert "no GPU code of its own" in lib["verdicts"][0]["reason"]
    assert lib["cuda_majors"] == [13]  # its cubin's toolkit note: "release 13.0"


def test_gpu_newer_than_the_driver_names_the_driver(
    capplan_in: Any, artifacts: dict[str, Path]
) -> None:
    # An RTX 5090 with a 550 driver: the driver, not the code, is the first fix.
    result = capplan_in("doctor", str(artifacts["fat_noptx"]), "--device", "RTX 5090",
                        "--driver", "550.163.01")  # fmt: skip
    assert result.exit_code == int(ExitCode.WONT_RUN)
    assert "fix: NVIDIA driver >= 580.65.06" in result.stdout  # and CUDA 13's minimum
    assert "predates this GPU" in result.stdout
    assert "a build with SASS" not in result.stdout


def test_bottom_line_fits_80_columns(capplan_in: Any, artifacts: dict[str, Path]) -> None:
    result = capplan_in("doctor", str(artifacts["sass86"].parent), "--device", "T4",
                        "--driver", DRIVERS[0])  # fmt: skip
    last = result.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    assert "checked:" in last and len(last) <= 80, last


def test_a_cuda_12_library_runs_on_the_drivers_cuda_12_accepts(
    capplan_in: Any, wheel_libs: dict[str, Path]
) -> None:
    # The cu12 libcufftw stub on a V100 (CUDA 12 keeps Volta) and a 535 driver: it runs.
    if "cufftw12" not in wheel_libs:
        pytest.skip("nvidia-cufft-cu12 11.4.1.4 is not here and pip download could not get it")
    result = capplan_in("doctor", str(wheel_libs["cufftw12"]), "--device", "V100",
                        "--driver", "535.261.03")  # fmt: skip
    assert result.exit_code == 0, result.stdout


def test_no_zstd_decoder_leaves_compressed_entries_as_code(
    artifacts: dict[str, Path], tmp_path: Path
) -> None:
    # Without the zstandard package doctor cannot open zstd entries: it then counts them as code
    # (the behaviour before issue 38), never as stubs. Run in a process that cannot import it.
    script = (
        "import sys; sys.modules['zstandard'] = None\n"
        "from capplan.adapters.environment import _library\n"
        "import os\n"
        f"p = {str(artifacts['zstd80'])!r}\n"
        "lib = _library(p, p, 'k', os.path.getsize(p))\n"
        "print(sorted(c.sm for c in lib.sass))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ), check=True)  # fmt: skip
    assert done.stdout.strip() == "['sm_80']"


def test_rpath_to_a_cu13_folder_makes_a_cuda_13_library(capplan_in: Any, tmp_path: Path) -> None:
    # A host library (no device code, no libcudart in DT_NEEDED) that needs a CUDA library and
    # finds it through RPATH $ORIGIN/../nvidia/cu13/lib, as jax's CUDA 13 plugins do: it needs a
    # 13.x driver. Built here with gcc against the CUDA toolkit's libcupti.
    gcc = shutil.which("gcc")
    cuda_lib = Path("/usr/local/cuda/lib64")
    if gcc is None or not (cuda_lib / "libcupti.so").exists():
        pytest.skip("gcc or /usr/local/cuda/lib64/libcupti.so not on this machine")
    source = tmp_path / "plugin.c"
    source.write_text("int plugin_version(void) { return 1; }\n")
    lib = tmp_path / "site" / "plugin" / "libplugin.so"
    lib.parent.mkdir(parents=True)
    subprocess.run(
        [gcc, "-shared", "-fPIC", str(source), "-o", str(lib), "-Wl,--no-as-needed",
         f"-L{cuda_lib}", "-lcupti", "-Wl,-rpath,$ORIGIN/../nvidia/cu13/lib",
         "-Wl,-soname,libplugin.so"],
        check=True, capture_output=True,
    )  # fmt: skip
    result = capplan_in("doctor", str(lib.parent.parent), "--device", "A100",
                        "--driver", "570.172.08", "--json")  # fmt: skip
    assert result.exit_code == int(ExitCode.WONT_RUN), result.stdout
    (package,) = json.loads(result.stdout)["packages"]
    (found,) = package["libraries"]
    assert found["cuda_majors"] == [13]
    verdict = found["verdicts"][0]
    assert verdict["cause"] == "driver-runtime" and "RPATH" in verdict["reason"]
    # Without the RPATH the same library says no CUDA major: it is not judged at all, and the
    # folder holds no GPU code: nothing to check (exit 3).
    plain = tmp_path / "plain" / "x" / "libplugin.so"
    plain.parent.mkdir(parents=True)
    subprocess.run(
        [gcc, "-shared", "-fPIC", str(source), "-o", str(plain), "-Wl,--no-as-needed",
         f"-L{cuda_lib}", "-lcupti", "-Wl,-soname,libplugin.so"],
        check=True, capture_output=True,
    )  # fmt: skip
    result = capplan_in("doctor", str(plain.parent.parent), "--device", "A100",
                        "--driver", "570.172.08", "--json")  # fmt: skip
    assert result.exit_code == int(ExitCode.NOTHING_TO_DO), result.stderr
    assert "holds no GPU code" in result.stderr and not result.stdout
