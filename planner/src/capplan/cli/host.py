"""``capplan host``: the NVIDIA driver this (non-NixOS) host has, and what to paste so Nix-built
programs find it. It only prints; it writes nothing. Documented in docs/hosts.md."""

from __future__ import annotations

import os
from typing import Any

import click

from capplan.cli.output import emit_json, out_console
from capplan.errors import printable

__all__ = ["host"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (shape in docs/hosts.md).")
def host(as_json: bool) -> None:
    """Show this host's NVIDIA driver and how Nix-built programs can find it.

    Prints the driver version, the folder its libraries lie in (Debian/Ubuntu, Fedora, Arch,
    WSL2, JetPack), a home-manager block, systemd-tmpfiles rules and link commands that make
    /run/opengl-driver/lib hold the driver's libraries and only those. Writes nothing.
    """
    from capplan.adapters.host_driver import (
        find_host_driver,
        home_manager_block,
        link_commands,
        tmpfiles_rules,
    )

    driver = find_host_driver(os.environ)
    block, then = home_manager_block(driver)
    data: dict[str, Any] = {
        **driver.to_json(),
        "home_manager": {"block": block, "then": then},
        "tmpfiles": tmpfiles_rules(driver),
        "commands": link_commands(driver),
    }
    if as_json:
        emit_json(data)
        return
    _print(data)


def _print(data: dict[str, Any]) -> None:
    console = out_console()

    def say(text: str = "") -> None:
        console.print(printable(text) if text else "", markup=False, highlight=False,
                      soft_wrap=True)  # fmt: skip

    def block(text: str) -> None:
        for line in text.rstrip("\n").split("\n"):
            say("    " + line)

    version = data["version"] or "unknown"
    source = f" (from {data['version_source']})" if data["version_source"] else ""
    say(f"driver {version}{source}")
    say(f"libraries: {data['folder']} ({data['label']}), {len(data['libraries'])} of them; "
        f"libcuda.so.1 is {data['libcuda']}")  # fmt: skip
    for folder in data["other_folders"]:
        say(f"also: {folder} holds a libcuda.so.1 (not used)")
    for note in data["notes"]:
        say(f"note: {note}")
    for problem in data["problems"]:
        say(f"problem: {problem}")
    say()
    say("home-manager (home.nix):")
    block(data["home_manager"]["block"])
    say(f"  {data['home_manager']['then']}")
    say()
    say("system-manager or systemd (/etc/tmpfiles.d/nvidia-driver-link.conf, then "
        "'systemd-tmpfiles --create'):")  # fmt: skip
    block(data["tmpfiles"])
    say()
    say("by hand (as root; /run is emptied at each boot):")
    block(data["commands"])
    say()
    say("or one program at a time, without root: capplan run -- PROGRAM [ARGS]")
