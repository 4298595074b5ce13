"""One bounded runner for every helper program (issue 31): nvidia-smi, rocminfo, nix, nix-store,
python3 (capplan's adapters) and nvidia-smi again (the dispatch selector) all go through
``selector.run_bounded``, which keeps at most ``limit`` bytes of output and kills the program's
whole process group past it or past its timeout. A fake nvidia-smi writing without end drove
``capplan detect`` to 12-19 GB before its timeout; here such a program is reported unusable as
soon as it passes the limit, and detection moves on to the next source.

The programs are real shell scripts on disk; no time is asserted (a hang fails the test through
the runner's own timeout, which is then named in the message the tests check).
"""

from __future__ import annotations

import os
import resource
import shutil
import stat
from pathlib import Path

import pytest

from capplan.adapters.detect.amd import detect_amd_gpus
from capplan.adapters.detect.nvidia import detect_gpus, run_nvidia_smi
from capplan.adapters.detect.tools import TOOL_OUTPUT_LIMIT
from capplan.adapters.kb import load_kb
from capplan.adapters.nix import nix_eval_json
from capplan.errors import NixError, NoGpuError
from capplan.runtime import selector

KB = load_kb()
# Writes a valid-looking nvidia-smi line without end (yes(1) is coreutils).
ENDLESS = 'exec yes "NVIDIA A100-SXM4-40GB, 8.0, 535.104.05"\n'


def _script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_output_past_the_limit_is_unusable_and_the_program_killed(tmp_path: Path) -> None:
    # The script's child (yes) holds the pipe too: only killing the group ends the read.
    program = _script(tmp_path, "chatty", "yes chatter &\nwait\n")
    done = selector.run_bounded([str(program)], timeout=60, limit=100_000)
    assert isinstance(done, selector.Unusable) and done.kind == "output"
    assert str(done) == f"{program} printed more than 97 KiB, the most read from it"


def test_stderr_counts_toward_the_limit(tmp_path: Path) -> None:
    program = _script(tmp_path, "noisy", "exec yes error >&2\n")
    done = selector.run_bounded([str(program)], timeout=60, limit=4096)
    assert isinstance(done, selector.Unusable) and done.kind == "output"


def test_output_within_the_limit_is_whole(tmp_path: Path) -> None:
    program = _script(
        tmp_path, "ok", "head -c 100000 /dev/zero | tr '\\0' x\necho err >&2\nexit 3\n"
    )
    done = selector.run_bounded([str(program)], timeout=60, limit=100_004)
    assert isinstance(done, selector.Finished)
    assert (done.returncode, len(done.stdout), done.stderr) == (3, 100_000, b"err\n")


def test_a_silent_hang_is_a_timeout(tmp_path: Path) -> None:
    program = _script(tmp_path, "stuck", "sleep 600 &\nwait\n")
    done = selector.run_bounded([str(program)], timeout=0.5, limit=1000)
    assert isinstance(done, selector.Unusable) and done.kind == "timeout"
    assert str(done) == f"{program} did not answer within 0.5 s"


@pytest.mark.parametrize(
    ("make", "kind"),
    [(lambda p: p / "absent", "missing"), (lambda p: _script(p, "x", "").parent, "denied")],
)
def test_a_program_that_cannot_start(tmp_path: Path, make: object, kind: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    done = selector.run_bounded([str(path)], timeout=10, limit=1000)
    assert isinstance(done, selector.Unusable) and done.kind == kind


def test_endless_nvidia_smi_is_unusable_in_detect(tmp_path: Path) -> None:
    smi = _script(tmp_path / "bin", "nvidia-smi", ENDLESS)
    gpus, why = run_nvidia_smi(str(smi), timeout=120)
    assert gpus == []
    assert why == f"{smi} printed more than {TOOL_OUTPUT_LIMIT >> 20} MiB, the most read from it"
    env = {
        "PATH": str(tmp_path / "empty"),
        "CAPPLAN_NVIDIA_SMI": str(smi),
        "CAPPLAN_SYSFS_ROOT": str(tmp_path / "no-sys"),
    }
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(NoGpuError, match="printed more than 4 MiB"):
        detect_gpus(env=env, proc_root=tmp_path / "no-proc", kb=KB, timeout=120)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 256 * 1024, f"detect grew by {grown_kib} KiB reading nvidia-smi"


def test_endless_nvidia_smi_in_the_dispatch_selector(tmp_path: Path) -> None:
    smi = _script(tmp_path / "bin", "nvidia-smi", ENDLESS.replace(", 535.104.05", ""))
    env = {
        "CAPPLAN_NVML": "0",
        "CAPPLAN_NVIDIA_SMI": str(smi),
        "CAPPLAN_SYSFS_ROOT": str(tmp_path / "no-sys"),
    }
    table = {"version": 1, "package": "torch", "fallback": "error", "variants": [], "pci": {}}
    chosen = selector.choose(table, env)
    assert chosen.gpus == [] and chosen.exit_code == selector.EXIT_NO_GPU
    assert f"nvidia-smi: {smi} printed more than 1 MiB, the most read from it" in chosen.notes


def test_endless_rocminfo_is_unusable(tmp_path: Path) -> None:
    rocminfo = _script(tmp_path / "bin", "rocminfo", 'exec yes "  Name:  gfx90a"\n')
    env = {"CAPPLAN_ROCMINFO": str(rocminfo), "CAPPLAN_SYSFS_ROOT": str(tmp_path / "no-sys")}
    gpus, notes = detect_amd_gpus(env={**env, "PATH": os.environ.get("PATH", "")}, timeout=120)
    assert gpus == []
    assert notes == [f"{rocminfo} printed more than 4 MiB, the most read from it"]


def test_endless_nix_is_a_nix_error(tmp_path: Path) -> None:
    _script(tmp_path / "bin", "nix", f"exec {shutil.which('yes')} '\"x\",'\n")
    with pytest.raises(NixError, match="printed more than 64 MiB") as caught:
        nix_eval_json(["--expr", "1"], env={"PATH": str(tmp_path / "bin")}, timeout=300)
    assert caught.value.message.startswith("nix eval is unusable: nix printed more than")


def test_no_other_module_starts_programs() -> None:
    """The runner stays the only one: no module of capplan but the selector imports subprocess
    (or starts programs another way), so every new helper program gets the same bounds."""
    src = Path(selector.__file__).resolve().parents[1]
    starters = ("import subprocess", "from subprocess", "os.system(", "os.popen(", "os.exec")
    offenders = []
    for path in sorted(src.rglob("*.py")):
        if path.name == "selector.py" and path.parent.name == "runtime":
            continue
        text = path.read_text(encoding="utf-8")
        offenders += [f"{path.relative_to(src)}: {s}" for s in starters if s in text]
    assert offenders == []
