"""`capplan failures` and `capplan matrix --failures` end to end: the record on disk, parallel
writers (real processes), records that cannot be read, and the matrix that skips known failures."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.test_ci_github import read_rows

from capplan.core.planning.failures import LOG_LINES

SRC = Path(__file__).resolve().parents[2] / "planner" / "src"
NIX32 = "0123456789abcdfghijklmnpqrsvwxyz"
EPOCH = "1764000000"  # 2025-11-24T16:00:00Z
MAGMA_USERS = {"torch-sm86", "torchvision-sm86"}  # in the default plan, magma-sm86's dependents


def store_hash(text: str) -> str:
    return "".join(NIX32[b % 32] for b in hashlib.sha256(text.encode()).digest())


def jobs_lines(capplan: Any, salt: str = "") -> str:
    """nix-eval-jobs lines for every job of the embedded default plan (NIXPKGS.md section 8's
    fields), derivation paths made up per job name (and salt: another nixpkgs)."""
    result = capplan("matrix", "--json")
    assert result.exit_code == 0, result.stderr
    lines = []
    for job in json.loads(result.stdout)["jobs"]:
        digest = store_hash(salt + job["name"])
        lines.append(
            json.dumps(
                {
                    "attr": f"{job['system']}.{job['name']}",
                    "attrPath": [job["system"], job["name"]],
                    "name": job["name"],
                    "system": job["system"],
                    "drvPath": f"/nix/store/{digest}-{job['name']}.drv",
                    "outputs": {"out": f"/nix/store/{digest}-{job['name']}"},
                }
            )
        )
    return "".join(line + "\n" for line in lines)


@pytest.fixture
def jobs(capplan_in: Any, tmp_path: Path) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text(jobs_lines(capplan_in))
    return path


def add(capplan: Any, record: str, attr: str, *extra: str, epoch: str = EPOCH) -> Any:
    return capplan(
        "failures", "add", record, "--jobs", "jobs.jsonl", "--attr", attr, *extra,
        env={"SOURCE_DATE_EPOCH": epoch},
    )  # fmt: skip


def matrix_json(capplan: Any, *extra: str) -> tuple[dict[str, Any], str]:
    jobs = ("--jobs", "jobs.jsonl") if "--failures" in extra else ()
    result = capplan("matrix", "--json", *jobs, *extra)
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data, result.stderr


def names(data: dict[str, Any]) -> set[str]:
    return {job["name"] for job in data["jobs"]}


# ------------------------------------------------------------------------------------- commands


def test_add_list_forget(capplan_in: Any, jobs: Path, tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("".join(f"magma> [{i}/900] nvcc\n" for i in range(900)) + "error: oom\n")
    result = add(capplan_in, "rec.json", "magma-sm86", "--log", "build.log")
    assert result.exit_code == 0, result.stderr
    assert "recorded x86_64-linux.magma-sm86" in result.stderr
    data = json.loads((tmp_path / "rec.json").read_text())
    assert data["format"] == "capplan-failures" and data["version"] == 1
    ((drv, entry),) = data["failures"].items()
    assert drv == f"/nix/store/{store_hash('magma-sm86')}-magma-sm86.drv"
    assert entry["attr"] == "x86_64-linux.magma-sm86" and entry["system"] == "x86_64-linux"
    assert entry["since"] == entry["last"] == "2025-11-24T16:00:00Z" and entry["count"] == 1
    assert len(entry["log_tail"]) == LOG_LINES and entry["log_tail"][-1] == "error: oom"

    again = add(capplan_in, "rec.json", "x86_64-linux.magma-sm86", epoch="1764086400")
    assert again.exit_code == 0, again.stderr
    entry = json.loads((tmp_path / "rec.json").read_text())["failures"][drv]
    assert entry["count"] == 2 and entry["last"] == "2025-11-25T16:00:00Z"
    assert entry["since"] == "2025-11-24T16:00:00Z" and entry["log_tail"] == []

    listed = capplan_in("failures", "list", "rec.json", "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout)["failures"][drv]["count"] == 2
    table = capplan_in("failures", "list", "rec.json")
    assert "x86_64-linux.magma-sm86" in table.stdout and "1 recorded failure" in table.stdout

    typo = capplan_in("failures", "forget", "rec.json", "--attr", "magma-sm68")
    assert typo.exit_code == 4 and "recorded: x86_64-linux.magma-sm86" in typo.stderr
    old = capplan_in("failures", "forget", "rec.json", "--older-than", "3",
                     env={"SOURCE_DATE_EPOCH": str(1764086400 + 3 * 86400)})  # fmt: skip
    assert old.exit_code == 0 and "0 forgotten, 1 left" in old.stderr
    old = capplan_in("failures", "forget", "rec.json", "--older-than", "3",
                     env={"SOURCE_DATE_EPOCH": str(1764086400 + 3 * 86400 + 1)})  # fmt: skip
    assert old.exit_code == 0 and "1 forgotten, 0 left" in old.stderr
    assert json.loads((tmp_path / "rec.json").read_text())["failures"] == {}


def test_add_by_derivation_and_the_schema(capplan_in: Any, tmp_path: Path) -> None:
    drv = f"/nix/store/{store_hash('x')}-torch-sm120.drv"
    result = capplan_in("failures", "add", "r.json", "--drv", drv, "--system", "aarch64-linux",
                        "--attr", "torch-sm120")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    entry = json.loads((tmp_path / "r.json").read_text())["failures"][drv]
    assert entry["system"] == "aarch64-linux" and entry["attr"] == "torch-sm120"
    schema = capplan_in("failures", "schema")
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema checks the schema")
    jsonschema.validate(json.loads((tmp_path / "r.json").read_text()), json.loads(schema.stdout))


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--attr", "x"], 2),  # neither --jobs nor --drv
        (["--attr", "x", "--jobs", "jobs.jsonl", "--drv", "/nix/store/x.drv"], 2),
        (["--attr", "x", "--drv", "/nix/store/x.drv"], 2),  # --drv without --system
        (["--attr", "nope", "--jobs", "jobs.jsonl"], 4),
        (["--attr", "cublas", "--jobs", "missing.jsonl"], 4),
        (["--attr", "cublas", "--jobs", "jobs.jsonl", "--log", "missing.log"], 4),
        (["--attr", "x", "--drv", "/nix/store/not-a-drv", "--system", "x86_64-linux"], 4),
    ],
)
def test_bad_add_arguments(capplan_in: Any, jobs: Path, args: list[str], code: int) -> None:
    result = capplan_in("failures", "add", "rec.json", *args)
    assert result.exit_code == code, result.stderr
    assert result.stderr.splitlines()[-1].startswith("capplan: error: ")
    assert not (jobs.parent / "rec.json").exists()


_ARG = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(attr=_ARG, drv=_ARG, system=_ARG, days=_ARG)
def test_bad_values_never_crash_and_never_touch_the_record(
    capplan_in: Any, tmp_path: Path, attr: str, drv: str, system: str, days: str
) -> None:
    record = tmp_path / "keep.json"
    record.write_text('{"failures": {}, "format": "capplan-failures", "version": 1}\n')
    before = record.read_bytes()
    for args in (
        ["add", "keep.json", "--attr", attr, "--drv", drv, "--system", system],
        ["forget", "keep.json", "--older-than", days],
        ["forget", "keep.json", "--attr", attr],
    ):
        result = capplan_in("failures", *args)
        assert result.exit_code in (0, 2, 4), (args, result.stderr)
        if result.exit_code:
            assert record.read_bytes() == before
            assert "internal error" not in result.stderr


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.binary(max_size=64),
        st.sampled_from([
            b"", b"{", b"null", b"[]", b'{"format": "capplan-failures", "version": 2, "failures": {}}',
            b'{"format": "capplan-failures", "version": true, "failures": {}}',
            b'{"format": "other", "version": 1, "failures": {}}',
            b'{"format": "capplan-failures", "version": 1, "failures": {"/nix/store/x.drv": {}}}',
            b"\xff\xfe{}", b"[" * 100_000,
        ]),
    )
)  # fmt: skip
def test_a_record_that_cannot_be_read_is_exit_6_and_left_byte_for_byte(
    capplan_in: Any, tmp_path: Path, content: bytes
) -> None:
    record = tmp_path / "bad.json"
    record.write_bytes(content)
    drv = f"/nix/store/{store_hash('a')}-a.drv"
    (tmp_path / "in.json").write_bytes(content)
    for args in (
        ["failures", "add", "bad.json", "--drv", drv, "--system", "x86_64-linux", "--attr", "a"],
        ["failures", "forget", "bad.json", "--older-than", "1"],
        ["failures", "forget", "bad.json", "--attr", "a"],
        ["failures", "list", "bad.json"],
        ["failures", "merge", "bad.json"],  # OUT is read before it is written
        ["failures", "merge", "good.json", "in.json"],  # an input that cannot be read
        ["matrix", "--offline", "--failures", "bad.json"],
    ):
        result = capplan_in(*args)
        assert result.exit_code == 6, (args, result.stderr)
        assert "not" in result.stderr and "internal error" not in result.stderr
        assert record.read_bytes() == content
    assert not (tmp_path / "good.json").exists()


def test_a_record_too_large_to_read_is_refused_unread(capplan_in: Any, tmp_path: Path) -> None:
    from capplan.adapters.failures import MAX_RECORD_BYTES

    record = tmp_path / "big.json"
    with record.open("wb") as handle:
        handle.truncate(MAX_RECORD_BYTES + 1)
    result = capplan_in("failures", "list", "big.json")
    assert result.exit_code == 6 and "larger than" in result.stderr


# ------------------------------------------------------------------------------ parallel writers


def _capplan_process(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "SOURCE_DATE_EPOCH": EPOCH}
    return subprocess.Popen(
        [sys.executable, "-m", "capplan", *args], cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


WRITERS = 12


def test_parallel_adds_to_one_file_lose_no_record(tmp_path: Path) -> None:
    drvs = [f"/nix/store/{store_hash(str(i))}-job{i}.drv" for i in range(WRITERS)]
    procs = [
        _capplan_process(
            tmp_path,
            "failures",
            "add",
            "shared.json",
            "--drv",
            drv,
            "--system",
            "x86_64-linux",
            "--attr",
            f"job{i}",
        )
        for i, drv in enumerate(drvs)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    data = json.loads((tmp_path / "shared.json").read_text())
    assert sorted(data["failures"]) == sorted(drvs)


def test_one_file_per_job_merged_at_the_end_loses_no_record(tmp_path: Path) -> None:
    (tmp_path / "new").mkdir()
    shared = f"/nix/store/{store_hash('shared')}-shared.drv"
    procs = []
    for i in range(WRITERS):
        drv = shared if i % 2 else f"/nix/store/{store_hash(str(i))}-job{i}.drv"
        procs.append(
            _capplan_process(
                tmp_path,
                "failures",
                "add",
                f"new/job{i}.json",
                "--drv",
                drv,
                "--system",
                "x86_64-linux",
                "--attr",
                f"job{i}",
            )
        )
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    # The record as the last run left it: one failure of `shared` already.
    base = _capplan_process(tmp_path, "failures", "add", "record.json", "--drv", shared,
                            "--system", "x86_64-linux", "--attr", "shared")  # fmt: skip
    assert base.wait(timeout=120) == 0
    merged = _capplan_process(tmp_path, "failures", "merge", "record.json", "new")
    _, err = merged.communicate(timeout=120)
    assert merged.returncode == 0, err.decode()
    data = json.loads((tmp_path / "record.json").read_text())["failures"]
    assert len(data) == WRITERS // 2 + 1
    assert data[shared]["count"] == 1 + WRITERS // 2  # each job's failure counted once


# ----------------------------------------------------------------------------- matrix --failures


def test_matrix_skips_a_known_failure_and_what_needs_it(capplan_in: Any, jobs: Path) -> None:
    full, _ = matrix_json(capplan_in)
    assert add(capplan_in, "rec.json", "magma-sm86", "--log", "jobs.jsonl").exit_code == 0
    data, stderr = matrix_json(capplan_in, "--failures", "rec.json")
    assert names(full) - names(data) == {"magma-sm86"} | MAGMA_USERS
    (known,) = data["known_failures"]
    assert known["job"] == "magma-sm86" and known["attribute"] == "x86_64-linux.magma-sm86"
    assert known["derivation"].endswith("-magma-sm86.drv") and known["count"] == 1
    assert known["since"] == "2025-11-24T16:00:00Z" and known["log_tail"]
    assert set(known["blocks"]) == MAGMA_USERS
    minutes = {j["name"]: j["estimated_minutes"] for j in full["jobs"]}
    saved = sum(minutes[n] for n in {"magma-sm86"} | MAGMA_USERS)
    assert data["summary"]["known_failures_minutes_saved"] == pytest.approx(saved)
    assert data["summary"]["total_minutes"] == pytest.approx(
        full["summary"]["total_minutes"] - saved
    )
    assert "skipped magma-sm86: known failure of /nix/store/" in stderr
    assert "skipped torch-sm86: needs magma-sm86, a known failure" in stderr

    table = capplan_in("matrix", "--jobs", "jobs.jsonl", "--failures", "rec.json")
    assert table.exit_code == 0
    assert "failed  │ magma-sm86" in table.stdout and "blocked │ torch-sm86" in table.stdout
    assert f"{saved:g} build minutes saved" in table.stdout
    # The bottom line says so before any table (issue 33).
    head = " ".join(table.stdout.split("┃")[0].split())
    assert "skipped: known failures: magma-sm86, and 2 jobs that need them" in head


def test_a_changed_derivation_and_retry_failed_bring_the_jobs_back(
    capplan_in: Any, jobs: Path, tmp_path: Path
) -> None:
    full, _ = matrix_json(capplan_in)
    for name in ("cublas", "magma-sm86"):
        assert add(capplan_in, "rec.json", name).exit_code == 0
    skipped, _ = matrix_json(capplan_in, "--failures", "rec.json")
    assert len(names(skipped)) < len(names(full)) - 10  # cublas is under most of the plan
    retried, stderr = matrix_json(capplan_in, "--failures", "rec.json", "--retry-failed")
    assert names(retried) == names(full) and retried["known_failures"] == []
    assert retried["summary"]["retried_known_failures"] == ["cublas", "magma-sm86"]
    assert "retrying cublas: a known failure (--retry-failed)" in stderr
    env = capplan_in("matrix", "--json", "--jobs", "jobs.jsonl", "--failures", "rec.json",
                     env={"CAPPLAN_RETRY_FAILED": "true"})  # fmt: skip
    assert names(json.loads(env.stdout)) == names(full)
    # Another nixpkgs: every derivation path differs, the record matches none of them.
    jobs.write_text(jobs_lines(capplan_in, salt="nixpkgs-bump"))
    bumped, _ = matrix_json(capplan_in, "--failures", "rec.json")
    assert names(bumped) == names(full) and bumped["known_failures"] == []


def test_github_output_leaves_known_failures_out_and_gives_rows_their_derivation(
    capplan_in: Any, jobs: Path
) -> None:
    assert add(capplan_in, "rec.json", "magma-sm86").exit_code == 0
    result = capplan_in("matrix", "--format", "github-output", "--jobs", "jobs.jsonl",
                        "--failures", "rec.json", "--rows", "rows.tsv")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines())
    names = [
        r["name"] for k, v in outputs.items() if k.startswith("stage")
        for r in json.loads(v)["include"]
    ]  # fmt: skip
    rows = list(read_rows(jobs.parent / "rows.tsv").values())
    built = {r["name"] for r in rows}
    assert sorted(names) == sorted(built)
    assert not built & ({"magma-sm86"} | MAGMA_USERS) and "magma-sm80" in built
    lines = {json.loads(line)["name"]: json.loads(line) for line in jobs.read_text().splitlines()}
    assert all(r["drv"] == lines[r["name"]]["drvPath"] for r in rows)


def test_matrix_failures_arguments(capplan_in: Any, jobs: Path, tmp_path: Path) -> None:
    missing = capplan_in("matrix", "--json", "--jobs", "jobs.jsonl", "--failures", "none.json")
    assert missing.exit_code == 0 and "no failure record at none.json yet" in missing.stderr
    assert not (tmp_path / "none.json").exists()
    retry = capplan_in("matrix", "--retry-failed")
    assert retry.exit_code == 2 and "--retry-failed goes with --failures" in retry.stderr
    (tmp_path / "bad.jsonl").write_text('{"attr": "cublas", "drvPath": "/tmp/x"}\n')
    assert add(capplan_in, "rec.json", "cublas").exit_code == 0
    bad = capplan_in("matrix", "--jobs", "bad.jsonl", "--failures", "rec.json")
    assert bad.exit_code == 6 and "bad.jsonl:1" in bad.stderr


def test_the_documented_example_record_is_a_valid_record(capplan_in: Any, tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "failures.md").read_text()
    example = text.split("## The record file\n\n```json\n", 1)[1].split("```", 1)[0]
    (tmp_path / "doc.json").write_text(example)
    listed = capplan_in("failures", "list", "doc.json", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert json.loads(listed.stdout) == json.loads(example)


# ----------------------------------------------------------------------------- adapter readers


def test_jobs_reader_skips_jobs_that_did_not_evaluate_and_names_bad_lines(tmp_path: Path) -> None:
    from capplan.adapters.failures import read_job_derivations
    from capplan.errors import DataError

    drv = f"/nix/store/{store_hash('t')}-torch.drv"
    good = {"attr": "x86_64-linux.torch-sm86", "drvPath": drv, "system": "x86_64-linux"}
    path = tmp_path / "jobs.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps({"attr": "b", "error": "boom"}) + "\n")
    jobs = read_job_derivations(path)
    assert list(jobs) == ["x86_64-linux.torch-sm86"] and jobs["x86_64-linux.torch-sm86"].drv == drv
    for bad, why in (
        ("nope", "2: not JSON"),
        ("[1]", "2: not a JSON object"),
        (json.dumps({**good, "drvPath": "/nix/store/x"}), "2: job x86_64-linux.torch-sm86: 'drvPath'"),
        (json.dumps({k: v for k, v in good.items() if k != "system"}), "2: job x86_64-linux.torch-sm86 has no 'system'"),
        (json.dumps(good), "2: duplicate attr"),
        (json.dumps({"drvPath": drv}), "2: missing or empty 'attr'"),
    ):  # fmt: skip
        path.write_text(json.dumps(good) + "\n" + bad + "\n")
        with pytest.raises(DataError, match=why.replace("'", ".")):
            read_job_derivations(path)


def test_a_huge_log_is_read_from_its_end_only(tmp_path: Path) -> None:
    from capplan.adapters.failures import MAX_LOG_BYTES, read_log_tail

    log = tmp_path / "huge.log"
    with log.open("w") as handle:
        handle.write("x" * (MAX_LOG_BYTES * 4) + "\n")  # one line far longer than what is read
        handle.write("".join(f"step {i}\n" for i in range(5)))
        handle.write("error: builder failed\n")
    # The read starts inside the long line: that cut line is not a line of the log's tail.
    assert read_log_tail(log) == ("step 0", "step 1", "step 2", "step 3", "step 4",
                                  "error: builder failed")  # fmt: skip
    (tmp_path / "short.log").write_text("x" * (MAX_LOG_BYTES - 10) + "\nlast\n")
    assert read_log_tail(tmp_path / "short.log")[-1] == "last"


def test_missing_records_and_inputs_are_exit_4_and_create_nothing(
    capplan_in: Any, tmp_path: Path
) -> None:
    for args in (["list", "none.json"], ["forget", "none.json", "--older-than", "1"]):
        result = capplan_in("failures", *args)
        assert result.exit_code == 4 and "no such failure record: none.json" in result.stderr
    assert not (tmp_path / "none.json").exists()
    drv = f"/nix/store/{store_hash('k')}-k.drv"
    assert capplan_in("failures", "add", "out.json", "--drv", drv, "--system", "x86_64-linux",
                      "--attr", "k").exit_code == 0  # fmt: skip
    before = (tmp_path / "out.json").read_bytes()
    result = capplan_in("failures", "merge", "out.json", "missing.json")
    assert result.exit_code == 4 and (tmp_path / "out.json").read_bytes() == before
    both = capplan_in("failures", "forget", "out.json", "--attr", "k", "--older-than", "1")
    assert both.exit_code == 2 and (tmp_path / "out.json").read_bytes() == before
