"""Knowledge-base names reach generated files (issue 46): a package named ``x\\npwned: 1\\n#`` in
``CAPPLAN_KB_DIR`` wrote a live ``pwned:`` key into recipe.yaml and variants.yaml; CR, U+2028
and U+0085 broke the YAML; ``::error::x`` started a line of ``plan --print-identifiers``. A
knowledge base is user input, so its names are checked where a file is loaded: any name that is
not a plain one (in packages.json, cpu_packages.json or amd_packages.json, as a key or an
attribute) is exit 6 naming the file, and nothing is written. A plain new name still plans,
exports and prints.
"""

from __future__ import annotations

import json
import os
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from tests.integration.fuzzing import at_most, derandomized

from capplan.cli.main import cli
from capplan.errors import ExitCode

KB = Path(str(resources.files("capplan").joinpath("kb")))
BAD = ["\npwned: 1\n#", "\r", "\u2028", "\u0085", "::error::", " ", "\t", "\x1b[31m", "'", '"',
       ":", "#", "{", "/", "\u202e", "\u00e9", "$(id)", "${x}"]  # fmt: skip
# The package a bad name is given to: a copy of nccl (a per-capability build), as a new key.
PLACES = ["packages-key", "packages-attr", "cpu-package", "cpu-attr", "amd-build", "amd-attr"]


def kb_with(folder: Path, place: str, name: str) -> Path:
    kb = folder / "kb"
    shutil.copytree(KB, kb)

    def edit(file: str, change: Any) -> None:
        data = json.loads((kb / file).read_text())
        change(data)
        (kb / file).write_text(json.dumps(data))

    def packages(data: dict[str, Any]) -> None:
        entry = dict(data["packages"]["nccl"], attr=name if place == "packages-attr" else "mypkg")
        data["packages"][name if place == "packages-key" else "mypkg"] = entry

    def cpu(data: dict[str, Any]) -> None:
        entry = dict(data["packages"][0])
        entry.update(package=name if place == "cpu-package" else "mycpu",
                     attr=name if place == "cpu-attr" else "mycpu")  # fmt: skip
        data["packages"].append(entry)

    def amd(data: dict[str, Any]) -> None:
        entry = dict(data["builds"]["llama-cpp"], attr=name if place == "amd-attr" else "x")
        data["builds"][name if place == "amd-build" else "myamd"] = entry

    if place.startswith("packages"):
        edit("packages.json", packages)
    elif place.startswith("cpu"):
        edit("cpu_packages.json", cpu)
    else:
        edit("amd_packages.json", amd)
    return kb


def run(cwd: Path, kb: Path, *argv: str) -> Any:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with at_most(60):
            return CliRunner().invoke(cli, list(argv), env={"CAPPLAN_KB_DIR": str(kb)},
                                      catch_exceptions=True)  # fmt: skip
    finally:
        os.chdir(old)


def fleet(folder: Path, package: str) -> None:
    (folder / "capplan.toml").write_text(
        # cpus: so cpu_packages.json is read (a fleet without CPUs plans from no CPU file).
        '[fleet]\ngpus = ["A100", "RTX 3090"]\ncpus = ["x86-64-v3"]\n[policy]\nsystem = "x86_64-linux"\n'
        f"[packages.{json.dumps(package)}]\n"
    )


@derandomized(40)
@given(
    st.sampled_from(PLACES),
    st.one_of(
        st.tuples(
            st.sampled_from(["", "x", "torch"]), st.sampled_from(BAD), st.sampled_from(["", "y"])
        ),
        st.just(("", "", "")),
    ),
)
def test_names_that_are_not_plain_are_refused_where_loaded(
    tmp_path_factory: Any, place: str, parts: tuple[str, str, str]
) -> None:
    name = "".join(parts)
    folder = tmp_path_factory.mktemp("kbname")
    kb = kb_with(folder, place, name)
    fleet(folder, name if place == "packages-key" else "nccl")
    for argv in (["plan", "--print-identifiers"], ["export", "conda", "--package", name or "x",
                 "--output", "out"], ["export", "wheel-variants", "--package", "nccl",
                 "--output", "out"]):  # fmt: skip
        result = run(folder, kb, *argv)
        assert result.exit_code == int(ExitCode.DATA), (argv, result.stdout, result.stderr)
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"capplan: error: knowledge-base file {kb}/"), line
        assert "\n" not in line and "\r" not in line and "\u2028" not in line
        assert result.stdout == ""
        assert not (folder / "out").exists()


def test_a_plain_new_name_plans_and_exports(tmp_path: Path) -> None:
    kb = kb_with(tmp_path, "packages-key", "my-pkg_2.0+x")
    fleet(tmp_path, "my-pkg_2.0+x")
    result = run(tmp_path, kb, "plan", "--print-identifiers")
    assert result.exit_code == 0, result.stderr
    assert {"my-pkg_2.0+x-sm80", "my-pkg_2.0+x-sm86"} <= set(result.stdout.split())
    result = run(tmp_path, kb, "export", "conda", "--package", "my-pkg_2.0+x", "--output", "out")
    assert result.exit_code == 0, result.stderr
    recipe = (tmp_path / "out" / "recipe.yaml").read_text()
    assert "my-pkg_2.0+x" in recipe
