"""Two derivation graphs side by side: where they first differ (``capplan cache why``).

Pure: the caller hands in a ``fetch`` function that reads derivations (``nix derivation show``
on Nix >= 2.15, ``nix show-derivation`` on 2.8, through adapters/derivations.py); this module
parses the answers, compares derivations with the store hashes taken out, and walks both graphs
from the roots, level by level, down the inputs that differ only because their own inputs
differ. A branch stops at its first derivation that differs in itself (an attribute, its name,
an input added or removed): that is a finding. Shared inputs (equal paths) are never read, so
the walk reads only the part of the closure where the two sides part.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capplan.errors import NixError, shorten

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "Change",
    "Drv",
    "Finding",
    "Walk",
    "diff_drvs",
    "drv_stem",
    "find_named",
    "package_of",
    "parse_show",
    "walk",
]

# No derivation graph nixpkgs makes is this deep (torch's closure, bootstrap stages included,
# is a few hundred levels at most): past it the answer is a chain or a loop nix should not give.
MAX_DEPTH = 1000
# Pairs compared in one walk; each is read at most once.
MAX_NODES = 200_000
# Levels read one `show` call each before the rest of the differing branches is read with one
# recursive call: a difference near the top costs a few small calls, a deep one two calls.
LAZY_LEVELS = 8
# A store path's hash part: /nix/store/<32 nix32 chars>-name (nix32 leaves out e, o, t, u).
_HASH = re.compile(r"/[0-9a-df-np-sv-z]{32}-")
# A derivation name's version (nixpkgs' builtins.parseDrvName splits at the first "-digit")
# and the cudaPackages prefix of a CUDA redistributable ("cuda12.9-cuda_cudart-12.9").
_VERSION = re.compile(r"-[0-9][^-]*(-.*)?$")
_CUDA_PREFIX = re.compile(r"^cuda[0-9]+(\.[0-9]+)?-")
_VALUE_CHARS = 120
# A whole store path's base name: two derivations that refer to their inputs' outputs differ in
# those references whenever an input differs, name included (numpy-2.3.2 against 2.3.3); the
# input itself is compared further down, so the reference is no difference of this one.
_STORE_NAME = re.compile(r"/[0-9a-df-np-sv-z]{32}-[^/\s\"'\\;:,]*")


@dataclass(frozen=True, slots=True)
class Drv:
    """One derivation as ``nix derivation show`` prints it."""

    path: str
    name: str
    system: str
    builder: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    inputs: tuple[str, ...]  # input derivation paths, sorted
    srcs: tuple[str, ...]
    outputs: tuple[str, ...] = ()  # output paths (none for a content-addressed one)


def _store_key(key: str, store_dir: str) -> str:
    # Nix >= 2.20 prints a derivation's key as its base name, older ones as the full path.
    return key if key.startswith("/") else f"{store_dir}/{key}"


def _bad(why: str) -> NixError:
    return NixError(
        f"nix printed a derivation capplan cannot read: {why}",
        hint="check the nix installation (2.8 or newer)",
    )


def parse_show(data: Any, *, store_dir: str = "/nix/store") -> dict[str, Drv]:
    """The derivations of one ``nix derivation show`` / ``show-derivation`` answer, by path."""
    if not isinstance(data, dict):
        raise _bad(f"a JSON {type(data).__name__}, not an object")
    out: dict[str, Drv] = {}
    for key, body in data.items():
        if not isinstance(key, str) or not isinstance(body, dict):
            raise _bad(f"entry {shorten(str(key), 80)!r} is not an object")
        path = _store_key(key, store_dir)
        env = body.get("env", {})
        args = body.get("args", [])
        raw_inputs = body.get("inputDrvs", {})
        srcs = body.get("inputSrcs", [])
        if not (
            isinstance(env, dict)
            and all(isinstance(v, str) for v in env.values())
            and isinstance(args, list)
            and all(isinstance(a, str) for a in args)
            and isinstance(raw_inputs, dict)
            and isinstance(srcs, list)
            and all(isinstance(s, str) for s in srcs)
        ):
            raise _bad(f"{shorten(path, 120)} has fields of the wrong type")
        raw_outputs = body.get("outputs", {})
        outputs = (
            tuple(
                sorted(
                    str(o["path"])
                    for o in raw_outputs.values()
                    if isinstance(o, dict) and isinstance(o.get("path"), str)
                )
            )
            if isinstance(raw_outputs, dict)
            else ()
        )
        name = body.get("name", env.get("name", ""))
        system = body.get("system", "")
        builder = body.get("builder", "")
        if not all(isinstance(x, str) for x in (name, system, builder)):
            raise _bad(f"{shorten(path, 120)} has fields of the wrong type")
        out[path] = Drv(
            path=path,
            name=str(name) or path.rsplit("/", 1)[-1].removesuffix(".drv")[33:],
            system=str(system),
            builder=str(builder),
            args=tuple(args),
            env=env,
            inputs=tuple(sorted(_store_key(str(k), store_dir) for k in raw_inputs)),
            srcs=tuple(sorted(srcs)),
            outputs=outputs,
        )
    return out


@dataclass(frozen=True, slots=True)
class Change:
    """One attribute that differs: ``yours`` (the installable's) and ``planned`` (the plan's
    variant's), None where that side lacks it. A JSON-valued attribute is compared key by key
    (``record.cudaCapabilities``)."""

    attribute: str
    yours: str | None
    planned: str | None


def _unhashed(text: str) -> str:
    return _HASH.sub("/", text) if "/" in text else text


def _bare(text: str) -> str:
    return _STORE_NAME.sub("/<store path>", text) if "/" in text else text


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return shorten(_unhashed(text), _VALUE_CHARS)


def _diff_values(key: str, ours: Any, theirs: Any, out: list[Change], depth: int = 0) -> None:
    if isinstance(ours, str) and isinstance(theirs, str):
        left, right = _json_object(ours), _json_object(theirs)
        if left is not None and right is not None:
            ours, theirs = left, right
    if isinstance(ours, dict) and isinstance(theirs, dict) and depth < 8:
        for sub in sorted(set(ours) | set(theirs)):
            if sub not in theirs:
                out.append(Change(f"{key}.{sub}", _show(ours[sub]), None))
            elif sub not in ours:
                out.append(Change(f"{key}.{sub}", None, _show(theirs[sub])))
            else:
                _diff_values(f"{key}.{sub}", ours[sub], theirs[sub], out, depth + 1)
        return
    left_text = _bare(ours if isinstance(ours, str) else json.dumps(ours, sort_keys=True))
    right_text = _bare(theirs if isinstance(theirs, str) else json.dumps(theirs, sort_keys=True))
    if left_text != right_text:
        out.append(Change(key, _show(ours), _show(theirs)))


def diff_drvs(yours: Drv, planned: Drv) -> list[Change]:
    """What differs between two derivations in themselves, store hashes taken out (an input
    that differs shows as its own difference further down, not here)."""
    out: list[Change] = []
    if yours.name != planned.name:
        out.append(Change("name", yours.name, planned.name))
    if yours.system != planned.system:
        out.append(Change("system", yours.system, planned.system))
    _diff_values("builder", yours.builder, planned.builder, out)
    _diff_values("args", " ".join(yours.args), " ".join(planned.args), out)
    # Sources by name (a patch file added or renamed); a source's content is its hash alone,
    # which every input also changes, so it is not compared.
    srcs = (
        " ".join(sorted(map(_unhashed, yours.srcs))),
        " ".join(sorted(map(_unhashed, planned.srcs))),
    )
    if srcs[0] != srcs[1]:
        out.append(
            Change("inputSrcs", shorten(srcs[0], _VALUE_CHARS), shorten(srcs[1], _VALUE_CHARS))
        )
    skip = {"name", "system", "builder"}
    for key in sorted((set(yours.env) | set(planned.env)) - skip):
        if key not in planned.env:
            out.append(Change(key, _show(yours.env[key]), None))
        elif key not in yours.env:
            out.append(Change(key, None, _show(planned.env[key])))
        elif yours.env[key] != planned.env[key]:
            _diff_values(key, yours.env[key], planned.env[key], out)
    return out


def drv_stem(name: str) -> str:
    """A derivation name without its version and CUDA-set prefix: what stays the same when
    the same package comes from another nixpkgs revision or CUDA release."""
    return _VERSION.sub("", _CUDA_PREFIX.sub("", name))


def _name_of(path: str) -> str:
    base = path.rsplit("/", 1)[-1].removesuffix(".drv")
    return base[33:] if len(base) > 33 and base[32] == "-" else base


def _pair_inputs(
    yours: Sequence[str], planned: Sequence[str]
) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Inputs paired by name, then by name without version; the rest were added or removed."""
    pairs: list[tuple[str, str]] = []
    left = sorted(yours, key=lambda p: (_name_of(p), p))
    right = sorted(planned, key=lambda p: (_name_of(p), p))
    for key in (_name_of, lambda p: drv_stem(_name_of(p))):
        by_key: dict[str, list[str]] = {}
        for path in right:
            by_key.setdefault(key(path), []).append(path)
        rest: list[str] = []
        for path in left:
            same = by_key.get(key(path))
            if same:
                pairs.append((path, same.pop(0)))
            else:
                rest.append(path)
        left = rest
        right = [p for group in by_key.values() for p in group]
    return pairs, sorted(left), sorted(right)


@dataclass(frozen=True, slots=True)
class Finding:
    """A derivation that differs in itself, and the way down to it from the root."""

    trail: tuple[str, ...]  # derivation names from the root to this one
    yours: Drv
    planned: Drv
    changes: tuple[Change, ...]
    added: tuple[str, ...] = ()  # names of inputs only yours has
    removed: tuple[str, ...] = ()  # names of inputs only the plan's has


@dataclass
class Walk:
    """What a walk found, and how much it read."""

    findings: list[Finding] = field(default_factory=list)
    read: int = 0  # derivations read
    depth: int = 0  # levels walked
    calls: int = 0  # fetch calls made


Fetch = Callable[[Sequence[str], bool], Mapping[str, Drv]]


def walk(
    root_yours: str, root_planned: str, fetch: Fetch, *, lazy_levels: int = LAZY_LEVELS
) -> Walk:
    """Walk both graphs from their roots to the first differences (see the module docstring).

    ``fetch(paths, recursive)`` returns at least the derivations of ``paths`` (and, when
    ``recursive``, those of their closures). A graph deeper than :data:`MAX_DEPTH` levels or a
    derivation among its own inputs is a NixError: nix should not print either.
    """
    result = Walk()
    known: dict[str, Drv] = {}
    parent: dict[tuple[str, str], tuple[str, str] | None] = {(root_yours, root_planned): None}
    frontier = [(root_yours, root_planned)]
    while frontier:
        if result.depth >= MAX_DEPTH:
            raise NixError(
                f"the derivation graphs still differ only in their inputs after {MAX_DEPTH} "
                f"levels (at {shorten(_name_of(frontier[0][0]), 80)}): stopped",
                hint="nix printed a chain deeper than any nixpkgs makes; compare the two "
                "derivations with nix-diff",
            )
        need = sorted({p for pair in frontier for p in pair} - known.keys())
        if need:
            result.calls += 1
            got = fetch(need, result.depth >= lazy_levels)
            known.update(got)
            missing = [p for p in need if p not in known]
            if missing:
                raise _bad(f"no answer for {shorten(missing[0], 120)}")
        nxt: list[tuple[str, str]] = []
        for pair in frontier:
            yours, planned = known[pair[0]], known[pair[1]]
            result.read += 1
            changes = diff_drvs(yours, planned)
            pairs, added, removed = _pair_inputs(yours.inputs, planned.inputs)
            differing = [p for p in pairs if p[0] != p[1]]
            if changes or added or removed or not differing:
                result.findings.append(
                    Finding(
                        _trail(parent, pair, known),
                        yours,
                        planned,
                        tuple(changes),
                        tuple(_name_of(p) for p in added),
                        tuple(_name_of(p) for p in removed),
                    )
                )
                continue
            for child in differing:
                if child in parent:
                    if _is_ancestor(parent, child, pair):
                        raise NixError(
                            f"nix printed a derivation graph with a cycle through "
                            f"{shorten(_name_of(child[0]), 80)}",
                            hint="a derivation cannot depend on itself; check the nix store",
                        )
                    continue  # reached already by another branch
                parent[child] = pair
                nxt.append(child)
                if len(parent) > MAX_NODES:
                    raise NixError(
                        f"the derivation graphs differ in more than {MAX_NODES} derivations: "
                        "stopped",
                        hint="compare the two derivations with nix-diff",
                    )
        frontier = nxt
        result.depth += 1
    return result


def _is_ancestor(
    parent: Mapping[tuple[str, str], tuple[str, str] | None],
    child: tuple[str, str],
    node: tuple[str, str],
) -> bool:
    current: tuple[str, str] | None = node
    steps = 0
    while current is not None and steps <= MAX_DEPTH + 1:
        if current == child:
            return True
        current = parent.get(current)
        steps += 1
    return False


def _trail(
    parent: Mapping[tuple[str, str], tuple[str, str] | None],
    pair: tuple[str, str],
    known: Mapping[str, Drv],
) -> tuple[str, ...]:
    names: list[str] = []
    current: tuple[str, str] | None = pair
    while current is not None and len(names) <= MAX_DEPTH:
        names.append(known[current[0]].name if current[0] in known else _name_of(current[0]))
        current = parent.get(current)
    return tuple(reversed(names))


def find_named(
    root: str, fetch: Fetch, wanted: Callable[[Drv], bool], *, lazy_levels: int = LAZY_LEVELS
) -> list[Drv]:
    """The derivations in ``root``'s closure that ``wanted`` picks (``root`` itself first),
    breadth first, not looking below a picked one: a devShell's planned packages."""
    seen = {root}
    frontier = [root]
    found: list[Drv] = []
    known: dict[str, Drv] = {}
    depth = 0
    while frontier and depth < MAX_DEPTH:
        need = [p for p in frontier if p not in known]
        if need:
            known.update(fetch(need, depth >= lazy_levels))
        nxt: list[str] = []
        for path in frontier:
            drv = known.get(path)
            if drv is None:
                raise _bad(f"no answer for {shorten(path, 120)}")
            if wanted(drv):
                found.append(drv)
                continue
            for child in drv.inputs:
                if child not in seen:
                    seen.add(child)
                    nxt.append(child)
            if len(seen) > MAX_NODES:
                raise NixError(
                    f"the closure of {shorten(_name_of(root), 80)} holds more than {MAX_NODES} "
                    "derivations: stopped",
                    hint="name one package's attribute instead",
                )
        frontier = nxt
        depth += 1
    return found


def package_of(name: str, packages: Mapping[str, Sequence[str]]) -> str | None:
    """The planned package a derivation name is a build of: a dash-separated word of the name
    (python3.13-torch-2.12.0, cuda12.9-nccl-2.28.3) equal to the package's name or its
    attribute's last part (libcublas for cublas)."""
    words = set(name.split("-"))
    for package, spellings in sorted(packages.items()):
        if words & {package, *spellings}:
            return package
    return None
