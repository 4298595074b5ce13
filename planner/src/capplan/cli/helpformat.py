"""Help text: a command's one-line summary, whole, in every group's command list.

click cuts a subcommand's summary at 45 characters with "..." (``Write buildbot-nix.toml:
buildbot-nix evaluates the...``); a group of capplan's lists each summary whole, its first
sentence, and wraps it at the help's width (issue 46)."""

from __future__ import annotations

import click

__all__ = ["Group", "summary"]


def summary(command: click.Command) -> str:
    """The command's one-line summary, whole: its short_help, else its help's first sentence;
    never cut mid-phrase with '...'."""
    if command.short_help:
        return command.short_help
    first = " ".join((command.help or "").split("\n\n")[0].split())
    sentence, dot, _ = first.partition(". ")
    return sentence + "." if dot else first


class Group(click.Group):
    """A command group (``capplan ci``, ``capplan failures``) whose help lists every
    subcommand's summary whole."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, summary(command)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
