"""``capplan init``: a fleet repository of one's own, the files ``nix flake init -t`` writes.

The files are the flake template's (``templates.fleet`` in capplan's flake.nix points at the
same folder, ``capplan/templates/fleet``), so the two ways to start never drift apart.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import click

from capplan.adapters.files import atomic_write_text, output_folder, path_kind
from capplan.cli.output import err_console
from capplan.errors import shorten

__all__ = ["TEMPLATE_FILES", "init", "template_text"]

# Written in this order; the template folder holds exactly these (a test checks it).
TEMPLATE_FILES = ("flake.nix", "capplan.toml", "README.md")


def template_text(name: str) -> str:
    """One file of the fleet template, as packaged with capplan."""
    return resources.files("capplan").joinpath("templates", "fleet", name).read_text("utf-8")


def _say(text: str) -> None:
    err_console().print(text, markup=False, highlight=False, soft_wrap=True)


def _there(path: Path) -> bool:
    """Whether ``path`` is taken (a dangling link too: the writer would create its file, which
    is a reason to keep it without --force); the writer says what is wrong with the rest."""
    return path_kind(path) != "missing"


@click.command()
@click.argument(
    "directory",
    # What DIRECTORY is (a file, a FIFO, a dangling link) is said by output_folder, exit 15.
    type=click.Path(path_type=str),
    default=".",
    required=False,
)
@click.option("--force", is_flag=True, help="Replace flake.nix, capplan.toml or README.md there.")
def init(directory: str, force: bool) -> None:
    """Start a fleet repository in DIRECTORY (default: here): flake.nix, capplan.toml, README.md.

    The same files as `nix flake init -t <capplan>`: a flake that takes capplan and nixpkgs
    as inputs and builds the plan `capplan generate` writes (overlays/plan.json). A file that
    is already there is kept (your capplan.toml gets the flake beside it); --force replaces it."""
    folder = output_folder(directory, make_parents=True, option="DIRECTORY")
    kept = [name for name in TEMPLATE_FILES if not force and _there(folder / name)]
    wrote = [name for name in TEMPLATE_FILES if name not in kept]
    for name in wrote:
        atomic_write_text(folder / name, template_text(name))
    shown = shorten(directory)
    if kept:
        _say(f"kept {', '.join(kept)} in {shown} (already there; --force replaces them)")
    if not wrote:
        return
    _say(f"wrote {', '.join(wrote)} in {shown}")
    for line in _next_steps(directory):
        _say(line)


def _next_steps(directory: str) -> list[str]:
    """What to do next, one short step a line (the one long line ran past 200 columns), with
    the `cd` into a new folder first: `capplan generate` writes beside capplan.toml (issue 46)."""
    import shlex

    steps = []
    if Path(directory) != Path("."):
        steps.append(f"cd {shlex.quote(shorten(directory))}")
    steps += [
        "set inputs.capplan.url in flake.nix to where you take capplan from",
        "list your GPUs in capplan.toml",
        "capplan generate",
        "git add flake.nix capplan.toml README.md overlays/plan.json"
        " (git init first in a new folder)",
        "nix build .#torch-sm86",
        "on your machines: nixosModules.default or lib.overlayFor   (README.md has the rest)",
    ]
    return ["next:"] + [f"  {n}. {step}" for n, step in enumerate(steps, 1)]
