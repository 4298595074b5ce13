"""The pure export renderers (core/export) on plan variants the fleet alone does not make:
``a``/``f`` targets, labels past PEP 825's 16 characters, two builds that would share a label."""

from __future__ import annotations

import dataclasses
import re

from capplan.adapters.kb import load_kb
from capplan.core.export.wheel import wheel_label as _label
from capplan.core.export.wheel import wheel_variants
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.export import cuda_wheel_properties as _nvidia
from capplan.core.families.cuda.keys import cuda_spec
from capplan.core.families.cuda.spec import CudaSpec
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
    built = cuda_spec(base).version
    a = base._replace(spec=CudaSpec((Capability.parse("10.0a"),), version=built))
    _, properties, notes = _nvidia(p, a, frozenset())
    assert properties["nvidia"]["sm_arch"] == ["100_real"]
    # The nvidia provider offers 100_real to a 10.3 GPU too, where sm_100a code does not run.
    assert any("sm_100a is stated as 100_real" in n and "10.3" in n for n in notes)
    f = base._replace(spec=CudaSpec((Capability.parse("10.0f"),), version=built))
    _, properties, notes = _nvidia(p, f, frozenset())
    assert properties["nvidia"]["sm_arch"] == ["100_real"]
    # Family code runs on the later minors the provider offers 100_real to: nothing to say.
    assert not any("100f" in n for n in notes)


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
    caps = (*cuda_spec(sm86).capabilities, *cuda_spec(sm90).capabilities)
    fat = sm86._replace(
        name="torch-fat", fat=True, spec=CudaSpec(caps, version=cuda_spec(sm86).version)
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
    # The aarch64 fat build has the properties of x86_64's sm90 build: one label for both
    # (their wheels differ in the platform tag), never two labels installers would refuse.
    assert labels["torch-fat-aarch64"] == labels["torch-sm90"]
    # The x86_64 fat build states only what ranks below the single-target wheels.
    assert props[labels["torch-fat"]]["nvidia"]["sm_arch"] == ["90_virtual"]


def caps(*texts: str) -> tuple[Capability, ...]:
    return tuple(Capability.parse(t) for t in texts)


def test_cuda_arch_spec_says_where_each_kind_of_code_runs() -> None:
    from capplan.core.families.cuda.export import cuda_arch_spec

    assert cuda_arch_spec(caps("8.6"), ()) == ">=8.6,<9"  # SASS: its major's later minors
    assert cuda_arch_spec(caps("8.0", "8.6", "9.0"), ()) == ">=8.0,<9|>=9.0,<10"
    assert cuda_arch_spec(caps("12.0"), caps("12.0")) == ">=12.0"  # PTX: every later GPU
    assert cuda_arch_spec(caps("8.0", "9.0"), caps("9.0")) == ">=8.0,<9|>=9.0"
    assert cuda_arch_spec(caps("10.0a"), ()) == "==10.0"  # arch-specific: that GPU alone
    assert cuda_arch_spec(caps("10.0", "10.0a"), ()) == ">=10.0,<11"  # held by the wider part


def test_amdgpu_arch_is_the_isa_version_py_rattler_reports() -> None:
    from capplan.core.families.rocm.export import amdgpu_arch

    assert amdgpu_arch("gfx942") == "9.4.2"
    assert amdgpu_arch("gfx90a") == "9.0.10"
    assert amdgpu_arch("gfx1100") == "11.0.0"
    assert amdgpu_arch("gfx90a:xnack+") == "9.0.10"  # the ISA, whatever its features
    assert amdgpu_arch("gfx9-4-generic") is None  # a generic target names no one ISA
