"""The build matrix: plan variants as CI jobs, with stages, needs, costs and a schedule.

Shapes follow the engines we feed (NIXPKGS.md §8): GitHub Actions ``{"include": [...]}`` with
nix-github-actions' keys (``name``, ``system``, ``os``, ``attr``), at most 256 jobs per matrix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capplan.core.families.registry import (
    gccarch_feature,
    is_cpu_level,
    job_keys,
    nix_keys,
    plan_keys,
)
from capplan.core.planning.gcpause import gc_paused
from capplan.core.planning.graph import JobGraph, build_job_graph
from capplan.core.planning.plan import Plan, Variant
from capplan.core.planning.schedule import Schedule, schedule_jobs
from capplan.core.planning.workflow import github_rows

if TYPE_CHECKING:
    from capplan.core.planning.runners import JobCost

__all__ = ["GITHUB_MAX_JOBS", "Matrix", "build_matrix", "github_matrices", "plan_dict", "plan_json"]

GITHUB_MAX_JOBS = 256


@dataclass(frozen=True)
class Matrix:
    plan: Plan
    graph: JobGraph
    schedule: Schedule  # every pool together: runners summed, makespan the longest pool's
    pools: Mapping[str, Schedule]  # one runner pool per system (jobs never cross systems)
    # Job name -> its minutes on the runner it is scheduled on (core/planning/runners.py);
    # a job without one keeps the knowledge base's reference minutes.
    costs: Mapping[str, JobCost] = field(default_factory=dict)

    @gc_paused
    def jobs(self) -> list[dict[str, Any]]:
        """One dict per job, in the graph's topological order (stage by stage)."""
        variant = self.plan.variant
        graph = self.graph
        runner = self.schedule.runner
        start = self.schedule.start
        # Variants live in legacyPackages (flake.nix), so `nix flake show` stays cheap.
        prefixes = {system: f"legacyPackages.{system}." for system in self.plan.systems}
        jobs: list[dict[str, Any]] = []
        for name, stage, needs in zip(graph.order, graph.stage, graph.needs, strict=True):
            v: Variant = variant(name)  # type: ignore[assignment]
            system = v.system
            jobs.append(
                {
                    "name": name,
                    "package": v.package,
                    "attr": prefixes.get(system, f"legacyPackages.{system}.") + name,
                    "nixpkgs_attr": v.attr,
                    "system": system,
                    "needs": list(needs),
                    "stage": stage,
                    "estimated_minutes": v.minutes,
                    "estimated_size_mb": v.size_mb,
                    "required_system_features": ["big-parallel"] if v.big_parallel else [],
                    "runner": runner[name],
                    "start_minute": round(start[name], 2),
                    # Each family's fields (CUDA's release, capabilities and PTX on every job, AMD
                    # jobs' gfx targets, CPU-level jobs' required CPU features).
                    **job_keys(v),
                }
            )
            cost = self.costs.get(name)
            if cost is not None:
                job = jobs[-1]
                job["estimated_minutes"] = cost.minutes
                job["runner_cores"] = cost.cores
                if cost.critical_minutes is not None:
                    job["critical_minutes"] = cost.critical_minutes
                if cost.peak_mb is not None:
                    job["peak_mb_per_compile"] = cost.peak_mb
                    job["parallel_compiles"] = cost.parallel
                if cost.needs_big and not v.big_parallel and not is_cpu_level(v):
                    # Memory holds its compiles below the runner's cores, or the runner
                    # cannot finish it: a bigger runner builds it (faster). A CPU-level job
                    # goes only to the runners of its gccarch feature, whatever it needs.
                    job["required_system_features"].append("big-parallel")
                if cost.problem is not None:
                    job["cannot_finish"] = cost.problem
            if (gccarch := gccarch_feature(v)) is not None:
                # CPU-level jobs only: the derivation's gccarch-<arch> feature (what the
                # runner's CPU must have before it declares it is the CPU family's job key).
                jobs[-1]["required_system_features"].append(gccarch)
        return jobs

    def summary(self) -> dict[str, Any]:
        b = self.plan.baselines
        s = self.schedule
        return {
            "jobs": len(self.graph.order),
            "stages": self.graph.stages(),
            "runners": s.runners,
            "total_minutes": round(s.total_work, 2),
            "makespan_minutes": round(s.makespan, 2),
            "lower_bound_minutes": round(s.lower_bound, 2),
            "critical_path_minutes": round(s.critical_path, 2),
            "makespan_over_lower_bound": round(s.ratio, 4),
            "pools": {
                system: {
                    "jobs": len(pool.start),
                    "runners": pool.runners,
                    "total_minutes": round(pool.total_work, 2),
                    "makespan_minutes": round(pool.makespan, 2),
                    "lower_bound_minutes": round(pool.lower_bound, 2),
                    "critical_path_minutes": round(pool.critical_path, 2),
                    "makespan_over_lower_bound": round(pool.ratio, 4),
                }
                for system, pool in self.pools.items()
            },
            "total_size_mb": b.plan_size_mb,
            "baselines": {
                "nixpkgs_default": {
                    "jobs": b.nixpkgs_default_jobs,
                    "minutes": b.nixpkgs_default_minutes,
                    "size_mb": b.nixpkgs_default_size_mb,
                },
                "naive": {
                    "jobs": b.naive_jobs,
                    "minutes": b.naive_minutes,
                    "size_mb": b.naive_size_mb,
                },
            },
            "unserved": [
                {"package": d.package, "gpu": d.subject, "reason": d.reason}
                for d in self.plan.unserved
            ],
        }

    @gc_paused  # one pause around jobs() and summary(): between them a full collection walked
    # the whole plan (1.4 s of the 20,000-package benchmark, which had made it superlinear)
    def to_json(self) -> dict[str, Any]:
        return {"jobs": self.jobs(), "summary": self.summary()}


@gc_paused
def build_matrix(
    plan: Plan,
    runners: int | Mapping[str, int],
    costs: Mapping[str, JobCost] | None = None,
) -> Matrix:
    """Schedule the plan's jobs: each system's jobs on that system's own runner pool
    (``runners``: one size for every pool, or a size per system, 4 where a system is missing);
    ``costs``: each job's minutes on its runner (runners.job_costs); without: the knowledge
    base's reference minutes.
    """
    graph = build_job_graph(plan.variants)
    variant = plan.variant
    ordered: list[Variant] = [variant(name) for name in graph.order]  # type: ignore[misc]
    costs = dict(costs or {})
    # One lookup per job, not one per field.
    minutes = [costs[v.name].minutes if v.name in costs else v.minutes for v in ordered]
    systems = [v.system for v in ordered]
    pools: dict[str, Schedule] = {}
    for system in dict.fromkeys((*plan.systems, *systems)):
        members = [i for i, s in enumerate(systems) if s == system]
        if not members and system not in plan.systems:
            continue
        size = runners if isinstance(runners, int) else runners.get(system, 4)
        pools[system] = _schedule_pool(graph, minutes, members, size)
    return Matrix(plan, graph, _together(pools), pools, costs)


def _schedule_pool(
    graph: JobGraph, minutes: Sequence[float], members: Sequence[int], runners: int
) -> Schedule:
    """The list schedule of the jobs ``members`` (job numbers, in topological order), which the
    graph checks never need a job of another system."""
    if len(members) == len(graph.order):  # one system: the graph's own numbering
        return schedule_jobs(
            graph.order,
            minutes,
            [len(needs) for needs in graph.needs],
            graph.later,
            runners,
        )
    local = {job: k for k, job in enumerate(members)}
    return schedule_jobs(
        [graph.order[i] for i in members],
        [minutes[i] for i in members],
        [len(graph.needs[i]) for i in members],
        [[local[j] for j in graph.later[i]] for i in members],
        runners,
    )


def _together(pools: Mapping[str, Schedule]) -> Schedule:
    """The pools as one schedule: they run side by side, so the makespan and its lower bound
    are the largest pool's, and the work and runners add up."""
    busy = [p for p in pools.values() if p.start]
    if len(busy) == 1 and len(pools) == 1:
        return busy[0]
    start: dict[str, float] = {}
    runner: dict[str, int] = {}
    for pool in busy:
        start.update(pool.start)
        runner.update(pool.runner)
    return Schedule(
        sum(p.runners for p in pools.values()),
        max((p.makespan for p in pools.values()), default=0.0),
        max((p.lower_bound for p in pools.values()), default=0.0),
        max((p.critical_path for p in pools.values()), default=0.0),
        round(sum(p.total_work for p in pools.values()), 4),
        start,
        runner,
    )


def github_matrices(
    matrix: Matrix,
    max_jobs: int = GITHUB_MAX_JOBS,
    runners_os: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """``{"include": [...]}`` objects of at most ``max_jobs`` jobs, in stage order.

    Chunks follow the topological order, so a job never sits in an earlier chunk than a job it
    needs: running the matrices one after another respects every dependency. Rows are
    :func:`capplan.core.planning.workflow.github_rows`.
    """
    rows = github_rows(matrix.jobs(), runners_os)
    return [{"include": rows[i : i + max_jobs]} for i in range(0, len(rows), max_jobs)] or [
        {"include": []}
    ]


@gc_paused
def plan_json(
    plan: Plan,
    dispatch: dict[str, Any] | None = None,
    *,
    machine: dict[str, Any] | None = None,
    cache: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """overlays/plan.json: the data overlays/default.nix reads with builtins.fromJSON;
    ``dispatch`` is the dispatch outputs' part (the ``section`` of
    :func:`capplan.core.families.registry.dispatcher`), ``machine`` what pkgs/machine.nix
    picks a machine's variants from (:func:`capplan.core.families.registry.machine_section`),
    ``cache`` capplan.toml's ``[cache]`` substituters and keys (left out when empty, so a
    plan without one keeps its bytes). Both are additions a version-1 reader ignores: the
    version stays 1."""
    extra: dict[str, Any] = {} if dispatch is None else {"dispatch": dispatch}
    if machine is not None:
        extra["machine"] = machine
    if cache:
        extra["cache"] = cache
    return {
        **extra,
        "version": 1,
        # "system" is the first (default) system, kept for readers of one-system plans; each
        # variant names its own system.
        "system": plan.system,
        "systems": list(plan.systems),
        "variants": {
            v.name: {
                "system": v.system,
                "package": v.package,
                "attr": list(v.attr_path),
                "independent": v.independent,
                # How Nix receives each family's targets.
                **nix_keys(v),
            }
            for v in plan.variants
        },
    }


def _cpu_costs(plan: Plan) -> dict[str, Any] | None:
    c = plan.cpu_costs
    if c is None:
        return None
    return {
        "plan": {"jobs": c.plan_jobs, "minutes": c.plan_minutes, "size_mb": c.plan_size_mb},
        "generic": {
            "jobs": c.generic_jobs,
            "minutes": c.generic_minutes,
            "size_mb": c.generic_size_mb,
        },
        "every_level": {
            "jobs": c.every_level_jobs,
            "minutes": c.every_level_minutes,
            "size_mb": c.every_level_size_mb,
        },
    }


@gc_paused
def plan_dict(plan: Plan) -> dict[str, Any]:
    """The whole plan as JSON data (``capplan plan --json``)."""
    b = plan.baselines
    return {
        "system": plan.system,
        "systems": list(plan.systems),
        "share": plan.share,
        # Each family's part: CUDA's policy and fleet, ROCm's fleet and scope, the CPU fleet.
        **{k: v for part in plan.parts for k, v in part.json_fields().items()},
        "packages": list(plan.packages),
        "variants": [
            {
                "name": v.name,
                "package": v.package,
                "system": v.system,
                "attr": v.attr,
                "vendor": v.vendor,
                # Each family's fields: CUDA's release, capabilities, PTX, gpu_targets and
                # forward_compat; ROCm's gfx_targets and rocm_scope; the CPU target.
                **plan_keys(v),
                "independent": v.independent,
                "fat": v.fat,
                "needs": list(v.needs),
                "estimated_minutes": v.minutes,
                "estimated_size_mb": v.size_mb,
                "serves": [
                    {"gpu": s.gpu, "level": s.level.value, "reason": s.reason} for s in v.serves
                ],
            }
            for v in plan.variants
        ],
        "decisions": [
            {"package": d.package, "subject": d.subject, "action": d.action, "reason": d.reason}
            for d in plan.decisions
        ],
        "unserved": [
            {"package": d.package, "gpu": d.subject, "reason": d.reason} for d in plan.unserved
        ],
        "costs": {
            "plan": {"jobs": b.plan_jobs, "minutes": b.plan_minutes, "size_mb": b.plan_size_mb},
            "nixpkgs_default": {
                "jobs": b.nixpkgs_default_jobs,
                "minutes": b.nixpkgs_default_minutes,
                "size_mb": b.nixpkgs_default_size_mb,
            },
            "naive": {"jobs": b.naive_jobs, "minutes": b.naive_minutes, "size_mb": b.naive_size_mb},
            "exact_jobs": b.exact_jobs,
            # CPU-side packages against one generic build each and every package for every
            # fleet CPU target; null when the plan has no CPU-side package.
            "cpu": _cpu_costs(plan),
        },
    }
