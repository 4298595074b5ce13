"""The build-job graph. networkx stays inside this module; callers get our own sorted types."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.plan import Variant
from capplan.errors import GraphError

__all__ = ["JobGraph", "build_job_graph", "dependency_closure"]


def dependency_closure(kb: KnowledgeBase, packages: Iterable[str]) -> tuple[str, ...]:
    """Every package the given ones need (themselves included), sorted; cycles are errors."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    todo = sorted(set(packages))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        graph.add_node(name)
        for dep in kb.package(name).depends:
            if dep not in kb.packages:
                raise GraphError(
                    f"package '{name}' depends on '{dep}', which the knowledge base does not "
                    "define",
                    hint="add it to kb/packages.json or remove the dependency",
                )
            graph.add_edge(name, dep)
            todo.append(dep)
    if nx.is_directed_acyclic_graph(graph):
        return tuple(sorted(seen))
    cycle = nx.find_cycle(graph)
    path = " -> ".join([str(edge[0]) for edge in cycle] + [str(cycle[0][0])])
    raise GraphError(f"dependency cycle: {path}", hint="break the cycle in kb/packages.json")


@dataclass(frozen=True)
class JobGraph:
    """Jobs numbered in a topological order: job ``i`` is ``order[i]``. Stages are depths
    (a job's stage is one more than its deepest need); within a stage jobs keep the plan's
    order. The per-job tuples are indexed by job number."""

    order: tuple[str, ...]
    stage: tuple[int, ...]
    needs: tuple[tuple[str, ...], ...]  # names, sorted
    later: tuple[tuple[int, ...], ...]  # the jobs that need this one, by number

    def stages(self) -> int:
        return self.stage[-1] + 1 if self.stage else 0


def build_job_graph(variants: Sequence[Variant]) -> JobGraph:
    """One node per variant; checks every edge is consistent (same capabilities and CUDA).

    Stages come from Kahn's algorithm over plain lists of job numbers (tens of thousands of
    jobs stay well under a second); networkx is only asked to name a cycle when there is one.
    """
    index = {v.name: i for i, v in enumerate(variants)}  # also the order within a stage
    n = len(variants)
    needs: list[tuple[str, ...]] = []
    later: list[list[int]] = [[] for _ in range(n)]
    waiting = [0] * n
    # Each job's toolkit release (CUDA's), asked once per job rather than once per edge.
    kits = [_toolkit(v) for v in variants]
    for i, v in enumerate(variants):
        own = tuple(sorted(set(v.needs)))
        for need in own:
            j = index.get(need)
            if j is None:
                raise GraphError(
                    f"job '{v.name}' needs '{need}', which is not in the plan",
                    hint="this is a planner bug; rerun with --debug and report it",
                )
            dep = variants[j]
            # Identity first: the planner hands a variant's own toolkit release (CUDA's) and
            # capability tuple to its dependencies, so the full comparison only runs for
            # hand-made plans.
            if (
                (kits[j] is not kits[i] and kits[j] != kits[i])
                or dep.system != v.system
                or (
                    not dep.independent
                    and (theirs := _targets(dep)) is not (mine := _targets(v))
                    and theirs != mine
                )
            ):
                raise GraphError(
                    f"inconsistent dependency: {v.name} ({_desc(v)}) needs {dep.name} "
                    f"({_desc(dep)})",
                    hint="a capability-dependent dependency must share capabilities and CUDA, "
                    "and every dependency the system",
                )
            later[j].append(i)
        needs.append(own)
        waiting[i] = len(own)
    generation = [i for i in range(n) if waiting[i] == 0]
    order: list[int] = []
    stage: list[int] = []
    depth = 0
    while generation:
        following: list[int] = []
        for i in generation:
            order.append(i)
            stage.append(depth)
            for j in later[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    following.append(j)
        following.sort()
        generation = following
        depth += 1
    if len(order) != n:
        graph: nx.DiGraph[str] = nx.DiGraph()
        graph.add_edges_from(
            (need, v.name) for v, own in zip(variants, needs, strict=True) for need in own
        )
        cycle = nx.find_cycle(graph)
        raise GraphError(
            "dependency cycle between jobs: " + " -> ".join(str(e[0]) for e in cycle),
            hint="break the cycle in kb/packages.json",
        )
    number = [0] * n  # plan position -> job number
    for k, i in enumerate(order):
        number[i] = k
    return JobGraph(
        order=tuple(variants[i].name for i in order),
        stage=tuple(stage),
        needs=tuple(needs[i] for i in order),
        later=tuple(tuple(sorted(number[j] for j in later[i])) for i in order),
    )


def _targets(v: Variant) -> tuple[object, ...]:
    return () if v.spec is None else v.spec.dependency_targets()


def _toolkit(v: Variant) -> str | None:
    return None if v.spec is None else v.spec.toolkit()


def _desc(v: Variant) -> str:
    caps = ",".join(map(str, _targets(v))) or "any"
    return f"{caps}, CUDA {_toolkit(v)}, {v.system}"
