"""``capplan export``: the plan of one package in another ecosystem's format (issue 35)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from capplan.cli.planning import config_option, flag_layer, plan_with_settings, policy_options
from capplan.errors import InvalidInputError, printable, shorten

if TYPE_CHECKING:
    from capplan.core.export import Export
    from capplan.core.planning.plan import Plan

__all__ = ["export"]

FORMATS = ("conda", "spack", "wheel-variants")
_ROCM_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")


def _version(text: str | None) -> str | None:
    if text is None:
        return None
    from packaging.version import Version

    try:
        return str(Version(text))
    except ValueError:  # InvalidVersion, or a number past Python's 4,300 digits
        raise InvalidInputError(
            f"--version '{shorten(text, 100)}' is not a valid Python package version",
            hint="give the version the builds carry, like 2.9.0",
        ) from None


def _wheel_name(text: str | None, package: str) -> str | None:
    if text is None:
        return None
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        name, _, _, _ = parse_wheel_filename(text)
    except InvalidWheelFilename as error:
        raise InvalidInputError(
            f"--wheel-name '{shorten(text, 100)}' is not a wheel file name "
            f"({shorten(str(error), 100)})",
            hint="give the non-variant wheel's name, like torch-2.9.0-cp312-cp312-"
            "manylinux_2_28_x86_64.whl",
        ) from None
    except ValueError:  # a version or build number past Python's 4,300 digits
        raise InvalidInputError(
            f"--wheel-name '{shorten(text, 100)}' holds a number too long to read",
            hint="give the non-variant wheel's name, like torch-2.9.0-cp312-cp312-"
            "manylinux_2_28_x86_64.whl",
        ) from None
    if printable(text) != text:
        # A control character or bidi override is in no wheel's name, and each line naming
        # the wheels would echo it.
        raise InvalidInputError(
            f"--wheel-name '{shorten(text, 100)}' holds a control character",
            hint="give the non-variant wheel's name, like torch-2.9.0-cp312-cp312-"
            "manylinux_2_28_x86_64.whl",
        )
    if name != canonicalize_name(package):
        raise InvalidInputError(
            f"--wheel-name '{shorten(text, 100)}' is a wheel of '{shorten(name, 100)}', not "
            f"of '{shorten(package, 100)}'",
            hint=f"give a wheel name of {shorten(package, 100)}",
        )
    return text


def _cpu_generic(plan: Plan, package: str) -> Callable[[str], tuple[str, tuple[str, ...]] | None]:
    """target -> its generic target (x86-64 level, Arm version) and that target's features,
    from archspec; only loaded for CPU builds."""
    from capplan.core.families.registry import is_cpu_level

    if not any(is_cpu_level(v) for v in plan.variants_of(package)):
        return lambda target: None
    from capplan.adapters.families import cpu_model

    model = cpu_model()

    def generic(target: str) -> tuple[str, tuple[str, ...]]:
        found = model.generic(target)
        return found, model.features(found)

    return generic


@click.command()
@click.argument("format_name", metavar="FORMAT", type=click.Choice(FORMATS))
@click.option("--package", "package", required=True, help="The planned package to export.")
@click.option("--version", "version", default=None, help="The package version the builds carry.")
@click.option(
    "--output",
    "output",
    required=True,
    # A str: click's Path("") would be ".", and an empty --output must not mean here.
    type=click.Path(path_type=str),
    help="The folder to write into (made when missing).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.option(
    "--wheel-name",
    default=None,
    help="wheel-variants: the non-variant wheel's file name each label is added to.",
)
@click.option(
    "--rocm-version",
    default=None,
    help="wheel-variants: the ROCm release AMD builds use (amd :: rocm_version, as major.minor).",
)
@config_option
@policy_options
def export(
    format_name: str,
    package: str,
    version: str | None,
    output: str,
    as_json: bool,
    wheel_name: str | None,
    rocm_version: str | None,
    config_path: Path | None,
    cuda: str | None,
    share: str | None,
    fat: str | None,
    ptx: str | None,
    gpus: tuple[str, ...],
    rocm_scope: str | None,
) -> None:
    """Write the plan of one package as PEP 825 wheel variants, a rattler-build recipe.yaml
    with its variants.yaml, or a Spack environment.

    FORMAT is wheel-variants, conda or spack; docs/other-ecosystems.md says what each
    format cannot express (every such case is a note on the entry it concerns)."""
    checked = _version(version)
    if rocm_version is not None and not _ROCM_VERSION.fullmatch(rocm_version):
        raise InvalidInputError(
            f"--rocm-version '{shorten(rocm_version, 100)}' is not a ROCm release",
            hint="write it as MAJOR.MINOR[.PATCH], like 6.4 or 7.2.3",
        )
    named = _wheel_name(wheel_name, package)
    flags = flag_layer(cuda, share, fat, ptx, gpus, rocm_scope=rocm_scope)
    plan = plan_with_settings(config_path, flags).plan
    result = _render(format_name, plan, package, checked, named, rocm_version)
    from capplan.adapters.exported import write_export

    write_export(output, result, f"{format_name} {package}")
    if as_json:
        from capplan.cli.output import emit_json

        # A non-UTF-8 byte of the path is written as \udcXX, as in every JSON output.
        emit_json({**result.to_json(), "output": output})
        return
    _print(output, result)


def _render(
    format_name: str,
    plan: Plan,
    package: str,
    version: str | None,
    wheel_name: str | None,
    rocm_version: str | None,
) -> Export:
    if format_name == "wheel-variants":
        from capplan.core.export.wheel import wheel_variants

        result = wheel_variants(
            plan,
            package,
            version or "0",
            cpu_generic=_cpu_generic(plan, package),
            rocm_version=rocm_version,
            wheel_name=wheel_name,
        )
        if version is None:
            from capplan.cli.output import err_console

            err_console().print(
                "capplan: no --version: the index file is named for version 0 "
                "(give the version the wheels carry)",
                markup=False,
                highlight=False,
            )
        return result
    if format_name == "conda":
        from capplan.cli.planning import current_kb
        from capplan.core.export.conda import conda_config

        info = current_kb().packages.get(package)
        torch_like = info is not None and info.ptx in ("gpu-targets", "inherited")
        conda = conda_config(plan, package, version or "", torch_like=torch_like)
        if version is None:
            from capplan.cli.output import err_console

            err_console().print(
                "capplan: no --version: recipe.yaml says version 0 "
                "(give the version the packages carry)",
                markup=False,
                highlight=False,
            )
        return conda
    from capplan.core.export.spack import spack_environment

    return spack_environment(plan, package, version or "")


def _print(output: str, result: Export) -> None:
    from capplan.cli.output import out_console, print_wrapped
    from capplan.errors import printable

    shown = shorten(output)
    for item in result.files:
        click.echo(printable(f"wrote {shown}/{item.path}"))
    for entry in result.entries:
        name = (
            entry.get("label")
            or entry.get("group")
            or (f"priority {entry['priority']}" if "priority" in entry else "(not in the index)")
        )
        # A fallback per system (conda's linux-64 and linux-aarch64 configs) says which.
        system = f" for {entry['system']}" if entry.get("system") else ""
        made_from = ", ".join(entry["variants"]) or f"(fat fallback{system})"
        wheel = f" -> {entry['wheel']}" if "wheel" in entry else ""
        # Each value escaped as every echoed value is (a name from --wheel-name, a KB note).
        click.echo(printable(f"{name}: {made_from}{wheel}"))
        for note in entry["notes"]:
            # Wrapped at the terminal's width between words (a note ran to 276 columns).
            print_wrapped(out_console(), printable(note), indent="  ", label="cannot express: ")
