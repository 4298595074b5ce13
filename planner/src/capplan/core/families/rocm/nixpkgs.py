"""The ROCm family's part of ``capplan nixpkgs check`` (pure): the recipe arguments its builds
rely on (a ROCm build's ``argument``, ``gpuTargets`` by default; the library arguments a
per-target scope's changes set), nixpkgs' default ROCm targets and per-target scopes, and
whether each planned scope's composable_kernel and MIOpen evaluate. The shared check
(core/planning/nixpkgs_check.py) asks it through the registry's ``nixpkgs_checks``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from capplan.core.families.rocm.kb import AmdKnowledgeBase
from capplan.core.families.rocm.target import AmdTarget
from capplan.core.model.drift import Drift, mapping, odd, strings, words
from capplan.core.model.kb import KnowledgeBase

__all__ = ["RocmNixpkgs"]

# Packages whose evaluation in a per-target ROCm scope the plan relies on (ROCM.md: MIOpen links
# the scope's composable_kernel, which is meta.broken without a gfx9 target).
_SCOPE_PACKAGES = ("composable_kernel", "miopen")

_ScopeChanges = dict[str, dict[str, dict[str, Any]]]


class RocmNixpkgs:
    """The ROCm family's :class:`capplan.core.families.base.ReliesOnArguments` and
    :class:`capplan.core.families.base.AsksNixpkgs` (nothing to ask of a knowledge base
    without the AMD part)."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self._kb = kb

    def arguments(
        self, variants: Mapping[str, Mapping[str, Any]], packages: Sequence[str]
    ) -> Iterator[tuple[str, tuple[str, ...], str]]:
        amd = self._kb.part(AmdKnowledgeBase)
        if amd is None:
            return
        _, changed = _stack_scopes(variants)
        for libraries in changed.values():
            for library, arguments in libraries.items():
                for argument in arguments:
                    yield (library, ("rocmPackages", library), str(argument))
        for name in packages:
            build = amd.builds.get(name)
            if build is not None and build.how == "gpu-targets":
                yield (name, tuple(build.attr.split(".")), build.argument or "gpuTargets")

    def request(
        self, variants: Mapping[str, Mapping[str, Any]], packages: Sequence[str]
    ) -> dict[str, Any]:
        amd = self._kb.part(AmdKnowledgeBase)
        if amd is None:
            return {}
        planned, changed = _stack_scopes(variants)
        scopes: dict[str, set[str]] = {
            name: {str(t) for t in targets} for name, targets in amd.nixpkgs_family_scopes.items()
        }
        for info in amd.targets:
            for scope in info.nixpkgs_scopes:
                scopes.setdefault(scope, set()).add(str(info.target))
        return {
            "rocm": {
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
        }

    def compare(self, request: Mapping[str, Any], answer: Mapping[str, Any]) -> list[Drift]:
        return _rocm(self._kb, request, answer)


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
                "it has none" if got is None else odd(got),
            )
        ]
    fact = "default targets (clr.gpuTargets)"
    raw_default = got.get("default_targets")
    default = [] if raw_default is None else strings(raw_default)
    if default is None:
        found.append(Drift("rocmPackages", fact, words(asked["default_targets"]), odd(raw_default)))
    elif default != asked["default_targets"]:
        found.append(Drift("rocmPackages", fact, words(asked["default_targets"]), words(default)))
    scopes = mapping(got.get("scopes"))
    for name, targets in asked["scopes"].items():
        there = scopes.get(name)
        fact = f"per-target scope rocmPackages.{name}"
        builds = f"it builds for {words(targets)}"
        if there is None:
            found.append(Drift("rocmPackages", fact, builds, "there is none"))
        elif strings(there) is None:
            found.append(Drift("rocmPackages", fact, builds, odd(there)))
        elif sorted(there) != targets:
            found.append(
                Drift("rocmPackages", fact, builds, f"it builds for {words(sorted(there))}")
            )
    names = strings(got.get("scope_names")) or []
    for name in sorted(set(names) - set(asked["scopes"])):
        found.append(
            Drift(
                "rocmPackages",
                f"per-target scope rocmPackages.{name}",
                "there is none",
                "it exists",
            )
        )
    evaluates = mapping(got.get("scope_packages"))
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
                    else odd(actual),
                )
            )
    return found
