"""A fleet repository of one's own, end to end, with real Nix against the stand-in nixpkgs.

In an empty folder: `nix flake init -t <capplan>#fleet`, `capplan generate`, `nix build
.#torch-sm86`, `capplan ci github`, then the workflow's own plan command (`matrix
--skip-cached` against a binary cache served on 127.0.0.1) and every `nix run` target the
workflow names, each resolved in the fleet's flake, not capplan's.  capplan itself is a copy
of this repository (a flake in a git work tree sees only tracked files), taken as the fleet's
`capplan` input with `--override-input`; the fleet's nixpkgs is the stand-in, which capplan's
nixpkgs follows.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from nixhelpers import SYSTEM, NixRunner, copy_to_binary_cache, copy_tree, serve_binary_cache

from capplan.cli.init import TEMPLATE_FILES, template_text
from capplan.cli.main import cli

pytestmark = pytest.mark.nix

WORKFLOW = ".github/workflows/cuda-cache.yml"


class Fleet:
    """The fleet folder, and Nix run there with capplan and nixpkgs given as local paths."""

    def __init__(self, root: Path, capplan: Path) -> None:
        self.root = root
        self.capplan = capplan
        self.nix = NixRunner(root)

    @property
    def overrides(self) -> list[str]:
        return [
            "--override-input", "capplan", f"path:{self.capplan}",
            "--override-input", "nixpkgs", f"path:{self.capplan / 'tests' / 'nixpkgs'}",
        ]  # fmt: skip

    def flake(self, verb: Sequence[str], *args: str) -> str:
        return self.nix.run([*verb, *args, *self.overrides, "--no-write-lock-file"]).stdout

    def capplan_cli(self, *args: str) -> Result:
        old = Path.cwd()
        os.chdir(self.root)
        try:
            return CliRunner().invoke(cli, list(args), catch_exceptions=False)
        finally:
            os.chdir(old)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    if shutil.which("nix") is None:
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run tests/nix)")
    capplan = tmp_path_factory.mktemp("capplan-source")
    copy_tree(capplan)
    root = tmp_path_factory.mktemp("my-fleet")
    fleet = Fleet(root, capplan)
    fleet.nix.run(["flake", "init", "-t", f"path:{capplan}#fleet"])
    yield fleet


@pytest.fixture(scope="module")
def generated(fleet: Fleet) -> Result:
    result = fleet.capplan_cli("generate")
    assert result.exit_code == 0, result.stderr
    return result


def test_flake_init_writes_the_files_capplan_init_writes(fleet: Fleet, tmp_path: Path) -> None:
    written = sorted(p.name for p in fleet.root.iterdir())
    assert set(TEMPLATE_FILES) <= set(written)
    for name in TEMPLATE_FILES:
        assert (fleet.root / name).read_text() == template_text(name), name
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "from-cli")])
    assert result.exit_code == 0, result.stderr
    for name in TEMPLATE_FILES:
        assert (tmp_path / "from-cli" / name).read_text() == template_text(name), name
    # The default template is the named one.
    both = json.loads(
        fleet.nix.run(
            ["eval", "--json", f"path:{fleet.capplan}#templates",
             "--apply", "t: [ (toString t.default.path) (toString t.fleet.path) ]",
             "--override-input", "nixpkgs", f"path:{fleet.capplan / 'tests' / 'nixpkgs'}",
             "--no-write-lock-file"]
        ).stdout
    )  # fmt: skip
    assert both[0] == both[1]


def test_generate_writes_the_plan_the_flake_reads_without_a_warning(generated: Result) -> None:
    assert "\nwarning:" not in "\n" + generated.stderr, generated.stderr
    assert "overlays/plan.json" in generated.stderr


def test_torch_sm86_builds_in_the_fleets_own_flake(fleet: Fleet, generated: Result) -> None:
    plan = json.loads((fleet.root / "overlays" / "plan.json").read_text())
    assert "torch-sm86" in plan["variants"]
    fleet.flake(["build"], ".#torch-sm86")
    record = json.loads((fleet.root / "result").read_text())
    assert record["TORCH_CUDA_ARCH_LIST"] == "8.6"
    assert record["configCudaCapabilities"] == ["8.6"]
    # The fleet's outputs mirror its own plan, not capplan's embedded one.
    names = json.loads(
        fleet.flake(
            ["eval"], f".#legacyPackages.{SYSTEM}", "--json", "--apply", "builtins.attrNames"
        )
    )
    assert set(plan["variants"]) <= set(names)
    assert "torch-sm80" not in names  # in capplan's own plan (A100), not in this fleet's


def test_flake_check_evaluates_the_fleet(fleet: Fleet, generated: Result) -> None:
    checks = json.loads(
        fleet.flake(["eval"], f".#checks.{SYSTEM}", "--json", "--apply", "builtins.attrNames")
    )
    assert checks == ["capplan", "plan-current", "variants-evaluate"]
    fleet.flake(["flake", "check"], "--no-build")


@pytest.fixture(scope="module")
def workflow(fleet: Fleet, generated: Result) -> dict[str, object]:
    (fleet.root / WORKFLOW).parent.mkdir(parents=True, exist_ok=True)  # a typed --output's folder
    result = fleet.capplan_cli("ci", "github", "--cache", "my-fleet", "--output", WORKFLOW)
    assert result.exit_code == 0, result.stderr
    assert "\nwarning:" not in "\n" + result.stderr, result.stderr
    data = yaml.safe_load((fleet.root / WORKFLOW).read_text())
    assert isinstance(data, dict)
    return data


def _run_lines(workflow: dict[str, object]) -> list[str]:
    jobs = workflow["jobs"]
    assert isinstance(jobs, dict)
    return [step["run"] for job in jobs.values() for step in job["steps"] if "run" in step]


def test_every_nix_run_of_the_workflow_resolves_in_the_fleet(
    fleet: Fleet, workflow: dict[str, object]
) -> None:
    targets = {t for run in _run_lines(workflow) for t in re.findall(r"nix run \.#(\S+)", run)}
    assert targets == {"capplan"}
    for target in sorted(targets):
        app = json.loads(fleet.flake(["eval"], f".#apps.{SYSTEM}.{target}", "--json"))
        assert app["type"] == "app" and app["program"].endswith("/bin/capplan")
        package = fleet.flake(["eval"], f".#packages.{SYSTEM}.{target}.name", "--raw")
        assert package.startswith("capplan")


def test_the_workflows_plan_command_skips_what_the_cache_holds(
    fleet: Fleet, workflow: dict[str, object], tmp_path: Path
) -> None:
    torch = Path(fleet.flake(["eval"], ".#torch-sm86.outPath", "--raw"))
    fleet.flake(["build"], ".#torch-sm86", "--no-link")
    copy_to_binary_cache([torch], tmp_path / "cache")
    plan_run = next(run for run in _run_lines(workflow) if "--skip-cached" in run)
    command = plan_run.split(" -- ", 1)[1].split(">>", 1)[0].replace("\\\n", " ")
    argv = shlex.split(command)
    with serve_binary_cache(tmp_path / "cache") as url:
        argv[argv.index("--cache") + 1] = url
        result = fleet.capplan_cli(*argv, *fleet.overrides)
        table = fleet.capplan_cli("matrix", "--cache", url, "--skip-cached", *fleet.overrides)
    # The table's bottom line says what the cache took out, before the table.
    head = " ".join(table.stdout.split("┃")[0].split())
    held = re.search(r"skipped: (\d+) jobs? that a binary cache holds", head)
    assert held and int(held.group(1)) >= 1, table.stdout  # torch-sm86 and what it links
    assert "torch-sm86" not in table.stdout and "torch-sm89" in table.stdout
    assert result.exit_code == 0, result.stderr
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines())
    jobs = [
        job["name"]
        for key, value in outputs.items()
        if value.startswith("{")
        for job in json.loads(value).get("include", [])
    ]
    assert "torch-sm86" not in jobs and "torch-sm89" in jobs, outputs
    # The attribute every build job builds (`nix build ".#$ATTR"`) is in the fleet's flake.
    attrs = json.loads(
        fleet.flake(
            ["eval"], f".#legacyPackages.{SYSTEM}", "--json", "--apply", "builtins.attrNames"
        )
    )
    assert {name for name in jobs} <= set(attrs)
