"""One rule for GPU names (issue "what a new user meets", item 1).

An exact model name or alias (with or without "NVIDIA", case and spacing aside) wins over
chip-qualified and generated (pci.ids) variants; a loose name that matches models of different
capabilities, with no exact match, is ambiguous in every command that resolves one GPU: exit 4
with the candidates and how to pick one. ``gpus`` ranks exact matches first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.adapters.kb import load_kb
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.gpus import exact_key, find_gpus, resolve_device, unique_model
from capplan.core.families.cuda.kb import nvidia
from capplan.errors import ExitCode, InvalidInputError

KB = load_kb()
CURATED = [m for m in nvidia(KB).gpus if not m.pci_ids]

# Marketing names people type that stand for models of different capabilities.
AMBIGUOUS: list[tuple[str, set[str]]] = [
    ("rtx 6000", {"7.5", "8.9", "12.0"}),  # Quadro RTX 6000, RTX 6000 Ada, RTX PRO 6000
    ("RTX 6000", {"7.5", "8.9", "12.0"}),
    ("6000", {"7.5", "8.9", "12.0"}),  # not Quadro K6000/M6000/P6000: "k6000" is one word
    ("Titan", {"3.5", "5.2", "6.1", "7.0", "7.5", "8.9"}),
    ("TITAN X", {"5.2", "6.1"}),  # Maxwell GM200 and Pascal GP102
    ("Tesla", {"3.0", "3.7", "6.0"}),  # the message names six, lowest first, "and N more"
    ("Quadro", {"3.0", "3.5"}),
    ("gt 640", {"3.0", "3.5"}),
    ("GeForce GT 730", {"3.0", "3.5"}),
    ("Jetson", {"3.2", "5.3", "8.7"}),
]

# Exact names and aliases: they win however many loose or generated models share their words.
EXACT: list[tuple[str, str]] = [
    ("GeForce GTX 750 Ti", "5.0"),  # not the pci.ids "GTX 750 Ti (GK106)" at 3.0
    ("GTX 750 Ti", "5.0"),
    ("NVIDIA GeForce GTX 750 Ti", "5.0"),
    ("gtx750ti", "5.0"),
    ("Quadro RTX 6000", "7.5"),
    ("quadro rtx6000", "7.5"),
    ("RTX 6000 Ada", "8.9"),
    ("NVIDIA RTX 6000 Ada Generation", "8.9"),
    ("RTX PRO 6000", "12.0"),
    ("RTX A6000", "8.6"),
    ("A6000", "8.6"),
    ("TITAN V", "7.0"),
    ("nvidia titan rtx", "7.5"),
    ("Tesla K80", "3.7"),
    ("rtx3090", "8.6"),
]

# Loose names whose matches all share one capability resolve without a word.
LOOSE: list[tuple[str, str]] = [
    ("RTX 3090", "8.6"),  # 3090 and 3090 Ti
    ("a100", "8.0"),
    ("H100", "9.0"),
    ("V100", "7.0"),
    ("RTX 4090", "8.9"),
]


@pytest.mark.parametrize(("query", "caps"), AMBIGUOUS)
def test_a_loose_name_of_several_capabilities_is_ambiguous(query: str, caps: set[str]) -> None:
    with pytest.raises(InvalidInputError) as info:
        resolve_device(query, nvidia(KB).gpus)
    assert info.value.exit_code == ExitCode.INVALID_INPUT
    message = str(info.value)
    assert "ambiguous" in message
    for cap in caps:
        assert f"({cap})" in message, (cap, message)
    assert "capplan gpus" in (info.value.hint or "")
    assert unique_model(query, nvidia(KB).gpus) is None


@pytest.mark.parametrize(("query", "cap"), EXACT + LOOSE)
def test_an_exact_name_wins_and_a_one_capability_loose_name_resolves(query: str, cap: str) -> None:
    assert resolve_device(query, nvidia(KB).gpus)[0] == Capability.parse(cap)
    model = unique_model(query, nvidia(KB).gpus)
    assert model is not None and model.capability == Capability.parse(cap)


@pytest.mark.parametrize(("query", "cap"), EXACT)
def test_gpus_ranks_the_exact_match_first(query: str, cap: str) -> None:
    matches = find_gpus(query, nvidia(KB).gpus)
    assert matches[0].exact and matches[0].model.capability == Capability.parse(cap)
    assert all(
        not m.exact for m in matches[1:] if m.model.capability != matches[0].model.capability
    )


def test_a_generated_or_chip_qualified_model_ranks_below_a_curated_one() -> None:
    names = [m.model.name for m in find_gpus("GTX 750 Ti", nvidia(KB).gpus)]
    assert names.index("NVIDIA GeForce GTX 750 Ti") < names.index(
        "NVIDIA GeForce GTX 750 Ti (GK106)"
    )


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(CURATED), st.sampled_from(["", "NVIDIA ", "nvidia "]), st.booleans())
def test_every_curated_name_resolves_to_its_own_capability(
    model: Any, prefix: str, upper: bool
) -> None:
    # An exact name, whatever the case or the NVIDIA prefix, is never ambiguous and never
    # resolves to another capability.
    name = model.name.removeprefix("NVIDIA ")
    query = prefix + (name.upper() if upper else name.lower())
    cap, found = resolve_device(query, nvidia(KB).gpus)
    assert cap == model.capability, (query, found)


def test_exact_keys_ignore_nvidia_case_and_spacing_only() -> None:
    assert exact_key("NVIDIA RTX-3090") == exact_key("rtx 3090") == exact_key("RTX3090")
    assert exact_key("Quadro RTX 6000") != exact_key("RTX 6000")


# -- every command that resolves one GPU ------------------------------------------------------


def _plan_toml(tmp: Path, gpus: list[str]) -> None:
    (tmp / "capplan.toml").write_text(
        "[fleet]\ngpus = " + json.dumps(gpus) + "\n[packages.torch]\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("explain", "8.6", "--device", "rtx 6000"),
        ("verify", "--expect", "8.6", "--device", "rtx 6000", "does-not-matter.so"),
        ("dispatch", "explain", "--device", "rtx 6000"),
        ("doctor", "--device", "rtx 6000", "."),
        ("plan",),
    ],
    ids=["explain", "verify", "dispatch", "doctor", "fleet"],
)
def test_every_command_refuses_an_ambiguous_name_with_exit_4(
    tmp_path: Path, capplan_in: Any, args: tuple[str, ...]
) -> None:
    _plan_toml(tmp_path, ["rtx 6000"])
    result = capplan_in(*args)
    assert result.exit_code == ExitCode.INVALID_INPUT, (args, result.output, result.stderr)
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "ambiguous" in line and "(8.9)" in line


def test_a_fleet_with_an_exact_name_plans_it(tmp_path: Path, capplan_in: Any) -> None:
    _plan_toml(tmp_path, ["GeForce GTX 750 Ti", "RTX 6000 Ada"])
    result = capplan_in("plan", "--json")
    assert result.exit_code == 0, result.stderr
    fleet = json.loads(result.stdout)["fleet"]
    assert {g["capability"] for g in fleet} >= {"5.0", "8.9"}


# -- AMD names: the same rule on gfx targets ----------------------------------------------------


@pytest.mark.parametrize(
    ("query", "target"), [("MI300", "gfx942"), ("mi300x", "gfx942"), ("RX 7900 XTX", "gfx1100")]
)
def test_an_amd_name_of_one_target_resolves(query: str, target: str) -> None:
    from capplan.core.families.rocm.claim import amd_entry

    found = amd_entry(KB, query)
    assert found is not None and str(found[0]) == target


@pytest.mark.parametrize("query", ["RX 7", "RX 6"])
def test_an_amd_name_of_several_targets_is_ambiguous(query: str) -> None:
    from capplan.core.families.rocm.claim import amd_entry

    with pytest.raises(InvalidInputError, match="ambiguous"):
        amd_entry(KB, query)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_name_resolves_or_is_one_invalid_input(text: str) -> None:
    # Every command that resolves one GPU goes through resolve_device: whatever a user types is
    # a capability, a model, or exit 4 in one line, never another exception.
    try:
        cap, _ = resolve_device(text, nvidia(KB).gpus)
    except InvalidInputError as error:
        assert "\n" not in error.one_line()
    else:
        assert isinstance(cap, Capability)


# Queries made from the labels people copy: words of real names and aliases, dropped, joined,
# re-cased, with vendor words and chip qualifiers, and free text.
_LABEL_WORDS = sorted(
    {w for m in nvidia(KB).gpus for label in (m.name, *m.aliases) for w in label.split()}
)
_query = st.one_of(
    st.lists(st.sampled_from(_LABEL_WORDS), min_size=1, max_size=4).flatmap(
        lambda words: st.sampled_from([" ", "", "-", "  "]).map(lambda sep: sep.join(words))
    ),
    st.sampled_from([label for m in nvidia(KB).gpus for label in (m.name, *m.aliases)]).flatmap(
        lambda label: st.sampled_from([label, label.upper(), label.lower(), label[:-1]])
    ),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzRTXGK0123456789 .-()", max_size=20),
)


@settings(max_examples=400, deadline=None)
@given(_query)
def test_skipping_labels_that_lack_a_wanted_word_changes_no_answer(query: str) -> None:
    # find_gpus skips a label before normalising it when a wanted word is not in its text: the
    # answers must be what normalising every label gives.
    import capplan.core.families.cuda.gpus as gpus_module

    fast = find_gpus(query, nvidia(KB).gpus)
    original = gpus_module._could_match
    gpus_module._could_match = lambda label, wanted: True
    try:
        every = find_gpus(query, nvidia(KB).gpus)
    finally:
        gpus_module._could_match = original
    assert fast == every
