"""Fixtures every test area shares: paths, a clean CLI runner, and tool availability."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from click.testing import CliRunner, Result

from capplan.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
NVCC = Path("/usr/local/cuda/bin/nvcc")
LLVM16 = Path("/usr/lib/llvm-16/bin")


def llvm16_tool(name: str) -> Path:
    """Debian's LLVM 16 tool ``name`` (clang, clang-offload-bundler, ...), or skip the test
    with the reason when it is not installed."""
    found = shutil.which(f"{name}-16") or (
        str(LLVM16 / name) if (LLVM16 / name).is_file() else None
    )
    if found is None:
        pytest.skip(f"{name}-16 not installed (scripts/setup --dev installs Debian's LLVM 16)")
    return Path(found)


T = TypeVar("T")
NOBODY = 65534  # nobody / nogroup on Debian


def unprivileged(action: Callable[[], T]) -> T:
    """``action()`` run as an unprivileged user: directly when the suite is not root, else in a
    forked child that drops to nobody (setgroups, setgid, setuid) before it runs, so tests of
    permission errors run under root too. The child uses the modules already imported (run the
    action once as root first when it imports lazily); its result comes back pickled."""
    if os.geteuid() != 0:
        return action()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            payload = pickle.dumps(("ok", action()))
        except BaseException as error:
            payload = pickle.dumps(("error", repr(error)))
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        data = handle.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data)
    if status != "ok":
        raise AssertionError(f"the unprivileged child failed: {value}")
    return value  # type: ignore[no-any-return]


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary folder any user can enter (pytest's own tmp_path is root's alone under
    /tmp/pytest-of-root), for tests run through :func:`unprivileged`."""
    folder = Path(tempfile.mkdtemp(prefix="capplan-open-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "data" / "nixpkgs-cuda-capabilities.tsv").is_file():
        pytest.skip(f"../shared is not beside the repository ({SHARED})")
    return SHARED


@pytest.fixture(scope="session")
def nix_bin() -> str:
    found = shutil.which("nix")
    if found is None:
        pytest.skip("nix not found on PATH (scripts/setup --dev installs Debian's nix-bin)")
    return found


@pytest.fixture(scope="session")
def nvcc_bin() -> Path:
    if NVCC.is_file():
        return NVCC
    found = shutil.which("nvcc")
    if found is None:
        pytest.skip(f"nvcc not found at {NVCC} or on PATH")
    return Path(found)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests never see the developer's CAPPLAN_* settings, colours or terminal width."""
    for name in list(os.environ):
        if name.startswith("CAPPLAN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
    yield


class Cli:
    """Runs ``capplan`` in-process with click's CliRunner (stdout and stderr kept apart)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Result:
        runner = CliRunner()
        old = Path.cwd()
        os.chdir(self.cwd)
        try:
            return runner.invoke(cli, list(args), env=env, catch_exceptions=False)
        finally:
            os.chdir(old)


@pytest.fixture
def capplan_cli() -> Cli:
    """``capplan`` run from the repository root (so the embedded capplan.toml applies)."""
    return Cli(REPO)


@pytest.fixture
def capplan_in(tmp_path: Path) -> Cli:
    """``capplan`` run from an empty temporary folder (write a capplan.toml there)."""
    return Cli(tmp_path)
