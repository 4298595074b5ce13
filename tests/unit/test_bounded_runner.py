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
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


# The two modules that start programs the bounded runner cannot: `capplan run` replaces capplan
# with the user's program (exec: nothing of capplan is left to bound it), and `capplan build`
# keeps several `nix build` process groups running at once for hours, reading their events as
# they come, with its own stop on SIGINT/SIGTERM (tests/nix/test_build.py).
_OWN_STARTERS = {"cli/run.py": ("os.exec",), "adapters/nix_build.py": ("import subprocess",)}


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
        own = _OWN_STARTERS.get(path.relative_to(src).as_posix(), ())
        offenders += [f"{path.relative_to(src)}: {s}" for s in starters if s in text and s not in own]
    assert offenders == []


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for init to reap it has ended too)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return fields[0] in ("Z", "X")


def _wait_for(check: Any, what: str, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {seconds:g} s")
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("signum", "status"),
    [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGHUP, -signal.SIGHUP), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
def test_a_signal_to_capplan_ends_the_program_it_runs(
    tmp_path: Path, signum: int, status: int
) -> None:
    # A CI cancel sends SIGTERM to capplan; its `nix eval` (in a session of its own, so the
    # signal does not reach it) and that program's children must end with it.
    if signal.getsignal(signum) == signal.SIG_IGN:
        # capplan keeps an ignored signal ignored (nohup's SIGHUP; a shell's background job
        # ignores SIGINT), and it would inherit this one: nothing here to observe.
        pytest.skip(
            f"{signal.Signals(signum).name} is ignored in this test run (nohup or a background job)"
        )
    pids = tmp_path / "pids"
    pids.mkdir()
    _script(tmp_path / "bin", "nix",
            f'echo $$ > {pids}/nix\nsleep 600 &\necho $! > {pids}/sleep\nwait\n')  # fmt: skip
    (tmp_path / "nixpkgs").mkdir()
    (tmp_path / "nixpkgs" / "default.nix").write_text("{ ... }: { }\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    capplan = subprocess.Popen(
        [sys.executable, "-m", "capplan", "nixpkgs", "check", "--nixpkgs", "nixpkgs"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait_for(lambda: (pids / "sleep").is_file() and (pids / "sleep").read_text(), "nix")
        started = [int((pids / name).read_text()) for name in ("nix", "sleep")]
        capplan.send_signal(signum)
        _, stderr = capplan.communicate(timeout=60)
    finally:
        capplan.kill()
    assert capplan.returncode == status, stderr
    assert b"Traceback" not in stderr
    _wait_for(lambda: all(_gone(pid) for pid in started), "nix and its child ended", 10)


def test_nix_eval_has_a_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capplan_in: Any
) -> None:
    from capplan.adapters import nix

    _script(tmp_path / "bin", "nix", "sleep 600 &\nwait\n")
    (tmp_path / "nixpkgs").mkdir()
    (tmp_path / "nixpkgs" / "default.nix").write_text("{ ... }: { }\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(nix, "NIX_EVAL_SECONDS", 0.5)
    result = capplan_in("nixpkgs", "check", "--nixpkgs", str(tmp_path / "nixpkgs"))
    assert result.exit_code == 14, result.stderr
    assert "nix eval did not finish within 0.5 s" in result.stderr
