"""What names one device (issue 31): ``--device`` and ``[fleet] gpus`` entries.

``explain gfx942 --device -8.6`` answered for a Radeon 860M; ``--device "A100,A100"`` and
``"a100 a100 a100"`` resolved to one A100 (word matching ignores repeats); a 20,000-times
repeated name planned as one GPU and printed a 6 MB table. Each is now exit 4 with one short
line, in every command that takes a device, while every name in the knowledge base (one with a
repeated word among them) still resolves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.adapters.kb import load_kb
from capplan.core.families.cuda.gpus import resolve_device
from capplan.core.families.cuda.kb import nvidia
from capplan.core.model.devices import MAX_DEVICE_TEXT, check_device_text
from capplan.errors import ExitCode, InvalidInputError

KB = load_kb()
LONG = " ".join(["A100"] * 20_000)


def _one_line(result: Any) -> str:
    assert result.exit_code == int(ExitCode.INVALID_INPUT), (result.exit_code, result.output)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("capplan: error: "), lines
    assert len(lines[0]) < 600, len(lines[0])
    assert result.stdout == ""
    return lines[0]


@pytest.mark.parametrize(
    ("device", "says"),
    [
        ("-8.6", "starts with '-'"),
        ("A100,A100", "is a list"),
        ("a100 a100 a100", "repeats 'a100' 3 times"),
        ("RTX 3090 rtx 3090", "repeats 'rtx 3090' 2 times"),
        (LONG, "characters long"),
    ],
)
@pytest.mark.parametrize("targets", ["gfx942", "8.0"])
def test_explain_refuses_what_is_not_one_device(
    capplan_in: Any, device: str, says: str, targets: str
) -> None:
    line = _one_line(capplan_in("explain", targets, "--device", device))
    assert says in line


@pytest.mark.parametrize("device", ["-8.6", "A100,A100", "a100 a100 a100", LONG])
def test_a_fleet_entry_is_one_device(capplan_in: Any, tmp_path: Path, device: str) -> None:
    (tmp_path / "capplan.toml").write_text(f'[fleet]\ngpus = ["{device}"]\n')
    _one_line(capplan_in("plan"))


def test_doctor_device(capplan_in: Any) -> None:
    assert "repeats 'a100' 3 times" in _one_line(
        capplan_in("doctor", ".", "--device", "a100 a100 a100")
    )


def test_every_known_name_and_alias_still_resolves() -> None:
    # "NVIDIA RTX Spark N1X (5120-core Blackwell RTX GPU)" says RTX twice: still one device.
    for model in nvidia(KB).gpus:
        for label in (model.name, *model.aliases):
            check_device_text(label)
    cap, model = resolve_device(
        "NVIDIA RTX Spark N1X (5120-core Blackwell RTX GPU)", nvidia(KB).gpus
    )
    assert model is not None and str(cap) == "12.1"
    assert resolve_device("A100", nvidia(KB).gpus)[0] == resolve_device("8.0", nvidia(KB).gpus)[0]


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(["A100", "rtx 3090", "MI300X", "8.6", "H100 SXM"]),
    times=st.integers(2, 50),
    sep=st.sampled_from([" ", "  ", ",", ", ", ";", "\t"]),
)
def test_generated_repeats_never_resolve(name: str, times: int, sep: str) -> None:
    text = sep.join([name] * times)
    with pytest.raises(InvalidInputError) as caught:
        check_device_text(text)
    assert len(caught.value.message) < 300
    if len(text) > MAX_DEVICE_TEXT:
        assert "characters long" in caught.value.message
