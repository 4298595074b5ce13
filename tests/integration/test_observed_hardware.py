"""capplan's compatibility rules against what a real GPU did.

tests/data/observed/h100-kernel-launches.txt records launches of a one-line kernel on a real
NVIDIA H100 (9.0, driver 580.159.04), each built by nvcc 13.0 with one `-gencode` target. For
every row, capplan must say "runs" exactly when the kernel ran: first from the target alone
(core/families/cuda/compat), then from the bytes of the same build made here (the fatbin reader feeding the
same rules), so a wrong rule or a misread binary shows up as a disagreement with the hardware.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from capplan.adapters.fatbin import inspect_paths
from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.binary import cuda_code
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import how_runs

OBSERVED = Path(__file__).resolve().parents[1] / "data" / "observed" / "h100-kernel-launches.txt"
KERNEL = "__global__ void k(int *o) { *o = 42; }\n"


class Launch(NamedTuple):
    arch: str  # nvcc's arch=, e.g. compute_90a
    code: str  # nvcc's code=, sm_XY (SASS only) or compute_XY (PTX only)
    ran: bool
    what: str


def _observations() -> tuple[Capability, list[Launch]]:
    device: Capability | None = None
    rows: list[Launch] = []
    for line in OBSERVED.read_text().splitlines():
        if line.startswith("# device "):
            device = Capability.parse(line.removeprefix("# device "))
        if not line or line.startswith("#"):
            continue
        targets, rc, what = line.split("|")
        arch, code = targets.split(",")
        rows.append(Launch(arch, code, rc == "rc=0", what))
    assert device is not None, "the observation file names its device"
    return device, rows


DEVICE, LAUNCHES = _observations()


def test_observations_cover_every_kind_of_answer() -> None:
    # Both outcomes, SASS and PTX, and a/f suffixes: a file that lost rows would weaken the test.
    assert {launch.ran for launch in LAUNCHES} == {True, False}
    assert any(launch.code.startswith("compute_") and launch.ran for launch in LAUNCHES)
    assert any(launch.code.endswith(("a", "f")) for launch in LAUNCHES)


@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda launch: f"{launch.arch}-{launch.code}")
def test_rules_agree_with_the_hardware(launch: Launch) -> None:
    target = Capability.parse(launch.code)
    is_ptx = launch.code.startswith("compute_")
    verdict = how_runs(DEVICE, () if is_ptx else (target,), (target,) if is_ptx else ())
    assert (verdict.level is not RunLevel.CANNOT_RUN) == launch.ran, (
        f"{launch.arch},{launch.code} on {DEVICE}: the H100 said {launch.what!r}, "
        f"capplan said {verdict.level.value}: {verdict.reason}"
    )


# One row of each kind is rebuilt here: SASS that runs, SASS of another major, arch-specific
# SASS, PTX JIT across majors, PTX newer than the device, family SASS of another family.
_REBUILT = [
    launch
    for launch in LAUNCHES
    if (launch.arch, launch.code)
    in {
        ("compute_90", "sm_90"),
        ("compute_80", "sm_80"),
        ("compute_90a", "sm_90a"),
        ("compute_80", "compute_80"),
        ("compute_100", "compute_100"),
        ("compute_100f", "sm_100f"),
    }
]


@pytest.mark.nvcc
@pytest.mark.parametrize("launch", _REBUILT, ids=lambda launch: f"{launch.arch}-{launch.code}")
def test_inspected_binaries_agree_with_the_hardware(
    launch: Launch, nvcc_bin: Path, tmp_path: Path
) -> None:
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)
    obj = tmp_path / "k.o"
    subprocess.run(
        [
            str(nvcc_bin),
            "-c",
            f"-gencode=arch={launch.arch},code={launch.code}",
            "-o",
            str(obj),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (code,) = cuda_code(inspect_paths([obj]))
    verdict = how_runs(DEVICE, code.sass, code.ptx)
    assert (verdict.level is not RunLevel.CANNOT_RUN) == launch.ran, (
        f"{obj} holds SASS {[c.sm for c in code.sass]} PTX {[c.compute for c in code.ptx]}; "
        f"the H100 said {launch.what!r}, capplan said {verdict.level.value}"
    )
