"""Say where you are: a capplan.toml with no flake beside it that reads the plan it makes.

``capplan generate`` writes overlays/plan.json beside capplan.toml, and the workflow ``capplan
ci github`` writes runs ``nix build ".#$ATTR"`` and ``nix run .#capplan`` in that folder: both
need a flake there that reads the plan (capplan's own, or one made by ``nix flake init -t`` /
``capplan init``, which calls ``capplan.lib.mkFleetFlake``). Without one, both commands used to
succeed quietly and the first ``nix build`` or CI run failed.
"""

from __future__ import annotations

from pathlib import Path

from capplan.cli.output import err_console

__all__ = ["TEMPLATE_REF", "flake_problem", "warn_without_flake"]

# Where `nix flake init -t` finds the fleet template (flake.nix `templates.fleet`).
TEMPLATE_REF = "github:OWNER/capplan#fleet"


def flake_problem(root: Path, plan: Path) -> tuple[str, str] | None:
    """What keeps the flake in ``root`` from building ``plan`` and how to fix it, or None.

    "Reads the plan" is read off flake.nix's text: it names the plan's path relative to the
    folder (``./overlays/plan.json``), as the template and capplan's own flake do. A plan
    written outside the folder is the user's own arrangement and is not checked."""
    try:
        relative = plan.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None
    flake = root / "flake.nix"
    try:
        text = flake.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return (
            f"no flake.nix beside {root / 'capplan.toml'} reads {relative}",
            f"run 'capplan init' in {root}, which keeps your capplan.toml, or "
            f"'nix flake init -t {TEMPLATE_REF}'",
        )
    except OSError as error:
        return (f"cannot read {flake}: {error.strerror or error}", "check its permissions")
    if relative not in text:
        return (
            f"{flake} does not read {relative}",
            "take capplan as a flake input and return capplan.lib.mkFleetFlake "
            f"{{ inherit nixpkgs self; plan = ./{relative}; }} from its outputs, or move it "
            "away and run 'capplan init' for the template's",
        )
    return None


def warn_without_flake(root: Path, plan: Path) -> None:
    """One warning line on stderr when :func:`flake_problem` finds a problem."""
    found = flake_problem(root, plan)
    if found is None:
        return
    problem, fix = found
    err_console().print(
        f"warning: {problem}, so 'nix build .#<variant>' and the workflow's 'nix run .#capplan' "
        f"fail there ({fix})",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
