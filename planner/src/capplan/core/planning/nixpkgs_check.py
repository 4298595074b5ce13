"""What a plan relies on in nixpkgs, and where a nixpkgs says otherwise (pure).

:func:`nixpkgs_request` turns the knowledge base and a plan (``plan_json``'s data) into the
questions one ``nix eval`` answers (adapters/nixpkgs.py sends them as JSON and reads the
answer back); :func:`compare` turns the answer into one :class:`Drift` per disagreement. Which
recipe arguments a package relies on is data: the CUDA entry's ``ptx = "gpu-targets"``
(``gpuTargets``), the ROCm build's ``argument`` (``gpuTargets`` by default), the CPU entry's
``arguments`` and override rules; so a knowledge-base change is checked without a code change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capplan.core.families.cpu.kb import CpuPackagesFile
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.family import cuda_limits_reason
from capplan.core.families.cuda.inputs import NIXPKGS_DEFAULT_CUDA, resolve_cuda_policy
from capplan.core.families.cuda.kb import cuda_package, nvidia
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.target import AmdTarget
from capplan.core.model.kb import KnowledgeBase
from capplan.errors import MESSAGE_LIMIT, CapplanError, shorten

__all__ = ["Drift", "compare", "nixpkgs_request"]

# Packages whose evaluation in a per-target ROCm scope the plan relies on (ROCM.md: MIOpen links
# the scope's composable_kernel, which is meta.broken without a gfx9 target).
_SCOPE_PACKAGES = ("composable_kernel", "miopen")


@dataclass(frozen=True, order=True)
class Drift:
    """One fact on which the knowledge base and the nixpkgs checked disagree."""

    package: str
    fact: str
    kb: str
    nixpkgs: str

    def __post_init__(self) -> None:
        # What nixpkgs says is echoed like any outside value: control characters escaped (a
        # "::error::" after a newline is a GitHub workflow command), a 10 MB name cut.
        for name in ("package", "fact", "kb", "nixpkgs"):
            object.__setattr__(self, name, shorten(str(getattr(self, name)), MESSAGE_LIMIT))

    def line(self) -> str:
        says = f"knowledge base says {self.kb}; nixpkgs says {self.nixpkgs}"
        return f"{self.package}: {self.fact}: {says}"

    def as_dict(self) -> dict[str, str]:
        return {"package": self.package, "fact": self.fact, "kb": self.kb, "nixpkgs": self.nixpkgs}


_ScopeChanges = dict[str, dict[str, dict[str, Any]]]


def _stack_scopes(
    variants: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, list[str]], _ScopeChanges]:
    """The per-target ROCm scopes the plan's stack variants use (scope -> targets), and what
    plan.json changes in each (scope -> library -> arguments: MIOpen without composable_kernel
    where the scope has no gfx9 target): what the plan builds there is those libraries as
    changed, so that is what is evaluated, and the arguments it sets are facts of their own."""
    planned: dict[str, list[str]] = {}
    changed: _ScopeChanges = {}
    for v in variants.values():
        rocm = v.get("rocm")
        if isinstance(rocm, Mapping) and rocm.get("scope") == "stack" and rocm.get("scope_attr"):
            scope = str(rocm["scope_attr"])
            planned[scope] = [str(t) for t in rocm.get("targets", [])]
            for library, arguments in sorted((rocm.get("scope_overrides") or {}).items()):
                changed.setdefault(scope, {}).setdefault(str(library), {}).update(arguments)
    return planned, changed


def _argument_facts(
    kb: KnowledgeBase,
    cpu: CpuPackagesFile | None,
    packages: Sequence[str],
    changed: _ScopeChanges,
) -> list[dict[str, Any]]:
    facts: set[tuple[str, tuple[str, ...], str]] = {
        (library, ("rocmPackages", library), str(argument))
        for libraries in changed.values()
        for library, arguments in libraries.items()
        for argument in arguments
    }
    amd = kb.part(AmdKnowledgeBase)
    for name in packages:
        info = kb.packages.get(name)
        if info is not None and info.ptx == "gpu-targets":
            facts.add((name, tuple(info.attr.split(".")), "gpuTargets"))
        build = amd.builds.get(name) if amd is not None else None
        if build is not None and build.how == "gpu-targets":
            facts.add((name, tuple(build.attr.split(".")), build.argument or "gpuTargets"))
        for entry in cpu.packages if cpu is not None else ():
            if entry.package != name:
                continue
            attr = tuple(entry.attr.split("."))
            # Every argument a per-level build sets (overrides and always) and every one its
            # verdict relies on: a pin whose recipe lost one drifts, never silently.
            relied = (*entry.arguments, *entry.always, *entry.relies_on)
            for argument in (*relied, *(rule.argument for rule in entry.overrides)):
                facts.add((name, attr, argument))
    return [{"package": p, "attr": list(a), "argument": arg} for p, a, arg in sorted(facts)]


def policy_request(
    kb: KnowledgeBase,
    plan: Mapping[str, Any],
    cpu: CpuPackagesFile | None,
    policy_cuda: Sequence[str] | None,
) -> dict[str, Any]:
    """:func:`nixpkgs_request` for a config's ``policy.cuda`` as written (None: the knowledge
    base's default policy), resolved as the planner resolves it; a version the knowledge base
    does not know is the planner's InvalidInputError."""
    return nixpkgs_request(kb, plan, cpu, resolve_cuda_policy(kb, policy_cuda))


def nixpkgs_request(
    kb: KnowledgeBase,
    plan: Mapping[str, Any],
    cpu: CpuPackagesFile | None = None,
    cuda: Sequence[CudaVersion] = (),
) -> dict[str, Any]:
    """The questions for nixpkgs (JSON, read by Nix with builtins.fromJSON). ``cuda``: the
    policy's CUDA versions, on which torch's acceptance is asked too (the plan leaves torch off
    a version the knowledge base says it refuses, so the plan alone would never ask)."""
    variants: Mapping[str, Mapping[str, Any]] = plan.get("variants", {})
    packages = sorted({str(v["package"]) for v in variants.values()})
    planned, changed = (
        _stack_scopes(variants) if kb.part(AmdKnowledgeBase) is not None else ({}, {})
    )
    request: dict[str, Any] = {
        "system": str(plan.get("system", "x86_64-linux")),
        "arguments": _argument_facts(kb, cpu, packages, changed),
        "cuda_sets": sorted(
            str(nvidia(kb).cuda_release(v).nixpkgs_set) for v in nvidia(kb).nixpkgs_cuda()
        ),
        "default_cuda": str(NIXPKGS_DEFAULT_CUDA),
    }
    if "torch" in packages or "torchvision" in packages:
        used = {CudaVersion.parse(str(v["cuda"])) for v in variants.values() if v.get("cuda")}
        used.update((NIXPKGS_DEFAULT_CUDA, *cuda))
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
    amd = kb.part(AmdKnowledgeBase)
    if amd is not None:
        scopes: dict[str, set[str]] = {
            name: {str(t) for t in targets} for name, targets in amd.nixpkgs_family_scopes.items()
        }
        for info in amd.targets:
            for scope in info.nixpkgs_scopes:
                scopes.setdefault(scope, set()).add(str(info.target))
        request["rocm"] = {
            "default_targets": [str(t) for t in amd.nixpkgs_default_targets],
            "scopes": {k: sorted(v) for k, v in sorted(scopes.items())},
            "scope_packages": [
                {"scope": scope, "package": package, "overrides": changed.get(scope, {})}
                for scope in sorted(planned)
                for package in _SCOPE_PACKAGES
                if package in amd.packages
            ],
            "planned_scopes": {k: planned[k] for k in sorted(planned)},
        }
    return request


def _words(items: Sequence[str]) -> str:
    return "[" + ", ".join(items) + "]" if items else "none"


# Nix answers whatever the pinned nixpkgs holds: `gpuTargets = 5`, `cudaCapabilities = [ 86 ]`,
# an attrset where a list belongs. Each answer is read through these, and an answer of another
# type is a drift of its own fact (never an exception, never "agrees").
def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: Any) -> list[str] | None:
    """``value`` when it is a list of strings, else None."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    return None


def _odd(value: Any) -> str:
    """An answer of the wrong type, as the drift line shows it."""
    import json

    kinds = {dict: "an attrset", list: "a list", str: "a string", bool: "a boolean"}
    kind = "null" if value is None else kinds.get(type(value), "a number")
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):  # pragma: no cover - decoded JSON always encodes
        text = repr(value)
    return f"{shorten(text)} ({kind}, not what this fact is)"


def _capabilities(value: Any) -> list[Capability] | None:
    """A list of capability strings nixpkgs spells (``"8.6"``), parsed; None for anything else
    (``[ 86 ]``, ``"8.6"``, an unknown capability)."""
    names = _strings(value)
    if names is None:
        return None
    try:
        return [Capability.parse(name) for name in names]
    except (CapplanError, ValueError):
        return None


def compare(
    kb: KnowledgeBase, request: Mapping[str, Any], answer: Mapping[str, Any]
) -> tuple[Drift, ...]:
    """Every disagreement between what ``request`` assumed and what nixpkgs ``answer``ed."""
    found: list[Drift] = []
    args = _mapping(answer.get("arguments"))
    for fact in request["arguments"]:
        key = ".".join(fact["attr"])
        taken = args.get(key)
        where = f"recipe argument {fact['argument']} of {key}"
        if taken is None:
            found.append(Drift(fact["package"], where, "it takes it", f"there is no {key}"))
        elif _strings(taken) is None:
            found.append(Drift(fact["package"], where, "it takes it", _odd(taken)))
        elif fact["argument"] not in taken:
            found.append(
                Drift(
                    fact["package"],
                    where,
                    "it takes it",
                    f"its arguments are {_words(sorted(taken))}",
                )
            )
    sets = _strings(answer.get("cuda_sets"))
    if sets is None:
        found.append(
            Drift(
                "cudaPackages",
                "CUDA package sets",
                _words(request["cuda_sets"]),
                _odd(answer.get("cuda_sets")),
            )
        )
    elif sorted(sets) != list(request["cuda_sets"]):
        found.append(
            Drift(
                "cudaPackages",
                "CUDA package sets",
                _words(request["cuda_sets"]),
                _words(sorted(sets)),
            )
        )
    default = answer.get("default_cuda")
    if default != request["default_cuda"]:
        said = default if isinstance(default, str) else _odd(default)
        found.append(Drift("cudaPackages", "default CUDA version", request["default_cuda"], said))
    found.extend(_torch(kb, request, answer))
    found.extend(_rocm(kb, request, answer))
    return tuple(sorted(set(found)))


def _torch(kb: KnowledgeBase, request: Mapping[str, Any], answer: Mapping[str, Any]) -> list[Drift]:
    found: list[Drift] = []
    if "torch_cuda" not in request:
        return found
    torch = cuda_package(kb, "torch")
    broken = _mapping(answer.get("torch_broken"))
    for name in request["torch_cuda"]:
        version = CudaVersion.parse(name.removeprefix("cudaPackages_").replace("_", "."))
        accepted = torch.limits.cuda is None or version in torch.limits.cuda
        got = broken.get(name)
        say = {True: "it is meta.broken there", False: "it builds there"}
        if got is None:
            found.append(Drift("torch", f"torch on {name}", "it evaluates", f"there is no {name}"))
        elif not isinstance(got, bool):
            found.append(Drift("torch", f"torch on CUDA {version}", say[not accepted], _odd(got)))
        elif got == accepted:
            found.append(Drift("torch", f"torch on CUDA {version}", say[not accepted], say[got]))
    kept = answer.get("torch_capabilities")
    table_fact = f"capability table (_cuda.db) on CUDA {request['default_cuda']}"
    allowlist_fact = f"capability allowlist on CUDA {request['default_cuda']}"
    if "torch_capabilities" not in request or kept is None:
        return found
    if not isinstance(kept, Mapping):
        return [*found, Drift("torch", allowlist_fact, "a list per CUDA version", _odd(kept))]
    table = _strings(kept.get("requested"))
    if table is None:
        found.append(
            Drift("cudaPackages", table_fact, "a list of capabilities", _odd(kept.get("requested")))
        )
        return found
    lacking = [c for c in request["torch_capabilities"] if c not in table]
    if lacking:
        found.append(
            Drift(
                "cudaPackages",
                table_fact,
                f"it supports {_words(lacking)} too",
                f"it supports {_words(table)}",
            )
        )
    got_kept = kept.get("kept")
    if got_kept is None and table:
        found.append(
            Drift(
                "torch",
                allowlist_fact,
                f"torch evaluates for {_words(table)}",
                "it does not evaluate for them",
            )
        )
    elif got_kept is not None:
        asked = _capabilities(table)
        have = _capabilities(got_kept)
        if asked is None or have is None:
            wrong = got_kept if have is None else table
            found.append(Drift("torch", allowlist_fact, "a list of capabilities", _odd(wrong)))
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
                    f"it keeps {_words(want)}",
                    f"it keeps {_words(got_caps)} (more: {_words(more)}; fewer: {_words(less)})",
                )
            )
    return found


def _rocm(kb: KnowledgeBase, request: Mapping[str, Any], answer: Mapping[str, Any]) -> list[Drift]:
    found: list[Drift] = []
    asked = request.get("rocm")
    got = answer.get("rocm")
    amd = kb.part(AmdKnowledgeBase)
    if asked is None or amd is None:
        return found
    if not isinstance(got, Mapping):
        return [
            Drift(
                "rocmPackages",
                "ROCm package set",
                "nixpkgs has rocmPackages",
                "it has none" if got is None else _odd(got),
            )
        ]
    fact = "default targets (clr.gpuTargets)"
    raw_default = got.get("default_targets")
    default = [] if raw_default is None else _strings(raw_default)
    if default is None:
        found.append(
            Drift("rocmPackages", fact, _words(asked["default_targets"]), _odd(raw_default))
        )
    elif default != asked["default_targets"]:
        found.append(Drift("rocmPackages", fact, _words(asked["default_targets"]), _words(default)))
    scopes = _mapping(got.get("scopes"))
    for name, targets in asked["scopes"].items():
        there = scopes.get(name)
        fact = f"per-target scope rocmPackages.{name}"
        builds = f"it builds for {_words(targets)}"
        if there is None:
            found.append(Drift("rocmPackages", fact, builds, "there is none"))
        elif _strings(there) is None:
            found.append(Drift("rocmPackages", fact, builds, _odd(there)))
        elif sorted(there) != targets:
            found.append(
                Drift("rocmPackages", fact, builds, f"it builds for {_words(sorted(there))}")
            )
    names = _strings(got.get("scope_names")) or []
    for name in sorted(set(names) - set(asked["scopes"])):
        found.append(
            Drift(
                "rocmPackages",
                f"per-target scope rocmPackages.{name}",
                "there is none",
                "it exists",
            )
        )
    evaluates = _mapping(got.get("scope_packages"))
    for item in asked["scope_packages"]:
        scope, package = item["scope"], item["package"]
        targets = asked["planned_scopes"][scope]
        check = amd.packages[package].check(package, tuple(AmdTarget.parse(t) for t in targets))
        expected = check.outcome not in ("broken", "throw")
        actual = evaluates.get(f"{scope}.{package}")
        if actual is None or not isinstance(actual, bool) or actual != expected:
            say = {True: "it evaluates", False: "it does not evaluate"}
            found.append(
                Drift(
                    package,
                    f"rocmPackages.{scope}.{package}",
                    say[expected] + ("" if expected else f" ({check.reason})"),
                    "it is missing"
                    if actual is None
                    else say[actual]
                    if isinstance(actual, bool)
                    else _odd(actual),
                )
            )
    return found
