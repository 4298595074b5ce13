"""A repository of one's own (issue 33): `capplan init` writes the flake template's files, and
`generate` / `ci github` say so when the folder's flake cannot build the plan they write.

The end-to-end run in an empty folder (`nix flake init -t`, `nix build`, the workflow's plan
command) is tests/nix/test_fleet_template.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from capplan.cli.init import TEMPLATE_FILES, template_text
from capplan.cli.whereami import flake_problem
from capplan.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "planner" / "src" / "capplan" / "templates" / "fleet"
CONFIG = '[fleet]\ngpus = ["RTX 3090"]\n[packages.nccl]\n[policy]\nsystem = "x86_64-linux"\n'
FLAKE_WARNING = "warning: no flake.nix beside"


def test_the_template_folder_holds_what_init_writes() -> None:
    assert sorted(p.name for p in TEMPLATE.iterdir()) == sorted(TEMPLATE_FILES)
    flake = (REPO / "flake.nix").read_text()
    assert "./planner/src/capplan/templates/fleet" in flake  # templates.fleet is this folder
    # The template's flake reads the plan where `capplan generate` writes it.
    assert "plan = ./overlays/plan.json;" in template_text("flake.nix")
    assert 'inputs.capplan.inputs.nixpkgs.follows = "nixpkgs";' in template_text("flake.nix")


def test_init_writes_the_template_into_a_new_folder(capplan_in: object, tmp_path: Path) -> None:
    result = capplan_in("init", "fleet")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    for name in TEMPLATE_FILES:
        assert (tmp_path / "fleet" / name).read_text() == template_text(name)
    assert "wrote flake.nix, capplan.toml, README.md" in result.stderr


def test_init_keeps_an_existing_config_and_force_replaces_it(
    capplan_in: object, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(CONFIG)
    result = capplan_in("init")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "capplan.toml").read_text() == CONFIG
    assert (tmp_path / "flake.nix").read_text() == template_text("flake.nix")
    assert "kept capplan.toml" in result.stderr
    again = capplan_in("init")  # type: ignore[operator]
    assert again.exit_code == 0 and "wrote" not in again.stderr
    forced = capplan_in("init", "--force")  # type: ignore[operator]
    assert forced.exit_code == 0
    assert (tmp_path / "capplan.toml").read_text() == template_text("capplan.toml")


def test_init_under_a_file_is_one_line_and_exit_15(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    result = capplan_in("init", "taken/fleet")  # type: ignore[operator]
    assert result.exit_code == int(ExitCode.WRITE), result.stderr
    assert result.stderr.startswith("capplan: error: cannot create taken/fleet: ")
    assert "Traceback" not in result.stderr


def test_the_template_config_plans_torch_sm86(capplan_in: object, tmp_path: Path) -> None:
    assert capplan_in("init").exit_code == 0  # type: ignore[operator]
    result = capplan_in("plan", "--json")  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    assert "torch-sm86" in result.stdout


def test_generate_and_ci_warn_without_a_flake_and_name_the_fix(
    capplan_in: object, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(CONFIG)
    generate = capplan_in("generate")  # type: ignore[operator]
    assert generate.exit_code == 0
    warning = [line for line in generate.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and warning[0].startswith(FLAKE_WARNING), generate.stderr
    assert "overlays/plan.json" in warning[0]
    # One word for one thing: generate's variants are plan and matrix's build jobs.
    assert "variants, one build job each" in generate.stderr
    assert "capplan init" in warning[0] and "nix flake init -t" in warning[0]
    ci = capplan_in("ci", "github", "--cache", "mine")  # type: ignore[operator]
    assert ci.exit_code == 0
    assert FLAKE_WARNING in ci.stderr
    # A flake that reads something else is named as such.
    (tmp_path / "flake.nix").write_text("{ outputs = _: { }; }\n")
    other = capplan_in("generate")  # type: ignore[operator]
    assert f"warning: {tmp_path / 'flake.nix'} does not read overlays/plan.json" in other.stderr
    assert "capplan.lib.mkFleetFlake" in other.stderr


@pytest.mark.parametrize("command", [("generate",), ("ci", "github", "--cache", "mine")])
def test_no_warning_once_the_template_flake_is_there(
    capplan_in: object, tmp_path: Path, command: tuple[str, ...]
) -> None:
    (tmp_path / "capplan.toml").write_text(CONFIG)
    assert capplan_in("init").exit_code == 0  # type: ignore[operator]
    result = capplan_in(*command)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    assert not [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def test_capplans_own_repository_reads_its_plan() -> None:
    assert flake_problem(REPO, REPO / "overlays" / "plan.json") is None
    assert flake_problem(REPO, REPO / "elsewhere" / "plan.json") is not None
