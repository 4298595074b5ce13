"""The pure export renderers (core/export) on plan variants the fleet alone does not make:
``a``/``f`` targets, labels past PEP 825's 16 characters, two builds that would share a label."""

from __future__ import annotations

import dataclasses
import re

from capplan.adapters.kb import load_kb
from capplan.core.export.wheel import _label, _nvidia, wheel_variants
from capplan.core.families.cuda.capability import Capability
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.plan import Plan
from capplan.core.planning.planner import make_plan

LABEL = re.compile(r"[0-9a-z_.]{1,16}")


def plan() -> Plan:
    config = config_from_mapping(
        {
            "fleet": {"gpus": ["H100", "RTX 3090", "B200"]},
            "packages": {"torch": {}},
            "policy": {"system": "x86_64-linux", "cuda": ["12.9"]},
        },
        origin="test",
    )
    return make_plan(load_kb(), config)


def test_a_and_f_targets_are_stated_by_their_base_and_said() -> None:
    p = plan()
    base = p.variant("torch-sm90")
    assert base is not None
    a = base._replace(capabilities=(Capability.parse("9.0a"),))
    _, properties, notes = _nvidia(p, a)
    assert properties["nvidia"]["sm_arch"] == ["90_real"]
    assert any("sm_90a is stated as 90_real" in n for n in notes)
    f = base._replace(capabilities=(Capability.parse("10.0f"),))
    _, properties, notes = _nvidia(p, f)
    assert properties["nvidia"]["sm_arch"] == ["100_real"]
    assert any("later minors of major 10" in n for n in notes)


def test_a_label_past_16_characters_ends_in_a_digest() -> None:
    one = {"nvidia": {"sm_arch": ["80_real", "86_real", "89_real", "90_real"]}}
    other = {"nvidia": {"sm_arch": ["80_real", "86_real", "89_real", "100_real"]}}
    long = _label("cu129", ["sm80_86_89_90"], one)
    assert LABEL.fullmatch(long) and long.startswith("cu129_")
    assert long == _label("cu129", ["sm80_86_89_90"], one)  # stable
    assert long != _label("cu129", ["sm80_86_89_100"], other)
    assert _label("cu129", ["sm86"], one) == "cu129_sm86"  # short labels stay readable


def test_two_builds_named_alike_with_other_properties_get_two_labels() -> None:
    p = plan()
    sm86, sm90 = p.variant("torch-sm86"), p.variant("torch-sm90")
    assert sm86 is not None and sm90 is not None
    fat = sm86._replace(
        name="torch-fat", fat=True, capabilities=(*sm86.capabilities, *sm90.capabilities)
    )
    fat_arm = sm90._replace(name="torch-fat-aarch64", fat=True, system="aarch64-linux")
    variants = tuple(sorted((*p.variants, fat, fat_arm), key=lambda v: v.name))
    both = dataclasses.replace(p, variants=variants, systems=("x86_64-linux", "aarch64-linux"))
    result = wheel_variants(both, "torch", "1")
    labels = {name: e["label"] for e in result.entries for name in e["variants"]}
    assert labels["torch-fat"] != labels["torch-fat-aarch64"]
    assert all(LABEL.fullmatch(label) for label in labels.values())
    props = {e["label"]: e["properties"] for e in result.entries}
    assert props[labels["torch-fat"]] != props[labels["torch-fat-aarch64"]]
