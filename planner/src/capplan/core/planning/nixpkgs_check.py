"""What a plan relies on in nixpkgs, and where a nixpkgs says otherwise (pure).

:func:`nixpkgs_request` turns a plan (``plan_json``'s data) into the questions one ``nix eval``
answers (adapters/nixpkgs.py sends them as JSON and reads the answer back); :func:`compare`
turns the answer into one :class:`capplan.core.model.drift.Drift` per disagreement. Each family
asks its own facts (core/families/<family>/nixpkgs.py, from the registry's ``nixpkgs_checks``):
the recipe arguments its builds rely on, which is data (the CUDA entry's ``ptx = "gpu-targets"``,
the ROCm build's ``argument``, the CPU entry's ``arguments`` and override rules), so a
knowledge-base change is checked without a code change, and its own questions (CUDA's package
sets and torch's, ROCm's targets and scopes). Whether each recipe still takes the arguments
relied on is checked here, once for every family.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capplan.core.families.base import AsksNixpkgs, NixpkgsCheck, ReliesOnArguments
from capplan.core.model.drift import Drift, mapping, odd, strings, words

__all__ = ["compare", "nixpkgs_request"]


def nixpkgs_request(checks: Sequence[NixpkgsCheck], plan: Mapping[str, Any]) -> dict[str, Any]:
    """The questions for nixpkgs (JSON, read by Nix with builtins.fromJSON): the recipe
    arguments every family's builds of ``plan`` rely on, and each family's own questions, in
    the order of ``checks`` (the registry's ``nixpkgs_checks``)."""
    variants: Mapping[str, Mapping[str, Any]] = plan.get("variants", {})
    packages = sorted({str(v["package"]) for v in variants.values()})
    facts = {
        fact
        for check in checks
        if isinstance(check, ReliesOnArguments)
        for fact in check.arguments(variants, packages)
    }
    request: dict[str, Any] = {
        "system": str(plan.get("system", "x86_64-linux")),
        "arguments": [
            {"package": p, "attr": list(a), "argument": arg} for p, a, arg in sorted(facts)
        ],
    }
    for check in checks:
        if isinstance(check, AsksNixpkgs):
            request.update(check.request(variants, packages))
    return request


def compare(
    checks: Sequence[NixpkgsCheck], request: Mapping[str, Any], answer: Mapping[str, Any]
) -> tuple[Drift, ...]:
    """Every disagreement between what ``request`` assumed and what nixpkgs ``answer``ed."""
    found: list[Drift] = []
    args = mapping(answer.get("arguments"))
    for fact in request["arguments"]:
        key = ".".join(fact["attr"])
        taken = args.get(key)
        where = f"recipe argument {fact['argument']} of {key}"
        if taken is None:
            found.append(Drift(fact["package"], where, "it takes it", f"there is no {key}"))
        elif strings(taken) is None:
            found.append(Drift(fact["package"], where, "it takes it", odd(taken)))
        elif fact["argument"] not in taken:
            found.append(
                Drift(
                    fact["package"],
                    where,
                    "it takes it",
                    f"its arguments are {words(sorted(taken))}",
                )
            )
    for check in checks:
        if isinstance(check, AsksNixpkgs):
            found.extend(check.compare(request, answer))
    return tuple(sorted(set(found)))
