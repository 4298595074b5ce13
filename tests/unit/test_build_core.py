"""`capplan build`'s pure part, without Nix: the start order, what a failure blocks, the
builders and who takes what, the progress and ETA, events and the summary."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.core.planning.build import (
    BuildEvent,
    BuildJob,
    BuildProgress,
    BuildQueue,
    BuildSummary,
    estimate_minutes,
)
from capplan.core.planning.builders import (
    Machine,
    blocked_behind,
    parse_machines,
    slots,
    unplaceable,
)
from capplan.errors import CapplanError, ExitCode, InvalidInputError


def job(name: str, minutes: float, *needs: str, features: tuple[str, ...] = ()) -> BuildJob:
    return BuildJob(name, "x86_64-linux", needs, minutes, features, f"/nix/store/{name}.drv", ())


# cublas feeds magma, torch and torchvision (a long chain); cutensor only cupy.
PLAN = [
    job("cutensor", 2),
    job("cublas", 2),
    job("cupy", 160, "cublas", "cutensor"),
    job("magma", 120, "cublas"),
    job("torch", 90, "magma", "cublas"),
    job("torchvision", 68, "torch"),
    job("nvrtc", 1),
]


def drain(queue: BuildQueue) -> list[str]:
    """Start order with one slot: each started job finishes before the next starts."""
    order = []
    while (j := queue.pop()) is not None:
        order.append(j.name)
        queue.built(j.name)
    return order


def test_dependencies_first_then_the_longest_critical_path() -> None:
    order = drain(BuildQueue(PLAN))
    # Critical paths: cublas 2 + 120 + 90 + 68 = 280, then magma 278 once cublas is built,
    # cutensor 162 before cupy 160 before torch 158; nvrtc (1) last.
    assert order == ["cublas", "magma", "cutensor", "cupy", "torch", "torchvision", "nvrtc"]
    for j in PLAN:
        assert all(order.index(n) < order.index(j.name) for n in j.needs)
    assert order[-1] == "nvrtc"


def test_the_order_does_not_depend_on_the_input_order() -> None:
    assert drain(BuildQueue(PLAN)) == drain(BuildQueue(list(reversed(PLAN))))


def test_nothing_is_ready_until_its_needs_are_built() -> None:
    queue = BuildQueue(PLAN)
    started = []
    while (j := queue.pop()) is not None:
        started.append(j.name)
    assert set(started) == {"cublas", "cutensor", "nvrtc"}
    queue.built("cublas")
    assert queue.pop() == PLAN[3]  # magma: cupy still waits for cutensor
    assert queue.pop() is None


def test_a_failure_blocks_what_needs_it_directly_or_not() -> None:
    queue = BuildQueue(PLAN)
    assert queue.pop() == PLAN[1]  # cublas
    assert set(queue.failed("cublas")) == {"magma", "cupy", "torch", "torchvision"}
    assert queue.failed("cublas") == []  # blocked once
    rest = drain(queue)
    assert rest == ["cutensor", "nvrtc"]
    assert queue.remaining() == []


def test_blocked_jobs_are_listed_in_start_order() -> None:
    queue = BuildQueue(PLAN)
    queue.pop()
    blocked = queue.failed("cublas")
    assert set(blocked) == {"magma", "cupy", "torch", "torchvision"}
    assert blocked.index("magma") < blocked.index("torch") < blocked.index("torchvision")


def test_remaining_after_a_stop() -> None:
    queue = BuildQueue(PLAN)
    queue.pop()
    assert set(queue.remaining()) == {j.name for j in PLAN} - {"cublas"}
    assert len(queue) == len(PLAN) - 1


def test_needs_outside_the_jobs_count_as_built() -> None:
    queue = BuildQueue([job("torch", 90, "magma")])  # magma: cached or built before
    assert queue.pop() is not None


def test_estimate_is_the_list_schedule_makespan() -> None:
    chain = [job("a", 10), job("b", 5, "a"), job("c", 7)]
    assert estimate_minutes(chain, 1) == 22
    assert estimate_minutes(chain, 2) == 15
    assert estimate_minutes([], 3) == 0


MACHINES = """
# a comment line
ssh://gpu1 x86_64-linux,i686-linux /key 4 2 big-parallel,cuda - -
ssh://arm aarch64-linux - 2;ssh://only-big x86_64-linux - 1 1 big-parallel big-parallel
"""


def test_parse_machines_reads_nix_format() -> None:
    gpu1, arm, big = parse_machines(MACHINES, "x86_64-linux")
    assert gpu1 == Machine(
        "ssh://gpu1", ("x86_64-linux", "i686-linux"), 4, frozenset({"big-parallel", "cuda"})
    )
    assert arm.systems == ("aarch64-linux",) and arm.max_jobs == 2
    assert big.mandatory == frozenset({"big-parallel"})
    assert slots((gpu1, arm, big)) == 7
    assert parse_machines("ssh://x", "riscv64-linux")[0].systems == ("riscv64-linux",)
    assert parse_machines("", "x86_64-linux") == ()


def test_mandatory_features_take_only_jobs_that_require_them() -> None:
    big = Machine("ssh://big", ("x86_64-linux",), 1, frozenset({"big-parallel"}),
                  frozenset({"big-parallel"}))  # fmt: skip
    assert big.takes("x86_64-linux", ["big-parallel"])
    assert not big.takes("x86_64-linux", [])
    assert not big.takes("aarch64-linux", ["big-parallel"])


def test_unplaceable_names_the_missing_system_or_feature() -> None:
    local = Machine("local", ("x86_64-linux",), 1, frozenset({"kvm"}))
    jobs = [
        ("torch", "x86_64-linux", ["big-parallel"]),
        ("cublas", "x86_64-linux", []),
        ("torch-aarch64", "aarch64-linux", []),
    ]
    assert unplaceable(jobs, [local]) == {
        "torch": "no x86_64-linux builder has big-parallel",
        "torch-aarch64": "no builder for aarch64-linux",
    }
    no_slots = Machine("local", ("x86_64-linux",), 0, frozenset({"big-parallel"}))
    assert set(unplaceable(jobs, [no_slots])) == {"torch", "cublas", "torch-aarch64"}


def test_blocked_behind_follows_needs_transitively() -> None:
    needs = {j.name: j.needs for j in PLAN}
    assert blocked_behind(needs, ["magma"]) == {"torch": "magma", "torchvision": "magma"}
    assert blocked_behind(needs, []) == {}


@pytest.mark.parametrize(
    "text",
    ["ssh://x x86_64-linux - many", "ssh://x - - 1 fast", "ssh://x - - -3", "@/etc/nix/machines"],
)
def test_bad_machines_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        parse_machines(text, "x86_64-linux")
    assert "\n" not in str(error.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_builders_text_parses_or_is_refused(text: str) -> None:
    """--builders is user input: whatever it holds, a clean answer or a CapplanError."""
    try:
        machines = parse_machines(text, "x86_64-linux")
    except CapplanError as error:
        assert error.exit_code == ExitCode.INVALID_INPUT
        assert "\n" not in error.one_line() and "\x1b" not in error.one_line()
        return
    for m in machines:
        assert m.max_jobs >= 0 and m.systems and m.uri


def test_progress_counts_per_system_and_corrects_the_eta() -> None:
    jobs = {j.name: j for j in [job("a", 10), job("b", 10), job("c", 10)]}
    p = BuildProgress(jobs, slots=1)
    assert p.eta_seconds(0) == 30 * 60
    p.start("a", 0)
    p.finish("a", 300)  # took 5 min against 10: the rest is corrected by half
    assert p.factor() == 0.5
    assert p.eta_seconds(300) == 10 * 60
    p.start("b", 300)
    assert p.per_system() == {"x86_64-linux": (1, 1, 1)}
    assert p.eta_seconds(360) == 9 * 60  # b: 5 min less 1 elapsed, c: 5 min
    p.drop(["c"])
    assert p.per_system() == {"x86_64-linux": (2, 1, 0)}


def test_events_are_one_escaped_line_and_json() -> None:
    e = BuildEvent("failed", "magma\x1b[2J", "x86_64-linux", "error: boom\nnext", 1.25,
                   {"log_tail": ["a"]})  # fmt: skip
    assert "\n" not in e.line() and "\x1b" not in e.line()
    assert e.line().startswith("failed magma\\x1b[2J (x86_64-linux) in 1.2 s: error: boom")
    data = e.to_json()
    assert data["seconds"] == 1.25 and data["log_tail"] == ["a"]
    json.dumps(data)


def test_summary_exit_code_and_lines() -> None:
    s = BuildSummary(built=["a"], pushed=["a"], estimated_minutes=12)
    assert s.exit_code() == ExitCode.OK
    s.failed.append("b")
    s.blocked.append("c")
    assert s.exit_code() == ExitCode.BUILD_FAILED
    data = s.to_json()
    assert data["exit_code"] == 19 and data["failed"] == ["b"] and data["blocked"] == ["c"]
    text = "\n".join(s.lines())
    assert "built 1" in text and "failed 1" in text and "blocked: c" in text
