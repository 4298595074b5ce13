"""Minimum set cover for ``share = "compatible"``: fewest capabilities whose SASS serves every GPU.

SASS never crosses majors (CUDA.md), so the instance splits into independent components (one per
major, in practice) of a handful of candidates each; each component is solved exactly by trying
subsets in increasing size. Among the smallest covers we prefer the one serving the most GPUs
(weighted by fleet.count) natively, then the higher capabilities: deterministic and documented.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import TypeVar

__all__ = ["min_cover"]

T = TypeVar("T")

_MAX_COMPONENT = 24  # 2**24 subsets at worst; fleets never come near it


def min_cover(
    universe: Sequence[T],
    options: Mapping[T, frozenset[T]],
    weights: Mapping[T, int] | None = None,
) -> tuple[T, ...]:
    """The chosen options (sorted), covering every element of ``universe`` with fewest options.

    ``options`` maps each candidate to the elements it covers; a candidate whose own identity is
    an element (``candidate in universe``) serves that element natively, which breaks ties.
    """
    weights = weights or {}
    remaining = set(universe)
    uncoverable = remaining - set().union(*options.values()) if options else remaining
    if uncoverable:
        raise ValueError(f"no option covers {sorted(map(str, uncoverable))}")
    chosen: list[T] = []
    for elements, candidates in _components(universe, options):
        chosen.extend(_solve(elements, candidates, options, weights))
    return tuple(sorted(chosen))  # type: ignore[type-var]


def _components(
    universe: Sequence[T], options: Mapping[T, frozenset[T]]
) -> list[tuple[set[T], list[T]]]:
    parent: dict[T, T] = {d: d for d in universe}

    def find(d: T) -> T:
        while parent[d] != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    for covered in options.values():
        members = [d for d in covered if d in parent]
        for other in members[1:]:
            parent[find(other)] = find(members[0])
    groups: dict[T, set[T]] = {}
    for d in universe:
        groups.setdefault(find(d), set()).add(d)
    result = []
    for elements in groups.values():
        candidates = sorted((c for c, cov in options.items() if cov & elements), key=_order)
        result.append((elements, candidates))
    return sorted(result, key=lambda item: sorted(map(_order, item[0])))


def _order(x: object) -> tuple[object, ...]:
    key = getattr(x, "sort_key", None)
    return (key,) if key is not None else (str(x),)


def _solve(
    elements: set[T],
    candidates: list[T],
    options: Mapping[T, frozenset[T]],
    weights: Mapping[T, int],
) -> tuple[T, ...]:
    if len(candidates) > _MAX_COMPONENT:
        raise ValueError(f"set-cover component too large ({len(candidates)} candidates)")
    for size in range(1, len(candidates) + 1):
        best: tuple[T, ...] | None = None
        best_key: tuple[object, ...] | None = None
        for combo in combinations(candidates, size):
            covered: set[T] = set()
            for c in combo:
                covered |= options[c]
            if not elements <= covered:
                continue
            native = sum(weights.get(d, 1) for d in elements if d in combo)
            key = (native, sorted((_order(c) for c in combo), reverse=True))
            if best_key is None or key > best_key:
                best, best_key = combo, key
        if best is not None:
            return best
    raise ValueError("no cover")  # unreachable: every element is coverable
