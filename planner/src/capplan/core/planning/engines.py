"""Build farms that evaluate the flake's ``hydraJobs`` with nix-eval-jobs: Hydra and buildbot-nix.

Neither takes a matrix: each evaluates the flake and builds every job it finds, routing a job to
a builder by the ``requiredSystemFeatures`` of its derivation (``big-parallel`` for torch,
``gccarch-<arch>`` for a CPU level), which the builder must declare. So capplan writes the small
file each reads to find the jobs, and names the features the plan's builders need.

- Hydra, a static declarative project (doc/manual/src/plugins/declarative-projects.md, NixOS/hydra
  commit 0be3bed7): ``spec.json`` maps each jobset name to its specification; the keys Hydra
  accepts are those of ``validateDeclarativeJobset`` (src/lib/Hydra/Helper/AddBuilds.pm, commit
  2fc50363), any other key fails the jobset ("invalid keys ... in declarative specification
  file"), and a flake jobset is ``type`` 1 with ``flake`` set. Hydra evaluates ``hydraJobs``.
- buildbot-nix reads ``buildbot-nix.toml`` at the repository root (``BranchConfig``:
  ``flake_dir``, ``lock_file``, ``attribute``; buildbot_nix/engine/repo_config.py, commit
  5a7d4ed6) and falls back to its defaults, ``attribute = "checks"``, on a file it cannot
  parse or validate, in silence: so the file is kept to those keys and plain strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from capplan.core.planning.workflow import check_matches

__all__ = [
    "HYDRA_SPEC_KEYS",
    "buildbot_nix_toml",
    "builder_features",
    "check_flake_ref",
    "check_jobset_name",
    "features_text",
    "hydra_spec",
    "hydra_spec_text",
]

# validateDeclarativeJobset's @allowed_keys, plus "inputs" (updateDeclarativeJobset).
HYDRA_SPEC_KEYS = frozenset(
    {
        "enabled", "hidden", "type", "flake", "description", "nixexprinput", "nixexprpath",
        "checkinterval", "schedulingshares", "enableemail", "enable_dynamic_run_command",
        "emailoverride", "keepnr", "inputs",
    }
)  # fmt: skip

_JOBSET = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")
# A flake reference as Hydra and Nix take it: a scheme, then no space, quote or backslash.
_FLAKE = re.compile(r"[a-z][a-z0-9+.-]*:[A-Za-z0-9._~:/?#@!$&()*+,;=%-]{1,500}")


def check_jobset_name(name: str) -> str:
    return check_matches(
        _JOBSET,
        name,
        "Hydra jobset name",
        "use letters, digits, '_' and '-', starting with a letter or '_', e.g. cuda",
    )


def check_flake_ref(ref: str) -> str:
    return check_matches(
        _FLAKE,
        ref,
        "flake reference",
        "give the URI Hydra fetches, e.g. github:my-org/my-flake or "
        "git+https://git.example.org/cuda.git?ref=main",
    )


def builder_features(jobs: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per system, every system feature some job's derivation requires (sorted)."""
    found: dict[str, set[str]] = {}
    for job in jobs:
        found.setdefault(str(job["system"]), set()).update(job["required_system_features"])
    return {system: sorted(found[system]) for system in sorted(found)}


def features_text(features: Mapping[str, list[str]]) -> list[str]:
    """One line per system that needs features: ``x86_64-linux: big-parallel, gccarch-...``."""
    return [f"{system}: {', '.join(names)}" for system, names in features.items() if names]


def hydra_spec(
    jobset: str,
    flake: str,
    *,
    checkinterval: int = 3600,
    keepnr: int = 3,
    schedulingshares: int = 100,
) -> dict[str, Any]:
    """A static declarative project's ``spec.json``: one flake jobset (Hydra evaluates the
    flake's ``hydraJobs``)."""
    check_jobset_name(jobset)
    check_flake_ref(flake)
    return {
        jobset: {
            "enabled": 1,
            "hidden": False,
            "type": 1,
            "flake": flake,
            "description": "capplan: every variant of the plan (the flake's hydraJobs)",
            "checkinterval": checkinterval,
            "schedulingshares": schedulingshares,
            "enableemail": False,
            "emailoverride": "",
            "keepnr": keepnr,
            "inputs": {},
        }
    }


def hydra_spec_text(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, indent=2, sort_keys=True) + "\n"


def buildbot_nix_toml(header: Iterable[str], attribute: str = "hydraJobs") -> str:
    """``buildbot-nix.toml``: the attribute to evaluate, after comment lines."""
    lines = [f"# {line}".rstrip() for line in header]
    # json.dumps of an ASCII string is a valid TOML basic string.
    lines.append(f"attribute = {json.dumps(attribute)}")
    return "\n".join(lines) + "\n"
