"""The CUDA family's part of ``capplan nixpkgs check`` (pure): the recipe argument a CUDA
entry's ``ptx = "gpu-targets"`` relies on (``gpuTargets``), nixpkgs' CUDA package sets and
default CUDA version, and torch's: the CUDA versions it accepts (asked on every version the
policy allows, since the plan leaves torch off a version the knowledge base says it refuses)
and its capability allowlist on the default CUDA. The shared check
(core/planning/nixpkgs_check.py) asks it through the registry's ``nixpkgs_checks``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.family import cuda_limits_reason
from capplan.core.families.cuda.inputs import NIXPKGS_DEFAULT_CUDA, resolve_cuda_policy
from capplan.core.families.cuda.kb import cuda_package, nvidia
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.drift import Drift, mapping, odd, strings, words
from capplan.core.model.kb import KnowledgeBase
from capplan.errors import CapplanError

__all__ = ["CudaNixpkgs"]


class CudaNixpkgs:
    """The CUDA family's :class:`capplan.core.families.base.ReliesOnArguments` and
    :class:`capplan.core.families.base.AsksNixpkgs`. ``policy_cuda``: a config's
    ``policy.cuda`` as written (None: the knowledge base's default policy), resolved as the
    planner resolves it; a version the knowledge base does not know is the planner's
    InvalidInputError."""

    def __init__(self, kb: KnowledgeBase, policy_cuda: Sequence[str] | None) -> None:
        self._kb = kb
        self._cuda = resolve_cuda_policy(kb, policy_cuda)

    def arguments(
        self, variants: Mapping[str, Mapping[str, Any]], packages: Sequence[str]
    ) -> Iterator[tuple[str, tuple[str, ...], str]]:
        for name in packages:
            info = self._kb.packages.get(name)
            if info is not None and info.ptx == "gpu-targets":
                yield (name, tuple(info.attr.split(".")), "gpuTargets")

    def request(
        self, variants: Mapping[str, Mapping[str, Any]], packages: Sequence[str]
    ) -> dict[str, Any]:
        kb = self._kb
        request: dict[str, Any] = {
            "cuda_sets": sorted(
                str(nvidia(kb).cuda_release(v).nixpkgs_set) for v in nvidia(kb).nixpkgs_cuda()
            ),
            "default_cuda": str(NIXPKGS_DEFAULT_CUDA),
        }
        if "torch" in packages or "torchvision" in packages:
            used = {CudaVersion.parse(str(v["cuda"])) for v in variants.values() if v.get("cuda")}
            used.update((NIXPKGS_DEFAULT_CUDA, *self._cuda))
            request["torch_cuda"] = sorted(
                str(nvidia(kb).cuda_release(c).nixpkgs_set)
                for c in used
                if nvidia(kb).cuda_release(c).nixpkgs_set
            )
            request["torch_capabilities"] = [
                str(c.capability)
                for c in nvidia(kb).supported(NIXPKGS_DEFAULT_CUDA)
                if c.nixpkgs and not c.jetson
            ]
        return request

    def compare(self, request: Mapping[str, Any], answer: Mapping[str, Any]) -> list[Drift]:
        found: list[Drift] = []
        sets = strings(answer.get("cuda_sets"))
        if sets is None:
            found.append(
                Drift(
                    "cudaPackages",
                    "CUDA package sets",
                    words(request["cuda_sets"]),
                    odd(answer.get("cuda_sets")),
                )
            )
        elif sorted(sets) != list(request["cuda_sets"]):
            found.append(
                Drift(
                    "cudaPackages",
                    "CUDA package sets",
                    words(request["cuda_sets"]),
                    words(sorted(sets)),
                )
            )
        default = answer.get("default_cuda")
        if default != request["default_cuda"]:
            said = default if isinstance(default, str) else odd(default)
            found.append(
                Drift("cudaPackages", "default CUDA version", request["default_cuda"], said)
            )
        found.extend(_torch(self._kb, request, answer))
        return found


def _capabilities(value: Any) -> list[Capability] | None:
    """A list of capability strings nixpkgs spells (``"8.6"``), parsed; None for anything else
    (``[ 86 ]``, ``"8.6"``, an unknown capability)."""
    names = strings(value)
    if names is None:
        return None
    try:
        return [Capability.parse(name) for name in names]
    except (CapplanError, ValueError):
        return None


def _torch(kb: KnowledgeBase, request: Mapping[str, Any], answer: Mapping[str, Any]) -> list[Drift]:
    found: list[Drift] = []
    if "torch_cuda" not in request:
        return found
    torch = cuda_package(kb, "torch")
    broken = mapping(answer.get("torch_broken"))
    for name in request["torch_cuda"]:
        version = CudaVersion.parse(name.removeprefix("cudaPackages_").replace("_", "."))
        accepted = torch.limits.cuda is None or version in torch.limits.cuda
        got = broken.get(name)
        say = {True: "it is meta.broken there", False: "it builds there"}
        if got is None:
            found.append(Drift("torch", f"torch on {name}", "it evaluates", f"there is no {name}"))
        elif not isinstance(got, bool):
            found.append(Drift("torch", f"torch on CUDA {version}", say[not accepted], odd(got)))
        elif got == accepted:
            found.append(Drift("torch", f"torch on CUDA {version}", say[not accepted], say[got]))
    kept = answer.get("torch_capabilities")
    table_fact = f"capability table (_cuda.db) on CUDA {request['default_cuda']}"
    allowlist_fact = f"capability allowlist on CUDA {request['default_cuda']}"
    if "torch_capabilities" not in request or kept is None:
        return found
    if not isinstance(kept, Mapping):
        return [*found, Drift("torch", allowlist_fact, "a list per CUDA version", odd(kept))]
    table = strings(kept.get("requested"))
    if table is None:
        found.append(
            Drift("cudaPackages", table_fact, "a list of capabilities", odd(kept.get("requested")))
        )
        return found
    lacking = [c for c in request["torch_capabilities"] if c not in table]
    if lacking:
        found.append(
            Drift(
                "cudaPackages",
                table_fact,
                f"it supports {words(lacking)} too",
                f"it supports {words(table)}",
            )
        )
    got_kept = kept.get("kept")
    if got_kept is None and table:
        found.append(
            Drift(
                "torch",
                allowlist_fact,
                f"torch evaluates for {words(table)}",
                "it does not evaluate for them",
            )
        )
    elif got_kept is not None:
        asked = _capabilities(table)
        have = _capabilities(got_kept)
        if asked is None or have is None:
            wrong = got_kept if have is None else table
            found.append(Drift("torch", allowlist_fact, "a list of capabilities", odd(wrong)))
            return found
        want = [
            str(c)
            for c in sorted(asked)
            if cuda_limits_reason(kb, "torch", torch.limits, c, None) is None
        ]
        got_caps = [str(c) for c in sorted(have)]
        if want != got_caps:
            more = [c for c in got_caps if c not in want]
            less = [c for c in want if c not in got_caps]
            found.append(
                Drift(
                    "torch",
                    allowlist_fact,
                    f"it keeps {words(want)}",
                    f"it keeps {words(got_caps)} (more: {words(more)}; fewer: {words(less)})",
                )
            )
    return found
