"""The list schedule: dependencies respected, runners never double-booked, bound honoured."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.core.planning.schedule import list_schedule


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[str], dict[str, float], dict[str, list[str]]]:
    n = draw(st.integers(1, 40))
    names = [f"j{i:02d}" for i in range(n)]
    minutes = {name: draw(st.floats(0.5, 90, allow_nan=False)) for name in names}
    needs = {
        name: sorted(draw(st.sets(st.sampled_from(names[:i]), max_size=3)) if i else set())
        for i, name in enumerate(names)
    }
    return names, minutes, needs


@settings(max_examples=200, deadline=None)
@given(dags(), st.integers(1, 8))
def test_schedule_is_feasible_and_bounded(
    dag: tuple[list[str], dict[str, float], dict[str, list[str]]], runners: int
) -> None:
    order, minutes, needs = dag
    dependents: dict[str, list[str]] = {n: [] for n in order}
    for name, ns in needs.items():
        for need in ns:
            dependents[need].append(name)
    s = list_schedule(order, minutes, needs, dependents, runners)
    eps = 1e-6
    for name in order:
        for need in needs[name]:
            assert s.start[name] >= s.start[need] + minutes[need] - eps
    for runner in range(runners):
        slots = sorted(
            (s.start[n], s.start[n] + minutes[n]) for n in order if s.runner[n] == runner
        )
        for (_, end), (begin, _) in itertools.pairwise(slots):
            assert begin >= end - eps
    assert s.makespan >= s.lower_bound - eps
    assert s.lower_bound >= max(s.critical_path, sum(minutes.values()) / runners) - 1e-3
    # Graham's bound for list scheduling: never worse than twice the lower bound.
    assert s.makespan <= 2 * s.lower_bound + eps


def test_independent_equal_jobs_fill_every_runner() -> None:
    order = [f"j{i}" for i in range(8)]
    s = list_schedule(order, dict.fromkeys(order, 10.0), {n: [] for n in order},
                      {n: [] for n in order}, 4)  # fmt: skip
    assert s.makespan == 20.0 == s.lower_bound
