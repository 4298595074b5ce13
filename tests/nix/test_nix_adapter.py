"""capplan.adapters.nix against the real nix: one `nix eval` for many attrs, input overrides,
attr names treated as data (never spliced into Nix code), and clear errors."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from capplan.adapters.nix import current_system, flake_output_paths, nix_eval_json
from capplan.core.caches.narinfo import split_store_path
from capplan.errors import NixError

pytestmark = pytest.mark.skipif(
    shutil.which("nix") is None,
    reason="nix not found on PATH (install Debian's nix-bin)",
)

FLAKE = """
{
  inputs.dep.url = "path:@DEP@";
  outputs = { self, dep }: {
    legacyPackages.@SYSTEM@ = {
      plain = derivation { name = "capplan-nixtest-plain"; system = "@SYSTEM@";
                           builder = "/bin/sh"; args = [ "-c" "echo > $out" ]; };
      multi = derivation { name = "capplan-nixtest-multi-${dep.tag}"; system = "@SYSTEM@";
                           builder = "/bin/sh"; outputs = [ "out" "lib" ];
                           args = [ "-c" "echo > $out; echo > $lib" ]; };
      "with.dot" = derivation { name = "capplan-nixtest-dot"; system = "@SYSTEM@";
                                builder = "/bin/sh"; args = [ "-c" "echo > $out" ]; };
      broken = throw "capplan test: this variant does not evaluate";
    };
  };
}
"""


def _dep(path: Path, tag: str) -> Path:
    path.mkdir()
    (path / "flake.nix").write_text(f'{{ outputs = {{ self }}: {{ tag = "{tag}"; }}; }}\n')
    return path


@pytest.fixture
def flake(tmp_path: Path) -> Path:
    dep = _dep(tmp_path / "dep", "one")
    root = tmp_path / "flake"
    root.mkdir()
    text = FLAKE.replace("@DEP@", str(dep)).replace("@SYSTEM@", current_system())
    (root / "flake.nix").write_text(text)
    return root


def test_outputs_of_several_attrs_in_one_call(flake: Path) -> None:
    paths = flake_output_paths(f"path:{flake}", ["plain", "multi", "with.dot"])
    assert sorted(paths) == ["multi", "plain", "with.dot"]
    assert len(paths["multi"]) == 2 and paths["multi"][1].endswith("-capplan-nixtest-multi-one-lib")
    assert paths["plain"][0].endswith("-capplan-nixtest-plain")
    for outs in paths.values():
        for out in outs:
            split_store_path(out)


def test_override_input_changes_the_outputs(flake: Path, tmp_path: Path) -> None:
    other = _dep(tmp_path / "dep2", "two")
    before = flake_output_paths(f"path:{flake}", ["multi"])
    after = flake_output_paths(f"path:{flake}", ["multi"], {"dep": f"path:{other}"})
    assert after["multi"][0].endswith("-capplan-nixtest-multi-two")
    assert before["multi"] != after["multi"]


def test_only_requested_attrs_are_forced(flake: Path) -> None:
    # `broken` throws when forced; asking for the others must not touch it.
    assert list(flake_output_paths(f"path:{flake}", ["plain"])) == ["plain"]
    with pytest.raises(NixError, match="this variant does not evaluate"):
        flake_output_paths(f"path:{flake}", ["broken"])


@pytest.mark.parametrize("name", ['plain"; x = builtins.abort "injected', "${builtins.abort 1}"])
def test_attr_names_are_data_not_code(flake: Path, name: str) -> None:
    # Spliced into Nix code, these would abort evaluation; as data they are just missing attrs.
    with pytest.raises(NixError, match="has no legacyPackages"):
        flake_output_paths(f"path:{flake}", [name])


def test_missing_attr_is_named(flake: Path) -> None:
    with pytest.raises(
        NixError, match=r"has no legacyPackages\.[a-z0-9_]+-[a-z]+\.nope \(and 1 more\)"
    ):
        flake_output_paths(f"path:{flake}", ["plain", "nope", "nope2"])


def test_nix_eval_json_and_its_errors(tmp_path: Path) -> None:
    assert nix_eval_json(["--expr", '{ b = [ 1 2 ]; a = "x"; }']) == {
        "a": "x",
        "b": [1, 2],
    }
    with pytest.raises(NixError, match=r"nix eval failed: error: .*undefined variable"):
        nix_eval_json(["--expr", "undefinedThing"])
    with pytest.raises(NixError, match="nix not found"):
        nix_eval_json(["--expr", "1"], env={"PATH": str(tmp_path)})


def test_nixpkgs_needing_a_newer_nix_is_one_clear_line(tmp_path: Path) -> None:
    # The abort text of current nixpkgs' default.nix (lib/minfeatures.nix); a pinned nixpkgs
    # that needs Nix >= 2.18 evaluated with this machine's Nix 2.8 fails exactly so.
    (tmp_path / "default.nix").write_text(
        "abort ''\n  This version of Nixpkgs requires an implementation of Nix with the "
        "following features:\n  - `builtins.nixVersion` reports at least 2.18\n\n"
        "  You are evaluating with Nix ${builtins.nixVersion}, please upgrade:\n''\n"
    )
    with pytest.raises(NixError) as info:
        nix_eval_json(["--file", str(tmp_path / "default.nix")])
    err = info.value
    assert err.exit_code == 14
    assert err.message.startswith("the pinned nixpkgs needs Nix >= 2.18, this nix is 2.")
    assert "\n" not in err.one_line() and "upgrade Nix" in (err.hint or "")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # Nix >= 2.18 leaves the first `error:` line bare for these and puts the message last,
        # after the `… while calling the 'throw' builtin` frames.
        ('let f = x: throw "capplan test: thrown"; in { a = f 1; }.a', "capplan test: thrown"),
        ('abort "capplan test: aborted"', "evaluation aborted .*capplan test: aborted"),
        ("builtins.map (x: x.y) [ { } ]", "attribute '\"?y\"?' missing"),
        ('{ }."9.9"', "attribute '\"?9\\.9\"?' missing"),
        ("assert 1 == 2; 1", r"assertion '\(1 == 2\)' failed"),
    ],
)
def test_nix_errors_read_right_under_every_nix_version(expression: str, message: str) -> None:
    # `json` forces the list so the missing attribute is reached.
    with pytest.raises(NixError) as info:
        nix_eval_json(["--expr", expression])
    line = info.value.message
    assert re.fullmatch(f"nix eval failed: error: .*{message}.*", line), line
