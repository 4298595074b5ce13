"""``capplan generate``: write overlays/plan.json from the plan (``--check``: only compare)."""

from __future__ import annotations

from pathlib import Path

import click

from capplan.adapters.files import atomic_write_text
from capplan.cli.output import check_committed, err_console, to_json_text
from capplan.cli.planning import config_option, current_kb, plan_with_settings
from capplan.cli.whereami import warn_without_flake
from capplan.core.planning.dispatch import dispatch_section
from capplan.core.planning.matrix import plan_json

__all__ = ["generate"]


@click.command()
@config_option
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write (default: overlays/plan.json beside the config file).",
)
@click.option(
    "--check", is_flag=True, help="Write nothing; exit 11 with a diff when the file is stale."
)
def generate(config_path: Path | None, output: Path | None, check: bool) -> None:
    """Write overlays/plan.json, the data the flake and overlay read."""
    planned = plan_with_settings(config_path)
    plan = planned.plan
    dispatch = dispatch_section(current_kb(), plan, fallback=planned.config.dispatch.fallback)
    text = to_json_text(plan_json(plan, dispatch))
    if output is None:
        found = planned.config_file
        root = found.parent if found is not None else Path.cwd()
        output = root / "overlays" / "plan.json"
    if check:
        check_committed(output, text, fix="run 'capplan generate' and commit the result")
        return
    for package in plan.packages:
        if package not in dispatch["packages"]:
            err_console().print(
                f"note: no {package}-dispatch output: {package} has only capability-independent "
                "builds in this plan (one build already serves every GPU)",
                markup=False,
                highlight=False,
            )
    atomic_write_text(output, text)
    err_console().print(
        f"wrote {output} ({len(plan.variants)} variants, one build job each: 'capplan matrix' "
        "schedules them)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    if planned.config_file is not None:
        warn_without_flake(planned.config_file.parent, output)
