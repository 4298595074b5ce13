"""``capplan limits read``: the capabilities a package accepts, read from the real source.

- ``capplan limits read torch (--wheel PATH_OR_URL | --installed | --file PATH |
  --version X.Y.Z) [--json] [--update-kb [--write]]``: parse torch's cpp_extension.py.
- ``capplan limits read magma --file CMakeLists.txt [--release X] [--json] [--update-kb
  [--write]]``: read magma's HIP target list (VALID_GFXS); see :mod:`capplan.cli.limits_magma`.
- ``capplan limits read --binary PATH [--json]``: a prebuilt package's SASS set plus what its
  PTX can JIT to (CUDA.md, "Where compiled code runs").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from packaging.version import InvalidVersion, Version

from capplan.adapters.torch_source import (
    DEFAULT_TIMEOUT,
    MEMBER,
    TorchSource,
    from_file,
    from_installed,
    from_version,
    from_wheel,
)
from capplan.cli.helpformat import Group
from capplan.cli.kb_update import apply_update, validate_kb
from capplan.cli.output import emit_json, make_table, out_console, print_table
from capplan.core.families.cuda.compat import device_verdict, is_jetson
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.torch_limits import TorchLimits, parse_torch_limits
from capplan.errors import DataError, InvalidInputError, json_printable

__all__ = ["limits", "read", "updated_kb_text"]

_PACKAGES = ("torch", "magma")
# Written into kb/torch.json when a release is new and no wheel index could be consulted.
_CUDA_FROM_TABLES = (
    "CUDA versions not verified against the wheel index: taken from the file's "
    "CUDA_GCC_VERSIONS/CUDA_CLANG_VERSIONS keys"
)


@click.group("limits", cls=Group)
def limits() -> None:
    """Capability limits of packages, read from their real sources or binaries."""


@limits.command("read")
@click.argument("package", required=False)
@click.option("--wheel", "wheel", metavar="PATH_OR_URL", help="A torch wheel, local or https.")
@click.option("--installed", is_flag=True, help="The torch installed in this Python.")
@click.option(
    "--file",
    "file_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A torch/utils/cpp_extension.py (torch) or CMakeLists.txt (magma) on disk.",
)
@click.option("--version", "release", metavar="X.Y.Z", help="Download the file of this release.")
@click.option(
    "--release",
    "release_override",
    metavar="X.Y.Z",
    help="Which release the source is, where it cannot tell (a bare --file; magma: a "
    "release or commit).",
)
@click.option(
    "--binary",
    type=click.Path(path_type=Path, exists=True),
    help="A prebuilt wheel, library or store path: its SASS and PTX decide.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--update-kb",
    is_flag=True,
    help="Show the change to kb/torch.json (magma: kb/amd_packages.json).",
)
@click.option("--write", is_flag=True, help="With --update-kb: write the change.")
@click.option(
    "--kb",
    "kb_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The KB file to compare and update (default: the packaged kb/torch.json, or "
    "kb/amd_packages.json for magma).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1, max=3600),
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds to wait on the network.",
)
def read(
    package: str | None,
    wheel: str | None,
    installed: bool,
    file_path: Path | None,
    release: str | None,
    release_override: str | None,
    binary: Path | None,
    as_json: bool,
    update_kb: bool,
    write: bool,
    kb_file: Path | None,
    timeout: float,
) -> None:
    """Read the capabilities PACKAGE accepts (torch), magma's HIP gfx targets (magma), or
    the capabilities a prebuilt --binary holds."""
    sources = [
        name
        for name, given in (
            ("--wheel", wheel is not None),
            ("--installed", installed),
            ("--file", file_path is not None),
            ("--version", release is not None),
        )
        if given
    ]
    if binary is not None:
        if package is not None or sources or update_kb:
            raise click.UsageError("--binary takes no PACKAGE, source option or --update-kb")
        _read_binary(binary, as_json)
        return
    if package is None:
        raise click.UsageError("give a PACKAGE (torch, magma) or --binary PATH")
    if package not in _PACKAGES:
        raise InvalidInputError(
            f"no limits reader for package {package!r}",
            hint=f"readers exist for: {', '.join(_PACKAGES)}; use --binary for prebuilt ones",
        )
    if len(sources) != 1:
        raise click.UsageError(
            "give exactly one of --wheel, --installed, --file, --version"
            + (f" (got {', '.join(sources)})" if sources else "")
        )
    if write and not update_kb:
        raise click.UsageError("--write only goes with --update-kb")
    if package == "magma":
        if file_path is None:
            raise click.UsageError("magma is read from its CMakeLists.txt: give --file PATH")
        from capplan.cli.limits_magma import read_magma

        read_magma(
            file_path,
            release_override,
            as_json=as_json,
            update_kb=update_kb,
            write=write,
            kb_file=kb_file,
        )
        return

    source = _load(wheel, installed, file_path, release, release_override, timeout)
    version = release_override or source.version
    result = parse_torch_limits(source.text, version=version, package=package)

    if as_json:
        emit_json({**result.to_json(), "origin": _origin_label(source)})
    else:
        _print_table(result, source)
    if update_kb:
        _update_kb(result, source, kb_file, write=write, diff_to_stderr=as_json)


def _load(
    wheel: str | None,
    installed: bool,
    file_path: Path | None,
    release: str | None,
    release_override: str | None,
    timeout: float,
) -> TorchSource:
    if wheel is not None:
        return from_wheel(wheel, timeout=timeout)
    if installed:
        return from_installed()
    if file_path is not None:
        return from_file(file_path, version=release_override)
    assert release is not None
    return from_version(release, timeout=timeout)


def _origin_label(source: TorchSource) -> str:
    """Where the file came from, without local absolute paths (output must be reproducible)."""
    kind, _, where = source.origin.partition(" ")
    if kind == "wheel":
        return f"wheel {where.rstrip('/').rsplit('/', 1)[-1]}"
    if kind == "file":
        return f"file {Path(where).name}"
    if kind == "installed":
        return "installed torch"
    return source.origin  # "GitHub tag vX.Y.Z" or "url ...": no local path in either


def _print_table(result: TorchLimits, source: TorchSource) -> None:
    console = out_console()
    names_of: dict[str, list[str]] = {}
    for name, targets in result.named.items():
        for target in targets:
            names_of.setdefault(target.removesuffix("+PTX"), []).append(name)
    table = make_table(
        "capability",
        "sm",
        "named arch",
        title=f"{result.package} {result.version or '(release unknown)'}: "
        f"TORCH_CUDA_ARCH_LIST accepts",
    )
    for cap in result.supported:
        table.add_row(str(cap), cap.sm, ", ".join(names_of.get(str(cap), [])))
    print_table(console, table)
    console.print(f"+PTX suffix accepted: {'yes' if result.ptx_suffix else 'no'}")
    if result.cuda_versions:
        console.print(f"CUDA versions with compiler bounds: {', '.join(result.cuda_versions)}")
    console.print(f"source: {_origin_label(source)} ({MEMBER})")


# --------------------------------------------------------------------------------------------
# --update-kb


def _default_kb_file() -> Path:
    from capplan.adapters.kb import kb_path

    return kb_path("torch.json")


def _minor(version: str) -> tuple[int, int]:
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise DataError(
            f"kb/torch.json holds a release that is not a version: {version!r}"
        ) from None
    return parsed.major, parsed.minor


def _entry(result: TorchLimits, source: TorchSource, old: dict[str, Any] | None) -> dict[str, Any]:
    assert result.version is not None
    if old is not None and isinstance(old.get("cuda"), list):
        cuda: list[str] = list(old["cuda"])
        # Keep what the old entry said about its CUDA list; only the file's provenance changes.
        old_source = str(old.get("source", ""))
        cuda_note = old_source.partition("; ")[2] or _CUDA_FROM_TABLES
    else:
        cuda = list(result.cuda_versions)
        cuda_note = _CUDA_FROM_TABLES
    return result.kb_entry(
        result.version,
        cuda,
        f"pytorch/pytorch v{result.version} {MEMBER} read by capplan from "
        f"{_origin_label(source)}; {cuda_note}",
    )


def updated_kb_text(old_text: str, result: TorchLimits, source: TorchSource) -> str:
    """kb/torch.json with this release's entry replaced (same major.minor) or added."""
    if result.version is None:
        raise InvalidInputError(
            "cannot tell which torch release this file is, so the KB entry has no version",
            hint="pass --release X.Y.Z",
        )
    try:
        doc = json.loads(old_text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"kb/torch.json is not valid JSON: {exc.msg} at line {exc.lineno}"
        ) from None
    except RecursionError:
        raise DataError("kb/torch.json is nested too deeply to read") from None
    releases = doc.get("releases") if isinstance(doc, dict) else None
    if not isinstance(releases, list):
        raise DataError("kb/torch.json has no 'releases' list", hint="restore it from git")
    key = _minor(result.version)
    old = next(
        (r for r in releases if isinstance(r, dict) and _minor(str(r.get("version"))) == key),
        None,
    )
    kept = [r for r in releases if r is not old]
    kept.append(_entry(result, source, old))
    kept.sort(key=lambda r: Version(str(r["version"])))
    doc["releases"] = kept
    _validate(doc)
    return json_printable(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)) + "\n"


def _validate(doc: dict[str, Any]) -> None:
    """The KB's model must accept what we are about to write."""
    from capplan.core.families.cuda.kb import TorchFile

    validate_kb(TorchFile, doc, "torch.json")


def _update_kb(
    result: TorchLimits,
    source: TorchSource,
    kb_file: Path | None,
    *,
    write: bool,
    diff_to_stderr: bool,
) -> None:
    apply_update(
        kb_file or _default_kb_file(),
        "torch.json",
        empty={"source": "capplan limits read torch --update-kb", "releases": []},
        update=lambda old: updated_kb_text(old, result, source),
        same=f"kb/torch.json already holds torch {result.version} as read",
        done=f"updated kb/torch.json (torch {result.version})",
        write=write,
        diff_to_stderr=diff_to_stderr,
    )


# --------------------------------------------------------------------------------------------
# --binary


def _read_binary(path: Path, as_json: bool) -> None:
    # Imported here: the fatbin reader and the KB loader are separate modules that this command
    # needs only for --binary.
    from capplan.adapters.fatbin import inspect_paths
    from capplan.adapters.kb import load_kb
    from capplan.core.families.cuda.binary import binary_limits

    kb = load_kb()
    candidates = [info.capability for info in nvidia(kb).capabilities]
    reports = inspect_paths([path])
    result = binary_limits(str(path), reports, candidates, lambda cap: is_jetson(cap, kb))
    if as_json:
        emit_json(result.to_json())
        return
    table = make_table("capability", "how", title=f"{path.name}: runs on")
    for cap in result.supported:
        table.add_row(str(cap), device_verdict(cap, result.sass, result.ptx, kb).level.value)
    console = out_console()
    print_table(console, table)
    console.print(f"SASS: {', '.join(c.sm for c in result.sass) or 'none'}")
    console.print(f"PTX: {', '.join(c.compute for c in result.ptx) or 'none'}")
