"""The GPU names plan.json's ``machine`` section exports for the NixOS / home-manager module
(pkgs/machine.nix looks them up by exact key) answer as the CLI's one rule does: every model
name and alias (NVIDIA's and AMD's, AMD's also without their vendor and line words), every
capability spelling and gfx processor, asked of ``doctor_gpu`` (the rule ``--device`` and the
fleet use), gives the family and target the table holds."""

from __future__ import annotations

import pytest

from capplan.adapters.kb import load_kb
from capplan.core.families.cuda.gpus import exact_key
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.machine import machine_names as nvidia_names
from capplan.core.families.registry import doctor_gpu, machine_names
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.machine import machine_spellings
from capplan.errors import CapplanError

KB = load_kb()


def _names() -> dict[str, dict[str, str]]:
    return machine_names(KB)


def _spellings() -> list[str]:
    labels = [label for m in nvidia(KB).gpus for label in (m.name, *m.aliases)]
    amd = KB.part(AmdKnowledgeBase)
    assert amd is not None
    labels += machine_spellings(amd)
    labels += [t.target.processor for t in amd.targets if not t.target.is_generic]
    caps = [i.capability for i in nvidia(KB).capabilities if not i.capability.suffix]
    for cap in caps:
        digits = f"{cap.major}{cap.minor}"
        labels += [cap.text, digits, f"sm_{digits}", f"SM{digits}", f"compute_{digits}"]
    return labels


def _cli(text: str) -> tuple[str, str] | None:
    try:
        gpu = doctor_gpu(KB, text)
    except CapplanError:
        return None
    device = gpu.device
    return gpu.vendor, getattr(device, "processor", None) or str(device)


def test_every_exported_name_answers_as_the_cli_does() -> None:
    names = _names()
    spellings = _spellings()
    assert len(spellings) > 900
    for text in spellings:
        for variant in (text, " " + text.upper().replace(" ", "-") + " "):
            entry = names.get(exact_key(variant))
            if entry is None:
                # Left out: a shortened AMD spelling ("680M") the CLI gives another family
                # loosely; the module refuses it rather than answer differently.
                answer = _cli(variant)
                assert answer is None or answer[0] != "amd", variant
                continue
            table = (entry["vendor"], entry["target"]) if "vendor" in entry else None
            assert table == _cli(variant), (variant, entry)


def test_exact_keys_of_nvidia_names_are_unambiguous_or_say_why() -> None:
    # Two models whose names share an exact key but not a capability would be refused with
    # both: none does today, and a future one must not silently pick one.
    for key, entry in nvidia_names(KB, exact_key).items():
        assert ("error" in entry) != ("vendor" in entry), key


@pytest.mark.parametrize("text", ["RTX 3090", "rtx3090", "NVIDIA GeForce RTX 3090", "sm_86", "86"])
def test_an_rtx_3090_is_86_however_it_is_written(text: str) -> None:
    assert _names()[exact_key(text)]["target"] == "8.6"
