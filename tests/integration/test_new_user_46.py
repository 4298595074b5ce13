"""What a new user met (issue 46): each step a first reader takes answers as the docs say."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.conftest import Cli

from capplan.errors import ExitCode


def test_gpus_lists_the_models_a_partial_query_matches(capplan_in: Cli) -> None:
    """`gpus` is the search command: 'rtx 30' lists the RTX 30 series (exit 0), not an error."""
    result = capplan_in("gpus", "rtx 30", "--json")
    assert result.exit_code == 0, result.output
    names = [row["name"] for row in json.loads(result.stdout)]
    assert any("RTX 3090" in name for name in names)
    assert any("RTX 3050" in name for name in names)
    assert not any("RTX 40" in name or "RTX 20" in name for name in names)


def test_a_partial_name_never_chooses_a_device(capplan_in: Cli) -> None:
    """Where one GPU must be chosen, a partial name stays an error (exit 4)."""
    result = capplan_in("explain", "8.6", "--device", "rtx 30")
    assert result.exit_code == ExitCode.INVALID_INPUT
    assert capplan_in("gpus", "rtx 309x").exit_code == ExitCode.INVALID_INPUT


def test_dispatch_explain_names_device_as_the_source(capplan_in: Cli, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text('[fleet]\ngpus = ["RTX 3090"]\n[packages.torch]\n')
    result = capplan_in("dispatch", "explain", "--device", "RTX 3090")
    assert result.exit_code == 0, result.output
    assert "GPUs: 8.6 (from --device)" in result.stdout
    assert "CAPPLAN_CAPABILITY" not in result.stdout
    from_env = capplan_in("dispatch", "explain", env={"CAPPLAN_CAPABILITY": "8.6"})
    assert "GPUs: 8.6 (from CAPPLAN_CAPABILITY)" in from_env.stdout


def test_generate_outside_a_fleet_writes_nothing(capplan_in: Cli, tmp_path: Path) -> None:
    """The README tour's `capplan generate` without the `cd` wrote the embedded 67-variant plan
    into a folder with no capplan.toml; it refuses now, naming the `cd`."""
    result = capplan_in("generate")
    assert result.exit_code == ExitCode.CONFIG
    (line,) = result.stderr.splitlines()
    assert line.startswith("capplan: error: no capplan.toml here or above") and "cd " in line
    assert list(tmp_path.iterdir()) == []
    # Said where to write, it writes there (the plan the user chose to take).
    assert capplan_in("generate", "--output", "plan.json").exit_code == 0
    assert (tmp_path / "plan.json").is_file()


def test_init_says_cd_first_in_short_lines(capplan_in: Cli, tmp_path: Path) -> None:
    result = capplan_in("init", "my-fleet")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    steps = lines[lines.index("next:") + 1 :]
    assert steps[0] == "  1. cd my-fleet"
    assert any("capplan generate" in step for step in steps[1:])
    assert max(len(line) for line in lines) <= 100
    here = Cli(tmp_path / "my-fleet")("init", "--force")
    assert not any(" cd " in line for line in here.stderr.splitlines())


def test_the_readme_tour_runs_as_written(capplan_in: Cli, tmp_path: Path) -> None:
    """The tour's commands that need no Nix, GPU or environment, in order, in one folder."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    tour = readme.split("## A short tour", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    commands = [
        line[2:].split("  #", 1)[0].strip() for line in tour.splitlines() if line.startswith("$ ")
    ]
    assert any(c.startswith("capplan init my-fleet && cd my-fleet") for c in commands)
    cwd = tmp_path
    for command in commands:
        for step in command.split(" && "):
            words = step.split()
            if words[0] == "cd":
                cwd = cwd / words[1]
                continue
            if words[0] != "capplan" or words[1] in ("detect", "doctor", "verify"):
                continue  # a GPU, an environment or a build of its own (said under the tour)
            result = Cli(cwd)(*shlex.split(step)[1:])
            assert result.exit_code == 0, (step, result.output)
    assert (tmp_path / "my-fleet" / "overlays" / "plan.json").is_file()
    assert not (tmp_path / "overlays").exists()


def test_help_names_every_family_and_never_cuts_a_summary(capplan_cli: Cli) -> None:
    import click

    from capplan.cli.helpformat import summary
    from capplan.cli.main import COMMANDS, cli

    top = capplan_cli("--help", env={"COLUMNS": "80"}).stdout
    first = " ".join(top.split("Options:")[0].split())
    assert all(word in first for word in ("CUDA", "ROCm", "CPU")), first
    ctx = click.Context(cli)
    for name in sorted(COMMANDS):
        group = cli.get_command(ctx, name)
        if not isinstance(group, click.Group):
            continue
        text = capplan_cli(name, "--help", env={"COLUMNS": "80"}).stdout
        listed = text.split("Commands:", 1)[1]
        assert "..." not in listed, (
            f"capplan {name} --help cuts a summary with '...' (give the group cls=Group, "
            f"from capplan.cli.helpformat):\n{text}"
        )
        flat = "".join(text.split())  # click wraps at blanks and after hyphens
        for sub in group.list_commands(ctx):
            command = group.get_command(ctx, sub)
            assert command is not None
            assert "".join(summary(command).split()) in flat, (name, sub)
        assert max(map(len, text.splitlines())) <= 80


def test_export_notes_wrap_and_fallbacks_name_their_system(
    capplan_cli: Cli, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = capplan_cli(
        "export", "conda", "--package", "torch", "--output", str(out), env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if not line.startswith("wrote ")]
    assert max(map(len, lines)) <= 80, result.stdout  # a note ran to 276 columns
    fallbacks = [line for line in lines if "fat fallback" in line]
    assert fallbacks and len(set(fallbacks)) == len(fallbacks), fallbacks
    assert any("x86_64-linux" in line for line in fallbacks)


def test_self_hosted_rows_name_their_jobs_architecture(capplan_cli: Cli) -> None:
    """Runners and limits, item 1: the default plan's aarch64 torch jobs went to the any-system
    ["self-hosted", "big-parallel"] labels, which an x86 self-hosted runner also carries."""
    result = capplan_cli("matrix", "--format", "github")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    rows = data.get("include") or [r for m in data["matrices"] for r in m["include"]]
    hosted = [r for r in rows if "self-hosted" in r["os"]]
    assert {r["system"] for r in hosted} == {"x86_64-linux", "aarch64-linux"}
    for row in hosted:
        want, other = ("ARM64", "X64") if row["system"] == "aarch64-linux" else ("X64", "ARM64")
        assert want in row["os"] and other not in row["os"], row
