"""The AMD knowledge base: validated, frozen models of ``kb/amd_*.json`` and questions on them.

The ROCm family's part of the knowledge base (``kb.part(AmdKnowledgeBase)``), beside CUDA's
(:mod:`capplan.core.families.cuda.kb`): gfx targets with their family, generic target, ROCm
range, KFD number and nixpkgs default/scopes; AMD GPU models by loose name; and the per-package
target lists nixpkgs hard-codes (torch, magma-hip, hipblaslt, hipsparselt, aotriton, miopen,
composable_kernel, onnxruntime). Every entry carries a ``source``. Loading lives in
:mod:`capplan.adapters.kb`, which reads these files through the registry (:func:`read_amd_kb`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from capplan.core.families.rocm.target import AmdTarget
from capplan.core.model.identifiers import check_kb_attr, check_kb_name
from capplan.core.model.records import Record, check_costs, record
from capplan.errors import DataError, InvalidInputError, shorten

if TYPE_CHECKING:
    from capplan.core.families.base import ReadsKbFile
    from capplan.core.model.kb import CostBasisKind

__all__ = [
    "AMD_KB_FILES",
    "AmdGpuModel",
    "AmdGpusFile",
    "AmdKnowledgeBase",
    "AmdPackageCheck",
    "AmdPackageTargets",
    "AmdPackagesFile",
    "AmdTargetField",
    "AmdTargetInfo",
    "AmdTargetsFile",
    "RocmBuild",
    "RocmCost",
    "StackLibrary",
    "normalise_amd_name",
    "read_amd_kb",
]


# The value type of gfx target fields (kept as a name: other modules import it).
AmdTargetField = AmdTarget

_ROCM_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")


@record
class AmdTargetInfo(Record):
    target: AmdTargetField
    family: str
    generic: AmdTargetField | None
    products: tuple[str, ...]
    first_rocm: str | None  # None: not recorded
    removed_in_rocm: str | None  # the first ROCm release without it
    rocm_note: str | None
    gfx_target_version: int
    nixpkgs_default: bool  # in rocmPackages.clr.gpuTargets
    nixpkgs_scopes: tuple[str, ...]  # rocmPackages.<scope> names that build for it
    source: str

    def __post_init__(self) -> None:
        if self.target.is_generic or self.target != self.target.base:
            raise ValueError(f"{self.target}: list processors only, without features")
        if self.gfx_target_version != self.target.gfx_target_version:
            raise ValueError(
                f"{self.target}: gfx_target_version {self.gfx_target_version} is not "
                f"{self.target.gfx_target_version} (major*10000+minor*100+stepping)"
            )
        if self.generic != self.target.generic:
            raise ValueError(
                f"{self.target}: generic target {self.generic} disagrees with LLVM's "
                f"{self.target.generic}"
            )
        for version in (self.first_rocm, self.removed_in_rocm):
            if version is not None and not _ROCM_VERSION.fullmatch(version):
                raise ValueError(f"{self.target}: ROCm version {version!r} is not X.Y[.Z]")


@record
class AmdTargetsFile(Record):
    source: str
    nixpkgs_default_targets: tuple[AmdTargetField, ...]
    nixpkgs_family_scopes: dict[str, tuple[AmdTargetField, ...]]
    targets: tuple[AmdTargetInfo, ...]

    def __post_init__(self) -> None:
        names = [t.target for t in self.targets]
        if len(set(names)) != len(names):
            raise ValueError("a target is listed twice")
        defaults = set(self.nixpkgs_default_targets)
        for info in self.targets:
            if info.nixpkgs_default != (info.target in defaults):
                raise ValueError(f"{info.target}: nixpkgs_default disagrees with the default list")
            scopes = {str(info.target)} if info.nixpkgs_default else set()
            scopes |= {f for f, m in self.nixpkgs_family_scopes.items() if info.target in m}
            if set(info.nixpkgs_scopes) != scopes:
                raise ValueError(f"{info.target}: nixpkgs_scopes should be {sorted(scopes)}")
        missing = defaults - set(names)
        if missing:
            raise ValueError(f"default targets without an entry: {sorted(map(str, missing))}")


AmdGpuKind = Literal["instinct", "radeon", "radeon-pro", "radeon-ai-pro", "igpu"]


@record
class AmdGpuModel(Record):
    name: str
    target: AmdTargetField
    kind: AmdGpuKind
    aliases: tuple[str, ...] = ()
    source: str


@record
class AmdGpusFile(Record):
    source: str
    gpus: tuple[AmdGpuModel, ...]


WithoutTargets = Literal["throw", "shim", "broken", "none"]


@dataclass(frozen=True, slots=True)
class AmdPackageCheck:
    """What a package does with a requested target list."""

    package: str
    kept: tuple[AmdTarget, ...]
    excluded: tuple[AmdTarget, ...]
    outcome: Literal["ok", "throw", "shim", "broken", "empty"]
    reason: str


@record
class AmdPackageTargets(Record):
    """A package's own ROCm target handling (``accepts`` None: any target passes through)."""

    accepts: tuple[AmdTargetField, ...] | None
    default_targets: tuple[AmdTargetField, ...] | None
    without_targets: WithoutTargets
    requires_family: str | None  # e.g. "gfx9": broken unless one target is of that family
    reads: str
    note: str | None
    source: str

    def check(self, package: str, targets: Sequence[AmdTarget]) -> AmdPackageCheck:
        """Which of ``targets`` the package builds for, and what happens when none is left."""
        if self.accepts is None:
            kept = tuple(sorted(set(targets)))
            excluded: tuple[AmdTarget, ...] = ()
        else:
            allowed = {t.processor for t in self.accepts}
            kept = tuple(sorted({t for t in targets if t.processor in allowed}))
            excluded = tuple(sorted({t for t in targets if t.processor not in allowed}))
        if self.requires_family is not None and not any(
            re.fullmatch(rf"{self.requires_family}[0-9a-f]{{2}}", t.processor) for t in kept
        ):
            return AmdPackageCheck(
                package,
                kept,
                excluded,
                "broken",
                f"{package} is meta.broken without a {self.requires_family} target "
                f"(given: {_names(targets)})",
            )
        if kept:
            reason = f"{package} builds {_names(kept)}"
            if excluded:
                reason += f"; its own list excludes {_names(excluded)}"
            return AmdPackageCheck(package, kept, excluded, "ok", reason)
        outcome: Literal["throw", "shim", "broken", "empty"] = (
            "empty" if self.without_targets == "none" else self.without_targets
        )
        what = {
            "throw": "evaluation throws 'No supported GPU targets specified'",
            "shim": "nixpkgs builds a device-less shim",
            "broken": "the package is meta.broken",
            "empty": "the build holds no device code",
        }[outcome]
        return AmdPackageCheck(
            package,
            kept,
            excluded,
            outcome,
            f"{package}'s own target list excludes {_names(excluded)}: {what}",
        )


def _names(targets: Sequence[AmdTarget]) -> str:
    return ", ".join(str(t) for t in sorted(set(targets))) or "none"


@record
class RocmCost(Record):
    """Build minutes and output size of one ROCm build: base plus per target."""

    base_minutes: float
    per_target_minutes: float
    base_size_mb: float
    per_target_size_mb: float
    source: str
    # "measured" or "estimate" (capplan.core.model.kb.CostBasisKind); every AMD cost is an
    # estimate today.
    basis: Literal["measured", "estimate"] = "estimate"

    def __post_init__(self) -> None:
        check_costs(
            self, "base_minutes", "per_target_minutes", "base_size_mb", "per_target_size_mb"
        )


RocmHow = Literal["gpu-targets", "inherited", "default-targets", "scope-targets"]


@record
class RocmBuild(Record):
    """How a capplan package builds for ROCm in nixpkgs (``builds`` in kb/amd_packages.json).

    ``how``: ``gpu-targets`` takes a ``gpuTargets`` list (``override`` names the plan.json
    override key: ``torch`` is the Python torch, any other name a top-level attribute);
    ``inherited`` builds against a planned package of its own set (torchvision's torch);
    ``default-targets`` reads ``clr.gpuTargets`` only, so one build in nixpkgs' default ROCm
    set serves every default target (a shared job); ``scope-targets`` reads the scope's list
    (``clr.localGpuTargets or clr.gpuTargets``) and has no target argument of its own
    (onnxruntime): a per-target build in a stack scope, else the shared default build.
    ``device_code`` False: its ROCm build compiles no GPU code (torchvision), so it costs no
    more per target and verify expects none in it.
    """

    attr: str
    how: RocmHow
    override: str | None
    targets: str | None  # the ``packages`` entry holding its own target list
    depends: tuple[str, ...]
    links: tuple[str, ...]  # target-dependent ROCm libraries in its closure
    big_parallel: bool
    cost: RocmCost
    source: str
    # How its gpuTargets are spelled: "gfx1030" (torch), or "1030" (magma-hip compares the
    # argument as given with its supportedGpuTargets, which lack the prefix).
    gfx_prefix: bool = True
    # The override's argument: torch and magma take gpuTargets, llama-cpp and ollama
    # rocmGpuTargets (their package.nix files).
    argument: str = "gpuTargets"
    device_code: bool = True

    def spell(self, target: AmdTarget) -> str:
        return target.processor if self.gfx_prefix else target.processor.removeprefix("gfx")

    def __post_init__(self) -> None:
        if (self.how == "gpu-targets") != (self.override is not None):
            raise ValueError("override is set exactly when how is gpu-targets")
        if self.how == "inherited" and not self.depends:
            raise ValueError("an inherited build names the package it inherits from in depends")


@record
class StackLibrary(Record):
    """A target-dependent ROCm library a per-target scope rebuilds (``rocm_scope = "stack"``)."""

    attr: str
    targets: str | None
    cost: RocmCost
    source: str
    # False when it reads clr.gpuTargets rather than the scope's localGpuTargets (magma-hip):
    # a per-target scope then rebuilds it for the whole default list.
    reads_scope: bool = True
    # The targets for which a consumer links this library at all; None: always. Off the list
    # the consumer builds without it (torch vendors CK's headers when the scope has no MFMA
    # target), so a per-target scope has nothing of it to rebuild. ``linked_why`` says so.
    linked_for: tuple[str, ...] | None = None
    linked_why: str | None = None
    # What its consumers get from it, in a user's words ("magma-backed linear algebra"): the
    # plan says it where a variant's copy of the library lacks the variant's target.
    provides: str | None = None
    # Where a scope cannot build it (its own rule says broken), the library that links it is
    # built without it: ``fallback_library`` with ``fallback_argument = false`` in the scope
    # (MIOpen's withComposableKernel), for the reason ``fallback_why``.
    fallback_library: str | None = None
    fallback_argument: str | None = None
    fallback_why: str | None = None

    def __post_init__(self) -> None:
        if (self.linked_for is None) != (self.linked_why is None):
            raise ValueError("linked_for and linked_why go together")
        fallback = (self.fallback_library, self.fallback_argument, self.fallback_why)
        if any(f is None for f in fallback) != all(f is None for f in fallback):
            raise ValueError("fallback_library, fallback_argument and fallback_why go together")


@record
class AmdPackagesFile(Record):
    source: str
    packages: dict[str, AmdPackageTargets]
    builds: dict[str, RocmBuild] = field(default_factory=dict)
    stack_libraries: dict[str, StackLibrary] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for section in (self.packages, self.builds, self.stack_libraries):
            for name in section:
                check_kb_name(name, "package")
        for name, build in self.builds.items():
            check_kb_attr(build.attr, f"builds.{name}.attr")
            if build.override is not None:
                check_kb_name(build.override, f"builds.{name}.override")
        for name, library in self.stack_libraries.items():
            check_kb_attr(library.attr, f"stack_libraries.{name}.attr")
        for name, build in self.builds.items():
            if build.targets is not None and build.targets not in self.packages:
                raise ValueError(f"builds.{name}.targets names unknown list {build.targets!r}")
            for dep in build.depends:
                if dep not in self.builds:
                    raise ValueError(f"builds.{name} depends on {dep!r}, which has no build")
            for linked in build.links:
                if linked not in self.stack_libraries:
                    raise ValueError(f"builds.{name} links {linked!r}, not a stack library")
        for name, library in self.stack_libraries.items():
            if library.targets is not None and library.targets not in self.packages:
                raise ValueError(f"stack_libraries.{name}.targets names unknown list")


def normalise_amd_name(text: str) -> str:
    """Lower case, letters and digits only, vendor/line words dropped (``AMD Instinct`` ...)."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    while words and words[0] in ("amd", "radeon", "instinct"):
        words = words[1:]
    return "".join(words)


@record
class AmdKnowledgeBase(Record):
    targets: tuple[AmdTargetInfo, ...]
    nixpkgs_default_targets: tuple[AmdTarget, ...]
    nixpkgs_family_scopes: dict[str, tuple[AmdTarget, ...]]
    gpus: tuple[AmdGpuModel, ...]
    packages: dict[str, AmdPackageTargets]
    builds: dict[str, RocmBuild] = field(default_factory=dict)
    stack_libraries: dict[str, StackLibrary] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = {t.target for t in self.targets}
        for gpu in self.gpus:
            if gpu.target not in known:
                raise DataError(
                    f"knowledge-base file kb/amd_gpus.json: {gpu.name!r} names target "
                    f"{gpu.target}, which kb/amd_targets.json lacks",
                    hint="add the target or fix the GPU entry",
                )

    def cost_sources(self) -> tuple[str, dict[str, tuple[CostBasisKind, str]]]:
        """Each ROCm build's and stack library's cost basis and source, for AMD variants
        (:class:`capplan.core.model.kb.PricesBuilds`)."""
        found = {name: (b.cost.basis, b.cost.source) for name, b in self.builds.items()}
        found.update(
            {name: (s.cost.basis, s.cost.source) for name, s in self.stack_libraries.items()}
        )
        return "amd", found

    def target_info(self, target: AmdTarget) -> AmdTargetInfo | None:
        for info in self.targets:
            if info.target == target.base:
                return info
        return None

    def lookup_gpu(self, query: str) -> tuple[AmdGpuModel, ...]:
        """GPU models matching a loose name (``mi300x``, ``Radeon RX 7900 XTX``, ``strix halo``).

        An exact normalised match on a name or alias wins; otherwise every model whose name
        contains the query (``7900`` -> XTX, XT, GRE). No match: InvalidInputError with the
        closest names.
        """
        key = normalise_amd_name(query)
        if not key:
            raise InvalidInputError(
                "an empty AMD GPU name was given", hint="name a GPU, e.g. 'mi300x' or 'rx 7900 xtx'"
            )
        labels: dict[str, AmdGpuModel] = {}
        for gpu in self.gpus:
            for label in (gpu.name, *gpu.aliases):
                labels.setdefault(normalise_amd_name(label), gpu)
        if key in labels:
            return (labels[key],)
        partial = tuple(
            gpu for gpu in self.gpus if any(key in normalise_amd_name(x) for x in (gpu.name,))
        )
        if partial:
            return partial
        names = self.suggest_gpus(query)
        raise InvalidInputError(
            f"unknown AMD GPU '{shorten(query.strip())}'",
            hint=f"did you mean: {', '.join(names)}"
            if names
            else "run 'capplan gpus --json' for the known models",
        )

    def suggest_gpus(self, query: str, limit: int = 3) -> list[str]:
        """Model names close to ``query`` (for "did you mean")."""
        labels: dict[str, AmdGpuModel] = {}
        for gpu in self.gpus:
            for label in (gpu.name, *gpu.aliases):
                labels.setdefault(normalise_amd_name(label), gpu)
        close = difflib.get_close_matches(normalise_amd_name(query), list(labels), limit, 0.6)
        return sorted({labels[c].name for c in close})

    def package(self, name: str) -> AmdPackageTargets:
        try:
            return self.packages[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self.packages), n=1)
            raise InvalidInputError(
                f"no ROCm target list for package {shorten(name)!r}",
                hint=f"did you mean {close[0]}?"
                if close
                else f"known: {', '.join(sorted(self.packages))}",
            ) from None


# The ROCm family's knowledge-base files (kb/) and the model of each (the tests validate every
# entry).
AMD_KB_FILES: dict[str, type] = {
    "amd_gpus.json": AmdGpusFile,
    "amd_packages.json": AmdPackagesFile,
    "amd_targets.json": AmdTargetsFile,
}


def read_amd_kb(read: ReadsKbFile) -> AmdKnowledgeBase:
    """The AMD knowledge base (``kb/amd_targets.json``, ``amd_gpus.json``,
    ``amd_packages.json``), each file read through ``read``."""
    targets = read("amd_targets.json", AmdTargetsFile)
    gpus = read("amd_gpus.json", AmdGpusFile)
    packages = read("amd_packages.json", AmdPackagesFile)
    return AmdKnowledgeBase(
        targets=tuple(sorted(targets.targets, key=lambda t: t.target)),
        nixpkgs_default_targets=targets.nixpkgs_default_targets,
        nixpkgs_family_scopes=dict(sorted(targets.nixpkgs_family_scopes.items())),
        gpus=gpus.gpus,
        packages=dict(sorted(packages.packages.items())),
        builds=dict(sorted(packages.builds.items())),
        stack_libraries=dict(sorted(packages.stack_libraries.items())),
    )
