"""``capplan build``'s hands: Nix's version and settings, the builders it reads, and the
``nix build`` / push processes it runs, each in a process group of its own.

One ``nix build`` per job, of the job's derivation path (evaluated once, up front): no flake
evaluation per job, so a job costs one nix process (about 20 ms here, and several run at once),
and each job's own exit status says whether it failed, with no log parsing. Nix still places
each derivation on a machine (``--builders``, ``--max-jobs`` passed on) and builds whatever the
derivation needs that is not a job of the plan.

Stopping: Nix runs each builder in a session of its own and kills it when it is itself
interrupted (SIGINT/SIGTERM), releasing its locks; a SIGKILL would leave builders running. So
:meth:`Processes.stop_all` sends SIGTERM to each group, waits a grace period, then SIGKILLs
what is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capplan.core.planning.builders import Machine
from capplan.core.planning.failures import log_tail
from capplan.errors import InvalidInputError, NixError, shorten
from capplan.runtime.selector import Unusable, run_bounded

__all__ = [
    "NIX_MINIMUM",
    "Finished",
    "Processes",
    "build_argv",
    "builders_text",
    "check_push_target",
    "failure_log",
    "invalid_paths",
    "local_machine",
    "nix_settings",
    "nix_version",
    "push_argv",
]

NIX_MINIMUM = (2, 8)  # Debian's nix-bin: the oldest Nix the tests run
_FEATURES = ["--extra-experimental-features", "nix-command flakes"]
_TAIL = 64 * 1024  # what is kept of each process's stderr: the last lines say why it failed
_GRACE = 10.0  # seconds Nix has to stop its builders after SIGTERM
_VERSION = re.compile(r"\(Nix\)\s+(\d+)\.(\d+)")
# How Nix says where it builds: "building '/nix/store/...drv' on 'ssh://host'..." (2.8, 2.18).
_ON_MACHINE = re.compile(r"building '([^']+)' on '([^']+)'")


def _quick(argv: list[str], what: str, timeout: float = 60.0) -> str:
    done = run_bounded(argv, timeout=timeout, limit=16 << 20)
    if isinstance(done, Unusable):
        if done.kind == "missing":
            raise NixError("nix not found", hint="install nix-bin (Debian) or Nix")
        raise NixError(f"{what}: {done}", hint="check the Nix installation")
    if done.returncode != 0:
        last = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise NixError(f"{what} failed: {shorten(last[0])}", hint="check the Nix installation")
    return done.stdout.decode(errors="replace")


def nix_version() -> tuple[int, int]:
    """Nix's version; NixError (exit 14) when nix is missing or older than 2.8."""
    text = _quick(["nix", "--version"], "nix --version")
    found = _VERSION.search(text)
    if found is None:
        raise NixError(f"nix --version said {shorten(text.strip())!r}", hint="install Nix 2.8+")
    version = (int(found.group(1)), int(found.group(2)))
    if version < NIX_MINIMUM:
        raise NixError(
            f"nix is {version[0]}.{version[1]}, capplan build needs 2.8 or newer",
            hint="upgrade Nix",
        )
    return version


def nix_settings() -> dict[str, Any]:
    """Nix's settings as it sees them (nix.conf, NIX_CONFIG): ``{name: value}``."""
    try:
        text = _quick(["nix", *_FEATURES, "show-config", "--json"], "nix show-config")
    except NixError:
        # Nix 2.20 renamed it `nix config show` (show-config went on as a deprecated alias).
        text = _quick(["nix", *_FEATURES, "config", "show", "--json"], "nix config show")
    try:
        data = json.loads(text)
        return {k: v["value"] for k, v in data.items() if isinstance(v, dict) and "value" in v}
    except (json.JSONDecodeError, TypeError) as exc:
        raise NixError("nix show-config --json printed no settings", hint="check Nix") from exc


def local_machine(settings: Mapping[str, Any], max_jobs: int | None) -> Machine:
    """This machine as a builder: its system, extra platforms and system features."""
    system = str(settings.get("system", ""))
    extra = settings.get("extra-platforms") or []
    features = settings.get("system-features") or []
    jobs = max_jobs if max_jobs is not None else settings.get("max-jobs", 1)
    return Machine(
        uri="local",
        systems=(system, *[str(p) for p in extra]),
        max_jobs=int(jobs) if isinstance(jobs, int) else 1,
        features=frozenset(str(f) for f in features),
    )


def builders_text(spec: str | None, settings: Mapping[str, Any]) -> str:
    """The machines text: ``--builders`` as given (``@FILE`` read), else Nix's ``builders``
    setting (its ``@/etc/nix/machines`` read when the file exists, as Nix does)."""
    from capplan.adapters.files import read_input_bytes

    given = spec is not None
    value = spec if spec is not None else str(settings.get("builders", ""))
    if not value.startswith("@"):
        return value
    path = Path(value[1:])
    if not given and not path.exists():
        return ""
    raw = read_input_bytes(path, hint="give --builders a machines file Nix can read")
    return raw.decode("utf-8", errors="replace")


def check_push_target(target: str) -> None:
    """Refuse a ``cachix:``/``attic:`` target whose program is not on PATH, before building."""
    for prefix, program in (("cachix:", "cachix"), ("attic:", "attic")):
        if target.startswith(prefix):
            if not target[len(prefix) :]:
                raise InvalidInputError(
                    f"--push {shorten(target)!r} names no cache", hint=f"write {prefix}NAME"
                )
            if shutil.which(program) is None:
                raise InvalidInputError(
                    f"--push {shorten(target)!r} needs {program}, which is not on PATH",
                    hint=f"install {program}, or push to a Nix store URL",
                )


def push_argv(target: str, paths: Sequence[str]) -> list[str]:
    """The command that pushes ``paths``: cachix push, attic push, or nix copy --to."""
    if target.startswith("cachix:"):
        return ["cachix", "push", target.removeprefix("cachix:"), *paths]
    if target.startswith("attic:"):
        return ["attic", "push", target.removeprefix("attic:"), *paths]
    return ["nix", *_FEATURES, "copy", "--to", target, *paths]


def build_argv(
    drvs: Sequence[str], version: tuple[int, int], builders: str | None, max_jobs: int | None
) -> list[str]:
    """``nix build --keep-going`` of the derivations' outputs (2.8 reads a .drv path as its
    outputs; from 2.13 on that is the .drv itself, and ``^*`` names every output)."""
    installables = list(drvs) if version < (2, 13) else [d + "^*" for d in drvs]
    argv = ["nix", *_FEATURES, "build", "--no-link", "--keep-going", *installables]
    if builders is not None:
        argv += ["--builders", builders]
    if max_jobs is not None:
        argv += ["--max-jobs", str(max_jobs)]
    return argv


def invalid_paths(paths: Sequence[str]) -> set[str]:
    """The store paths of ``paths`` that the local store does not hold (one nix-store call)."""
    if not paths:
        return set()
    out = _quick(
        ["nix-store", "--check-validity", "--print-invalid", *paths], "nix-store --check-validity"
    )
    return {line.strip() for line in out.splitlines() if line.strip()}


def failure_log(drv: str, stderr_tail: str) -> tuple[str, ...]:
    """The last lines of a failed build's log: ``nix log``, else what nix build printed."""
    done = run_bounded(["nix", *_FEATURES, "log", drv], timeout=60, limit=32 << 20)
    if not isinstance(done, Unusable) and done.returncode == 0 and done.stdout.strip():
        return log_tail(done.stdout.decode(errors="replace"))
    return log_tail(stderr_tail)


@dataclass
class _Running:
    key: str
    proc: subprocess.Popen[bytes]
    tail: bytearray = field(default_factory=bytearray)


@dataclass(frozen=True)
class Finished:
    key: str
    returncode: int
    stderr: str

    def machine(self, drv: str) -> str | None:
        """The remote machine Nix built ``drv`` on, when it says so."""
        for found in _ON_MACHINE.finditer(self.stderr):
            if found.group(1) == drv:
                return found.group(2)
        return None


class Processes:
    """Child processes, each in a session (and process group) of its own, whose stderr is read
    as it comes (its last 64 KiB kept) and whose end is seen as its stderr closes."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = None if env is None else dict(env)
        self._selector = selectors.DefaultSelector()
        self._running: dict[int, _Running] = {}

    def __len__(self) -> int:
        return len(self._running)

    def start(self, key: str, argv: list[str]) -> None:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=self._env,
                start_new_session=True,
            )
        except OSError as exc:
            raise NixError(
                f"cannot start {argv[0]}: {exc.strerror or exc}", hint="check it is installed"
            ) from None
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        os.set_blocking(fd, False)
        self._running[fd] = _Running(key, proc)
        self._selector.register(fd, selectors.EVENT_READ)

    def wait(self, timeout: float | None) -> list[Finished]:
        """The processes that ended within ``timeout`` seconds (None: until one ends)."""
        done: list[Finished] = []
        if not self._running:
            if timeout:
                time.sleep(timeout)
            return done
        for key, _ in self._selector.select(timeout):
            fd = int(key.fd)
            run = self._running[fd]
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if data:
                run.tail += data
                if len(run.tail) > 2 * _TAIL:
                    del run.tail[:-_TAIL]
                continue
            self._selector.unregister(fd)
            del self._running[fd]
            assert run.proc.stderr is not None
            run.proc.stderr.close()
            code = run.proc.wait()
            done.append(Finished(run.key, code, bytes(run.tail[-_TAIL:]).decode(errors="replace")))
        return done

    def stop_all(self, grace: float = _GRACE) -> list[str]:
        """SIGTERM to every group, SIGKILL to what is left after ``grace`` seconds; the keys of
        the processes stopped."""
        runs = list(self._running.values())
        for run in runs:
            _signal_group(run.proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for run in runs:
            try:
                run.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # Still there (so its pid is not reused): the whole group goes.
                _signal_group(run.proc, signal.SIGKILL)
                run.proc.wait()
        for fd, run in list(self._running.items()):
            self._selector.unregister(fd)
            assert run.proc.stderr is not None
            run.proc.stderr.close()
        self._running.clear()
        return [run.key for run in runs]


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(OSError):  # the group is gone already
        os.killpg(proc.pid, signum)
