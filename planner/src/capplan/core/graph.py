"""The build-job graph. networkx stays inside this module; callers get our own sorted types."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from capplan.core.kb import KnowledgeBase
from capplan.core.plan import Variant
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
    """Jobs in dependency order: ``order`` is a topological order, ``stage`` the depth."""

    order: tuple[str, ...]
    stage: dict[str, int]
    needs: dict[str, tuple[str, ...]]
    dependents: dict[str, tuple[str, ...]]


def build_job_graph(variants: Sequence[Variant]) -> JobGraph:
    """One node per variant; checks every edge is consistent (same capabilities and CUDA).

    Stages come from Kahn's algorithm over plain dicts (tens of thousands of jobs stay well
    under a second); networkx is only asked to name a cycle when there is one.
    """
    by_name = {v.name: v for v in variants}
    position = {v.name: i for i, v in enumerate(variants)}  # the plan's order within a stage
    needs: dict[str, tuple[str, ...]] = {}
    dependents: dict[str, list[str]] = {name: [] for name in by_name}
    for v in variants:
        for need in v.needs:
            dep = by_name.get(need)
            if dep is None:
                raise GraphError(
                    f"job '{v.name}' needs '{need}', which is not in the plan",
                    hint="this is a planner bug; rerun with --debug and report it",
                )
            if dep.cuda != v.cuda or (not dep.independent and dep.capabilities != v.capabilities):
                raise GraphError(
                    f"inconsistent dependency: {v.name} ({_desc(v)}) needs {dep.name} "
                    f"({_desc(dep)})",
                    hint="a capability-dependent dependency must share capabilities and CUDA",
                )
            dependents[need].append(v.name)
        needs[v.name] = tuple(sorted(set(v.needs)))
    waiting = {name: len(needs[name]) for name in by_name}
    generation = sorted((name for name, n in waiting.items() if n == 0), key=position.__getitem__)
    order: list[str] = []
    stage: dict[str, int] = {}
    depth = 0
    while generation:
        following: list[str] = []
        for name in generation:
            order.append(name)
            stage[name] = depth
            for later in dependents[name]:
                waiting[later] -= 1
                if waiting[later] == 0:
                    following.append(later)
        generation = sorted(following, key=position.__getitem__)
        depth += 1
    if len(order) != len(by_name):
        graph: nx.DiGraph[str] = nx.DiGraph()
        graph.add_edges_from((need, v) for v, ns in needs.items() for need in ns)
        cycle = nx.find_cycle(graph)
        raise GraphError(
            "dependency cycle between jobs: " + " -> ".join(str(e[0]) for e in cycle),
            hint="break the cycle in kb/packages.json",
        )
    return JobGraph(
        tuple(order),
        stage,
        needs,
        {name: tuple(sorted(ds)) for name, ds in dependents.items()},
    )


def _desc(v: Variant) -> str:
    caps = ",".join(map(str, v.capabilities)) or "any"
    return f"{caps}, CUDA {v.cuda}"
