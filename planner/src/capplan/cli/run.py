"""``capplan run -- CMD ...``: run one program with the host's NVIDIA driver libraries, and
nothing else of the host's, first on its library path (as nix-gl-host does). Documented in
docs/hosts.md."""

from __future__ import annotations

import os
import sys

import click

from capplan.errors import printable, shorten

__all__ = ["run"]

# A shell's codes for a command it cannot start (POSIX, "Command Search and Execution").
_NOT_FOUND, _NOT_EXECUTABLE = 127, 126


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--verbose", "-v", is_flag=True, help="Say which driver it uses, on stderr.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD...")
def run(verbose: bool, command: tuple[str, ...]) -> None:
    """Run CMD with this host's NVIDIA driver libraries first on its library path.

    A private folder of links to the driver's libraries only (never libc or libstdc++), kept
    per driver version under $XDG_CACHE_HOME/capplan/driver and checked on each run, goes first
    on LD_LIBRARY_PATH; then CMD replaces capplan, so its exit code and signals are its own.
    """
    from capplan.adapters.host_driver import find_host_driver, private_folder

    driver = find_host_driver(os.environ)
    folder = private_folder(driver, os.environ)
    for problem in driver.problems:
        _say(f"warning: {problem}")
    if verbose:
        version = driver.version or "of unknown version"
        source = f" (from {driver.version_source})" if driver.version_source else ""
        _say(f"driver {version}{source}: {len(driver.libraries)} libraries of {driver.folder} "
             f"({driver.layout.label}), linked in {folder}")  # fmt: skip
    env = dict(os.environ)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = f"{folder}:{old}" if old else str(folder)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], list(command), env)
    except FileNotFoundError:
        _fail(f"{shorten(command[0])!r}: command not found", _NOT_FOUND)
    except PermissionError:
        _fail(f"{shorten(command[0])!r}: permission denied (not executable)", _NOT_EXECUTABLE)
    except OSError as error:
        _fail(f"{shorten(command[0])!r} cannot be run: {error.strerror or error}", _NOT_EXECUTABLE)


def _say(text: str) -> None:
    sys.stderr.write(f"capplan: {printable(text)}\n")


def _fail(text: str, code: int) -> None:
    sys.stderr.write(f"capplan: error: {text}\n")
    raise SystemExit(code)
