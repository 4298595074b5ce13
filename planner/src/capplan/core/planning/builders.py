"""Nix's build machines, as ``--builders`` and ``/etc/nix/machines`` write them, and which
jobs none of them can take.

capplan never places a derivation itself: Nix does (``--builders``). This module only reads the
machines to say up front which jobs no machine can take, so that a job for a missing system or
feature is listed and left out instead of failing late, or hanging.

The format is Nix's (src/libstore/machines.cc, the same in 2.8 and 2.18): machines separated by
newlines or ``;``, ``#`` starts a comment, each machine's fields separated by blanks:
``URI [SYSTEMS [SSH-KEY [MAX-JOBS [SPEED [FEATURES [MANDATORY [HOST-KEY]]]]]]]``, where SYSTEMS,
FEATURES and MANDATORY are comma-separated and ``-`` (or a missing field) keeps the default.
A machine takes a derivation when it supports its system, has each feature the derivation
requires among its features or mandatory features, and the derivation requires every mandatory
feature (Machine::allSupported and Machine::mandatoryMet).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from capplan.errors import InvalidInputError, shorten

__all__ = ["Machine", "blocked_behind", "parse_machines", "slots", "unplaceable"]

# A machines text longer than this is no list of machines (nix.conf's own line limit is far
# below); reading stops at once instead of splitting megabytes.
MAX_MACHINES_TEXT = 1 << 20


@dataclass(frozen=True)
class Machine:
    uri: str
    systems: tuple[str, ...]
    max_jobs: int = 1
    features: frozenset[str] = frozenset()
    mandatory: frozenset[str] = frozenset()

    def takes(self, system: str, required: Iterable[str]) -> bool:
        need = set(required)
        return (
            system in self.systems
            and need <= (self.features | self.mandatory)
            and self.mandatory <= need
        )


def _list(field: str) -> tuple[str, ...]:
    return () if field == "-" else tuple(p for p in field.split(",") if p)


def parse_machines(text: str, default_system: str) -> tuple[Machine, ...]:
    """The machines of a ``--builders`` value (or a machines file's text); a machine that names
    no system builds ``default_system`` (Nix: settings.thisSystem)."""
    if len(text) > MAX_MACHINES_TEXT:
        raise InvalidInputError(
            f"the builders list is {len(text)} characters, more than {MAX_MACHINES_TEXT}",
            hint="give a list of machines, one per line or separated by ';'",
        )
    machines = []
    for raw in text.replace(";", "\n").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if fields[0].startswith("@"):
            raise InvalidInputError(
                f"a builders file names another file: {shorten(fields[0])!r}",
                hint="Nix reads @FILE only as the whole --builders value",
            )
        fields += ["-"] * (8 - len(fields))
        uri, systems, _key, jobs, speed, features, mandatory = fields[:7]
        try:
            max_jobs = 1 if jobs == "-" else int(jobs)
            if speed != "-":
                float(speed)
        except ValueError:
            raise InvalidInputError(
                f"builder {shorten(uri)!r}: max-jobs {shorten(jobs)!r} or speed factor "
                f"{shorten(speed)!r} is not a number",
                hint="write a machine as URI SYSTEMS KEY MAX-JOBS SPEED FEATURES MANDATORY",
            ) from None
        if max_jobs < 0 or not jobs.isascii():
            raise InvalidInputError(
                f"builder {shorten(uri)!r}: max-jobs {shorten(jobs)!r} is negative",
                hint="give 0 or more",
            )
        machines.append(
            Machine(
                uri=uri,
                systems=_list(systems) or (default_system,),
                max_jobs=max_jobs,
                features=frozenset(_list(features)),
                mandatory=frozenset(_list(mandatory)),
            )
        )
    return tuple(machines)


def unplaceable(
    jobs: Sequence[tuple[str, str, Sequence[str]]], machines: Sequence[Machine]
) -> dict[str, str]:
    """Job name -> why no machine takes it, for each ``(name, system, required features)`` that
    no machine with a build slot (max-jobs above 0) takes."""
    usable = [m for m in machines if m.max_jobs > 0]
    out: dict[str, str] = {}
    for name, system, required in jobs:
        if any(m.takes(system, required) for m in usable):
            continue
        on_system = [m for m in usable if system in m.systems]
        if not on_system:
            out[name] = f"no builder for {system}"
            continue
        have: set[str] = set()
        for m in on_system:
            have |= m.features | m.mandatory
        missing = sorted(set(required) - have)
        if missing:
            out[name] = f"no {system} builder has {', '.join(missing)}"
        else:
            out[name] = f"every {system} builder requires a feature it lacks (mandatory features)"
    return out


def slots(machines: Sequence[Machine]) -> int:
    """Build slots over every machine: how many builds may run at once."""
    return sum(m.max_jobs for m in machines)


def blocked_behind(needs: Mapping[str, Sequence[str]], out: Iterable[str]) -> dict[str, str]:
    """Each job that needs one of ``out`` (directly or not) -> the first such job it needs, in
    name order. ``needs`` is a graph without cycles (build_job_graph refuses them)."""
    gone = set(out)
    memo: dict[str, str | None] = {}

    def blocker(name: str) -> str | None:
        if name not in memo:
            memo[name] = None
            for need in sorted(needs.get(name, ())):
                by = need if need in gone else blocker(need)
                if by is not None:
                    memo[name] = by
                    break
        return memo[name]

    return {
        name: by for name in sorted(needs) if name not in gone and (by := blocker(name)) is not None
    }
