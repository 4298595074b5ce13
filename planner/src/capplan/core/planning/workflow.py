"""GitHub Actions: matrix rows, the stage-and-shard layout, and the cache-build workflow as data.

GitHub cannot express dependencies inside one matrix, caps a matrix at 256 jobs, fails on an
empty one, and skips a job whose ``needs`` were skipped. So the workflow has one build job per
(stage, shard), known when it is generated: stages are the plan's dependency depths and each
stage is cut into shards of at most ``max_jobs``. The layout comes from the whole plan, before
``--skip-cached`` drops what a cache holds, so it does not move as the cache fills: a cached job
just leaves its shard, and an empty shard is skipped by its job's ``if:``.

The workflow is a plain dict rendered by :func:`render_yaml` (block style, every string that is
not a plain word single-quoted), so the same inputs give byte-identical text without a YAML
library. Every value that comes from the user is validated before it is written.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capplan.core.model.systems import ARCH_LABELS, DEFAULT_RUNNERS_OS
from capplan.errors import ConfigError, InvalidInputError, printable, shorten

__all__ = [
    "BIG_PARALLEL",
    "BUILD",
    "CACHE_NAME",
    "CPU_CHECK",
    "DEFAULT_RUNNERS_OS",
    "GCCARCH",
    "GITHUB_HOSTED_LIMIT_MINUTES",
    "GITHUB_OUTPUT_LIMIT_BYTES",
    "ROWS_FILE",
    "ROW_READ",
    "SELF_HOSTED_LIMIT_MINUTES",
    "SUMMARY_FILE",
    "Shard",
    "WorkflowSettings",
    "build_workflow",
    "check_cache_name",
    "check_cache_url",
    "check_gccarch_keys",
    "check_label",
    "check_matches",
    "check_named_path",
    "check_ref_name",
    "check_relative_path",
    "gccarch_runner",
    "github_output_lines",
    "github_rows",
    "layout_text",
    "matrix_entry",
    "output_bytes",
    "over_hosted_limit",
    "over_run_limits",
    "render_yaml",
    "rows_text",
    "runner_labels",
    "shard_layout",
    "shard_matrices",
    "timeout_minutes",
    "with_arch_label",
    "without_cached",
]

BIG_PARALLEL = "big-parallel"
# The system feature of a CPU-level build (make-derivation.nix: `gccarch-<gcc.arch>`).
GCCARCH = "gccarch-"
_GCC_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_CPU_FEATURE = re.compile(r"[a-z0-9_]{1,40}")

# The build job's first step: a CPU-level job (matrix.gccarch set) runs only where the runner's
# CPU has every instruction-set feature the level's code may use (/proc/cpuinfo's `flags`, or
# `Features` on Arm); then, and only then, Nix is told the runner has the gccarch-<arch> system
# feature the derivation requires. Other jobs pass through with no extra Nix setting. The
# values come in through the environment, never into the script's text. CAPPLAN_CPUINFO
# replaces /proc/cpuinfo in tests.
CPU_CHECK = """\
if [ -z "$GCCARCH" ]; then exit 0; fi
cpuinfo="${CAPPLAN_CPUINFO:-/proc/cpuinfo}"
have=" $(awk -F: '/^(flags|Features)[[:space:]]*:/ { print $2; exit }' "$cpuinfo") "
missing=""
for feature in $CPU_FEATURES; do
  case "$have" in
    *" $feature "*) ;;
    *) missing="$missing $feature" ;;
  esac
done
if [ -n "$missing" ]; then
  echo "::error::this runner's CPU cannot run $GCCARCH code, it lacks$missing:" \\
    "give gccarch-$GCCARCH jobs runners with such CPUs in [policy.runners_os]"
  exit 1
fi
echo "nix_config=extra-system-features = gccarch-$GCCARCH" >> "$GITHUB_OUTPUT"
"""
# GitHub stops a job on a hosted runner after 6 hours and on a self-hosted one after 5 days
# (docs.github.com: "Usage limits, billing, and administration").
GITHUB_HOSTED_LIMIT_MINUTES = 360
SELF_HOSTED_LIMIT_MINUTES = 5 * 24 * 60

# A job's outputs may hold 1 MB in all, "approximated based on UTF-16 encoding" (docs.github.com,
# "Passing information between jobs"; github/docs commit 1f20548b, 2025-03-14); GitHub refuses
# a run whose plan job writes more. A workflow file over 500 KB starts no run, and a run ends
# after 35 days (docs.github.com, "Actions limits").
GITHUB_OUTPUT_LIMIT_BYTES = 1_000_000
GITHUB_WORKFLOW_FILE_LIMIT_BYTES = 500_000
GITHUB_RUN_LIMIT_MINUTES = 35 * 24 * 60

# The plan job's outputs hold only what the build jobs' own keys need before a step runs
# (runs-on, timeout-minutes, the job's name): every other value of a row travels in this file,
# one tab-separated line per job, uploaded as an artifact and read by each build job's row step.
ROWS_FILE = "capplan-rows.tsv"
ROWS_ARTIFACT = "capplan-rows"
ROWS_COLUMNS = ("name", "attr", "system", "drv", "gccarch", "cpu_features", "peak_mb")
_ROW_VALUE = re.compile(r"[^\t\n\r\x00-\x1f\x7f]*")
# The build job's first step after the download: its row's values as step outputs. awk and a
# tab-separated file work on any runner (no jq, no Python, no Nix yet); the job's name comes
# in through the environment, never into the script's text.
ROW_READ = f"""\
awk -F '\\t' '
  $1 == ENVIRON["NAME"] {{
    found = 1
    print "attr=" $2; print "system=" $3; print "drv=" $4
    print "gccarch=" $5; print "cpu_features=" $6; print "peak_mb=" $7
  }}
  END {{ exit !found }}
' "{ROWS_ARTIFACT}/{ROWS_FILE}" >> "$GITHUB_OUTPUT" || {{
  echo "::error::job $NAME is not in {ROWS_FILE}: the plan job's artifact does not match this run"
  exit 1
}}
"""

# The build step. A job whose compiles have a measured peak (PEAK_MB, in its row) runs at most
# as many at once as this runner's available memory holds, and never more than its cores
# (Nix's `cores`, NIX_BUILD_CORES, is what a builder's make -j and nvcc's threads take); a
# runner that cannot hold one fails at once with one line. Without a peak: every core (0).
BUILD = """\
set -o pipefail
cores=0
if [ -n "$PEAK_MB" ]; then
  avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' "${MEMINFO:-/proc/meminfo}")
  cores=$(( ${avail:-0} / PEAK_MB ))
  [ "$cores" -gt "$(nproc)" ] && cores=$(nproc)
  if [ "$cores" -lt 1 ]; then
    echo "::error::$ATTR: one compile peaks at $PEAK_MB MB, this runner has ${avail:-0} MB free"
    exit 1
  fi
  echo "compiles at once: $cores (${avail} MB available, $PEAK_MB MB each, $(nproc) cores)"
fi
nix build -L --option cores "$cores" ".#$ATTR" 2>&1 | tee capplan-build.log
"""

# Pinned majors of the maintained actions the workflow uses.
CHECKOUT = "actions/checkout@v7"
INSTALL_NIX = "cachix/install-nix-action@v31"
CACHIX = "cachix/cachix-action@v17"
CACHE_RESTORE = "actions/cache/restore@v6"
CACHE_SAVE = "actions/cache/save@v6"
UPLOAD_ARTIFACT = "actions/upload-artifact@v7"
DOWNLOAD_ARTIFACT = "actions/download-artifact@v8"

# The failure record (capplan failures, docs/failures.md) that the workflow carries between
# runs in GitHub's cache: restored by the plan and record jobs, saved by the record job.
# The plan job's Markdown (matrix --summary), appended to its $GITHUB_STEP_SUMMARY.
SUMMARY_FILE = "capplan-summary.md"
FAILURES_FILE = "capplan-failures.json"
FAILURES_DIR = "capplan-new-failures"  # the record job's downloads: one file per failed job
FAILURE_ARTIFACT = "capplan-failure-"
# A cache entry is immutable, so every run saves under a new key; restore-keys find the newest
# entry of this branch, then of the default branch (GitHub lets a branch read those two).
FAILURES_KEY = "capplan-failures-${{ github.ref_name }}-"
# A known failure is retried once it is this old (its derivation may fail for a passing
# reason: out of memory, a flaky test, a runner lost), and recorded again if it fails again.
RETRY_AFTER_DAYS = 30

CACHE_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::(?P<port>[0-9]{1,5}))?(?:/[A-Za-z0-9._~/-]*)?")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")


# ---------------------------------------------------------------------------------------------
# validation of what reaches the workflow text


def check_cache_name(name: str) -> str:
    if not CACHE_NAME.fullmatch(name):
        raise InvalidInputError(
            f"invalid cachix cache name '{shorten(name)}'",
            hint="use lowercase letters, digits and dashes, as on cachix.org, e.g. my-cuda-cache",
        )
    return name


def check_cache_url(url: str) -> str:
    match = _URL.fullmatch(url)
    if match is None or ".." in url:
        raise InvalidInputError(
            f"invalid cache URL '{shorten(url)}'",
            hint="use http(s)://host[:port][/path] with letters, digits and . _ ~ / - only",
        )
    port = match.group("port")
    if port is not None and not 1 <= int(port) <= 65535:
        # A TCP port is 1-65535: nix would fail on this substituter in every job of the run.
        raise InvalidInputError(
            f"cache URL '{shorten(url)}' has port {int(port)}",
            hint="give a TCP port from 1 to 65535, or none for the scheme's own",
        )
    return url.rstrip("/") if url.count("/") > 2 else url


def check_matches(pattern: re.Pattern[str], value: str, what: str, hint: str) -> str:
    """``value`` when ``pattern`` matches all of it, else one line naming ``what`` and the value
    (escaped and cut, as every echoed value is): the check of every name that reaches a CI file."""
    if not pattern.fullmatch(value):
        raise InvalidInputError(f"invalid {what} '{shorten(value)}'", hint=hint)
    return value


def check_label(label: str) -> str:
    return check_matches(
        _LABEL, label, "runner label", "use letters, digits, '.', '_' and '-', e.g. self-hosted"
    )


def check_ref_name(branch: str) -> str:
    if not _REF.fullmatch(branch) or ".." in branch or branch.endswith((".lock", "/")):
        raise InvalidInputError(
            f"invalid branch name '{shorten(branch)}'",
            hint="use letters, digits, '.', '_', '/' and '-', e.g. main",
        )
    return branch


def check_named_path(path: str, option: str) -> str:
    """``path`` when the generated file may name it (its header's regenerating command): no
    control character (a newline in a comment line starts a live YAML or TOML line: a
    top-level ``env:``, a ``flake_dir``) and UTF-8 (the file is UTF-8 text); else exit 4."""
    if printable(path) != path:
        what = (
            "bytes that are not UTF-8"
            if any("\udc80" <= c <= "\udcff" for c in path)
            else "a control character"
        )
        raise InvalidInputError(
            f"{option} '{shorten(path)}' holds {what}, which the generated file's header "
            "would have to name",
            hint=f"give {option} a path of printable UTF-8 characters",
        )
    return path


def check_relative_path(path: str) -> str:
    if not _PATH.fullmatch(path) or ".." in path.split("/"):
        raise InvalidInputError(
            f"invalid --config path '{shorten(path)}' for the workflow",
            hint="give a path relative to the repository root, e.g. capplan.toml",
        )
    return path


# ---------------------------------------------------------------------------------------------
# matrix rows and the layout


def runner_labels(
    system: str, big_parallel: bool, runners_os: Mapping[str, Sequence[str]] | None = None
) -> tuple[str, ...]:
    """The ``runs-on`` labels for a job: ``<system>/big-parallel``, then ``big-parallel`` (jobs
    that need the big-parallel system feature, such as torch), then ``<system>``, then the
    GitHub-hosted default."""
    table = runners_os or {}
    keys = ([f"{system}/{BIG_PARALLEL}", BIG_PARALLEL] if big_parallel else []) + [system]
    for key in keys:
        if table.get(key):
            return with_arch_label(system, table[key])
    return DEFAULT_RUNNERS_OS.get(system, DEFAULT_RUNNERS_OS["x86_64-linux"])


def with_arch_label(system: str, labels: Sequence[str]) -> tuple[str, ...]:
    """``labels``, plus the architecture label of ``system`` (``X64``, ``ARM64``) when they
    name a self-hosted runner and no architecture: the any-system ``"big-parallel" =
    ["self-hosted", "big-parallel"]`` would otherwise send an aarch64 torch job to an x86
    runner that cannot build it (issue 46). GitHub-hosted labels (``ubuntu-24.04-arm``) name
    their machine already, and a list naming an architecture is kept as written."""
    lowered = {label.lower() for label in labels}
    arch = ARCH_LABELS.get(system)
    if arch is None or "self-hosted" not in lowered:
        return tuple(labels)
    if lowered & {known.lower() for known in ARCH_LABELS.values()}:
        return tuple(labels)
    return (*labels, arch)


def check_gccarch_keys(
    runners_os: Mapping[str, Sequence[str]],
    gcc_arches: Mapping[str, frozenset[str]],
    gcc_names: Mapping[str, str],
) -> None:
    """Refuse (exit 5) a ``[policy.runners_os]`` key no CPU-level job can ever ask for: the
    feature is ``gccarch-<gcc.arch>``, GCC's name (make-derivation.nix), so ``gccarch-zen4``
    never matches (zen4 is ``znver4`` to GCC), nor does an x86-64 name under aarch64-linux.
    ``gcc_arches``: every GCC name capplan plans for, to the systems it runs on;
    ``gcc_names``: each target's name (zen4), to its GCC name (znver4)."""
    for key in sorted(runners_os):
        system, _, feature = key.rpartition("/")
        if not feature.startswith(GCCARCH):
            continue
        arch = feature[len(GCCARCH) :]
        systems = gcc_arches.get(arch)
        if systems is None:
            from difflib import get_close_matches

            named = gcc_names.get(arch) or gcc_names.get(arch.replace("_", "-"))
            close = [named] if named else get_close_matches(arch, sorted(gcc_arches), 1, 0.6)
            raise ConfigError(
                f"policy.runners_os key '{shorten(key)}' can never match: no CPU level capplan "
                f"plans has the GCC name '{shorten(arch)}' (the feature is gccarch-<gcc.arch>)",
                hint=(f"did you mean '{GCCARCH}{close[0]}'? " if close else "")
                + "'capplan plan' names each CPU-level job's gccarch feature",
            )
        if system and system not in systems:
            raise ConfigError(
                f"policy.runners_os key '{shorten(key)}' can never match: {arch} code runs on "
                f"{' and '.join(sorted(systems))}, not {system}",
                hint=f"write it as '{GCCARCH}{arch}' or '{sorted(systems)[0]}/{GCCARCH}{arch}'",
            )


def gccarch_runner(
    system: str, feature: str, runners_os: Mapping[str, Sequence[str]] | None = None
) -> tuple[str, ...] | None:
    """The ``runs-on`` labels of a job requiring ``feature`` (``gccarch-<arch>``): those of
    ``<system>/gccarch-<arch>``, then ``gccarch-<arch>``; None when no runner declares it (such
    a job never goes to a runner whose CPU nobody vouched for)."""
    table = runners_os or {}
    for key in (f"{system}/{feature}", feature):
        if table.get(key):
            return with_arch_label(system, table[key])
    return None


def timeout_minutes(estimated: float, labels: Sequence[str]) -> tuple[int, int]:
    """(the ``timeout-minutes`` to write, the one the estimate asks for).

    The margin (half again plus 30 minutes for checkout, Nix and substitution) covers the
    estimate's error; the written value never exceeds what the runner kind allows."""
    wanted = math.ceil(estimated * 1.5) + 30
    limit = SELF_HOSTED_LIMIT_MINUTES if "self-hosted" in labels else GITHUB_HOSTED_LIMIT_MINUTES
    return min(wanted, limit), wanted


def github_rows(
    jobs: Iterable[Mapping[str, Any]], runners_os: Mapping[str, Sequence[str]] | None = None
) -> list[dict[str, Any]]:
    """One ``strategy.matrix`` row per job (``Matrix.jobs()`` dicts), in the same order, with
    nix-github-actions' keys (``name``, ``system``, ``os``, ``attr``) and a timeout."""
    rows = []
    for job in jobs:
        features = list(job["required_system_features"])
        gccarch = next((f for f in features if f.startswith(GCCARCH)), None)
        cpu: dict[str, str] = {}
        if gccarch is None:
            labels = runner_labels(job["system"], BIG_PARALLEL in features, runners_os)
        else:
            found = gccarch_runner(job["system"], gccarch, runners_os)
            arch = gccarch.removeprefix(GCCARCH)
            if found is None:
                raise ConfigError(
                    f"job {job['name']} needs a runner whose CPU runs {arch} code (its "
                    f"derivation requires the system feature {gccarch}), and [policy.runners_os] "
                    "names none",
                    hint=f'add [policy.runners_os] "{gccarch}" = ["self-hosted", ...] with the '
                    "labels of runners that have such CPUs (the job checks /proc/cpuinfo first)",
                )
            labels = found
            cpu_features = list(job.get("cpu_features", ()))
            if not _GCC_ARCH.fullmatch(arch) or not all(
                _CPU_FEATURE.fullmatch(f) for f in cpu_features
            ):
                raise InvalidInputError(
                    f"job {job['name']}: CPU level {arch!r} or its features {cpu_features} "
                    "cannot be written to the workflow",
                    hint="report this: the CPU knowledge base gave an unexpected name",
                )
            cpu = {"gccarch": arch, "cpu_features": " ".join(cpu_features)}
        timeout, _ = timeout_minutes(job["estimated_minutes"], labels)
        peak = job.get("peak_mb_per_compile")
        # A measured peak per compile (core/planning/memory.py): the build job sets Nix's
        # cores from the memory of the runner it lands on (BUILD), not from the plan's guess.
        memory = {} if peak is None else {"peak_mb": int(peak)}
        rows.append(
            {
                "name": job["name"],
                "system": job["system"],
                "os": list(labels),
                "attr": job["attr"],
                "capabilities": job["capabilities"],
                "cuda": job["cuda"],
                "stage": job["stage"],
                "needs": job["needs"],
                "estimated_minutes": job["estimated_minutes"],
                "timeout_minutes": timeout,
                "required_system_features": features,
                **cpu,
                **memory,
            }
        )
    return rows


def over_hosted_limit(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows whose estimate asks for more time than their runner allows."""
    return [
        r
        for r in rows
        if timeout_minutes(r["estimated_minutes"], r["os"])[1] > r["timeout_minutes"]
    ]


@dataclass(frozen=True)
class Shard:
    """One build job of the workflow: the matrix jobs of one stage that share a shard."""

    stage: int
    index: int
    jobs: tuple[str, ...]

    @property
    def key(self) -> str:
        """The plan job's output name and the build job's id."""
        return f"stage{self.stage}_shard{self.index}"


def shard_layout(rows: Sequence[Mapping[str, Any]], max_jobs: int) -> tuple[Shard, ...]:
    """Each stage cut into ``ceil(n / max_jobs)`` shards of nearly equal size, in row order."""
    if max_jobs < 1:
        raise InvalidInputError(f"--max-jobs must be >= 1, got {max_jobs}", hint="use 1 to 256")
    by_stage: dict[int, list[str]] = {}
    for row in rows:
        by_stage.setdefault(int(row["stage"]), []).append(str(row["name"]))
    shards: list[Shard] = []
    for stage in sorted(by_stage):
        names = by_stage[stage]
        count = math.ceil(len(names) / max_jobs)
        size, extra = divmod(len(names), count)
        start = 0
        for index in range(count):
            end = start + size + (1 if index < extra else 0)
            shards.append(Shard(stage, index, tuple(names[start:end])))
            start = end
    return tuple(shards)


def layout_text(shards: Sequence[Shard]) -> str:
    """Shards per stage, comma-separated (``1,1,2,1``); empty for a plan with no jobs."""
    counts: dict[int, int] = {}
    for shard in shards:
        counts[shard.stage] = counts.get(shard.stage, 0) + 1
    return ",".join(str(counts[s]) for s in sorted(counts))


def without_cached(
    rows: Iterable[Mapping[str, Any]], cached: Iterable[str]
) -> list[dict[str, Any]]:
    """Rows minus cached jobs; a kept job's cached needs are built already, so they go too."""
    drop = set(cached)
    return [
        {**row, "needs": [n for n in row["needs"] if n not in drop]}
        for row in rows
        if row["name"] not in drop
    ]


def shard_matrices(
    shards: Sequence[Shard], rows: Iterable[Mapping[str, Any]]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """``{shard key: {"include": rows}}`` for every shard; a shard whose jobs are all gone
    (cached) is ``{"include": []}``."""
    by_name = {row["name"]: dict(row) for row in rows}
    return {
        shard.key: {"include": [by_name[n] for n in shard.jobs if n in by_name]} for shard in shards
    }


def matrix_entry(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a build job's matrix holds of a row: the values its job-level keys read before
    any step runs (``runs-on``, ``timeout-minutes``, the job's name); the rest is in
    :data:`ROWS_FILE`."""
    return {"name": row["name"], "os": row["os"], "timeout_minutes": row["timeout_minutes"]}


def rows_text(rows: Iterable[Mapping[str, Any]]) -> str:
    """:data:`ROWS_FILE`: a header, then one tab-separated line of :data:`ROWS_COLUMNS` per row."""
    lines = ["# " + "\t".join(ROWS_COLUMNS)]
    for row in rows:
        values = [str(row.get(column, "")) for column in ROWS_COLUMNS]
        bad = next((v for v in values if not _ROW_VALUE.fullmatch(v)), None)
        if bad is not None or not values[0]:
            raise InvalidInputError(
                f"job {row['name']!r}: the value {bad!r} cannot be written to {ROWS_FILE}",
                hint="report this: a job's values hold no tab, newline or control character",
            )
        lines.append("\t".join(values))
    return "".join(line + "\n" for line in lines)


def output_bytes(text: str) -> int:
    """What GitHub counts of ``$GITHUB_OUTPUT`` text: its size in UTF-16."""
    return len(text.encode("utf-16-le"))


def github_output_lines(
    shards: Sequence[Shard], rows: Iterable[Mapping[str, Any]], json_encode: Any
) -> str:
    """``name=value`` lines for ``$GITHUB_OUTPUT``: one per shard (its matrix of
    :func:`matrix_entry` values), then ``jobs`` and ``layout``.

    ``json_encode`` turns a value into one-line JSON (the caller's deterministic encoder)."""
    matrices = shard_matrices(shards, (matrix_entry(row) for row in rows))
    lines = [f"{key}={json_encode(value)}" for key, value in matrices.items()]
    lines.append(f"jobs={sum(len(m['include']) for m in matrices.values())}")
    lines.append(f"layout={layout_text(shards)}")
    return "".join(line + "\n" for line in lines)


def over_run_limits(
    shards: Sequence[Shard],
    rows: Sequence[Mapping[str, Any]],
    workflow_text: str,
    json_encode: Any,
) -> list[str]:
    """What of the plan one GitHub workflow run cannot hold, one phrase each; empty when it fits.

    The outputs are measured on every row (the most the plan job can write: ``--skip-cached``
    only takes rows away); the run time is a lower bound, each stage's longest job after the
    one before."""
    problems = []
    size = output_bytes(github_output_lines(shards, rows, json_encode))
    if size > GITHUB_OUTPUT_LIMIT_BYTES:
        problems.append(
            f"the plan job's outputs for {len(rows)} jobs take {size:,} bytes (UTF-16), more "
            f"than the {GITHUB_OUTPUT_LIMIT_BYTES:,} GitHub allows a job"
        )
    size = len(workflow_text.encode())
    if size > GITHUB_WORKFLOW_FILE_LIMIT_BYTES:
        problems.append(
            f"the workflow file takes {size:,} bytes, more than the "
            f"{GITHUB_WORKFLOW_FILE_LIMIT_BYTES:,} GitHub starts runs of"
        )
    longest: dict[int, float] = {}
    for row in rows:
        stage = int(row["stage"])
        longest[stage] = max(longest.get(stage, 0.0), float(row["estimated_minutes"]))
    if sum(longest.values()) > GITHUB_RUN_LIMIT_MINUTES:
        problems.append(
            f"its stages take at least {sum(longest.values()):,.0f} min one after the other, "
            f"more than a run's {GITHUB_RUN_LIMIT_MINUTES:,} min (35 days)"
        )
    return problems


# ---------------------------------------------------------------------------------------------
# the workflow document


@dataclass(frozen=True)
class WorkflowSettings:
    cache: str  # cachix cache name (validated)
    cache_url: str | None = None  # queried instead of https://<cache>.cachix.org
    branch: str = "main"
    max_jobs: int = 256
    config: str | None = None  # --config for the plan job, relative to the repository root
    plan_runner: tuple[str, ...] = DEFAULT_RUNNERS_OS["x86_64-linux"]
    name: str = "cuda-cache"
    cron: str = "17 4 * * 1"  # weekly, Monday 04:17 UTC: picks up nixpkgs and KB changes


def _checked(settings: WorkflowSettings) -> WorkflowSettings:
    check_cache_name(settings.cache)
    if settings.cache_url is not None:
        check_cache_url(settings.cache_url)
    check_ref_name(settings.branch)
    if settings.config is not None:
        check_relative_path(settings.config)
    for label in settings.plan_runner:
        check_label(label)
    if not 1 <= settings.max_jobs <= 256:
        raise InvalidInputError(
            f"--max-jobs must be 1 to 256, got {settings.max_jobs}",
            hint="GitHub runs at most 256 jobs per matrix",
        )
    return settings


def cache_url(settings: WorkflowSettings) -> str:
    return settings.cache_url or f"https://{settings.cache}.cachix.org"


def plan_command(settings: WorkflowSettings, shards: Sequence[Shard]) -> list[str]:
    """The argv of the plan job's capplan (after ``nix run .#capplan --``)."""
    argv = ["matrix"]
    if settings.config is not None:
        argv += ["--config", settings.config]
    argv += [
        "--format",
        "github-output",
        "--max-jobs",
        str(settings.max_jobs),
        "--expect-shards",
        layout_text(shards) or "none",
        "--cache",
        cache_url(settings),
        "--skip-cached",
        "--failures",
        FAILURES_FILE,
        "--rows",
        ROWS_FILE,
        "--summary",
        SUMMARY_FILE,
    ]
    return argv


def generator_command(settings: WorkflowSettings, output: str | None) -> str:
    """The command that regenerates the workflow (its header comment)."""
    argv = ["capplan", "ci", "github"]
    if settings.config is not None:
        argv += ["--config", settings.config]
    argv += ["--cache", settings.cache]
    if settings.cache_url is not None:
        argv += ["--cache-url", settings.cache_url]
    if settings.branch != "main":
        argv += ["--branch", settings.branch]
    if settings.max_jobs != 256:
        argv += ["--max-jobs", str(settings.max_jobs)]
    if output is not None:
        argv += ["--output", output]
    return shlex.join(argv)


def _nix_steps() -> list[dict[str, Any]]:
    return [
        {"name": "Check out", "uses": CHECKOUT},
        {"name": "Install Nix", "uses": INSTALL_NIX},
    ]


def _build_nix_steps() -> list[dict[str, Any]]:
    """A build job's start: check out, read the job's row from the plan job's artifact
    (:data:`ROW_READ`), check the runner's CPU for a CPU-level job (:data:`CPU_CHECK`), and
    install Nix with the gccarch feature that check granted."""
    return [
        {"name": "Check out", "uses": CHECKOUT},
        {
            "name": "Download the plan's rows",
            "uses": DOWNLOAD_ARTIFACT,
            "with": {"name": ROWS_ARTIFACT, "path": ROWS_ARTIFACT},
        },
        {
            "name": "Read this job's row",
            "id": "row",
            "env": {"NAME": "${{ matrix.name }}"},
            "run": ROW_READ,
        },
        {
            "name": "Check the runner's CPU runs the job's CPU level",
            "id": "cpu",
            "env": {
                "GCCARCH": "${{ steps.row.outputs.gccarch }}",
                "CPU_FEATURES": "${{ steps.row.outputs.cpu_features }}",
            },
            "run": CPU_CHECK,
        },
        {
            "name": "Install Nix",
            "uses": INSTALL_NIX,
            "with": {"extra_nix_config": "${{ steps.cpu.outputs.nix_config }}"},
        },
    ]


def _restore_failures(settings: WorkflowSettings) -> dict[str, Any]:
    return {
        "name": "Restore the failure record",
        "uses": CACHE_RESTORE,
        "with": {
            "path": FAILURES_FILE,
            "key": FAILURES_KEY + "${{ github.run_id }}",
            "restore-keys": f"{FAILURES_KEY}\ncapplan-failures-{settings.branch}-\n",
        },
    }


def _build_steps() -> list[dict[str, Any]]:
    """Build; when it fails, write this job's own failure record (log tail included) and
    upload it for the record job; the job still fails."""
    failed = "${{ failure() && steps.build.outcome == 'failure' }}"
    own = FAILURE_ARTIFACT + "${{ matrix.name }}"
    return [
        {
            "name": "Build",
            "id": "build",
            "env": {
                "ATTR": "${{ steps.row.outputs.attr }}",
                "PEAK_MB": "${{ steps.row.outputs.peak_mb }}",
            },
            "run": BUILD,
        },
        {
            "name": "Record the failure",
            "if": failed,
            "env": {
                "NAME": "${{ matrix.name }}",
                "DRV": "${{ steps.row.outputs.drv }}",
                "SYSTEM": "${{ steps.row.outputs.system }}",
            },
            "run": (
                f'nix run .#capplan -- failures add "{FAILURE_ARTIFACT}$NAME.json" \\\n'
                '  --drv "$DRV" --system "$SYSTEM" --attr "$NAME" --log capplan-build.log\n'
            ),
        },
        {
            "name": "Upload the failure",
            "if": failed,
            "uses": UPLOAD_ARTIFACT,
            "with": {"name": own, "path": own + ".json", "retention-days": 7},
        },
    ]


def _plan_runs_on(settings: WorkflowSettings) -> str | list[str]:
    """The plan, record and summary jobs' runs-on: one label as a string, several as a list."""
    runner = settings.plan_runner
    return runner[0] if len(runner) == 1 else list(runner)


def _record_job(settings: WorkflowSettings, shards: Sequence[Shard]) -> dict[str, Any]:
    """The last job: this run's failures merged into the record, which is saved for the next."""
    return {
        "name": "record failures",
        "needs": ["plan", *(s.key for s in shards)],
        # After every build job, whatever they did; not when the run was cancelled or the plan
        # failed (then nothing was tried, and the restored record is still the newest).
        "if": "${{ !cancelled() && needs.plan.result == 'success' }}",
        "runs-on": _plan_runs_on(settings),
        "timeout-minutes": 30,
        "steps": [
            *_nix_steps(),
            _restore_failures(settings),
            {
                "name": "Download this run's failures",
                "uses": DOWNLOAD_ARTIFACT,
                "with": {
                    "pattern": FAILURE_ARTIFACT + "*",
                    "path": FAILURES_DIR,
                    "merge-multiple": True,
                },
            },
            {
                "name": "Merge them into the record",
                "run": (
                    f"mkdir -p {FAILURES_DIR}\n"
                    f"nix run .#capplan -- failures merge {FAILURES_FILE} {FAILURES_DIR}\n"
                    f"nix run .#capplan -- failures forget {FAILURES_FILE} "
                    f"--older-than {RETRY_AFTER_DAYS}\n"
                ),
            },
            {
                "name": "Save the failure record",
                "uses": CACHE_SAVE,
                "with": {
                    "path": FAILURES_FILE,
                    "key": FAILURES_KEY + "${{ github.run_id }}-${{ github.run_attempt }}",
                },
            },
        ],
    }


def _summary_job(settings: WorkflowSettings, shards: Sequence[Shard]) -> dict[str, Any]:
    """The final job, whatever happened before it (``always()``): built, failed and skipped per
    variant on the run's page. GitHub gives a matrix job one result for all its entries, so
    ``capplan ci results`` reads each shard's (``needs.<shard>.result``, fixed words, passed
    as one variable), the plan job's rows (the jobs it scheduled) and the failures the build
    jobs uploaded, and finds each job's shard in the plan's own layout."""
    results = " ".join(
        f"{key}=${{{{ needs.{key}.result }}}}" for key in ["plan", *(s.key for s in shards)]
    )
    argv = ["ci", "results"]
    if settings.config is not None:
        argv += ["--config", settings.config]
    argv += [
        "--max-jobs", str(settings.max_jobs),
        "--rows", f"{ROWS_ARTIFACT}/{ROWS_FILE}",
        "--failed", FAILURES_DIR,
    ]  # fmt: skip
    command = " ".join(shlex.quote(a) for a in argv)
    return {
        "name": "summary",
        "needs": ["plan", *(s.key for s in shards)],
        "if": "${{ always() }}",
        "runs-on": _plan_runs_on(settings),
        "timeout-minutes": 30,
        "steps": [
            *_nix_steps(),
            {
                # Absent when the plan job failed: every job is then "not run".
                "name": "Download the plan's rows",
                "continue-on-error": True,
                "uses": DOWNLOAD_ARTIFACT,
                "with": {"name": ROWS_ARTIFACT, "path": ROWS_ARTIFACT},
            },
            {
                "name": "Download this run's failures",
                "uses": DOWNLOAD_ARTIFACT,
                "with": {
                    "pattern": FAILURE_ARTIFACT + "*",
                    "path": FAILURES_DIR,
                    "merge-multiple": True,
                },
            },
            {
                "name": "Summarise the build results",
                "env": {"RESULTS": results},
                "run": (
                    f"mkdir -p {FAILURES_DIR}\n"
                    f'nix run .#capplan -- {command} --results "$RESULTS" \\\n'
                    '  >> "$GITHUB_STEP_SUMMARY"\n'
                ),
            },
        ],
    }


def build_workflow(settings: WorkflowSettings, shards: Sequence[Shard]) -> dict[str, Any]:
    """The workflow as data: a plan job, then one build job per shard, stage after stage."""
    settings = _checked(settings)
    argv = [shlex.quote(arg) for arg in plan_command(settings, shards)]
    # One option (and its value) per line; the flag after the last value closes the command.
    parts = [argv[0]]
    for arg in argv[1:]:
        if arg.startswith("--"):
            parts.append(arg)
        else:
            parts[-1] += " " + arg
    run = "nix run .#capplan -- " + " \\\n  ".join(parts) + ' \\\n  >> "$GITHUB_OUTPUT"\n'
    plan_step: dict[str, Any] = {"name": "Plan what the cache lacks", "id": "plan"}
    # "true" only when a dispatched run asks to build known failures again.
    plan_step["env"] = {"CAPPLAN_RETRY_FAILED": "${{ inputs.retry_failed == true }}"}
    if settings.cache_url is None:
        # Private cachix caches need the token to answer narinfo queries; capplan sends it
        # only to the cache's own host.
        plan_step["env"]["CAPPLAN_CACHE_TOKEN"] = "${{ secrets.CACHIX_AUTH_TOKEN }}"
    plan_step["run"] = run
    outputs = {s.key: f"${{{{ steps.plan.outputs.{s.key} }}}}" for s in shards}
    outputs["jobs"] = "${{ steps.plan.outputs.jobs }}"
    jobs: dict[str, Any] = {
        "plan": {
            "name": "plan",
            "runs-on": _plan_runs_on(settings),
            "timeout-minutes": 60,
            "outputs": outputs,
            "steps": [
                *_nix_steps(),
                _restore_failures(settings),
                plan_step,
                {
                    "name": "Upload the plan's rows",
                    "uses": UPLOAD_ARTIFACT,
                    "with": {"name": ROWS_ARTIFACT, "path": ROWS_FILE, "retention-days": 1},
                },
                {
                    "name": "Summarise the plan",
                    "run": f'cat {SUMMARY_FILE} >> "$GITHUB_STEP_SUMMARY"\n',
                },
            ],
        }
    }
    stages = sorted({s.stage for s in shards})
    previous: list[str] = []
    for stage in stages:
        current = [s for s in shards if s.stage == stage]
        for shard in current:
            output = f"needs.plan.outputs.{shard.key}"
            jobs[shard.key] = {
                "name": f"stage {stage} shard {shard.index} (${{{{ matrix.name }}}})",
                "needs": ["plan", *previous],
                # Runs when its shard has jobs and nothing before it failed or was cancelled;
                # a shard whose jobs were all cached is skipped, and its dependents still run
                # (a status function in `if:` replaces the implicit success() check).
                "if": (
                    "${{ !cancelled() && !failure() && "
                    f"fromJSON({output}).include[0] != null }}}}"
                ),
                "runs-on": "${{ matrix.os }}",
                "timeout-minutes": "${{ matrix.timeout_minutes }}",
                "strategy": {"fail-fast": False, "matrix": f"${{{{ fromJSON({output}) }}}}"},
                "steps": [
                    *_build_nix_steps(),
                    {
                        "name": "Use the cachix cache (pushes what is built)",
                        "uses": CACHIX,
                        "with": {
                            "name": settings.cache,
                            "authToken": "${{ secrets.CACHIX_AUTH_TOKEN }}",
                        },
                    },
                    *_build_steps(),
                ],
            }
        previous = [s.key for s in current]
    if shards:
        jobs["record"] = _record_job(settings, shards)
        jobs["summary"] = _summary_job(settings, shards)
    return {
        "name": settings.name,
        "on": {
            "push": {"branches": [settings.branch]},
            "schedule": [{"cron": settings.cron}],
            "workflow_dispatch": {
                "inputs": {
                    "retry_failed": {
                        "description": "Build known failures again (the failure record)",
                        "type": "boolean",
                        "default": False,
                    }
                }
            },
        },
        # One run at a time: a second run would rebuild what the first is about to push.
        "concurrency": {"group": settings.name, "cancel-in-progress": False},
        "permissions": {"contents": "read"},
        "jobs": jobs,
    }


# ---------------------------------------------------------------------------------------------
# YAML rendering

# Plain (unquoted) scalars: no YAML indicator characters, no ": " or " #", no edge spaces.
_PLAIN = re.compile(r"[A-Za-z_](?:[A-Za-z0-9_./@+() -]*[A-Za-z0-9_./@+)-])?")
# YAML 1.1 (GitHub's parser, PyYAML) reads these as booleans or null when unquoted.
_RESERVED = {"y", "n", "yes", "no", "true", "false", "on", "off", "null"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"cannot render {type(value).__name__} as YAML")
    if _PLAIN.fullmatch(value) and value.lower() not in _RESERVED:
        return value
    if _CONTROL.search(value):
        return json.dumps(value)  # a JSON string is a valid YAML double-quoted scalar
    return "'" + value.replace("'", "''") + "'"


def _literal_ok(text: str) -> bool:
    """Whether a literal block (``|``, ``|-``) gives back exactly ``text``."""
    lines = text.removesuffix("\n").split("\n")
    return (
        "\n" in text
        and not text.endswith("\n\n")
        and not _CONTROL.search(text.replace("\n", ""))
        and lines[0][:1] not in ("", " ")
        and all(line == line.rstrip() for line in lines)
    )


def _block(text: str, indent: int) -> list[str]:
    chomp = "|" if text.endswith("\n") else "|-"
    pad = " " * indent
    return [chomp] + [pad + line if line else "" for line in text.rstrip("\n").split("\n")]


def _emit(value: Any, indent: int, lines: list[str], prefix: str) -> None:
    """Append ``value`` after ``prefix`` (``key:`` or ``-``) at ``indent`` spaces."""
    pad = " " * indent
    if isinstance(value, dict) and value:
        if prefix == "-":
            # A mapping as a list item: its keys two spaces in, the first one after "- ".
            sub: list[str] = []
            for key, item in value.items():
                _emit(item, indent + 2, sub, f"{_scalar(key)}:")
            sub[0] = pad + "- " + sub[0][indent + 2 :]
            lines.extend(sub)
            return
        lines.append(pad + prefix)
        for key, item in value.items():
            _emit(item, indent + 2, lines, f"{_scalar(key)}:")
        return
    if isinstance(value, list) and value:
        lines.append(pad + prefix)
        for item in value:
            _emit(item, indent + 2, lines, "-")
        return
    if isinstance(value, dict):
        text = "{}"
    elif isinstance(value, list):
        text = "[]"
    elif isinstance(value, str) and _literal_ok(value):
        body = _block(value, indent + 2)
        lines.append(f"{pad}{prefix} {body[0]}")
        lines.extend(body[1:])
        return
    else:
        text = _scalar(value)
    lines.append(f"{pad}{prefix} {text}")


def render_yaml(document: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    """Block-style YAML for a dict of dicts, lists, strings, ints and bools, keys in insertion
    order; ``header`` lines become comments at the top."""
    lines = [f"# {line}".rstrip() for line in header]
    for key, value in document.items():
        _emit(value, 0, lines, f"{_scalar(key)}:")
    return "\n".join(lines) + "\n"
