"""``capplan nixpkgs check``: the knowledge base's assumptions, checked against the nixpkgs a
user pins (default: the ``nixpkgs`` input of ./flake.lock), with the user's ``nix``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from capplan.cli.helpformat import Group
from capplan.cli.output import emit_json, err_console
from capplan.cli.planning import (
    config_option,
    current_kb,
    kb_directory,
    nix_eval_seconds_option,
    plan_with_settings,
)

__all__ = ["check_against", "nixpkgs"]


def check_against(
    reference: str,
    plan_data: dict[str, Any],
    cuda: Sequence[str] | None,
    *,
    folder: Path | None = None,
    offline: bool = False,
    timeout: float | None = None,
) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """(what nixpkgs says of its own revision, the disagreements) for a plan's data; ``cuda``:
    the config's policy.cuda; ``folder``: the checkout ``reference`` names, if it is one."""
    from capplan.adapters.kb import load_cpu_packages
    from capplan.adapters.nixpkgs import evaluate_nixpkgs
    from capplan.core.families.registry import nixpkgs_checks
    from capplan.core.planning.nixpkgs_check import compare, nixpkgs_request

    kb = current_kb()
    cpu = load_cpu_packages(kb_directory())
    checks = nixpkgs_checks(kb, policy_cuda=cuda, cpu_packages=cpu)
    request = nixpkgs_request(checks, plan_data)
    answer = evaluate_nixpkgs(reference, request, folder=folder, offline=offline, timeout=timeout)
    source = answer.get("source") if isinstance(answer.get("source"), dict) else {}
    return dict(source or {}), compare(checks, request, answer)


@click.group(cls=Group)
def nixpkgs() -> None:
    """Check the knowledge base against the nixpkgs you pin."""


@nixpkgs.command()
@config_option
@click.option(
    "--nixpkgs",
    "given",
    default=None,
    metavar="PATH|FLAKEREF",
    help="The nixpkgs to check: a checkout or a flake reference (default: the nixpkgs input of "
    "./flake.lock).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@nix_eval_seconds_option
def check(
    config_path: Path | None, given: str | None, as_json: bool, eval_seconds: int | None
) -> None:
    """Check what the plan relies on against nixpkgs: the arguments each planned package's
    recipe takes, torch's CUDA versions and capability allowlist, the CUDA package sets, the
    default ROCm targets and per-target scopes, and whether composable_kernel and MIOpen
    evaluate in each planned scope. Exit 0 when all agree, 17 when something drifted."""
    from capplan.adapters.nixpkgs import locked_nixpkgs, nixpkgs_folder, nixpkgs_reference
    from capplan.core.planning.matrix import plan_json
    from capplan.errors import NixpkgsDriftError, shorten

    folder = None
    if given is None:
        reference = locked_nixpkgs(Path.cwd() / "flake.lock").reference
    else:
        folder = nixpkgs_folder(given)
        reference = nixpkgs_reference(given)
    planned = plan_with_settings(config_path)
    data = plan_json(planned.plan)
    source, drifts = check_against(
        reference, data, planned.config.policy.cuda, folder=folder, timeout=eval_seconds
    )
    # What nixpkgs says of itself is echoed like any value: escaped and cut.
    revision = shorten(str(source.get("rev") or source.get("narHash") or reference))
    if as_json:
        emit_json(
            {
                "nixpkgs": reference,
                "source": source,
                "agrees": not drifts,
                "drift": [d.as_dict() for d in drifts],
            }
        )
    else:
        for drift in drifts:
            click.echo(drift.line())
    if drifts:
        raise NixpkgsDriftError(
            f"nixpkgs {revision} disagrees with the knowledge base in {_count(drifts)}",
            hint="correct the knowledge base (each line names the fact), or pin the nixpkgs it "
            "describes",
        )
    err_console().print(
        f"nixpkgs {revision} agrees with the knowledge base", markup=False, highlight=False
    )


def _count(drifts: Sequence[Any]) -> str:
    return f"{len(drifts)} fact" + ("" if len(drifts) == 1 else "s")
