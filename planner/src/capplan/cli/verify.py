"""``capplan verify``: check a built output holds SASS/PTX for exactly the planned targets.

``--expect gfx942,gfx90a`` or an AMD variant (``--variant torch-gfx942``: its gfx targets; a
shared ROCm build: nixpkgs' default list) checks AMD code objects instead (clang offload
bundles and bare AMDGPU ELF objects, as ``capplan inspect`` reads them); ``--device mi300x``
then answers with :func:`capplan.core.families.rocm.target.amd_how_runs`. Each GPU family
answers its own part (:class:`capplan.core.families.base.Verifier`, from the registry's
``gpu_verifiers``): which targets are its, its devices, and the comparison; this command picks
the family and prints its answer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from capplan.cli.output import emit_json, out_console
from capplan.core.families.base import Verified, Verifier
from capplan.errors import CapplanError, InvalidInputError, VerifyError, shorten

__all__ = ["verify"]


def _verifiers() -> tuple[Verifier, ...]:
    """Each GPU family's part of verify, with the knowledge-base loaders it may need."""
    from capplan.cli.planning import current_capability_kb, current_kb, kb_directory
    from capplan.core.families.registry import gpu_verifiers

    def amd_kb() -> Any:
        from capplan.adapters.kb import load_amd_kb

        return load_amd_kb(kb_directory())

    return gpu_verifiers(current_kb, current_capability_kb, amd_kb)


def _targets(variant: str | None, expect: str | None, config: Path | None) -> tuple[object, ...]:
    if (variant is None) == (expect is None):
        raise InvalidInputError(
            "give exactly one of --variant and --expect",
            hint="e.g. --variant torch-sm86 or --expect 8.6,9.0+PTX",
        )
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
    targets: tuple[object, ...] = variant_targets(variant, config)
    return targets


def _expect(families: tuple[Verifier, ...], expect: str) -> tuple[Verifier, tuple[Any, ...]]:
    """The family whose targets ``--expect`` names (every item claimed by one family, the
    fallback taking what no other claims) and its targets."""
    items = [i for i in re.split(r"[,;\s]+", expect) if i]
    first: dict[int, str] = {}
    for item in items:
        owner = next(f for f in families if f.fallback or f.claims(item))
        first.setdefault(id(owner), item)
    found = [f for f in families if id(f) in first]
    if len(found) > 1:
        a, b = sorted(found, key=lambda f: not f.fallback)[:2]
        raise InvalidInputError(
            f"--expect mixes {a.code} and {b.code} targets ({shorten(first[id(a)])!r} and "
            f"{shorten(first[id(b)])!r})",
            hint="verify one vendor's code at a time, e.g. --expect gfx942,gfx90a",
        )
    family = found[0] if found else families[-1]
    return family, family.expected(expect, items)


def _device(family: Verifier, families: tuple[Verifier, ...], text: str) -> tuple[Any, bool]:
    """The device of ``family`` that ``--device`` names, and whether it is a Jetson; a device
    of another family is exit 4 saying so."""
    others = [f for f in families if f is not family]
    if family.loose_lookup:
        for other in others:
            spelled = other.target_spelling(text)
            if spelled is not None:
                raise _wrong_vendor(text, spelled, family.code)
    try:
        return family.lookup(text)
    except InvalidInputError as error:
        for other in others:
            try:
                found, _ = other.lookup(text)
            except CapplanError as other_error:
                # The lookup's own error, with its suggestions: AMD's for a gfx target.
                if not other.fallback and other.claims(text):
                    raise other_error from None
                continue
            raise _wrong_vendor(text, other.describe(found), family.code) from None
        raise error from None


def _wrong_vendor(text: str, found: str, expected: str) -> InvalidInputError:
    """``--device`` names the other vendor's GPU than the code being verified."""
    return InvalidInputError(
        f"--device {shorten(text.strip())!r} is {found}, but the expected code is {expected} code",
        hint="give a device of the variant's vendor (an AMD GPU for gfx targets, an NVIDIA "
        "GPU or capability for CUDA ones)",
    )


@click.command("verify")
@click.argument("result", type=click.Path(path_type=Path))
@click.option(
    "--variant",
    help="A planned variant, e.g. torch-sm86 or torch-gfx942: expect its targets.",
)
@click.option(
    "--expect",
    help="Expected targets, e.g. 8.6,9.0+PTX (PTX only where +PTX), or AMD gfx942,gfx90a.",
)
@click.option(
    "--device",
    help="Also say how the output runs on this capability, GPU model or AMD GPU (mi300x).",
)
@click.option(
    "--jetson", is_flag=True, help="The device is a Jetson (exact SASS only; known Jetsons are)."
)
@click.option(
    "--config",
    type=click.Path(path_type=Path),
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

    families = _verifiers()
    if variant is None and expect is not None:
        family, wanted = _expect(families, expect)
    else:  # --variant (either family's targets), or neither / both: exit 4 saying so
        planned = _targets(variant, expect, config)
        family = next(
            (f for f in families if not f.fallback and any(f.owns(t) for t in planned)),
            families[-1],
        )
        wanted = tuple(t for t in planned if family.owns(t))
    if jetson and not family.jetson:
        raise InvalidInputError(
            "--jetson applies to NVIDIA devices only",
            hint="drop --jetson when verifying AMD targets or an AMD variant",
        )
    dev: Any = None
    if device is not None:
        dev, known_jetson = _device(family, families, device)
        jetson = jetson or known_jetson
    reports = inspect_paths([result])
    outcome = family.verify(wanted, reports, dev, jetson)
    if as_json:
        _emit(outcome.fields, result, len(reports), list(outcome.problems), outcome.ok)
    else:
        _print(outcome, result)
    _check(result, outcome)


def _print(outcome: Verified, result: Path) -> None:
    console = out_console()
    for line in outcome.lines:
        console.print(line, markup=outcome.markup)
    if outcome.ok and not outcome.problems:
        console.print(f"ok: {result} holds exactly {outcome.what}", markup=outcome.markup)


def _emit(data: dict[str, Any], result: Path, files: int, problems: list[str], ok: bool) -> None:
    """``--json``: the comparison, with the path, the files read and any partial reads."""
    data["path"] = str(result)
    data["files"] = files
    data["partial"] = bool(problems)
    data["problems"] = problems
    data["ok"] = ok and not problems
    emit_json(data)


def _check(result: Path, outcome: Verified) -> None:
    """Exit 9 (VerifyError) naming every difference, a device it cannot run on, and a partial
    read; nothing when the build holds exactly what was expected."""
    failures = list(outcome.failures)
    if outcome.problems:
        failures.append(f"partial binary ({outcome.problems[0]})")
    if failures:
        raise VerifyError(
            f"{result} does not hold {outcome.what}: {'; '.join(failures)}", hint=outcome.hint
        )
