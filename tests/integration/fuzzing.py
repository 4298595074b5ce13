"""What every in-suite fuzz shares: hypothesis settings that give the same inputs on every run
(derandomized, no example database), with no deadline (a CLI run's time is bounded by each
fuzz's own alarm, not by hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings


def derandomized(max_examples: int) -> Any:
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.function_scoped_fixture],
    )  # fmt: skip
