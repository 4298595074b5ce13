"""``capplan verify``: check a built output holds SASS/PTX for exactly the planned targets.

``--expect gfx942,gfx90a`` or an AMD variant (``--variant torch-gfx942``: its gfx targets; a
shared ROCm build: nixpkgs' default list) checks AMD code objects instead (clang offload
bundles and bare AMDGPU ELF objects, as ``capplan inspect`` reads them); ``--device mi300x``
then answers with :func:`capplan.core.families.rocm.target.amd_how_runs`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

from capplan.cli.output import emit_json, out_console
from capplan.core.families.cuda.capability import Capability, Target, parse_targets
from capplan.core.families.rocm.target import AmdTarget, parse_amd_targets
from capplan.errors import CapplanError, InvalidInputError, VerifyError, shorten

__all__ = ["verify"]


def _targets(
    variant: str | None, expect: str | None, config: Path | None
) -> tuple[Target, ...] | tuple[AmdTarget, ...]:
    if (variant is None) == (expect is None):
        raise InvalidInputError(
            "give exactly one of --variant and --expect",
            hint="e.g. --variant torch-sm86 or --expect 8.6,9.0+PTX",
        )
    if expect is not None:
        from capplan.cli.planning import current_capability_kb

        return current_capability_kb().check_targets(parse_targets(expect))
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
    targets: tuple[Target, ...] | tuple[AmdTarget, ...] = variant_targets(variant, config)
    return targets


def _amd_expect(expect: str | None) -> tuple[AmdTarget, ...] | None:
    """The AMD targets of an ``--expect`` made of gfx targets; None for CUDA targets."""
    if expect is None:
        return None
    items = [i for i in re.split(r"[,;\s]+", expect) if i]
    amd = [i for i in items if i.lower().startswith("gfx")]
    if not amd:
        return None
    if len(amd) != len(items):
        cuda = next(i for i in items if not i.lower().startswith("gfx"))
        raise InvalidInputError(
            f"--expect mixes CUDA and AMD targets ({shorten(cuda)!r} and {shorten(amd[0])!r})",
            hint="verify one vendor's code at a time, e.g. --expect gfx942,gfx90a",
        )
    return parse_amd_targets(items)


def _amd_device(text: str) -> AmdTarget:
    """The processor of an AMD GPU named by target (``gfx942``) or model (``mi300x``); an
    NVIDIA GPU or a CUDA capability is exit 4 saying so."""
    try:
        Capability.parse(text)  # "8.6" would loosely match "Radeon 860M"
    except InvalidInputError:
        pass
    else:
        raise _wrong_vendor(text, "a CUDA capability", "AMD")
    try:
        return _amd_lookup(text)
    except InvalidInputError as error:
        try:
            cap, _ = _nvidia_lookup(text)
        except CapplanError:
            raise error from None  # the AMD lookup's own error, with its suggestions
        raise _wrong_vendor(text, f"an NVIDIA GPU ({cap})", "AMD") from None


def _amd_lookup(text: str) -> AmdTarget:
    if text.strip().lower().startswith("gfx"):
        target = AmdTarget.parse(text)
        if target.is_generic:
            raise InvalidInputError(
                f"--device {target} is a generic target, not a GPU",
                hint="give the GPU's processor (e.g. gfx1100) or its model name",
            )
        return target
    from capplan.adapters.kb import load_amd_kb
    from capplan.cli.planning import kb_directory

    models = load_amd_kb(kb_directory()).lookup_gpu(text)
    targets = sorted({m.target for m in models})
    if len(targets) != 1:
        names = ", ".join(f"{m.name} ({m.target})" for m in models[:4])
        raise InvalidInputError(
            f"--device {shorten(text.strip())!r} matches AMD GPUs with different targets: {names}",
            hint="name the model exactly or give its gfx target",
        )
    return targets[0]


def _device(text: str) -> tuple[Capability, bool]:
    """The device's capability (known to the knowledge base) and whether it is a Jetson; an
    AMD GPU is exit 4 saying so."""
    try:
        return _nvidia_lookup(text)
    except InvalidInputError as error:
        try:
            target = _amd_lookup(text)
        except CapplanError as amd_error:
            # The lookup's own error, with its suggestions: AMD's for a gfx target.
            raise (amd_error if text.strip().lower().startswith("gfx") else error) from None
        raise _wrong_vendor(text, f"an AMD GPU ({target})", "CUDA") from None


def _nvidia_lookup(text: str) -> tuple[Capability, bool]:
    from capplan.cli.planning import current_kb
    from capplan.core.families.cuda.compat import is_jetson
    from capplan.core.model.gpus import resolve_known_device

    kb = current_kb()
    cap, _ = resolve_known_device(text, kb)
    return cap, is_jetson(cap, kb)


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
    from capplan.core.families.cuda.verify import verify as compare

    amd = _amd_expect(expect) if variant is None else None
    targets: tuple[Target, ...] = ()
    if amd is None:  # --variant (either vendor's) or CUDA targets
        wanted = _targets(variant, expect, config)
        amd = tuple(t for t in wanted if isinstance(t, AmdTarget)) or None
        targets = tuple(t for t in wanted if isinstance(t, Target))
    if amd is not None:
        if jetson:
            raise InvalidInputError(
                "--jetson applies to NVIDIA devices only",
                hint="drop --jetson when verifying AMD targets or an AMD variant",
            )
        _verify_amd(result, amd, _amd_device(device) if device else None, as_json)
        return
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
        _emit(outcome.to_json(), result, len(reports), problems, outcome.ok)
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

    _check(
        result,
        outcome.differences(),
        f"cannot run on {dev}" if outcome.verdict is not None and not outcome.runs else None,
        problems,
        what="the planned device code",
        hint=f"expected {','.join(str(t) for t in outcome.expected)}; rebuild with exactly "
        "these targets",
    )


def _emit(data: dict[str, Any], result: Path, files: int, problems: list[str], ok: bool) -> None:
    """``--json``: the comparison, with the path, the files read and any partial reads."""
    data["path"] = str(result)
    data["files"] = files
    data["partial"] = bool(problems)
    data["problems"] = problems
    data["ok"] = ok and not problems
    emit_json(data)


def _check(
    result: Path,
    differences: list[str],
    cannot_run: str | None,
    problems: list[str],
    *,
    what: str,
    hint: str,
) -> None:
    """Exit 9 (VerifyError) naming every difference, a device it cannot run on, and a partial
    read; nothing when the build holds exactly what was expected."""
    failures = list(differences)
    if cannot_run:
        failures.append(cannot_run)
    if problems:
        failures.append(f"partial binary ({problems[0]})")
    if failures:
        raise VerifyError(f"{result} does not hold {what}: {'; '.join(failures)}", hint=hint)


def _verify_amd(
    result: Path, expected: tuple[AmdTarget, ...], device: AmdTarget | None, as_json: bool
) -> None:
    """``verify --expect gfx...``: the AMD code objects in RESULT against ``expected``."""
    from capplan.adapters.fatbin import inspect_paths
    from capplan.core.families.rocm.verify import verify_amd

    reports = inspect_paths([result])
    found = {t for r in reports for t in r.amd}
    cuda = {c.sm for r in reports for c in r.sass} | {c.compute for r in reports for c in r.ptx}
    problems = [f"{r.path}: {p}" for r in reports for p in (*r.amd_problems, *r.problems)]
    outcome = verify_amd(expected, found, cuda=cuda, device=device)
    if as_json:
        _emit(outcome.to_json(), result, len(reports), problems, outcome.ok)
    else:
        console = out_console()
        console.print(f"expected: {', '.join(str(t) for t in outcome.expected)}", markup=False)
        found_text = " ".join(str(t) for t in outcome.found) or "-"
        console.print(f"found AMD code: {found_text}", markup=False)
        for line in outcome.differences():
            console.print(line, markup=False)
        if outcome.verdict is not None and device is not None:
            console.print(
                f"on {device}: {outcome.verdict.level.value}: {outcome.verdict.reason}",
                markup=False,
            )
        if outcome.ok and not problems:
            console.print(f"ok: {result} holds exactly the expected AMD code", markup=False)
    _check(
        result,
        outcome.differences(),
        None if outcome.runs else f"cannot run on {device}",
        problems,
        what="the expected AMD code",
        hint=f"expected {','.join(str(t) for t in outcome.expected)}; rebuild with exactly "
        "these gpuTargets",
    )
