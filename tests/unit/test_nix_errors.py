"""adapters.nix reads the message out of Nix's error output as Nix 2.8 and Nix 2.18 print it.

The inputs are stderr printed by Debian's nix 2.8.0 and by Nix 2.18.9 (../shared/tools/nix-2.18)
for `nix eval` of the same flake; tests/nix checks the same against whichever Nix runs.
"""

from __future__ import annotations

import pytest

from capplan.adapters.nix import _error_line

NIX_2_8_THROW = "error: this variant does not evaluate\n"
NIX_2_18_THROW = """\
trace: capplan-standin: import system=x86_64-linux config={}
error:
       … while calling the 'throw' builtin

         at /nix/store/fl9rln98zard6mnr5jn5n3gm2didmn2n-source/flake.nix:1:66:

            1| { outputs = { self }: { broken = throw "this variant does not evaluate"; }; }
             |                                  ^
            2|

       error: this variant does not evaluate
"""
NIX_2_18_NESTED = """\
error:
       … while evaluating the attribute 'drvPath'

       … while calling the 'abort' builtin

       error: evaluation aborted with the following error message: 'aborted here'
"""
NIX_2_8_MISSING = """\
error: attribute '9.9' missing

       at /nix/store/x-source/flake.nix:1:113:

            1| { a = { }."9.9"; }
             |        ^
"""
NIX_2_18_MISSING = NIX_2_8_MISSING.replace("'9.9'", "'\"9.9\"'") + "            2|\n"


@pytest.mark.parametrize(
    ("stderr", "line"),
    [
        (NIX_2_8_THROW, "error: this variant does not evaluate"),
        (NIX_2_18_THROW, "error: this variant does not evaluate"),
        (
            NIX_2_18_NESTED,
            "error: evaluation aborted with the following error message: 'aborted here'",
        ),
        (NIX_2_8_MISSING, "error: attribute '9.9' missing"),
        (NIX_2_18_MISSING, "error: attribute '\"9.9\"' missing"),
        ("warning: something odd\n", "warning: something odd"),
        ("", "no error output"),
    ],
)
def test_the_message_line_under_both_nix_versions(stderr: str, line: str) -> None:
    assert _error_line(stderr) == line


def test_a_bare_error_never_is_the_message() -> None:
    assert _error_line("error:\n       … while evaluating\n") != "error:"
