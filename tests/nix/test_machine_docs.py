"""docs/machines.md's Nix blocks run as written: each ```nix block after a
`<!-- machine: KIND -->` mark is evaluated with `fleet` bound to a fleet flake's outputs
(tests/nix/machine_eval.nix: the real module system, the stand-in nixpkgs), and the machine
gets the sm86 variants the block's RTX 3090 asks for."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator

import pytest
from nixhelpers import REPO, NixRunner, copy_tree

pytestmark = pytest.mark.nix

PAGE = REPO / "docs" / "machines.md"
BLOCK = re.compile(r"<!-- machine: ([a-z-]+) -->\n```nix\n(.*?)```", re.S)
NIXPKGS_LIB = REPO.parent / "shared" / "nixpkgs-lib" / "lib"
REPORT = {
    "version": 1,
    "system": "x86_64-linux",
    "hardware": {
        "graphics_card": [
            {"vendor": {"hex": "10de", "value": 4318}, "device": {"hex": "2204", "value": 8708}}
        ]
    },
}


def blocks() -> dict[str, str]:
    return dict(BLOCK.findall(PAGE.read_text()))


def test_the_page_has_a_block_per_kind_of_machine() -> None:
    assert set(blocks()) == {"nixos", "nixos-facter", "home-manager", "overlay"}
    text = PAGE.read_text()
    # Hosts that are not NixOS come last, pointing at capplan host and run.
    assert "(hosts.md)" in text.split("## Non-NixOS hosts")[1]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NixRunner]:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    if not (NIXPKGS_LIB / "default.nix").is_file():
        pytest.skip(f"nixpkgs' lib is not at {NIXPKGS_LIB} (../shared/nixpkgs-lib)")
    root = tmp_path_factory.mktemp("docs-machines")
    copy_tree(root)
    # The committed plan's fleet has an RTX 3090 (8.6), as the blocks do.
    (root / "facter.json").write_text(json.dumps(REPORT))
    yield NixRunner(root)


def _eval(fleet: NixRunner, kind: str, block: str, body: str) -> object:
    helper = (
        f"import {fleet.root}/tests/nix/machine_eval.nix {{ root = {fleet.root}; "
        f"standin = {fleet.standin}; nixpkgsLib = {NIXPKGS_LIB}; "
    )
    if kind == "overlay":
        expression = (
            f"let e = {helper} }}; nixpkgs = {fleet.standin}; fleet = e.fleet; "
            f"shell = ({block}); in {body.replace('SHELL', 'shell')}"
        )
    else:
        module_kind = "home-manager" if kind == "home-manager" else "nixos"
        facter = "true" if kind == "nixos-facter" else "false"
        expression = (
            f'let e = {helper} kind = "{module_kind}"; facter = {facter}; '
            f"withFleet = fleet: ({block}); }}; in {body}"
        )
    return fleet.expr_json(expression)


@pytest.mark.parametrize("kind", ["nixos", "nixos-facter", "home-manager"])
def test_module_blocks_give_the_sm86_variants(fleet: NixRunner, kind: str) -> None:
    body = (
        "[ (e.pkgs.python3Packages.torch.outPath == e.variants.torch-sm86.outPath) "
        "(e.pkgs.python3Packages.torchvision.outPath == e.variants.torchvision-sm86.outPath) "
        "(e.pkgs.blender.outPath == e.default.blender.outPath) ]"
    )
    assert _eval(fleet, kind, blocks()[kind], body) == [True, True, True]


def test_overlay_block_builds_a_shell_on_the_variant(fleet: NixRunner) -> None:
    got = _eval(
        fleet,
        "overlay",
        blocks()["overlay"],
        "[ (builtins.isString SHELL.drvPath) "
        "(builtins.elem e.variants.torch-sm86.outPath (map (d: d.outPath) "
        '(import nixpkgs { system = "x86_64-linux"; overlays = [ (fleet.lib.overlayFor '
        '{ gpus = [ "RTX 3090" ]; }) ]; }).python3Packages.accelerate.dependencies)) ]',
    )
    assert got == [True, True]
