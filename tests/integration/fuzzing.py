"""What the in-suite fuzzes and the hang tests share: hypothesis settings that give the same
inputs on every run (derandomized, no example database, no deadline: a run's time is bounded by
an alarm, :func:`at_most`, not by hypothesis)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

from hypothesis import HealthCheck, settings


class Hang(BaseException):
    """A run past its alarm. A BaseException, so neither click's CliRunner nor an ``except
    Exception`` in the code under test can swallow it: the test fails."""


@contextlib.contextmanager
def at_most(seconds: int, what: str = "a run") -> Iterator[None]:
    """Fail the test when the body runs past ``seconds`` (a hang); no time is asserted, a body
    that ends is fine however long it took."""

    def ring(_signum: int, _frame: FrameType | None) -> None:
        raise Hang(f"{what} went past {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def derandomized(max_examples: int) -> Any:
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.function_scoped_fixture],
    )  # fmt: skip
