"""magma's HIP target list (``VALID_GFXS``), read from its real ``CMakeLists.txt``.

magma keeps its own list of AMD targets; a ``GPU_TARGET`` outside it gets no
``--offload-arch`` flag, and nixpkgs copies the list by hand into
pkgs/by-name/ma/magma/package.nix (``supportedGpuTargets``), throwing "No supported GPU targets
specified" when nothing is left. Reading the list from the source, as ``capplan limits read
torch`` does for torch's, keeps kb/amd_packages.json from drifting.

The CMake form (icl-utk-edu/magma CMakeLists.txt, the ``if (MAGMA_ENABLE_HIP)`` block)::

    set(VALID_GFXS "700;701;...;90c;1010;...;1033")
    foreach( GFX ${VALID_GFXS} ) ... --offload-arch=gfx${GFX} ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from capplan.core.families.rocm.target import PROCESSORS, AmdTarget
from capplan.errors import DataError, shorten

__all__ = ["MagmaLimits", "parse_magma_limits"]

# `set` is a CMake command (case-insensitive); the variable name is case-sensitive.
_SET = re.compile(r"\bset\s*\(\s*VALID_GFXS\b(?P<args>[^)]*)\)", re.IGNORECASE)
_VALUE = re.compile(r"(?:gfx)?(?P<digits>[0-9]{1,2}[0-9a-f]{2})")


def _strip_comments(text: str) -> str:
    """CMake ``#`` line comments removed (not inside quoted arguments)."""
    out: list[str] = []
    for line in text.splitlines():
        quoted = False
        cut = len(line)
        for index, char in enumerate(line):
            if char == '"':
                quoted = not quoted
            elif char == "#" and not quoted:
                cut = index
                break
        out.append(line[:cut])
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class MagmaLimits:
    """The targets magma's HIP build accepts, and where the list was found."""

    valid: tuple[AmdTarget, ...]
    unknown: tuple[str, ...]  # values that are no processor capplan knows (a newer magma)
    raw: tuple[str, ...]  # the list as written, in order
    line: int  # 1-based line of the `set(VALID_GFXS ...)` command

    def to_json(self) -> dict[str, Any]:
        return {
            "package": "magma-hip",
            "variable": "VALID_GFXS",
            "line": self.line,
            "raw": list(self.raw),
            "targets": [str(t) for t in self.valid],
            "unknown": list(self.unknown),
        }

    def kb_entry(self, old: dict[str, Any] | None, source: str) -> dict[str, Any]:
        """kb/amd_packages.json's ``magma-hip`` entry with this list (other fields kept)."""
        entry: dict[str, Any] = dict(old or {})
        entry.setdefault("default_targets", None)
        entry.setdefault("without_targets", "throw")
        entry.setdefault("requires_family", None)
        entry.setdefault(
            "reads", "gpuTargets argument, else clr.gpuTargets (not the scope's localGpuTargets)"
        )
        entry.setdefault(
            "note", "an empty intersection throws 'No supported GPU targets specified'"
        )
        entry["accepts"] = [str(t) for t in self.valid]
        entry["source"] = source
        return entry


def parse_magma_limits(text: str) -> MagmaLimits:
    """``VALID_GFXS`` from a magma ``CMakeLists.txt``; DataError when it is absent or garbled."""
    clean = _strip_comments(text)
    found = list(_SET.finditer(clean))
    if not found:
        raise DataError(
            "no `set(VALID_GFXS ...)` in this file, so it is not magma's CMakeLists.txt "
            "(or magma changed how it lists HIP targets)",
            hint="give magma's top-level CMakeLists.txt",
        )
    lists = {_values(m.group("args")) for m in found}
    if len(lists) > 1:
        raise DataError(
            f"magma's CMakeLists.txt sets VALID_GFXS {len(found)} times with different lists",
            hint="read the file by hand; capplan cannot tell which one applies",
        )
    raw = lists.pop()
    if not raw:
        raise DataError("magma's VALID_GFXS is empty", hint="give magma's top-level CMakeLists.txt")
    valid: set[AmdTarget] = set()
    unknown: list[str] = []
    for value in raw:
        match = _VALUE.fullmatch(value.lower())
        name = f"gfx{match['digits']}" if match else None
        if name is not None and name in PROCESSORS:
            valid.add(AmdTarget(name))
        else:
            unknown.append(value)
    line = clean.count("\n", 0, found[0].start()) + 1
    return MagmaLimits(tuple(sorted(valid)), tuple(unknown), raw, line)


def _values(args: str) -> tuple[str, ...]:
    """CMake arguments: quoted strings are ;-lists, unquoted ones split on space and ;."""
    values: list[str] = []
    for quoted, bare in re.findall(r'"([^"]*)"|([^\s"]+)', args):
        chunk = quoted if quoted else bare
        values.extend(v for v in re.split(r"[;\s]+", chunk) if v)
    if any(v.startswith("$") for v in values):
        raise DataError(
            f"magma's VALID_GFXS is computed ({shorten(' '.join(values), 80)}), not a literal list",
            hint="read the file by hand",
        )
    return tuple(values)
