"""Generated hostile input for what issue 41 (part B) reads from outside: buildbot-nix databases
(``failures import-buildbot-nix --db``), the records that import writes, Nix's answers to
``nixpkgs check``, and hostile names in each of their path arguments (``--db``, ``RECORD``,
``--jobs``, ``--nixpkgs``).

Every run ends with exit 0 or a documented code other than 1, a failure as one ``capplan:
error:`` line, no traceback, within 60 s (an alarm stops a run that does not), with the memory
of the whole file bounded; nothing outside the named output (the record) changes; a record the
import writes is read by every later command; a drift line nixpkgs' answer made holds no
control character and no line longer than an error line.

Derandomized (the same inputs every run, no example database), with modest example counts so
the file runs on every ``scripts/test`` (about 30 s here); ``pytest -s`` prints the outcomes.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sqlite3
import stat
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.fuzzing import at_most, derandomized

from capplan.cli.main import cli
from capplan.errors import ExitCode, printable

EXAMPLES = {"databases": 120, "answers": 100}
OUTCOMES: dict[str, Counter[str]] = {name: Counter() for name in ("databases", "answers", "names")}
NIX32 = "0123456789abcdfghijklmnpqrsvwxyz"
LIMIT_S = 60
FLEET = """
[fleet]
gpus = ["MI300X", "RTX 4090"]
cpus = ["x86-64-v3"]
[packages.torch]
[packages.llama-cpp]
[packages.gromacs]
[policy]
system = "x86_64-linux"
rocm_scope = "stack"
"""
JOBS = [("x86_64-linux.magma-sm86", "magma"), ("x86_64-linux.torch-sm86", "torch"),
        ("x86_64-linux.nccl-sm86", "nccl")]  # fmt: skip


def profile(name: str) -> Any:
    return derandomized(EXAMPLES[name])


@pytest.fixture(scope="module", autouse=True)
def _print_outcomes() -> Iterator[None]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    for name, counts in OUTCOMES.items():
        if counts:
            print(f"\n{name}: {sum(counts.values())} runs: {dict(sorted(counts.items()))}")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 1024 * 1024, f"the fuzz grew the process by {grown} KiB"


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    """``capplan ARGS`` in-process from ``cwd``, stopped by an alarm after LIMIT_S seconds."""
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with at_most(LIMIT_S):
            return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    finally:
        os.chdir(old)


def contract(result: Result, allowed: set[int]) -> str:
    """The run kept the error contract; its outcome as a label."""
    assert result.exit_code != ExitCode.FAILURE, result.stderr
    assert result.exit_code in allowed, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    if result.exit_code != 0:
        err = result.stderr.strip().splitlines()
        assert err and err[-1].startswith("capplan: error: "), result.stderr
        assert len(err[-1]) < 2500, err[-1][:300]
    return f"exit {result.exit_code}"


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """What is in ``root`` (names, kinds, sizes, times), links not followed."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                out[os.path.relpath(path, root)] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return out


def drv_path(h: str, name: str) -> str:
    return f"/nix/store/{h}-{name}.drv"


JOB_DRVS = [drv_path(NIX32[i] * 32, name) for i, (_, name) in enumerate(JOBS)]


def write_jobs(folder: Path) -> None:
    (folder / "jobs.jsonl").write_text(
        "".join(
            json.dumps({"attr": attr, "drvPath": drv, "system": "x86_64-linux"}) + "\n"
            for (attr, _), drv in zip(JOBS, JOB_DRVS, strict=True)
        )
    )


# ------------------------------------------------------------------------ buildbot databases

odd_text = st.sampled_from([
    "", "::error::x", "a\nb", "\x1b[31mred", "\x1b]0;title\x07", "\x9b31m", "\u202eevil",
    "https://b.example.org/#/builders/1/builds/" + "9" * 500, "é", "\udcff", "x" * 3000,
])  # fmt: skip
cell = st.one_of(
    st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.binary(max_size=40), odd_text,
    st.text(max_size=30),
)  # fmt: skip
drv_cell = st.one_of(
    st.sampled_from(JOB_DRVS),
    st.sampled_from(JOB_DRVS),
    st.sampled_from(JOB_DRVS),
    st.builds(drv_path, st.text(NIX32, min_size=32, max_size=32), st.just("other")),
    cell,
)
time_cell = st.one_of(st.floats(), cell)
url_cell = st.one_of(odd_text, cell)
special_times = st.sampled_from([1764000000.5, 0.0, -1.0, 253402300799.0, 253402300800.0, 1e18,
                                  float("inf"), float("-inf"), float("nan"), 1764000000])  # fmt: skip
good_row = st.tuples(st.sampled_from(JOB_DRVS), special_times, url_cell)
row = st.one_of(good_row, good_row, good_row, st.tuples(drv_cell, time_cell, url_cell))
SCHEMAS = [
    "CREATE TABLE failed_builds (derivation VARCHAR(512) NOT NULL, timestamp FLOAT NOT NULL, "
    "url VARCHAR(1024) NOT NULL, PRIMARY KEY (derivation))",
    "CREATE TABLE failed_builds (derivation, timestamp, url)",
    "CREATE TABLE failed_builds (derivation TEXT, url TEXT)",
    "CREATE TABLE builds (id INTEGER)",
    "CREATE TABLE rows (derivation, timestamp, url); CREATE VIEW failed_builds AS "
    "SELECT * FROM rows UNION ALL SELECT * FROM rows",
    "CREATE VIEW failed_builds AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
    "FROM r) SELECT 'x' || n AS derivation, 1.0 AS timestamp, '' AS url FROM r",
]


def _bad(value: Any) -> bool:
    return isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value)


def _raw(value: Any) -> Any:
    return value.encode("utf-8", "surrogateescape") if _bad(value) else value


@profile("databases")
@given(
    schema=st.one_of(st.sampled_from(SCHEMAS[:2]), st.sampled_from(SCHEMAS)),
    rows=st.lists(row, max_size=4),
    garbage=st.one_of(st.none(), st.none(), st.none(), st.binary(min_size=1, max_size=200)),
    record=st.sampled_from(["absent", "present", "spoiled"]),
)
def test_generated_buildbot_databases(
    schema: str, rows: list[tuple[Any, Any, Any]], garbage: bytes | None, record: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from capplan.adapters import failures as adapter

    monkeypatch.setattr(adapter, "MAX_BUILDBOT_ROWS", 5_000)  # the endless view ends soon
    with tempfile.TemporaryDirectory(prefix="capplan-fuzz-") as name:
        folder = Path(name)
        write_jobs(folder)
        db_path = folder / "state.sqlite"
        if garbage is not None:
            db_path.write_bytes(garbage)
        else:
            with contextlib.closing(sqlite3.connect(db_path)) as db:
                db.executescript(schema)
                table = "rows" if "rows" in schema else "failed_builds"
                if "VIEW failed_builds AS WITH" not in schema and "builds (id" not in schema:
                    width = 2 if "url TEXT)" in schema and "timestamp" not in schema else 3
                    for values in rows:
                        # Text that is not UTF-8 (a lone surrogate here) goes in as its bytes.
                        cells = values[:width]
                        marks = ", ".join("CAST(? AS TEXT)" if _bad(v) else "?" for v in cells)
                        with contextlib.suppress(sqlite3.Error):
                            db.execute(
                                f"INSERT INTO {table} VALUES ({marks})", [_raw(v) for v in cells]
                            )
                db.commit()
        if record != "absent":
            (folder / "rec.json").write_text(
                '{"format": "capplan-failures", "version": 1, "failures": {}}\n'
                if record == "present"
                else "{not json"
            )
        before = snapshot(folder)
        result = run(folder, "failures", "import-buildbot-nix", "rec.json", "--db",
                     "state.sqlite", "--jobs", "jobs.jsonl")  # fmt: skip
        OUTCOMES["databases"][contract(result, {0, 4, 6, 15})] += 1
        after = snapshot(folder)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert changed <= {"rec.json"}, changed
        if result.exit_code == 0 and (folder / "rec.json").exists():
            # A record the import wrote is one every later command reads.
            for command in (("failures", "list", "rec.json", "--json"),
                            ("failures", "merge", "merged.json", "rec.json")):  # fmt: skip
                assert run(folder, *command).exit_code == 0


# ----------------------------------------------------------------- Nix's answers to the check

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6),
                      st.floats(allow_nan=False, allow_infinity=False), odd_text,
                      st.text(max_size=10))  # fmt: skip
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)  # fmt: skip


def _agreeing() -> dict[str, Any]:
    """What a nixpkgs exactly as the knowledge base says answers for FLEET."""
    from tests.unit.test_nixpkgs_check_core import agreeing_answer, request_for

    request = request_for(["MI300X", "RTX 4090"], {"torch": {}, "llama-cpp": {}},
                          rocm_scope="stack")  # fmt: skip
    answer = agreeing_answer(request)
    answer["arguments"]["gromacs"] = ["cpuAcceleration", "enableCuda", "stdenv"]  # CPU levels
    answer["source"] = {"rev": None, "narHash": None, "lastModified": None, "version": "26.05"}
    return answer


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in sorted(value.items()):
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*prefix, index))
    return found


@st.composite
def answers(draw: st.DrawFn) -> Any:
    """The agreeing answer with a few of its parts replaced (or, now and then, anything)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_value)
    answer = _agreeing()
    paths = _paths(answer)
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(paths))
        spot = answer
        try:
            for key in path[:-1]:
                spot = spot[key]
            spot[path[-1]] = draw(json_value)
        except (KeyError, IndexError, TypeError):
            continue  # a part replaced before
    return answer


@pytest.fixture(scope="module")
def fake_nix() -> Iterator[Path]:
    """A folder holding a checkout (default.nix) and a ``nix`` that prints ANSWER's file:
    what Nix answered, whatever it is, reaches capplan as it would from the real one."""
    with tempfile.TemporaryDirectory(prefix="capplan-fuzz-nix-") as name:
        folder = Path(name)
        (folder / "bin").mkdir()
        nix = folder / "bin" / "nix"
        nix.write_text('#!/bin/sh\nexec cat "$FUZZ_NIX_ANSWER"\n')
        nix.chmod(nix.stat().st_mode | stat.S_IXUSR)
        (folder / "nixpkgs").mkdir()
        (folder / "nixpkgs" / "default.nix").write_text("{ ... }: { }\n")
        (folder / "capplan.toml").write_text(FLEET)
        yield folder


@profile("answers")
@given(answer=answers(), as_json=st.booleans())
def test_generated_nix_answers(fake_nix: Path, answer: Any, as_json: bool) -> None:
    # A lone surrogate stands for a byte that is not UTF-8: Nix prints a string's bytes as
    # they are.
    text = json.dumps(answer, ensure_ascii=False)
    (fake_nix / "answer.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    env = {"PATH": f"{fake_nix / 'bin'}:{os.environ['PATH']}",
           "FUZZ_NIX_ANSWER": str(fake_nix / "answer.json")}  # fmt: skip
    args = ["nixpkgs", "check", "--nixpkgs", "nixpkgs", *(["--json"] if as_json else [])]
    result = run(fake_nix, *args, env=env)
    OUTCOMES["answers"][contract(result, {0, 14, 17})] += 1
    if result.exit_code in (0, 17) and not as_json:
        for line in result.stdout.splitlines():
            assert printable(line) == line and len(line) < 4100, line[:200]
    if result.exit_code in (0, 17) and as_json:
        json.loads(result.stdout)


# ------------------------------------------------------------------------------ hostile names

NAMES = ["::error::x", "\x1b[31mred", "\x1b]0;title\x07", "\x9b31m", "\u202eevil", "a\nb",
         "a#b", "a%41b", "a%", "a?mode=rwc", "bad\udcff", "n" * 300]  # fmt: skip


def _make(root: Path, kind: str, name: str) -> str:
    """The path argument of one kind: a hostile ``name`` holding a good file, or a path that
    is no file (FIFO, device, /dev/stdout, a symlink loop, a missing folder above it)."""
    if kind == "fifo":
        os.mkfifo(root / "pipe")
        return "pipe"
    if kind == "device":
        return "/dev/null"
    if kind == "stdout":
        return "/dev/stdout"
    if kind == "loop":
        (root / "loop").symlink_to("loop")
        return "loop"
    if kind == "missing-folder":
        return "no/such/folder/x"
    return name


@pytest.mark.parametrize("role", ["--db", "RECORD", "--jobs"])
@pytest.mark.parametrize(
    "kind", [*(f"name:{n!r}" for n in NAMES), "fifo", "device", "stdout", "loop", "missing-folder"]
)
def test_hostile_names_in_the_import(role: str, kind: str) -> None:
    name = NAMES[[f"name:{n!r}" for n in NAMES].index(kind)] if kind.startswith("name:") else ""
    with tempfile.TemporaryDirectory(prefix="capplan-fuzz-") as folder_name:
        folder = Path(folder_name)
        write_jobs(folder)
        with contextlib.closing(sqlite3.connect(folder / "state.sqlite")) as db:
            db.execute(SCHEMAS[0])
            db.execute("INSERT INTO failed_builds VALUES (?, ?, ?)",
                       (JOB_DRVS[0], 1764000000.0, "https://b/1"))  # fmt: skip
            db.commit()
        args = {"RECORD": "rec.json", "--db": "state.sqlite", "--jobs": "jobs.jsonl"}
        given_path = _make(folder, kind, name)
        if kind.startswith("name:") and len(name) < 255 and role != "RECORD":
            source = {"--db": "state.sqlite", "--jobs": "jobs.jsonl"}[role]
            os.rename(folder / source, os.path.join(folder, name))
        args[role] = given_path
        before = snapshot(folder)
        result = run(folder, "failures", "import-buildbot-nix", args["RECORD"], "--db",
                     args["--db"], "--jobs", args["--jobs"])  # fmt: skip
        OUTCOMES["names"][contract(result, {0, 2, 4, 6, 15})] += 1
        after = snapshot(folder)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        assert changed <= {args["RECORD"]}, changed
        if result.exit_code == 0:
            assert "imported 1 of 1" in result.stderr
        if result.exit_code != 0:
            assert "\x1b" not in result.stderr and "\n::" not in result.stderr


@pytest.mark.parametrize(
    "kind", [*(f"name:{n!r}" for n in NAMES), "fifo", "device", "stdout", "loop", "missing-folder",
             "fifo-default", "device-default"]
)  # fmt: skip
def test_hostile_names_for_nixpkgs(fake_nix: Path, kind: str) -> None:
    # The names that are checkouts reach (the fake) nix; the others are one line, exit 4.
    (fake_nix / "answer.json").write_text(json.dumps(_agreeing()))
    env = {"PATH": f"{fake_nix / 'bin'}:{os.environ['PATH']}",
           "FUZZ_NIX_ANSWER": str(fake_nix / "answer.json")}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="capplan-fuzz-", dir=fake_nix) as folder_name:
        folder = Path(folder_name)
        name = NAMES[[f"name:{n!r}" for n in NAMES].index(kind)] if kind.startswith("name:") else ""
        if kind.endswith("-default"):
            (folder / "np").mkdir()
            if kind == "fifo-default":
                os.mkfifo(folder / "np" / "default.nix")
            else:
                (folder / "np" / "default.nix").symlink_to("/dev/zero")
            given_path = str(folder / "np")
        else:
            given_path = _make(folder, kind, name)
            if kind.startswith("name:") and len(name) < 255:
                os.mkdir(os.path.join(folder, name))
                Path(os.path.join(folder, name, "default.nix")).write_text("{ ... }: { }\n")
            if not given_path.startswith("/"):
                given_path = os.path.join(folder, given_path)
        before = snapshot(fake_nix)
        result = run(fake_nix, "nixpkgs", "check", "--nixpkgs", given_path, env=env)
        OUTCOMES["names"][contract(result, {0, 4})] += 1
        assert snapshot(fake_nix) == before
        if kind.startswith("name:") and len(name) < 255:
            assert result.exit_code == 0, result.stderr
        if result.exit_code != 0:
            assert "\x1b" not in result.stderr and "\n::" not in result.stderr
