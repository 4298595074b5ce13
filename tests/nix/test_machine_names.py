"""GPU names in the NixOS / home-manager module follow the CLI's one rule: Nix computes the
same exact key as capplan's Python (pkgs/machine.nix ``exactKey`` against
core/families/cuda/gpus.py ``exact_key``, on the same texts), and a capplan.gpus entry resolves
to the family and target the CLI gives it (tests/kb/test_machine_names.py checks the exported
table against ``doctor_gpu``; here the module's own resolution is checked against the CLI).
Texts are ASCII: Nix lowers ASCII letters only (builtins.replaceStrings), as every name and
spelling in the knowledge base is."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nixhelpers import REPO, NixRunner

from capplan.adapters.kb import load_kb
from capplan.core.families.cuda.gpus import exact_key, normalise
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.registry import doctor_gpu
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.errors import CapplanError

pytestmark = pytest.mark.nix

KB = load_kb()
AMD = KB.part(AmdKnowledgeBase)
assert AMD is not None
MACHINE = REPO / "pkgs" / "machine.nix"
PLAN = REPO / "overlays" / "plan.json"


@pytest.fixture(scope="module")
def nix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    import shutil

    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    yield NixRunner(tmp_path_factory.mktemp("names"))


def _nix_map(nix: NixRunner, function: str, texts: list[str]) -> list[object]:
    data = nix.root / "texts.json"
    data.write_text(json.dumps(texts))
    expression = (
        f"let m = import {MACHINE}; plan = builtins.fromJSON (builtins.readFile {PLAN}); "
        f"texts = builtins.fromJSON (builtins.readFile {data}); f = {function}; in map f texts"
    )
    result: list[object] = json.loads(
        nix.run(["eval", "--impure", "--json", "--expr", expression]).stdout
    )
    return result


@settings(max_examples=3, deadline=None)
@given(st.lists(st.text(alphabet=string.printable, max_size=30), min_size=80, max_size=80))
def test_nix_exact_key_is_pythons(nix: NixRunner, texts: list[str]) -> None:
    texts += ["NVIDIA GeForce RTX 3090", "rtx-3090", "GT 640 (GK208)", "Tesla V100-SXM2-32GB"]
    assert _nix_map(nix, "m.exactKey", texts) == [exact_key(t) for t in texts]


def test_module_names_resolve_as_the_cli_does(nix: NixRunner) -> None:
    texts = [
        "RTX 3090",
        "rtx3090",
        "NVIDIA GeForce RTX 3090",
        "A100",
        "h100",
        "8.6",
        "sm_90",
        "compute_80",
        "86",
        "MI300X",
        "Radeon RX 7900 XTX",
        "rx-7900-xtx",
        "gfx1100",
        "GFX942",
        "GeForce GT 640 (GK208)",
        "Jetson Orin",
        "RTX 9999 Ultra",
    ]
    got = _nix_map(
        nix,
        'text: let r = m.resolve { inherit plan; system = "x86_64-linux"; gpus = [ text ]; }; '
        "in if r.targets == [ ] then null else { inherit (builtins.head r.targets) family target; }",
        texts,
    )
    families = {"nvidia": "cuda", "amd": "rocm"}
    for text, answer in zip(texts, got, strict=True):
        try:
            gpu = doctor_gpu(KB, text)
        except CapplanError:
            assert answer is None, text
            continue
        device = gpu.device
        target = getattr(device, "processor", None) or str(device)
        assert answer == {"family": families[gpu.vendor], "target": target}, text


def test_the_exported_table_is_the_committed_plans(nix: NixRunner) -> None:
    # The committed plan carries the table the module reads (CI's `generate --check` keeps it
    # current); a plan without it is refused with the way out.
    assert "machine" in json.loads(Path(PLAN).read_text())


# Loose names (no exact name or alias): the NVIDIA family's word match and the CLI's pick,
# ambiguous ones included (the candidates named as the CLI names them).
LOOSE = [
    "GT 640",
    "GT 640 (GK208)",
    "Tesla",
    "Quadro",
    "titan",
    "rtx 6000",
    "3090 ti",
    "geforce rtx3080",
    "RTX 4090D",
    "a100 80gb",
    "h100 sxm",
    "l4 24gb",
    "jetson",
    "Radeon 7900",
    "mi300",
    "a100 a100",
    "8.6,9.0",
    "-8.6",
    "no such gpu",
]


# The words of every model's name, NVIDIA's (as normalise splits them) and AMD's.
WORDS = sorted(
    {w for m in nvidia(KB).gpus for w in normalise(m.name)}
    | {w for m in AMD.gpus for w in m.name.lower().split()}
)


@settings(max_examples=8, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_loose_words_resolve_as_the_cli_does(nix: NixRunner, words: list[str]) -> None:
    _compare(nix, [" ".join(words)])


def test_loose_names_resolve_as_the_cli_does(nix: NixRunner) -> None:
    _compare(nix, LOOSE)


def _compare(nix: NixRunner, texts: list[str]) -> None:
    got = _nix_map(
        nix,
        'text: let r = m.resolve { inherit plan; system = "x86_64-linux"; gpus = [ text ]; }; '
        "in if r.targets == [ ] then { error = builtins.head r.errors; } "
        "else { inherit (builtins.head r.targets) family target; }",
        texts,
    )
    families = {"nvidia": "cuda", "amd": "rocm"}
    for text, answer in zip(texts, got, strict=True):
        assert isinstance(answer, dict)
        try:
            gpu = doctor_gpu(KB, text)
        except CapplanError as error:
            assert "error" in answer, (text, answer)
            if "is ambiguous" in error.message:
                # The same candidates, in the same words (the hints differ).
                assert error.message in answer["error"], (text, answer, error.message)
            continue
        device = gpu.device
        target = getattr(device, "processor", None) or str(device)
        assert answer == {"family": families[gpu.vendor], "target": target}, text


@settings(max_examples=3, deadline=None)
@given(st.lists(st.text(alphabet=string.printable, max_size=40), min_size=40, max_size=40))
def test_any_entry_gives_a_target_or_one_capplan_line(nix: NixRunner, texts: list[str]) -> None:
    """Hostile capplan.gpus entries: never a Nix error, always a target or a `capplan:` line."""
    got = _nix_map(
        nix,
        'text: let r = m.resolve { inherit plan; system = "x86_64-linux"; gpus = [ text ]; }; '
        "in { targets = map (t: t.target) r.targets; errors = r.errors; }",
        texts,
    )
    for text, answer in zip(texts, got, strict=True):
        assert isinstance(answer, dict)
        # A target (with, where the plan does not serve it, the line saying so) or a refusal.
        assert len(answer["targets"]) <= 1 and (answer["targets"] or answer["errors"]), text
        assert all(e.startswith("capplan: ") and "\n" not in e for e in answer["errors"]), text


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**62), max_value=2**62)
    | st.text(alphabet=string.printable, max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["hardware", "graphics_card", "vendor", "device", "hex", "value", "model", "system"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=3, deadline=None)
@given(st.lists(JSON, min_size=20, max_size=20))
def test_any_facter_report_gives_targets_or_capplan_lines(
    nix: NixRunner, reports: list[object]
) -> None:
    """Hostile report files (any JSON: nixos-facter's keys at any depth, any values): never a
    Nix error, only targets or `capplan:` lines."""
    paths = []
    for n, report in enumerate(reports):
        path = nix.root / f"report-{n}.json"
        path.write_text(json.dumps(report))
        paths.append(str(path))
    got = _nix_map(
        nix,
        'path: let r = m.resolve { inherit plan; system = "x86_64-linux"; '
        "facterReport = /. + path; }; in { targets = map (t: t.target) r.targets; "
        "errors = r.errors; }",
        paths,
    )
    for report, answer in zip(reports, got, strict=True):
        assert isinstance(answer, dict)
        assert all(e.startswith("capplan: ") and "\n" not in e for e in answer["errors"]), report
