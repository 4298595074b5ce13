"""Issue 31, "data lost or misdirected" and "exit 1": what every writer may replace, failure
records through symlinks, at their limits and after a killed writer, and the inputs that ended
in an internal error (damaged wheels, conda metadata, huge JSON numbers, symlink loops, a far
SOURCE_DATE_EPOCH). Each test failed on c9356a3."""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capplan.core.planning.failures import MAX_COUNT
from capplan.errors import ExitCode

SRC = Path(__file__).resolve().parents[2] / "planner" / "src"
EPOCH = "1764000000"
DRV = "/nix/store/0ch0ilgzr4iq7y3dy7vqajg6jyb3ya0s-magma-2.9.0.drv"
DRV2 = "/nix/store/1ch0ilgzr4iq7y3dy7vqajg6jyb3ya0s-torch-2.9.0.drv"
TOML = '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n'
# An ELF the machine certainly has, as a wheel's library member.
LIBC = next(
    p for p in (Path("/usr/lib/x86_64-linux-gnu/libc.so.6"), Path("/lib64/libc.so.6"),
                Path(sys.executable).resolve()) if p.is_file()
)  # fmt: skip


def error_line(result: Any, code: ExitCode) -> str:
    """The one ``capplan: error:`` line of a refused command (never an internal error)."""
    assert result.exit_code == int(code), (result.exit_code, result.stderr)
    err = str(result.stderr).strip().splitlines()[-1]
    assert err.startswith("capplan: error: ") and "internal error" not in err
    return err


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ----------------------------------------------------------------------- what a writer replaces

# Each writer, run in a folder holding a capplan.toml, writing to PATH. A failure record is read
# before it is replaced, so what cannot be read is refused as the reader refuses it (exit 6, a
# folder exit 4), before the writer would (exit 15).
WRITERS: dict[str, Callable[[str], list[str]]] = {
    "generate": lambda path: ["generate", "--output", path],
    "ci github": lambda path: ["ci", "github", "--cache", "c", "--output", path],
    "failures add": lambda path: [
        "failures",
        "add",
        path,
        "--drv",
        DRV,
        "--attr",
        "a",
        "--system",
        "x86_64-linux",
    ],
}
READ_FIRST = {"fifo": ExitCode.DATA, "device": ExitCode.DATA, "loop": ExitCode.DATA,
              "folder": ExitCode.INVALID_INPUT}  # fmt: skip


class Writer:
    def __init__(self, name: str, capplan: Any) -> None:
        self.name, self.capplan = name, capplan

    def __call__(self, path: str) -> Any:
        return self.capplan(*WRITERS[self.name](path), env={"SOURCE_DATE_EPOCH": EPOCH})

    def code(self, kind: str) -> ExitCode:
        if self.name == "failures add" and kind in READ_FIRST:
            return READ_FIRST[kind]
        return ExitCode.WRITE


@pytest.fixture(params=sorted(WRITERS))
def writer(request: pytest.FixtureRequest, capplan_in: Any, tmp_path: Path) -> Writer:
    (tmp_path / "capplan.toml").write_text(TOML)
    return Writer(request.param, capplan_in)


def test_a_fifo_is_refused_not_replaced(writer: Writer, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    err = error_line(writer("pipe"), writer.code("fifo"))
    assert "pipe" in err and "FIFO" in err
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)
    assert listing(tmp_path) == ["capplan.toml", "pipe"]


def test_a_character_device_is_refused_not_replaced(writer: Writer, tmp_path: Path) -> None:
    # Through a link: the test must never risk /dev/null itself on a capplan that replaces.
    (tmp_path / "null").symlink_to("/dev/null")
    err = error_line(writer("null"), writer.code("device"))
    assert "character device" in err
    assert os.readlink(tmp_path / "null") == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    try:
        os.mknod(tmp_path / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except OSError:
        return  # no CAP_MKNOD here: the link above covered the device
    error_line(writer("dev"), writer.code("device"))
    assert stat.S_ISCHR(os.lstat(tmp_path / "dev").st_mode)


def test_a_symlink_is_written_through_and_stays_a_link(writer: Writer, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "file"
    first = writer("real/file")
    assert first.exit_code == 0, first.stderr
    written = target.read_text()
    target.chmod(0o600)
    if writer.name != "failures add":
        target.write_text("stale\n")
    (tmp_path / "link").symlink_to("real/file")
    result = writer("link")
    assert result.exit_code == 0, result.stderr
    assert os.readlink(tmp_path / "link") == "real/file"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # the file's own mode is kept
    if writer.name == "failures add":
        assert json.loads(target.read_text())["failures"][DRV]["count"] == 2
    else:  # the same text below ci github's first line, which names the --output given
        assert target.read_text().split("\n", 1)[1] == written.split("\n", 1)[1]
    assert listing(tmp_path) == ["capplan.toml", "link", "real"]
    assert listing(tmp_path / "real") == ["file"]


@pytest.mark.parametrize("kind", ["loop", "folder"])
def test_symlink_loops_and_folders_are_refused(writer: Writer, tmp_path: Path, kind: str) -> None:
    if kind == "loop":
        (tmp_path / "out").symlink_to("out2")
        (tmp_path / "out2").symlink_to("out")
    else:
        (tmp_path / "out").mkdir()
    before = listing(tmp_path)
    clicks = kind == "folder" and writer.name != "ci github"  # click's dir_okay=False says it
    error_line(writer("out"), ExitCode.USAGE if clicks else writer.code(kind))
    assert listing(tmp_path) == before
    assert kind == "folder" or (tmp_path / "out").is_symlink()


def test_a_link_to_a_new_file_creates_the_file_and_keeps_the_link(
    writer: Writer, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "out").symlink_to("sub/new")
    result = writer("out")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "out").is_symlink() and (tmp_path / "sub" / "new").is_file()
    (tmp_path / "far").symlink_to("nowhere/new")  # the link's file's folder must exist too
    assert "no folder" in error_line(writer("far"), ExitCode.WRITE)
    assert listing(tmp_path) == ["capplan.toml", "far", "out", "sub"]


def test_a_missing_folder_is_an_error_not_created(writer: Writer, tmp_path: Path) -> None:
    err = error_line(writer("no/such/out.json"), ExitCode.WRITE)
    assert "no folder no/such" in err
    assert listing(tmp_path) == ["capplan.toml"]


def test_generate_still_creates_its_default_overlays_folder(
    capplan_in: Any, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(TOML)
    assert capplan_in("generate").exit_code == 0
    assert listing(tmp_path / "overlays") == ["plan.json"]


# ------------------------------------------------------------------- killed and live writers

_WRITER = """
import os, sys
from pathlib import Path
from capplan.adapters.files import atomic_write_text
real = os.fsync
def pause(fd):
    real(fd)
    print("writing", flush=True)
    sys.stdin.readline()  # killed here, or told to go on
os.fsync = pause
atomic_write_text(Path(sys.argv[1]), sys.argv[2] * int(sys.argv[3]))
"""


def _paused_writer(path: Path, text: str, times: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), text, str(times)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
    return proc


def _temporaries(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(
    capplan_in: Any, tmp_path: Path, name: str
) -> None:
    (tmp_path / "capplan.toml").write_text(TOML)
    out = tmp_path / "out.json"
    proc = _paused_writer(out, "x" * 1024, 1024)
    proc.kill()  # SIGKILL: no handler runs
    proc.wait(timeout=60)
    left = _temporaries(out)
    assert len(left) == 1 and left[0].stat().st_size == 1024 * 1024
    lookalike = tmp_path / ".out.json.notours.tmp"  # not a name capplan makes: never touched
    lookalike.write_text("keep")
    result = capplan_in(*WRITERS[name]("out.json"), env={"SOURCE_DATE_EPOCH": EPOCH})
    assert result.exit_code == 0, result.stderr
    assert _temporaries(out) == [lookalike]


def test_a_live_writers_temporary_file_is_left_alone(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(TOML)
    out = tmp_path / "out.yml"
    proc = _paused_writer(out, "live\n", 1)
    try:
        (held,) = _temporaries(out)
        assert capplan_in(*WRITERS["ci github"]("out.yml")).exit_code == 0
        assert held.exists()
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert out.read_text() == "live\n" and _temporaries(out) == []


# --------------------------------------------------------------------------- failure records


def _add(capplan: Any, record: str, drv: str = DRV, attr: str = "a", epoch: str = EPOCH) -> Any:
    return capplan("failures", "add", record, "--drv", drv, "--system", "x86_64-linux",
                   "--attr", attr, env={"SOURCE_DATE_EPOCH": epoch})  # fmt: skip


def test_no_lock_file_is_left_by_any_update_refused_or_not(capplan_in: Any, tmp_path: Path) -> None:
    assert _add(capplan_in, "r.json").exit_code == 0
    assert capplan_in("failures", "forget", "r.json", "--older-than", "1").exit_code == 0
    (tmp_path / "in.json").write_bytes((tmp_path / "r.json").read_bytes())
    assert capplan_in("failures", "merge", "r.json", "in.json").exit_code == 0
    assert listing(tmp_path) == ["in.json", "r.json"]
    (tmp_path / "bad.json").write_text("{not json")
    error_line(_add(capplan_in, "bad.json"), ExitCode.DATA)
    error_line(
        capplan_in("failures", "forget", "r.json", "--attr", "nosuch"), ExitCode.INVALID_INPUT
    )
    assert listing(tmp_path) == ["bad.json", "in.json", "r.json"]


def _process(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "SOURCE_DATE_EPOCH": EPOCH}
    return subprocess.Popen([sys.executable, "-m", "capplan", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def test_adds_through_a_link_and_its_file_exclude_each_other(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "link.json").symlink_to("store/record.json")
    nix32 = "0123456789abcdfghijklmnpqrsvwxyz"
    procs = []
    for i in range(12):
        drv = f"/nix/store/{nix32[i] * 32}-job{i}.drv"
        record = "link.json" if i % 2 else "store/record.json"
        procs.append(_process(tmp_path, "failures", "add", record, "--drv", drv,
                              "--system", "x86_64-linux", "--attr", f"job{i}"))  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    assert os.readlink(tmp_path / "link.json") == "store/record.json"
    data = json.loads((tmp_path / "store" / "record.json").read_text())
    assert len(data["failures"]) == 12  # none lost: both names took the same lock
    assert listing(tmp_path) == ["link.json", "store"]
    assert listing(tmp_path / "store") == ["record.json"]


def _record(count: int, drv: str = DRV) -> dict[str, Any]:
    return {
        "format": "capplan-failures",
        "version": 1,
        "failures": {
            drv: {"attr": "a", "system": "x86_64-linux", "since": "2025-01-01T00:00:00Z",
                  "last": "2025-01-01T00:00:00Z", "count": count, "log_tail": []},
        },
    }  # fmt: skip


def test_a_count_at_the_maximum_stays_readable(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text(json.dumps(_record(MAX_COUNT)))
    (tmp_path / "other.json").write_text(json.dumps(_record(MAX_COUNT - 1)))
    assert _add(capplan_in, "r.json").exit_code == 0
    listed = capplan_in("failures", "list", "r.json", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert json.loads(listed.stdout)["failures"][DRV]["count"] == MAX_COUNT
    assert capplan_in("failures", "merge", "r.json", "other.json").exit_code == 0
    assert capplan_in("failures", "list", "r.json").exit_code == 0
    schema = json.loads(capplan_in("failures", "schema").stdout)
    count = schema["properties"]["failures"]["additionalProperties"]["properties"]["count"]
    assert count["maximum"] == MAX_COUNT


def test_text_that_cannot_be_utf8_is_refused_not_a_crash(capplan_in: Any, tmp_path: Path) -> None:
    error_line(_add(capplan_in, "r.json", attr="job\udcff"), ExitCode.INVALID_INPUT)
    assert listing(tmp_path) == []
    text = json.dumps(_record(1)).replace('"log_tail": []', '"log_tail": ["\\ud800"]')
    (tmp_path / "r.json").write_text(text)
    error_line(capplan_in("failures", "list", "r.json"), ExitCode.DATA)
    error_line(_add(capplan_in, "r.json", drv=DRV2), ExitCode.DATA)
    assert (tmp_path / "r.json").read_text() == text


@pytest.mark.parametrize("epoch", ["999999999999", "253402300800"])
def test_source_date_epoch_past_the_year_9999_is_invalid_input(
    capplan_in: Any, tmp_path: Path, epoch: str
) -> None:
    err = error_line(_add(capplan_in, "r.json", epoch=epoch), ExitCode.INVALID_INPUT)
    assert "SOURCE_DATE_EPOCH" in err and listing(tmp_path) == []
    assert _add(capplan_in, "r.json", epoch="253402300799").exit_code == 0  # the last second


def test_merge_with_a_symlink_loop_as_input_or_output(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop")
    assert _add(capplan_in, "r.json").exit_code == 0
    before = (tmp_path / "r.json").read_bytes()
    for args in (["r.json", "loop"], ["loop", "r.json"]):
        err = error_line(capplan_in("failures", "merge", *args), ExitCode.DATA)
        assert "loop" in err
    assert (tmp_path / "r.json").read_bytes() == before
    assert listing(tmp_path) == ["loop", "loop2", "r.json"]


# ------------------------------------------------------------------------ huge JSON integers

BIG = "9" * 5000


def test_a_huge_integer_in_a_record_or_jobs_file_is_bad_data(
    capplan_in: Any, tmp_path: Path
) -> None:
    text = json.dumps(_record(1)).replace('"count": 1', f'"count": {BIG}')
    (tmp_path / "r.json").write_text(text)
    assert "digits" in error_line(capplan_in("failures", "list", "r.json"), ExitCode.DATA)
    job = {"attr": "x86_64-linux.a", "drvPath": DRV, "system": "x86_64-linux", "n": 0}
    (tmp_path / "jobs.jsonl").write_text(json.dumps(job).replace('"n": 0', f'"n": {BIG}') + "\n")
    added = capplan_in("failures", "add", "new.json", "--jobs", "jobs.jsonl", "--attr", "a")
    assert "jobs.jsonl:1" in error_line(added, ExitCode.DATA)
    from capplan.adapters.binary_cache import output_paths_from_jobs
    from capplan.errors import DataError

    with pytest.raises(DataError, match="digits"):
        output_paths_from_jobs(tmp_path / "jobs.jsonl")
    assert not (tmp_path / "new.json").exists()


def test_a_huge_integer_in_a_knowledge_base_file_is_bad_data(
    capplan_in: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from capplan.adapters.kb import load_kb
    from capplan.errors import DataError

    kb = tmp_path / "kb"
    kb.mkdir()
    for f in (SRC / "capplan" / "kb").glob("*.json"):
        (kb / f.name).write_bytes(f.read_bytes())
    data = (kb / "cuda.json").read_text()
    (kb / "cuda.json").write_text(data.replace("{", f'{{"huge": {BIG}, ', 1))
    with pytest.raises(DataError, match="digits"):
        load_kb(kb)


# ------------------------------------------------------------------------------------- doctor


@pytest.mark.parametrize("files", ["5", "true", '"lib/libz.so"', '{"a": 1}'])
def test_conda_meta_files_that_are_not_a_list(capplan_in: Any, tmp_path: Path, files: str) -> None:
    env = tmp_path / "env"
    (env / "conda-meta").mkdir(parents=True)
    (env / "lib").mkdir()
    (env / "lib" / "libc.so.6").write_bytes(LIBC.read_bytes())
    (env / "conda-meta" / "x-1.json").write_text(
        f'{{"name": "x", "version": "1", "files": {files}}}'
    )
    result = capplan_in("doctor", "--device", "8.6", "--json", "env")
    assert result.exit_code == 0, result.stderr


def _wheel(*, method: int | None = None, flag: int = 0, deflate: bool = False,
           corrupt: bool = False) -> bytes:  # fmt: skip
    buf = io.BytesIO()
    compression = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", compression) as archive:
        archive.writestr("pkg/lib/libx.so", LIBC.read_bytes()[:200_000])
    data = bytearray(buf.getvalue())
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    if method is not None:
        struct.pack_into("<H", data, local + 8, method)
        struct.pack_into("<H", data, central + 10, method)
    if flag:
        for at in (local + 6, central + 8):
            struct.pack_into("<H", data, at, struct.unpack_from("<H", data, at)[0] | flag)
    if corrupt:
        data[60:80] = b"\xff" * 20  # inside the deflate stream, after the local header
    return bytes(data)


@pytest.mark.parametrize(
    ("case", "spec", "says"),
    [
        ("method99", {"method": 99}, "compression method 99"),
        ("encrypted", {"flag": 1}, "encrypted"),
        ("encrypted-deflate", {"flag": 1, "deflate": True}, "encrypted"),
        ("lzma-garbage", {"method": zipfile.ZIP_LZMA}, "wheel"),
        ("deflate-garbage", {"deflate": True, "corrupt": True}, "wheel"),
    ],
)
@pytest.mark.parametrize("command", [["inspect"], ["doctor", "--device", "8.6"]])
def test_unreadable_wheel_members_are_bad_binaries(
    capplan_in: Any, tmp_path: Path, case: str, spec: dict[str, Any], says: str,
    command: list[str],
) -> None:  # fmt: skip
    (tmp_path / f"{case}-1.0-py3-none-any.whl").write_bytes(_wheel(**spec))
    err = error_line(capplan_in(*command, f"{case}-1.0-py3-none-any.whl"), ExitCode.BAD_BINARY)
    assert says in err
