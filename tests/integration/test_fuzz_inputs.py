"""Generated spoiled inputs for the readers and the writer of issue 31 (its "data lost" and
"exit 1" classes): failure records, jobs files, conda metadata, wheels and output targets; and
ninja logs (issue 46: a zero-duration build or 15-digit times) through bench_costs.py.

Each reader either returns or raises a CapplanError (a documented exit code): never another
exception, which the CLI reports as an internal error (exit 1). A failure record that reads is
written back, grown by an add and merged with itself, and every one of those texts reads again
(a writer never writes what its reader refuses). The writer replaces only what it may (see
adapters/files.py) and leaves the folder as it was when it refuses.

Derandomized (the same inputs every run, no example database), with modest example counts so
the file runs on every ``scripts/test``; ``pytest -s`` prints the outcomes and docs/testing.md
states them.
"""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import sys
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.fuzzing import derandomized

from capplan.adapters.binary_cache import output_paths_from_jobs
from capplan.adapters.environment import _extract_wheel, _owner_maps
from capplan.adapters.failures import read_job_derivations, read_record, record_text
from capplan.adapters.fatbin import inspect_paths
from capplan.adapters.files import atomic_write_text, link_target
from capplan.core.planning.failures import MAX_COUNT, FailureRecord, parse_record
from capplan.errors import CapplanError, ExitCode, WriteError

EXAMPLES = {"records": 400, "jobs": 300, "conda": 200, "wheels": 150, "outputs": 150,
            "ninja": 150}  # fmt: skip
OUTCOMES: dict[str, Counter[str]] = {name: Counter() for name in EXAMPLES}
NIX32 = "0123456789abcdfghijklmnpqrsvwxyz"
LATEST = "9999-12-31T23:59:59Z"
BIG = "9" * 5000  # past Python's 4,300-digit int conversion limit


def profile(name: str) -> Any:
    return derandomized(EXAMPLES[name])


@pytest.fixture(scope="module", autouse=True)
def _print_outcomes() -> Iterator[None]:
    yield
    for name, counts in OUTCOMES.items():
        if counts:
            print(f"\n{name}: {sum(counts.values())} inputs: {dict(sorted(counts.items()))}")


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="capplan-fuzz-") as name:
        yield Path(name)


def _fresh(folder: Path) -> Path:
    """An empty folder of its own for one example."""
    return Path(tempfile.mkdtemp(dir=folder))


def refused(error: CapplanError) -> str:
    assert error.exit_code != ExitCode.FAILURE, error
    return f"exit {int(error.exit_code)}"


# -------------------------------------------------------------------------- building blocks

odd_text = st.one_of(
    st.sampled_from(["", " a", "a\n", "\ud800", "\udcff", "\x1b[31mred", "é", "x" * 600,
                     "::error::x", "\u2028", "a\tb"]),
    st.text(max_size=20),
)  # fmt: skip
scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), odd_text)
json_value = st.recursive(
    scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                    st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)  # fmt: skip
drv = st.builds(
    lambda h, n: f"/nix/store/{h}-{n}.drv",
    st.text(NIX32, min_size=32, max_size=32),
    st.sampled_from(["torch-2.9.0", "magma", "x"]),
)


def encoded(value: Any, ascii_only: bool, big: bool) -> bytes:
    """``value`` as JSON bytes; lone surrogates kept as they are (not UTF-8 then), and with
    ``big`` the first small integer written with 5,000 digits instead."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    if big:
        text = text.replace(": 1,", f": {BIG},", 1).replace(": 1}", f": {BIG}}}", 1)
    return text.encode("utf-8", "surrogatepass")


# ------------------------------------------------------------------------------------ records

times = st.sampled_from(["2025-01-01T00:00:00Z", LATEST, "0001-01-01T00:00:00Z",
                         "2025-02-29T00:00:00Z", "2024-02-29T23:59:59Z", "2025-1-1", ""])  # fmt: skip
counts = st.one_of(
    st.integers(1, 3),
    st.sampled_from([MAX_COUNT, MAX_COUNT - 1, MAX_COUNT + 1, 0, -1, True, 1.5, "1"]),
    st.integers(),
)
entry = st.fixed_dictionaries(
    {
        "attr": st.one_of(st.just("x86_64-linux.torch-sm86"), odd_text, scalar),
        "system": st.one_of(st.just("x86_64-linux"), odd_text),
        "since": times,
        "last": times,
        "count": counts,
        "log_tail": st.one_of(st.lists(odd_text, max_size=42), scalar),
    },
    optional={"extra": scalar},
)
record_doc = st.fixed_dictionaries(
    {
        "format": st.sampled_from(["capplan-failures", "capplan-failure", 1]),
        "version": st.sampled_from([1, 1, 1, 2, True, "1"]),
        "failures": st.dictionaries(st.one_of(drv, odd_text), entry, max_size=3),
    },
    optional={"more": scalar},
)

valid_times = st.sampled_from(["2025-01-01T00:00:00Z", "2025-06-30T12:00:00Z", LATEST,
                               "0001-01-01T00:00:00Z", "2024-02-29T23:59:59Z"])  # fmt: skip


@st.composite
def near_records(draw: st.DrawFn) -> dict[str, Any]:
    """A valid record, or one with a single field spoiled: most reads get past the format."""
    entries: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 3))):
        since, last = sorted(draw(st.lists(valid_times, min_size=2, max_size=2)))
        entries[draw(drv)] = {
            "attr": draw(st.one_of(st.sampled_from(["x86_64-linux.torch-sm86", "torch-sm86"]),
                                   st.text(min_size=1, max_size=30))),
            "system": "x86_64-linux", "since": since, "last": last,
            "count": draw(st.one_of(st.integers(1, 3), st.sampled_from([MAX_COUNT - 1, MAX_COUNT]))),
            "log_tail": draw(st.lists(st.text(max_size=40), max_size=5)),
        }  # fmt: skip
    if entries and draw(st.booleans()):
        spoiled = entries[draw(st.sampled_from(sorted(entries)))]
        spoiled[draw(st.sampled_from(sorted(spoiled)))] = draw(st.one_of(json_value, odd_text))
    return {"format": "capplan-failures", "version": 1, "failures": entries}


def _reads_back(record: FailureRecord) -> None:
    assert parse_record(json.loads(record_text(record)), "written") == record


@profile("records")
@given(
    doc=st.one_of(near_records(), near_records(), record_doc, json_value), ascii_only=st.booleans(),
    big=st.sampled_from([False, False, False, True]),
    cut=st.one_of(st.none(), st.none(), st.none(), st.integers(0, 400)),
)  # fmt: skip
def test_failure_records(
    folder: Path, doc: Any, ascii_only: bool, big: bool, cut: int | None
) -> None:
    data = encoded(doc, ascii_only, big)
    path = _fresh(folder) / "record.json"
    path.write_bytes(data if cut is None else data[:cut])
    try:
        record = read_record(path)
    except CapplanError as error:
        OUTCOMES["records"][refused(error)] += 1
        return
    OUTCOMES["records"]["read"] += 1
    _reads_back(record)
    _reads_back(record.merge(record, record))  # counts add, capped at the maximum
    for failure in record.entries():
        _reads_back(record.add(failure.drv, failure.attr, failure.system, LATEST, failure.log_tail))


# --------------------------------------------------------------------------------- jobs files

job = st.fixed_dictionaries(
    {"attr": st.one_of(st.just("x86_64-linux.torch-sm86"), odd_text, scalar),
     "system": st.one_of(st.just("x86_64-linux"), odd_text, scalar),
     "drvPath": st.one_of(drv, odd_text, scalar),
     "outputs": st.one_of(st.fixed_dictionaries({"out": st.one_of(drv, odd_text)}), json_value)},
    optional={"error": scalar, "n": st.just(1)},
)  # fmt: skip
valid_job = st.fixed_dictionaries(
    {"attr": st.sampled_from(["x86_64-linux.torch-sm86", "aarch64-linux.nccl-sm90"]),
     "system": st.just("x86_64-linux"), "drvPath": drv,
     "outputs": st.fixed_dictionaries({"out": drv.map(lambda d: d[: -len(".drv")])})},
)  # fmt: skip
job_line = st.one_of(
    st.builds(encoded, valid_job, st.booleans(), st.just(False)),
    st.builds(encoded, job, st.booleans(), st.booleans()),
    st.builds(encoded, json_value, st.booleans(), st.just(False)),
    st.binary(max_size=40),
    st.sampled_from([b"", b"   ", b"[" * 2000, b'{"attr": "a", "n": ' + BIG.encode() + b"}"]),
)


@profile("jobs")
@given(lines=st.lists(job_line, max_size=4))
def test_jobs_files(folder: Path, lines: list[bytes]) -> None:
    path = _fresh(folder) / "jobs.jsonl"
    path.write_bytes(b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines))
    for read in (read_job_derivations, output_paths_from_jobs):
        try:
            read(path)
            OUTCOMES["jobs"]["read"] += 1
        except CapplanError as error:
            OUTCOMES["jobs"][refused(error)] += 1


# ------------------------------------------------------------------------------- conda-meta


@profile("conda")
@given(
    meta=st.one_of(
        st.fixed_dictionaries({"name": st.one_of(st.just("x"), scalar),
                               "version": scalar, "files": json_value}),
        json_value,
    ),
    ascii_only=st.booleans(), big=st.booleans(),
)  # fmt: skip
def test_conda_metadata(folder: Path, meta: Any, ascii_only: bool, big: bool) -> None:
    root = _fresh(folder)
    (root / "conda-meta").mkdir()
    (root / "conda-meta" / "x-1.json").write_bytes(encoded(meta, ascii_only, big))
    owners, packages = _owner_maps(root)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in owners.items())
    OUTCOMES["conda"]["packages" if packages else "none"] += 1


# ------------------------------------------------------------------------------------ wheels

_ELF = next(
    p for p in (Path("/usr/lib/x86_64-linux-gnu/libc.so.6"), Path("/lib64/libc.so.6"),
                Path(sys.executable).resolve()) if p.is_file()
).read_bytes()[:65536]  # fmt: skip


def _wheel(
    method: int, flags: int, deflate: bool, flips: list[tuple[int, int]], cut: int | None
) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as z:
        z.writestr("pkg/lib/libx.so", _ELF)
        z.writestr("pkg-1.0.dist-info/RECORD", "pkg/lib/libx.so,,\n")
    data = bytearray(buf.getvalue())
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    if method >= 0:
        struct.pack_into("<H", data, local + 8, method)
        struct.pack_into("<H", data, central + 10, method)
    for at in (local + 6, central + 8):
        struct.pack_into("<H", data, at, struct.unpack_from("<H", data, at)[0] | flags)
    for offset, byte in flips:
        data[offset % len(data)] = byte
    return bytes(data if cut is None else data[: cut % len(data)])


@profile("wheels")
@given(
    method=st.sampled_from([-1, -1, 0, 8, 12, 14, 93, 99]),
    flags=st.sampled_from([0, 0, 1, 8, 0x41]),
    deflate=st.booleans(),
    flips=st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), max_size=6),
    cut=st.one_of(st.none(), st.none(), st.integers(0, 2**20)),
)
def test_wheels(folder: Path, method: int, flags: int, deflate: bool,
                flips: list[tuple[int, int]], cut: int | None) -> None:  # fmt: skip
    root = _fresh(folder)
    wheel = root / "pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(_wheel(method, flags, deflate, flips, cut))
    (root / "out").mkdir()
    for read in (
        lambda: inspect_paths([wheel], jobs=1),
        lambda: _extract_wheel(wheel, root / "out"),
    ):
        try:
            read()
            OUTCOMES["wheels"]["read"] += 1
        except CapplanError as error:
            OUTCOMES["wheels"][refused(error)] += 1


# ------------------------------------------------------------------------------ output targets

KINDS = ["missing", "regular", "folder", "fifo", "link", "dangling", "loop", "link-folder",
         "link-fifo", "chain", "no-parent", "link-no-parent"]  # fmt: skip


def _make(root: Path, kind: str) -> Path:
    out = root / "out"
    if kind == "regular":
        out.write_text("old\n")
    elif kind == "folder":
        out.mkdir()
    elif kind == "fifo":
        os.mkfifo(out)
    elif kind == "link":
        (root / "file").write_text("old\n")
        out.symlink_to("file")
    elif kind == "dangling":
        out.symlink_to("new")
    elif kind == "loop":
        out.symlink_to("out2")
        (root / "out2").symlink_to("out")
    elif kind == "link-folder":
        (root / "dir").mkdir()
        out.symlink_to("dir")
    elif kind == "link-fifo":
        os.mkfifo(root / "pipe")
        out.symlink_to("pipe")
    elif kind == "chain":
        (root / "file").write_text("old\n")
        (root / "l1").symlink_to("file")
        out.symlink_to("l1")
    elif kind == "no-parent":
        out = root / "missing" / "out"
    elif kind == "link-no-parent":
        out.symlink_to("missing/new")
    return out


def _snapshot(root: Path) -> dict[str, tuple[int, bytes | str]]:
    shot: dict[str, tuple[int, bytes | str]] = {}
    for entry in sorted(root.rglob("*")):
        mode = os.lstat(entry).st_mode
        shot[str(entry.relative_to(root))] = (
            stat.S_IFMT(mode),
            entry.read_bytes() if stat.S_ISREG(mode) else
            os.readlink(entry) if stat.S_ISLNK(mode) else b"",
        )  # fmt: skip
    return shot


@profile("outputs")
@given(kind=st.sampled_from(KINDS), text=st.text(max_size=50))  # no surrogates: text
def test_output_targets(folder: Path, kind: str, text: str) -> None:
    root = _fresh(folder)
    out = _make(root, kind)
    before = _snapshot(root)
    try:
        atomic_write_text(out, text)
    except WriteError as error:
        OUTCOMES["outputs"][f"{kind}: {refused(error)}"] += 1
        assert _snapshot(root) == before  # refused: nothing replaced, nothing left behind
        return
    OUTCOMES["outputs"][f"{kind}: written"] += 1
    written = link_target(out)
    assert stat.S_ISREG(os.lstat(written).st_mode) and written.read_bytes() == text.encode()
    after = _snapshot(root)
    changed = {name for name in after if before.get(name) != after[name]}
    assert changed == {str(written.relative_to(root))}  # links, FIFOs, folders untouched


# -------------------------------------------------------------------------------- ninja logs

_TIMES = st.one_of(st.sampled_from([0, 1, 5, 10**14, 10**15 - 1]), st.integers(0, 10**15 - 1))


@st.composite
def ninja_logs(draw: st.DrawFn) -> str:
    lines = ["# ninja log v" + draw(st.sampled_from("4567"))]
    for _ in range(draw(st.integers(1, 5))):
        start, end = sorted(draw(st.lists(_TIMES, min_size=2, max_size=2)))
        if draw(st.booleans()):
            end = start  # a step of 0 ms
        output = draw(st.sampled_from(["a.cu.o", "b.cu.o", "c.cpp.o", "lib.so"]))
        lines.append(f"{start}\t{end}\t1\t{output}\th")
    return "\n".join(lines) + "\n"


@profile("ninja")
@given(logs=st.lists(ninja_logs(), min_size=1, max_size=2))
def test_ninja_logs_through_bench_costs(folder: Path, logs: list[str]) -> None:
    """bench_costs.py --ninja-log: whatever the times, a report or one error line (exit 6),
    never a traceback (a log of 0-ms steps divided by its zero wall time)."""
    import contextlib

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        import bench_costs
    finally:
        sys.path.pop(0)
    root = _fresh(folder)
    paths = []
    for i, text in enumerate(logs):
        (root / f"{i}.ninja_log").write_text(text)
        paths.append(str(root / f"{i}.ninja_log"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = bench_costs.ninja_report(paths, [1, 2][: len(paths)], "llama-cpp", 16)
    assert code in (0, int(ExitCode.DATA)), err.getvalue()
    if code:
        (line,) = err.getvalue().splitlines()
        assert line.startswith("bench_costs.py: error: ")
    OUTCOMES["ninja"][f"exit {code}"] += 1
