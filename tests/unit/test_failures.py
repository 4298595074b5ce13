"""The failure record's pure core: add, merge, forget, parse, and the matrix filter."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from capplan.core.planning.failures import (
    LOG_LINE_CHARS,
    LOG_LINES,
    FailureRecord,
    check_drv,
    check_time,
    import_failures,
    known_failures,
    log_line,
    log_tail,
    parse_record,
    record_schema,
    utc_text,
)
from capplan.errors import DataError, InvalidInputError

T0 = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
NIX32 = "0123456789abcdfghijklmnpqrsvwxyz"


def drv(name: str, salt: str = "") -> str:
    digest = "".join(NIX32[(ord(c) * 7 + i * 13) % 32] for i, c in enumerate((salt + name) * 32))
    return f"/nix/store/{digest[:32]}-{name}.drv"


# A small graph: torch needs magma and cublas; torchvision needs torch; cupy needs cublas.
NEEDS = {
    "cublas": (),
    "magma-sm86": ("cublas",),
    "torch-sm86": ("magma-sm86", "cublas"),
    "torchvision-sm86": ("torch-sm86",),
    "cupy": ("cublas",),
    "nccl": (),
}
MINUTES = {"cublas": 2.0, "magma-sm86": 40.0, "torch-sm86": 180.0, "torchvision-sm86": 15.0,
           "cupy": 20.0, "nccl": 30.0}  # fmt: skip
DRVS = {name: drv(name) for name in NEEDS}


def utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def record_of(*names: str, when: datetime = T0) -> FailureRecord:
    record = FailureRecord()
    for name in names:
        record = record.add(DRVS[name], f"x86_64-linux.{name}", "x86_64-linux", utc(when), ["boom"])
    return record


# ------------------------------------------------------------------------------------- the filter


def test_a_recorded_failure_drops_the_job_and_everything_that_needs_it() -> None:
    known = known_failures(NEEDS, DRVS, MINUTES, record_of("magma-sm86"))
    assert set(known.failed) == {"magma-sm86"}
    assert known.blocked == {"torch-sm86": ("magma-sm86",), "torchvision-sm86": ("magma-sm86",)}
    assert known.dropped == {"magma-sm86", "torch-sm86", "torchvision-sm86"}
    assert known.minutes_saved == 40.0 + 180.0 + 15.0
    (entry,) = known.to_json()
    assert entry["job"] == "magma-sm86" and entry["derivation"] == DRVS["magma-sm86"]
    assert entry["blocks"] == ["torch-sm86", "torchvision-sm86"]
    assert entry["since"] == "2026-11-01T12:00:00Z" and entry["count"] == 1
    assert entry["log_tail"] == ["boom"]


def test_a_root_failure_blocks_every_job_above_it_and_names_each_blocker() -> None:
    known = known_failures(NEEDS, DRVS, MINUTES, record_of("cublas", "magma-sm86"))
    assert set(known.failed) == {"cublas", "magma-sm86"}
    assert known.blocked["torch-sm86"] == ("cublas", "magma-sm86")
    assert known.blocked["cupy"] == ("cublas",)
    assert "nccl" not in known.dropped


def test_a_changed_derivation_is_scheduled_again() -> None:
    changed = {**DRVS, "magma-sm86": drv("magma-sm86", salt="nixpkgs-bump")}
    known = known_failures(NEEDS, changed, MINUTES, record_of("magma-sm86"))
    assert known.dropped == frozenset() and known.minutes_saved == 0


def test_retry_failed_schedules_every_known_failure() -> None:
    known = known_failures(NEEDS, DRVS, MINUTES, record_of("cublas", "magma-sm86"), retry=True)
    assert known.dropped == frozenset()
    assert known.retried == ("cublas", "magma-sm86")


def test_a_cached_job_is_built_whatever_the_record_says_and_blocks_nothing() -> None:
    known = known_failures(NEEDS, DRVS, MINUTES, record_of("magma-sm86"), exclude=["magma-sm86"])
    assert known.dropped == frozenset()
    # A failed job below a cached one: the cached one needs no build, so its users still run.
    known = known_failures(NEEDS, DRVS, MINUTES, record_of("cublas"), exclude=["magma-sm86"])
    assert "torch-sm86" in known.blocked and known.blocked["torch-sm86"] == ("cublas",)
    known = known_failures(
        {"a": (), "b": ("a",), "c": ("b",)}, {"a": drv("a")}, {},
        FailureRecord().add(drv("a"), "a", "x86_64-linux", utc(T0)), exclude=["b"],
    )  # fmt: skip
    assert known.dropped == {"a"}


def test_jobs_without_a_derivation_are_scheduled() -> None:
    known = known_failures(NEEDS, {}, MINUTES, record_of("magma-sm86"))
    assert known.dropped == frozenset()


# ------------------------------------------------------------------------------------- the record


def test_add_counts_keeps_since_and_takes_the_newest_log() -> None:
    record = record_of("nccl")
    later = T0 + timedelta(days=3)
    record = record.add(DRVS["nccl"], "x86_64-linux.nccl", "x86_64-linux", utc(later), ["oom"])
    (f,) = record.entries()
    assert (f.count, f.since, f.last, f.log_tail) == (
        2, "2026-11-01T12:00:00Z", "2026-11-04T12:00:00Z", ("oom",),
    )  # fmt: skip


def test_merge_adds_counts_and_is_order_independent() -> None:
    a = record_of("nccl", "cupy")
    b = record_of("nccl", when=T0 + timedelta(hours=5))
    c = record_of("cublas", when=T0 - timedelta(days=1))
    one, two = a.merge(b, c), c.merge(b, a)
    assert one.to_json() == two.to_json()
    assert len(one) == 3
    nccl = one.failures[DRVS["nccl"]]
    assert (nccl.count, nccl.since, nccl.last) == (
        2,
        "2026-11-01T12:00:00Z",
        "2026-11-01T17:00:00Z",
    )


def test_merge_of_failures_in_the_same_second_does_not_depend_on_order() -> None:
    when = utc(T0)
    a = FailureRecord().add(DRVS["nccl"], "nccl", "x86_64-linux", when, ["a"])
    b = FailureRecord().add(DRVS["nccl"], "x86_64-linux.nccl", "x86_64-linux", when, ["b"])
    assert a.merge(b).to_json() == b.merge(a).to_json()
    assert a.merge(b).failures[DRVS["nccl"]].count == 2


def test_forget_by_attr_or_age() -> None:
    record = record_of("nccl", "cupy").merge(record_of("cublas", when=T0 - timedelta(days=40)))
    kept, gone = record.forget_attr("cupy")  # the variant name matches x86_64-linux.cupy
    assert [f.attr for f in gone] == ["x86_64-linux.cupy"] and len(kept) == 2
    kept, gone = record.forget_before(utc(T0 - timedelta(days=30)))
    assert [f.attr for f in gone] == ["x86_64-linux.cublas"] and len(kept) == 2
    kept, gone = record.forget_before(utc(T0))
    assert [f.attr for f in gone] == ["x86_64-linux.cublas"]  # failed exactly then: kept
    kept, gone = record.forget_before(utc(T0 + timedelta(seconds=1)))
    assert len(gone) == 3 and len(kept) == 0


def test_the_record_round_trips_and_matches_its_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema checks the documented schema")
    record = record_of("nccl", "torch-sm86")
    data = json.loads(json.dumps(record.to_json()))
    jsonschema.validate(data, record_schema())
    assert parse_record(data, "f").to_json() == data


def test_log_tail_keeps_the_last_lines_without_colours_or_control_characters() -> None:
    text = (
        "\n".join(f"torch> line {i}" for i in range(100)) + "\n\x1b[31;1merror:\x1b[0m bad\x07\n\n"
    )
    tail = log_tail(text)
    assert len(tail) == LOG_LINES and tail[-1] == "error: bad" and tail[0] == "torch> line 61"
    assert log_tail("x" * 5000)[0] == "x" * LOG_LINE_CHARS + "..."


@pytest.mark.parametrize(
    "bad",
    ["", "/nix/store/short-x.drv", drv("a")[:-4], "nix/store/" + drv("a")[11:], drv("a") + "\n"],
)
def test_check_drv_refuses_what_is_not_a_derivation_path(bad: str) -> None:
    with pytest.raises(InvalidInputError):
        check_drv(bad)


@pytest.mark.parametrize(
    "bad",
    ["2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-11-24T24:00:00Z", "2026-11-24 20:00:00Z",
     "2026-11-24T20:00:00+00:00", "2026-04-31T00:00:00Z", ""],
)  # fmt: skip
def test_check_time_refuses_anything_but_real_utc_seconds(bad: str) -> None:
    with pytest.raises(ValueError):
        check_time(bad)
    assert check_time("2024-02-29T23:59:59Z") == "2024-02-29T23:59:59Z"


# ---------------------------------------------------------------------------------- bad records

GOOD: dict[str, Any] = record_of("nccl").to_json()


def _mutations() -> st.SearchStrategy[Any]:
    entry = GOOD["failures"][DRVS["nccl"]]
    junk = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(),
                                                             max_size=2),
    )  # fmt: skip

    def with_entry(key: str, value: Any) -> dict[str, Any]:
        return {**GOOD, "failures": {DRVS["nccl"]: {**entry, key: value}}}

    return st.one_of(
        junk,
        st.builds(lambda v: {**GOOD, "version": v}, junk | st.integers(2, 99)),
        st.builds(lambda v: {**GOOD, "format": v}, junk),
        st.builds(lambda v: {**GOOD, "failures": v}, junk.filter(lambda v: v != {})),
        st.builds(lambda k: {**GOOD, "failures": {k: entry}}, st.text(max_size=40)),
        st.builds(with_entry, st.sampled_from(sorted(entry)), junk),
        st.builds(
            lambda k: {**GOOD, k: 1},
            st.text(min_size=1, max_size=8).filter(lambda k: k not in GOOD),
        ),
    )


@settings(max_examples=300, deadline=None)
@given(_mutations())
def test_bad_records_are_a_data_error(data: Any) -> None:
    try:
        parsed = parse_record(data, "rec.json")
    except DataError as exc:
        assert exc.message.startswith("rec.json: not a capplan failure record")
        return
    # What parses is a record the writer could have written, round trip included.
    assert parse_record(parsed.to_json(), "again").to_json() == parsed.to_json()


@example("/00000000000000000000000000000000-=.drv")  # found by hypothesis: store folder "/"
@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        lambda d, h, n: f"{d}/{h}-{n}",
        st.sampled_from(["/nix/store", "/gnu/store", "nix/store", "", "/a b/store"]),
        st.text(NIX32 + "eotu", min_size=31, max_size=33),
        st.text("abc-+._?=/~é", max_size=12).map(lambda n: n + ".drv"),
    )
)
def test_check_drv_reads_store_paths_as_the_narinfo_reader_does(path: str) -> None:
    from capplan.core.caches.narinfo import split_store_path
    from capplan.errors import CapplanError

    try:
        split_store_path(path)
        expected = True
    except CapplanError:
        expected = False
    try:
        check_drv(path)
        got = True
    except InvalidInputError:
        got = False
    assert got == expected, path


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.floats(min_value=0, max_value=253_402_300_799.999))
@example(0.0)
@example(951_782_400.0)  # 2000-02-29T00:00:00Z
@example(253_402_300_799.0)
def test_utc_text_is_the_calendar_second(seconds: float) -> None:
    expected = datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert utc_text(seconds) == expected
    assert check_time(expected) == expected


@pytest.mark.parametrize(
    "seconds", [float("inf"), float("-inf"), float("nan"), 1e18, -1.0, 253_402_300_800.0]
)
def test_utc_text_refuses_what_no_record_can_say(seconds: float) -> None:
    # issue 41: buildbot-nix's timestamp is any float; outside 1970-9999 it is no record time.
    assert utc_text(seconds) is None


def test_add_all_is_each_add_in_turn() -> None:
    drvs = [f"/nix/store/{c * 32}-x.drv" for c in "abcd"]
    start = FailureRecord().add(drvs[0], "x86_64-linux.a", "x86_64-linux", "2025-01-01T00:00:00Z")
    items = [
        (drvs[0], "x86_64-linux.a", "x86_64-linux", "2025-02-01T00:00:00Z", ("late",)),
        (drvs[1], "x86_64-linux.b", "x86_64-linux", "2025-01-02T00:00:00Z", ()),
        (drvs[2], "x86_64-linux.c", "aarch64-linux", "2025-01-03T00:00:00Z", ("one", "two")),
    ]
    one_by_one = start
    for item in items:
        one_by_one = one_by_one.add(*item)
    assert start.add_all(items) == one_by_one
    assert start.add_all(items).failures[drvs[0]].count == 2


def test_a_log_line_is_one_short_line() -> None:
    line = log_line("buildbot-nix: https://b/\\n" + "9" * 2000 + "\n::error::x\x1b[31m")
    assert "\n" not in line and "\x1b" not in line and len(line) == LOG_LINE_CHARS + 3


def test_import_failures_leaves_out_what_no_record_can_hold() -> None:
    drvs = [f"/nix/store/{c * 32}-x.drv" for c in "abcde"]
    jobs = {d: (f"x86_64-linux.{i}", "x86_64-linux") for i, d in enumerate(drvs[:4])}
    old = FailureRecord().add(drvs[2], "x86_64-linux.2", "x86_64-linux", "2025-11-24T16:00:00Z")
    rows = [
        (drvs[0], 1764000000.5, "https://b/" + "9" * 1000),
        (drvs[0], 1764000100.0, "https://b/later"),  # listed twice: the latest counts
        (drvs[1], float("inf"), ""),
        (drvs[2], 1764000000.0, ""),  # recorded already, at the same second
        (drvs[3], 1764000000.0, ""),
        (drvs[4], 1764000000.0, ""),  # another evaluation's
    ]
    done = import_failures(old, rows, jobs, source="buildbot-nix")
    assert done.added == 2
    assert done.left_out == (
        (drvs[1], "its timestamp inf is no time from 1970 to 9999"),
        (drvs[4], None),
    )
    assert done.record.failures[drvs[0]].log_tail == ("buildbot-nix: https://b/later",)
    assert done.record.failures[drvs[0]].last == "2025-11-24T16:01:40Z"
    assert done.record.failures[drvs[3]].log_tail == ()
    assert done.record.failures[drvs[2]] == old.failures[drvs[2]]
