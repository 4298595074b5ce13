"""``capplan verify``: check a built output holds SASS/PTX for exactly the planned targets."""

from __future__ import annotations

from pathlib import Path

import click

from capplan.cli.output import emit_json, out_console
from capplan.core.capability import Capability, Target, parse_targets
from capplan.errors import CapplanError, InvalidInputError, VerifyError

__all__ = ["verify"]


def _targets(variant: str | None, expect: str | None, config: Path | None) -> tuple[Target, ...]:
    if (variant is None) == (expect is None):
        raise InvalidInputError(
            "give exactly one of --variant and --expect",
            hint="e.g. --variant torch-sm86 or --expect 8.6,9.0+PTX",
        )
    if expect is not None:
        from capplan.cli.planning import current_kb

        return current_kb().check_targets(parse_targets(expect))
    assert variant is not None
    try:
        from capplan.cli.planning import (  # type: ignore[import-not-found,unused-ignore]
            variant_targets,
        )
    except ImportError:
        raise CapplanError(
            f"--variant {variant} needs the planner, which this build lacks",
            hint="use --expect with the variant's targets instead",
        ) from None
    targets: tuple[Target, ...] = variant_targets(variant, config)
    return targets


def _device(text: str) -> tuple[Capability, bool]:
    """The device's capability (known to the knowledge base) and whether it is a Jetson."""
    from capplan.cli.planning import current_kb
    from capplan.core.compat import is_jetson
    from capplan.core.gpus import resolve_known_device

    kb = current_kb()
    cap, _ = resolve_known_device(text, kb)
    return cap, is_jetson(cap, kb)


@click.command("verify")
@click.argument("result", type=click.Path(path_type=Path))
@click.option("--variant", help="A planned variant, e.g. torch-sm86: expect its targets.")
@click.option("--expect", help="Expected targets, e.g. 8.6,9.0+PTX (PTX only where +PTX).")
@click.option("--device", help="Also say how the output runs on this capability or GPU model.")
@click.option(
    "--jetson", is_flag=True, help="The device is a Jetson (exact SASS only; known Jetsons are)."
)
@click.option(
    "--config",
    type=click.Path(path_type=Path, dir_okay=False),
    help="capplan.toml to read the variant from.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def verify(
    result: Path,
    variant: str | None,
    expect: str | None,
    device: str | None,
    jetson: bool,
    config: Path | None,
    as_json: bool,
) -> None:
    """Check that RESULT (a file, wheel, directory or store path) holds the planned code.

    SASS must be present for every planned capability and PTX only for targets marked +PTX;
    anything missing or extra fails with exit code 9 (verify-failed), as does a device on which
    nothing in RESULT runs.
    """
    from capplan.adapters.fatbin import inspect_paths
    from capplan.core.verify import verify as compare

    targets = _targets(variant, expect, config)
    dev: Capability | None = None
    if device is not None:
        dev, known_jetson = _device(device)
        jetson = jetson or known_jetson
    reports = inspect_paths([result])
    sass = {c for r in reports for c in r.sass}
    ptx = {c for r in reports for c in r.ptx}
    problems = [f"{r.path}: {p}" for r in reports for p in r.problems]
    outcome = compare(targets, sass, ptx, device=dev, jetson=jetson)

    if as_json:
        data = outcome.to_json()
        data["path"] = str(result)
        data["files"] = len(reports)
        data["partial"] = bool(problems)
        data["problems"] = problems
        data["ok"] = outcome.ok and not problems
        emit_json(data)
    else:
        console = out_console()
        console.print(f"expected: {', '.join(str(t) for t in outcome.expected)}")
        console.print(f"found SASS: {' '.join(c.sm for c in outcome.sass) or '-'}")
        console.print(f"found PTX:  {' '.join(c.compute for c in outcome.ptx) or '-'}")
        for line in outcome.differences():
            console.print(line)
        if outcome.verdict is not None and dev is not None:
            console.print(f"on {dev}: {outcome.verdict.level.value}: {outcome.verdict.reason}")
        if outcome.ok and not problems:
            console.print(f"ok: {result} holds exactly the planned device code")

    failures = outcome.differences()
    if outcome.verdict is not None and not outcome.runs:
        failures.append(f"cannot run on {dev}")
    if problems:
        failures.append(f"partial binary ({problems[0]})")
    if failures:
        expected = ",".join(str(t) for t in outcome.expected)
        raise VerifyError(
            f"{result} does not hold the planned device code: {'; '.join(failures)}",
            hint=f"expected {expected}; rebuild with exactly these targets",
        )
