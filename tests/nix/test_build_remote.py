"""A real remote builder: Debian's openssh-server on 127.0.0.1 (a free port, a throwaway key,
its own sshd_config), declared to Nix as a builder with ``big-parallel``; this machine's Nix
declares no big-parallel. ``capplan build --builders 'ssh://...'`` must make Nix build torch
(big-parallel) there and everything else here.

Why a second store: the builder is this machine, and a remote build into the same store cannot
work. The local Nix holds the lock on the derivation's output paths while it hands the build to
the remote (DerivationGoal::tryToBuild locks the outputs, then tries the build hook), and the
remote ``nix-store --serve --write`` builds through the same store, so it waits for that very
lock forever (Nix 2.8 and 2.18 alike). The builder's URI gives it a store of its own instead:
``?remote-store=<folder>`` (a chroot store: the remote builds in a sandbox with <folder>/nix/store
mounted on /nix/store, which is why the remote program allows the stand-in's /bin and /usr into
the sandbox). Nix copies the inputs there and the outputs back, as with any remote machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from buildhelpers import build_env, by_event, planted_copy, run_build

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """(the builder's machines line, the remote program's log, NIX_SSHOPTS)."""
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        pytest.skip("no sshd (apt-get install openssh-server; scripts/setup --dev does)")
    if os.geteuid() != 0:
        pytest.skip("sshd here runs as root (privilege separation in /run/sshd)")
    nix_store = shutil.which("nix-store")
    assert nix_store is not None
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True
        )
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    (d / "client").chmod(0o600)
    port = _free_port()
    config = d / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nPidFile {d / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nLogLevel VERBOSE\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # Debian's privilege separation folder
    log = d / "remote.log"
    program = d / "remote-nix-store"
    # What sshd starts for Nix: the same nix-store (2.8, or 2.18 under scripts/nix218), with
    # the stand-in's /bin and /usr allowed into the chroot store's sandbox; each start logged.
    program.write_text(
        "#!/bin/sh\n"
        f'echo "remote nix-store $*" >> {log}\n'
        "export NIX_CONFIG='extra-sandbox-paths = /bin /lib /lib64 /usr'\n"
        f'exec {nix_store} "$@" 2>> {log}\n'
    )
    program.chmod(0o755)
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config), "-E", str(d / "sshd.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        else:
            pytest.skip(f"sshd did not listen on 127.0.0.1:{port}: {(d / 'sshd.log').read_text()}")
        store = d / "remote-store"
        uri = f"ssh://{os.environ.get('USER', 'root')}@127.0.0.1?remote-store={store}&remote-program={program}"
        # URI, systems, key, max-jobs, speed factor, supported and mandatory features: Nix
        # offers every build to the builders first, so the builder takes big-parallel only.
        line = f"{uri} x86_64-linux {d / 'client'} 1 1 big-parallel big-parallel"
        opts = f"-p {port} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes"
        yield line, log, opts
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_nix_builds_the_big_parallel_job_on_the_ssh_builder(
    builder: tuple[str, Path, str], tmp_path: Path
) -> None:
    line, log, opts = builder
    repo = planted_copy(tmp_path / "repo", f'{{ pname, record }}: "# remote-{uuid.uuid4().hex}\\n"')
    # This machine declares no big-parallel: only the builder can take torch.
    env = build_env("system-features = benchmark kvm nixos-test", big_parallel=False)
    env["NIX_SSHOPTS"] = opts
    proc, events = run_build(repo, "--only", "torch-sm86", "--builders", line, env=env)
    assert proc.returncode == 0, proc.stderr + "\n" + (log.read_text() if log.exists() else "")
    built = {e["job"]: e for e in events if e["event"] == "built"}
    assert set(built) == set(by_event(events, "started"))
    assert built["torch-sm86"]["machine"].startswith("ssh://")
    assert all(e["machine"] == "local" for name, e in built.items() if name != "torch-sm86")
    assert len(built) > 1  # torch's needs (cublas, magma, nccl, ...) built here
    remote = log.read_text()
    assert "remote nix-store --serve --write" in remote
    # The remote store holds torch's output, and no output of a job built here.
    torch_drv = next(
        e["derivation"] for e in events if e["event"] == "started" and e["job"] == "torch-sm86"
    )
    outs = subprocess.run(
        ["nix-store", "-q", "--outputs", torch_drv], capture_output=True, text=True, check=True
    ).stdout.split()
    store = Path(line.split("remote-store=")[1].split("&")[0])
    assert all((store / out.lstrip("/")).exists() for out in outs)
    assert all(Path(out).exists() for out in outs)  # and Nix copied it back


def test_a_job_no_builder_takes_is_named_up_front(tmp_path: Path) -> None:
    """Without the builder, torch (big-parallel) has no machine: one line, left out, no hang."""
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH")
    repo = planted_copy(tmp_path / "repo", '{ pname, record }: ""')
    env = build_env("system-features = benchmark kvm nixos-test", big_parallel=False)
    proc, events = run_build(repo, "--only", "torchvision-sm86", "--builders", "", env=env)
    assert proc.returncode == 0, proc.stderr  # what can be built was
    unbuildable = [e for e in events if e["event"] == "unbuildable"]
    assert [e["job"] for e in unbuildable] == ["torch-sm86"]
    assert unbuildable[0]["detail"] == "no x86_64-linux builder has big-parallel"
    assert by_event(events, "blocked") == ["torchvision-sm86"]
    assert not {"torch-sm86", "torchvision-sm86"} & set(by_event(events, "started"))
