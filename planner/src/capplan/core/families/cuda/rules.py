"""Rule 1, buildability: which capabilities a package builds for under a CUDA version, and why
not when it cannot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.family import cuda_limits_reason
from capplan.core.families.cuda.inputs import (
    nixpkgs_cuda_version,
)
from capplan.core.families.cuda.kb import Limits, cuda_package, nvidia
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.config import Config

__all__ = ["Rules"]


# -- buildability ---------------------------------------------------------------------------------
@dataclass
class Rules:
    """Rule 1, answered two ways: as sets of buildable capabilities per (package, CUDA), which
    is what planning asks tens of thousands of times, and as a reason string, which is only
    needed when the answer is no (:meth:`why_not` walks the checks in their documented order).
    """

    kb: KnowledgeBase
    config: Config
    system: str
    policy_cuda: tuple[CudaVersion, ...]
    _reasons: dict[tuple[str, Capability, CudaVersion], str] = field(default_factory=dict)
    _ok: dict[tuple[str, CudaVersion], frozenset[Capability]] = field(default_factory=dict)
    _platform: dict[CudaVersion, tuple[Capability, ...]] = field(default_factory=dict)
    _allowed: dict[tuple[int, CudaVersion], tuple[Limits, frozenset[Capability]]] = field(
        default_factory=dict
    )
    _cuda_memo: dict[str, tuple[CudaVersion, ...]] = field(default_factory=dict)
    _interned: dict[CudaVersion, CudaVersion] = field(default_factory=dict)
    _excluded: dict[str, frozenset[Capability]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._interned.update((v, v) for v in self.policy_cuda)

    def user_excludes(self, package: str) -> frozenset[Capability]:
        found = self._excluded.get(package)
        if found is None:
            user = self.config.packages.get(package)
            found = frozenset(Capability.parse(c) for c in (user.exclude if user else ()))
            self._excluded[package] = found
        return found

    def package_cuda(self, package: str) -> tuple[CudaVersion, ...]:
        found = self._cuda_memo.get(package)
        if found is None:
            pin = self.config.packages.get(package)
            found = self.policy_cuda
            if pin is not None and pin.cuda is not None:
                version = nixpkgs_cuda_version(self.kb, pin.cuda, f"packages.{package}.cuda")
                # One object per version: later lookups then match by identity.
                found = (self._interned.setdefault(version, version),)
            self._cuda_memo[package] = found
        return found

    def ok(self, package: str, cuda: CudaVersion) -> frozenset[Capability]:
        """Every capability ``package`` builds for under ``cuda`` (rule 1, as a set)."""
        key = (package, cuda)
        found = self._ok.get(key)
        if found is None:
            pkg = cuda_package(self.kb, package)
            found = self._limits_allow(package, pkg.limits, cuda)
            excluded = self.user_excludes(package)
            if excluded:
                found = found - excluded
            for dep in pkg.depends:
                if self.kb.package(dep).capability_dependent and dep not in pkg.optional:
                    found = found & self.ok(dep, cuda)
            self._ok[key] = found
        return found

    def _limits_allow(self, name: str, limits: Limits, cuda: CudaVersion) -> frozenset[Capability]:
        """The platform's capabilities under ``cuda`` that ``limits`` allow; many packages share
        one Limits value, so this is computed once per (limits, CUDA)."""
        key = (id(limits), cuda)
        entry = self._allowed.get(key)
        if entry is None or entry[0] is not limits:
            kb = self.kb
            allowed = frozenset(
                c
                for c in self._platform_caps(cuda)
                if cuda_limits_reason(kb, name, limits, c, cuda) is None
            )
            entry = self._allowed[key] = (limits, allowed)
        return entry[1]

    def _platform_caps(self, cuda: CudaVersion) -> tuple[Capability, ...]:
        found = self._platform.get(cuda)
        if found is None:
            found = self._platform[cuda] = tuple(
                c.capability
                for c in nvidia(self.kb).capabilities
                if self._platform_reason(c.capability, cuda) is None
            )
        return found

    def why_not(self, package: str, cap: Capability, cuda: CudaVersion) -> str | None:
        """None when ``package`` builds for ``cap`` under ``cuda``; else the reason it cannot."""
        if cap in self.ok(package, cuda):
            return None
        key = (package, cap, cuda)
        found = self._reasons.get(key)
        if found is None:
            found = self._reasons[key] = self._why_not(package, cap, cuda)
        return found

    def _why_not(self, package: str, cap: Capability, cuda: CudaVersion) -> str:
        reason = self._platform_reason(cap, cuda)
        if reason:
            return reason
        pkg = cuda_package(self.kb, package)
        reason = cuda_limits_reason(self.kb, package, pkg.limits, cap, cuda)
        if reason:
            return reason
        if cap in self.user_excludes(package):
            return f"capplan.toml excludes {cap} for {package}"
        for dep in pkg.depends:
            if self.kb.package(dep).capability_dependent and dep not in pkg.optional:
                dep_reason = self.why_not(dep, cap, cuda)
                if dep_reason:
                    return f"its dependency {dep} cannot: {dep_reason}"
        raise AssertionError(f"{package} builds for {cap} under CUDA {cuda}; no reason to give")

    def _platform_reason(self, cap: Capability, cuda: CudaVersion) -> str | None:
        if not nvidia(self.kb).knows(cap):
            return f"{cap} is not a known capability"
        info = nvidia(self.kb).capability(cap)
        if not info.nixpkgs:
            # nixpkgs asserts on capabilities outside its table ("Requested unrecognized CUDA
            # capabilities"), so nothing can be built for them however real they are.
            return f"{cap} is not in nixpkgs' capability table"
        if info.jetson and self.system != "aarch64-linux":
            return f"{cap} is a Jetson capability: it evaluates only on aarch64-linux"
        if not info.supported_by(cuda):
            span = f"{info.min_cuda}..{info.max_cuda or 'newest'}"
            return f"CUDA {cuda} does not support {cap} (supported by CUDA {span})"
        return None

    def first_cuda(
        self, package: str, caps: Iterable[Capability]
    ) -> tuple[CudaVersion | None, str]:
        """The first allowed CUDA under which every capability builds, or why none does."""
        caps = tuple(caps)
        allowed = self.package_cuda(package)
        for cuda in allowed:
            ok = self.ok(package, cuda)
            if all(c in ok for c in caps):
                return cuda, ""
        reasons = [
            next(r for c in caps if (r := self.why_not(package, c, cuda))) for cuda in allowed
        ]
        return None, "; ".join(dict.fromkeys(reasons))

    def buildable(self, package: str, cap: Capability) -> bool:
        return any(cap in self.ok(package, cuda) for cuda in self.package_cuda(package))
