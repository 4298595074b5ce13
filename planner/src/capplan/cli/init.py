"""``capplan init``: a fleet repository of one's own, the files ``nix flake init -t`` writes.

The files are the flake template's (``templates.fleet`` in capplan's flake.nix points at the
same folder, ``capplan/templates/fleet``), so the two ways to start never drift apart.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import click

from capplan.adapters.files import atomic_write_text
from capplan.cli.output import err_console
from capplan.errors import WriteError

__all__ = ["TEMPLATE_FILES", "init", "template_text"]

# Written in this order; the template folder holds exactly these (a test checks it).
TEMPLATE_FILES = ("flake.nix", "capplan.toml", "README.md")


def template_text(name: str) -> str:
    """One file of the fleet template, as packaged with capplan."""
    return resources.files("capplan").joinpath("templates", "fleet", name).read_text("utf-8")


def _say(text: str) -> None:
    err_console().print(text, markup=False, highlight=False, soft_wrap=True)


@click.command()
@click.argument(
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    required=False,
)
@click.option("--force", is_flag=True, help="Replace flake.nix, capplan.toml or README.md there.")
def init(directory: Path, force: bool) -> None:
    """Start a fleet repository in DIRECTORY (default: here): flake.nix, capplan.toml, README.md.

    The same files as `nix flake init -t <capplan>`: a flake that takes capplan and nixpkgs
    as inputs and builds the plan `capplan generate` writes (overlays/plan.json). A file that
    is already there is kept (your capplan.toml gets the flake beside it); --force replaces it."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WriteError(
            f"cannot create {directory}: {error.strerror or error}",
            hint="pick a folder you can write to",
        ) from None
    kept = [name for name in TEMPLATE_FILES if not force and (directory / name).exists()]
    wrote = [name for name in TEMPLATE_FILES if name not in kept]
    for name in wrote:
        atomic_write_text(directory / name, template_text(name))
    if kept:
        _say(f"kept {', '.join(kept)} in {directory} (already there; --force replaces them)")
    if not wrote:
        return
    _say(f"wrote {', '.join(wrote)} in {directory}")
    _say(
        "next: set inputs.capplan.url in flake.nix to where you take capplan from, list your "
        "GPUs in capplan.toml, run 'capplan generate', 'git add' the files, then "
        "'nix build .#torch-sm86' (README.md has the rest)"
    )
