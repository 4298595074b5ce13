"""docs/commands.md against the click definitions (issue 46, new user 9: it gave the `failures`
subcommands the wrong arguments).

Every command and subcommand has a section: a bullet whose code span starts `capplan <command>`
(`a|b` names several subcommands at once). Its signature names each of the command's arguments
(`RECORD`, `[PATH]...`, or a value in its place, `torch`) and no other, and each option it
shows is one the command has; every option appears in the command's sections, or in the list
of options the planning commands share. A new command needs only its section."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from capplan.cli.main import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "commands.md"
BULLET = re.compile(r"^- `capplan ([^`]*)`[^\n]*\n((?:  [^\n]*\n)*)", re.M)
SHARED = re.compile(r"^- `(--[a-z-]+)[^`]*`(?:, `(--[a-z-]+)[^`]*`)*", re.M)
_CTX = click.Context(cli)


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name in group.list_commands(_CTX):
        command = group.get_command(_CTX, name)
        if command is None or command.hidden:
            continue
        if isinstance(command, click.Group):
            found.update(_commands(command, (*path, name)))
        else:
            found[" ".join((*path, name))] = command
    return found


COMMANDS = _commands(cli)


def _sections() -> dict[str, list[tuple[list[str], str]]]:
    """Each command's sections: (its signature's words after the command, the whole bullet)."""
    sections: dict[str, list[tuple[list[str], str]]] = {}
    for match in BULLET.finditer(DOC.read_text()):
        words = match.group(1).split()
        paths: list[list[str]] = [[]]
        node: click.Command | None = cli
        while words and isinstance(node, click.Group):
            names = words[0].split("|")
            if not all(name in node.list_commands(_CTX) for name in names):
                break
            paths = [[*p, name] for p in paths for name in names]
            words.pop(0)
            node = node.get_command(_CTX, names[0]) if len(names) == 1 else None
        for path in paths:
            sections.setdefault(" ".join(path), []).append((words, match.group(0)))
    return sections


def _shared_options() -> set[str]:
    text = DOC.read_text()
    part = text.split("share these options", 1)[1].split("\n\n", 2)[1]
    return {opt for line in part.splitlines() for opt in re.findall(r"`(--[a-z-]+)", line)}


SECTIONS = _sections()


def _fix(name: str) -> str:
    return (
        f"docs/commands.md: give `capplan {name}` its section, a bullet like the others "
        f"('- `capplan {name} ARGS [--option VALUE]`' and a line saying what it does)"
    )


def _argument_names(argument: click.Argument) -> set[str]:
    """The names an argument is shown by: its metavar's words (``-- CMD [ARGS]...``: CMD and
    ARGS), else its name in capitals."""
    return set(re.findall(r"[A-Z][A-Z_]*", argument.metavar or "")) or {
        (argument.name or "").upper()
    }


def _bare(word: str) -> str:
    return re.sub(r"[\[\]()]|\.\.\.$", "", word)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_its_section(name: str) -> None:
    assert name in SECTIONS, _fix(name)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_section_gives_the_commands_arguments_and_options(name: str) -> None:
    if name not in SECTIONS:
        pytest.skip("no section: test_every_command_has_its_section says what to add")
    command = COMMANDS[name]
    options = {o: p for p in command.params if isinstance(p, click.Option) for o in p.opts}
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    names = {shown for a in arguments for shown in _argument_names(a)}
    variadic = {shown for a in arguments if a.nargs == -1 for shown in _argument_names(a)}
    text = " ".join(bullet for _, bullet in SECTIONS[name])
    for words, _ in SECTIONS[name]:
        values = 0  # the values the option just shown still takes (--override-input I R: 2)
        after_variadic = False
        for raw in words:
            shown = [word for word in _bare(raw).split("|") if word]
            if not shown or shown == ["--"]:
                continue  # a lone "|" between alternatives; "--" ends the options
            if shown[0].startswith("--"):
                for word in shown:
                    assert word in options, (
                        f"docs/commands.md shows `capplan {name} {word}`, an option it lacks"
                    )
                option = options[shown[-1]]
                values = 0 if option.is_flag or option.count else max(option.nargs, 1)
                continue
            for word in shown if not values else ():
                if re.fullmatch(r"[A-Z][A-Z_]*", word) and not after_variadic:
                    assert word in names, (
                        f"docs/commands.md shows `capplan {name}` with an argument {word}; "
                        f"it takes {sorted(names) or 'none'}"
                    )
                    # `-- CMD [ARGS]...`: what follows a variadic argument is its own values.
                    after_variadic = word in variadic
            values = max(values - 1, 0)
    signatures = [" ".join(words) for words, _ in SECTIONS[name]]
    for argument in arguments:
        known = _argument_names(argument)
        shown = any(
            any(re.search(rf"(?<![\w-]){n}(?![\w-])", sig) for n in known)
            or (sig and not sig.startswith(("-", "[-")))  # a value in its place: `torch`
            for sig in signatures
        )
        assert shown, (
            f"docs/commands.md: `capplan {name}` takes the argument "
            f"{min(known)}; name it in the signature"
        )
    shared = _shared_options()
    for option in command.params:
        if not isinstance(option, click.Option) or option.hidden or "--help" in option.opts:
            continue
        documented = any(re.search(rf"{re.escape(o)}(?![\w-])", text) for o in option.opts)
        assert documented or set(option.opts) & shared, (
            f"docs/commands.md: `capplan {name}` has the option {option.opts[0]}; "
            "show it in the command's section"
        )


def test_the_failures_subcommands_have_their_own_arguments() -> None:
    """The bug that started this: `failures schema` takes no RECORD, `merge` takes OUT and
    INPUTS."""
    assert "failures schema" in SECTIONS and "failures merge" in SECTIONS
    assert not any("RECORD" in words for words, _ in SECTIONS["failures schema"])
    (merge,) = SECTIONS["failures merge"]
    assert "OUT" in merge[0] and any("INPUTS" in word for word in merge[0])
