"""Bounded reads (issue "what a new user meets", item 2): every file capplan reads from a user is
refused when it is not a regular file (a FIFO would hang the open, /dev/zero never ends) or is
larger than its limit, with one line and the command's documented exit code.

Each command runs in a subprocess with a timeout, so a hang is a failure, not a stuck suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.integration.fuzzing import at_most

from capplan.adapters.detect.amd import read_kfd
from capplan.adapters.detect.nvidia import jetson_from_device_tree, read_proc_driver, read_sysfs
from capplan.adapters.files import open_regular, read_bounded
from capplan.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
TORCH_SOURCE = REPO / "tests" / "data" / "torch_sources" / "shape_2_9.py"


@pytest.fixture
def odd(tmp_path: Path) -> dict[str, Path]:
    """Paths that are no regular file: a FIFO without a writer, a character device, a folder."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    return {"fifo": fifo, "chardev": Path("/dev/zero"), "folder": folder}


def run(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> tuple[int, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CAPPLAN_")}
    environ.update(env or {}, NO_COLOR="1")
    proc = subprocess.run(
        [sys.executable, "-m", "capplan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        cwd=cwd,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr.strip()


COMMANDS: list[tuple[str, tuple[str, ...], ExitCode, str]] = [
    ("config", ("plan", "--config", "{p}"), ExitCode.CONFIG, "cannot read config file"),
    ("torch --file", ("limits", "read", "torch", "--file", "{p}"), ExitCode.INVALID_INPUT, ""),
    ("torch --wheel", ("limits", "read", "torch", "--wheel", "{p}"), ExitCode.INVALID_INPUT, ""),
    ("magma --file", ("limits", "read", "magma", "--file", "{p}"), ExitCode.INVALID_INPUT, ""),
    (
        "--kb",
        ("limits", "read", "torch", "--file", str(TORCH_SOURCE), "--update-kb", "--kb", "{p}"),
        ExitCode.DATA,
        "",
    ),
    ("--failures", ("matrix", "--failures", "{p}"), ExitCode.DATA, "failure record"),
    ("failures list", ("failures", "list", "{p}"), ExitCode.DATA, "failure record"),
    (
        "cache status --failures",
        ("cache", "status", "--gpu", "RTX 3090", "--failures", "{p}"),
        ExitCode.DATA,
        "failure record",
    ),
    (
        "--jobs",
        ("matrix", "--skip-cached", "--cache", "http://127.0.0.1:9", "--jobs", "{p}"),
        ExitCode.DATA,
        "jobs file",
    ),
    ("generate --check", ("generate", "--check", "--output", "{p}"), ExitCode.STALE, ""),
    ("inspect", ("inspect", "{p}"), ExitCode.BAD_BINARY, ""),
    ("doctor", ("doctor", "--device", "8.6", "{p}"), ExitCode.BAD_BINARY, ""),
]


@pytest.mark.parametrize("kind", ["fifo", "chardev"])
@pytest.mark.parametrize(("name", "args", "code", "says"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_no_command_reads_a_fifo_or_a_device(
    odd: dict[str, Path],
    kind: str,
    name: str,
    args: tuple[str, ...],
    code: ExitCode,
    says: str,
) -> None:
    path = str(odd[kind])
    rc, err = run(*(a.replace("{p}", path) for a in args))
    assert rc == code, (name, err)
    assert len(err.splitlines()) == 1 and path in err and says in err, err
    assert ("FIFO" in err) if kind == "fifo" else ("device" in err or "regular file" in err), err


def test_an_oversized_config_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "capplan.toml"
    big.write_bytes(b"# padding\n" * (110 * 1024))  # 1.1 MB of comments: valid TOML, too big
    rc, err = run("plan", "--config", str(big))
    assert rc == ExitCode.CONFIG and "larger than 1 MiB" in err, err


@pytest.mark.parametrize(
    "args",
    [
        ("matrix", "--skip-cached", "--cache", "http://127.0.0.1:9", "--jobs", "{p}"),
        ("failures", "add", "{r}", "--attr", "torch-sm86", "--jobs", "{p}"),
    ],
    ids=["matrix --jobs", "failures add --jobs"],
)
def test_a_jobs_line_past_its_limit_is_refused_by_number(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b"\n" + b'{"attr": "' + b"x" * (2 << 20) + b'"}\n')
    record = tmp_path / "record.json"
    rc, err = run(*(a.replace("{p}", str(jobs)).replace("{r}", str(record)) for a in args))
    assert (rc, f"{jobs}:2:" in err, "longer than 1 MiB" in err) == (ExitCode.DATA, True, True), err


def test_a_kb_folder_with_a_fifo_is_a_data_error(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    shutil.copytree(REPO / "planner" / "src" / "capplan" / "kb", kb)
    (kb / "gpus.json").unlink()
    os.mkfifo(kb / "gpus.json")
    rc, err = run("gpus", "A100", env={"CAPPLAN_KB_DIR": str(kb)})
    assert rc == ExitCode.DATA and "FIFO" in err, err


def test_doctor_leaves_out_metadata_that_is_no_regular_file(tmp_path: Path) -> None:
    # A venv whose RECORD is a FIFO: the package's files are not attributed, nothing hangs.
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    dist = site / "torch-2.14.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Name: torch\nVersion: 2.14.1\n")
    os.mkfifo(dist / "RECORD")
    conda = tmp_path / "venv" / "conda-meta"
    conda.mkdir()
    os.mkfifo(conda / "torch-2.14.1-0.json")
    rc, err = run("doctor", "--device", "8.6", "--json", str(tmp_path / "venv"))
    # The metadata was read (or left out) without hanging; the venv holds no library at all.
    assert rc == ExitCode.NOTHING_TO_DO and "holds no GPU code" in err, err


# -- detection sources under a fake root: in-process, with an alarm against hangs ---------------


def test_proc_and_sysfs_files_that_are_fifos_are_skipped(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "gpus" / "0000:01:00.0").mkdir(parents=True)
    os.mkfifo(proc / "version")
    os.mkfifo(proc / "gpus" / "0000:01:00.0" / "information")
    sysfs = tmp_path / "sys"
    node = sysfs / "bus" / "pci" / "devices" / "0000:01:00.0"
    node.mkdir(parents=True)
    for name in ("vendor", "device", "class"):
        os.mkfifo(node / name)
    kfd = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes" / "1"
    kfd.mkdir(parents=True)
    os.mkfifo(kfd / "properties")
    tree = tmp_path / "root" / "proc" / "device-tree"
    tree.mkdir(parents=True)
    os.mkfifo(tree / "compatible")
    with at_most(20, "a read"):
        assert read_proc_driver(proc) == []
        found, problems = read_sysfs(sysfs)
        assert found == [] and problems and "FIFO" in " ".join(problems)
        gpus, notes = read_kfd(sysfs)
        assert gpus == [] and "FIFO" in " ".join(notes)
        assert jetson_from_device_tree(tmp_path / "root") is None


def test_an_oversized_proc_file_is_not_read_whole(tmp_path: Path) -> None:
    kfd = tmp_path / "class" / "kfd" / "kfd" / "topology" / "nodes" / "1"
    kfd.mkdir(parents=True)
    (kfd / "properties").write_bytes(b"vendor_id 4098\n" * 100_000)  # 1.5 MB
    gpus, notes = read_kfd(tmp_path)
    assert gpus == [] and "larger than" in " ".join(notes)


# -- the helper itself ---------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=5000), limit=st.integers(min_value=0, max_value=5000)
)
def test_read_bounded_returns_the_file_exactly_when_it_fits(
    tmp_path_factory: pytest.TempPathFactory, size: int, limit: int
) -> None:
    path = tmp_path_factory.mktemp("bounded") / "f"
    data = bytes(i % 251 for i in range(size))
    path.write_bytes(data)
    if size <= limit:
        assert read_bounded(path, limit) == data
    else:
        with pytest.raises(OSError, match="larger than") as info:
            read_bounded(path, limit)
        assert info.value.strerror and "\n" not in info.value.strerror


def test_open_regular_names_what_the_path_is(odd: dict[str, Path]) -> None:
    for kind, word in (("fifo", "FIFO"), ("chardev", "character device"), ("folder", "folder")):
        with pytest.raises(OSError) as info:
            open_regular(odd[kind])
        assert word in str(info.value.strerror), kind
    with pytest.raises(FileNotFoundError):
        open_regular(odd["folder"] / "missing")


def test_the_limits_are_documented() -> None:
    text = (REPO / "docs" / "limits.md").read_text()
    for limit in ("1 MiB", "16 MiB", "32 MiB", "64 MiB", "256 KiB", "512 MiB"):
        assert limit in text, limit


def test_the_alarm_ends_a_hang_whatever_catches_exceptions() -> None:
    # What every hang test here and in the fuzzes relies on: a body past its alarm fails the
    # test even inside code that catches Exception (CliRunner does).
    import contextlib
    import time

    from tests.integration.fuzzing import Hang

    with (
        pytest.raises(Hang, match="a sleep went past 1 s"),
        at_most(1, "a sleep"),
        contextlib.suppress(Exception),  # the point: Hang is not an Exception
    ):
        time.sleep(5)
