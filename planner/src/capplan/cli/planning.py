"""What several commands share: loading the KB and config, planning, resolving devices."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from capplan.errors import InvalidInputError

if TYPE_CHECKING:
    # Imported where used: `capplan gpus`, `caps` and `explain` read the KB through this module
    # and must not pay for the config models, the planner or networkx (issue 20, item 4;
    # tests/unit/test_imports.py checks it).
    from capplan.core.families.registry import CpuModel
    from capplan.core.model.kb import KnowledgeBase
    from capplan.core.planning.config import Config
    from capplan.core.planning.matrix import Matrix
    from capplan.core.planning.plan import Plan
    from capplan.core.planning.runners import JobCost

__all__ = [
    "Planned",
    "config_option",
    "current_capability_kb",
    "current_kb",
    "kb_directory",
    "load_plan",
    "plan_with_settings",
    "planned_costs",
    "planned_matrix",
    "policy_options",
    "variant_targets",
]

F = TypeVar("F", bound=Callable[..., Any])


def kb_directory() -> Path | None:
    """The knowledge-base folder ``CAPPLAN_KB_DIR`` names; None: the packaged files."""
    directory = os.environ.get("CAPPLAN_KB_DIR")
    return Path(directory) if directory else None


def current_kb() -> KnowledgeBase:
    from capplan.adapters.kb import load_kb

    return load_kb(kb_directory())


def current_capability_kb() -> KnowledgeBase:
    """The capability table and CUDA releases alone (``load_capability_kb``): for ``caps`` and
    ``verify --expect``, which name no GPU, package or AMD target."""
    from capplan.adapters.kb import load_capability_kb

    return load_capability_kb(kb_directory())


def config_option(func: F) -> F:
    return click.option(
        "--config",
        "config_path",
        # A folder is refused where the file is read, as a config error (exit 5) like a FIFO.
        type=click.Path(path_type=Path),
        default=None,
        help="capplan.toml or pyproject.toml ([tool.capplan]); default: the nearest one.",
    )(func)


def _eval_seconds(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    from capplan.adapters.nix import eval_seconds

    return None if value is None else eval_seconds(value, "--nix-eval-seconds", InvalidInputError)


def nix_eval_seconds_option(func: F) -> F:
    """``--nix-eval-seconds N`` of a command that runs nix eval: its time limit (over
    CAPPLAN_NIX_EVAL_SECONDS, default 1,200 s); a bad value is exit 4."""
    return click.option(
        "--nix-eval-seconds",
        "eval_seconds",
        metavar="N",
        default=None,
        callback=_eval_seconds,
        help="Stop a nix eval after N seconds (default: CAPPLAN_NIX_EVAL_SECONDS, else 1200).",
    )(func)


def override_input_option(func: F) -> F:
    """``--override-input INPUT REF`` (repeatable) of a command that evaluates a flake."""
    return click.option(
        "--override-input",
        "override_inputs",
        nargs=2,
        multiple=True,
        metavar="INPUT REF",
        help="Passed to nix eval.",
    )(func)


def cache_query_options(skip_help: str) -> Callable[[F], F]:
    """The options of a command that asks binary caches which jobs they hold, as ``matrix
    --skip-cached`` does: the caches, the keys, and where the output paths come from."""

    def decorate(func: F) -> F:
        for option in reversed(
            [
                click.option(
                    "--cache",
                    "caches",
                    multiple=True,
                    metavar="URL",
                    help="Binary cache to query (repeatable).",
                ),
                click.option("--skip-cached", is_flag=True, help=skip_help),
                click.option(
                    "--trusted-key",
                    "trusted_keys",
                    multiple=True,
                    metavar="NAME:KEY",
                    help="Only count narinfos signed by these keys.",
                ),
                click.option(
                    "--jobs",
                    "jobs_file",
                    type=click.Path(dir_okay=False, path_type=Path),
                    default=None,
                    help="nix-eval-jobs JSON lines with the output paths (instead of nix eval).",
                ),
                click.option(
                    "--flake",
                    default=".",
                    show_default=True,
                    help="Flake whose packages give the output paths.",
                ),
                override_input_option,
                click.option("--offline", is_flag=True, help="Skip every cache check."),
            ]
        ):
            func = option(func)
        return func

    return decorate


def policy_options(func: F) -> F:
    """Flags that override [policy] keys (the last layer of the config cascade)."""
    for option in reversed(
        [
            click.option(
                "--cuda",
                "cuda",
                default=None,
                help="Allowed CUDA versions, preferred first (comma-separated).",
            ),
            click.option(
                "--share",
                type=click.Choice(["exact", "compatible"]),
                default=None,
                help="Variant sharing policy.",
            ),
            click.option(
                "--fat", type=click.Choice(["none", "fleet"]), default=None, help="Fat builds."
            ),
            click.option(
                "--ptx", type=click.Choice(["none", "newest"]), default=None, help="PTX policy."
            ),
            click.option(
                "--gpu",
                "gpus",
                multiple=True,
                help="Replace the fleet with these GPUs (repeatable).",
            ),
            click.option(
                "--rocm-scope",
                "rocm_scope",
                type=click.Choice(["package", "stack"]),
                default=None,
                help="AMD variants: rebuild only the package, or its whole ROCm stack.",
            ),
        ]
    ):
        func = option(func)
    return func


def flag_layer(
    cuda: str | None = None,
    share: str | None = None,
    fat: str | None = None,
    ptx: str | None = None,
    gpus: tuple[str, ...] = (),
    runners: int | None = None,
    rocm_scope: str | None = None,
) -> dict[str, dict[str, Any]]:
    policy: dict[str, Any] = {}
    if cuda:
        policy["cuda"] = [c.strip() for c in cuda.split(",") if c.strip()]
    for key, value in (
        ("share", share),
        ("fat", fat),
        ("ptx", ptx),
        ("runners", runners),
        ("rocm_scope", rocm_scope),
    ):
        if value is not None:
            policy[key] = value
    fleet: dict[str, Any] = {"gpus": list(gpus)} if gpus else {}
    return {"policy": policy, "fleet": fleet}


@dataclass(frozen=True)
class Planned:
    """A plan with the settings it came from (read once per command)."""

    plan: Plan
    config: Config
    config_file: Path | None


def plan_with_settings(
    config_path: Path | None,
    flags: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    quiet: bool = False,
) -> Planned:
    """The plan of the capplan.toml here or above (``config_path`` when given), else of the
    embedded default plan, which is said on stderr unless ``quiet`` (doctor's fixes: the plan
    is not what the user asked about)."""
    from capplan.adapters.config import load_config
    from capplan.core.planning.planner import make_plan

    config, found = load_config(
        config_path, cwd=Path.cwd(), environ=os.environ if environ is None else environ, flags=flags
    )
    if found is None and not quiet:
        from capplan.adapters.config import default_plan_path
        from capplan.cli.output import err_console

        err_console().print(
            "capplan: no capplan.toml here or above; using the embedded default plan "
            f"({default_plan_path()})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    kb = current_kb()
    cpu = _cpu_model(kb, config)
    if any("gccarch-" in key for key in config.policy.runners_os):
        from capplan.adapters.families import cpu_model
        from capplan.core.planning.workflow import check_gccarch_keys

        model = cpu or cpu_model()
        check_gccarch_keys(config.policy.runners_os, model.gcc_arches(), model.gcc_names())
    plan = make_plan(kb, config, cpu=cpu)
    if config.dispatch.fallback != "error":
        from capplan.core.families.registry import dispatcher

        # Every command that plans refuses a fallback naming nothing (exit 5), not only those
        # that write the dispatch table: `plan` and `matrix` accepted it.
        dispatcher(kb).resolve_fallback(plan, "", config.dispatch.fallback)
    return Planned(plan, config, found)


def planned_matrix(
    planned: Planned, plan: Plan | None = None, costs: Mapping[str, JobCost] | None = None
) -> Matrix:
    """The schedule of ``plan`` (default: the planned one) on the configured runners, each
    job's minutes those of the runner it is scheduled on (``costs``, of these jobs or more, when
    the caller has them already; else :func:`planned_costs`)."""
    from capplan.core.planning.matrix import build_matrix

    plan = planned.plan if plan is None else plan
    if costs is None:
        costs = planned_costs(planned, plan)
    else:
        costs = {v.name: costs[v.name] for v in plan.variants}
    return build_matrix(plan, planned.config.policy.runners, costs)


def planned_costs(planned: Planned, plan: Plan | None = None) -> dict[str, JobCost]:
    """Each job's minutes on the runner it is scheduled on ([policy] runner_cores,
    runner_memory_gb, runner_disk_gb, big_parallel_*; [policy.runners_os])."""
    from capplan.core.planning.memory import RunnerSize
    from capplan.core.planning.runners import RunnerSizes, job_costs

    policy = planned.config.policy
    sizes = RunnerSizes(
        RunnerSize(policy.runner_cores, policy.runner_memory_gb * 1024),
        policy.runner_disk_gb * 1024,
        RunnerSize(policy.big_parallel_cores, policy.big_parallel_memory_gb * 1024),
        policy.big_parallel_disk_gb * 1024,
    )
    plan = planned.plan if plan is None else plan
    return job_costs(current_kb(), plan, sizes, policy.runners_os)


def _cpu_model(kb: KnowledgeBase, config: Config) -> CpuModel | None:
    """The CPU model, loaded only for a plan that needs it (archspec reads its database at
    import): one with fleet.cpus, or a package kb/packages.json does not have."""
    if not config.fleet.cpus and all(p in kb.packages for p in config.packages):
        return None
    from capplan.adapters.families import cpu_model

    return cpu_model()


def load_plan(
    config_path: Path | None, flags: Mapping[str, Mapping[str, Any]] | None = None
) -> Plan:
    return plan_with_settings(config_path, flags).plan


def variant_targets(name: str, config: Path | None) -> tuple[object, ...]:
    """The targets a planned variant must contain (for ``capplan verify --variant``): an
    NVIDIA variant's capabilities (CUDA's ``Target``), an AMD variant's gfx targets (ROCm's
    ``AmdTarget``; a shared ROCm build, such as ``onnxruntime-rocm``, holds nixpkgs' default
    list, ``clr.gpuTargets``). verify hands them to the family whose verifier owns them."""
    plan = load_plan(config)
    variant = plan.variant(name)
    if variant is None:
        from capplan.core.model.suggest import closest

        raise InvalidInputError(
            f"no variant '{name}' in the plan",
            hint=closest(name, list(plan.identifiers()), what="variant"),
        )
    from capplan.core.families.registry import verify_targets

    targets = verify_targets(plan, variant, current_kb)
    if targets is None:
        raise InvalidInputError(
            f"variant '{name}' is capability-independent: it has no planned device code",
            hint="verify a capability-dependent variant such as torch-sm86",
        )
    return targets
