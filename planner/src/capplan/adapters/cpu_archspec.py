"""The planner's CPU target model (:class:`capplan.core.families.cpu.planning.CpuModel`) from
archspec, Spack's microarchitecture database (it reads its JSON data file at import: an adapter).

Targets are spelled as users and compilers do: the x86-64 psABI levels as GCC and glibc name
them (``x86-64-v3``), microarchitectures as archspec does (``sapphirerapids``, ``neoverse_v2``).
Compatibility is decided by instruction-set features: a machine runs code built for a target of
its own architecture when it has every feature archspec lists for that target (a Sapphire Rapids
runs x86-64-v4, -v3 and -v2 code; an x86-64-v3 machine does not run v4 code, it lacks AVX-512; a
Zen 4 runs sandybridge code, which archspec's tree alone would refuse, but not skylake code, which
nixpkgs' architectures.nix would allow: see :meth:`ArchspecCpuModel.why_not`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capplan.core.families.cpu.planning import CpuPackagePolicy
from capplan.errors import DataError, InvalidInputError, shorten

__all__ = ["X86_64_LEVELS", "ArchspecCpuModel", "OverrideRule"]

# The psABI levels glibc has hwcaps directories for (glibc 2.33 elf/dl-hwcaps).
# The x86-64 psABI levels, lowest first; glibc has hwcaps directories for all but the baseline
# (glibc 2.33 elf/dl-hwcaps).
X86_64_LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")
_PSABI = X86_64_LEVELS[1:]
# The GCC version the flags are asked for: nixpkgs' default stdenv compiler (GCC 14).
_GCC = "14.2"


@dataclass(frozen=True, slots=True)
class OverrideRule:
    """A package argument set when the target has every feature in ``features`` (rules are
    tried in order; the first that fits wins)."""

    features: frozenset[str]
    argument: str
    value: object


@dataclass
class ArchspecCpuModel:
    policies: Mapping[str, CpuPackagePolicy]
    overrides: Mapping[str, Sequence[OverrideRule]] = field(default_factory=dict)
    # Arguments every per-level build of a package sets (kb ``always``).
    always: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    _targets: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        import archspec.cpu  # type: ignore[import-untyped]

        self._targets = archspec.cpu.TARGETS

    def _get(self, target: str) -> Any:
        return self._targets[target.replace("-", "_")]

    def _accepted(self) -> list[str]:
        """The names capplan plans for: x86-64 and Arm targets (the systems it plans)."""
        return sorted(
            self._canonical(name)
            for name, target in self._targets.items()
            if target.family.name in ("x86_64", "aarch64")
        )

    @staticmethod
    def _canonical(name: str) -> str:
        return name.replace("_", "-") if name.startswith("x86_64") else name

    def parse(self, text: str) -> str:
        key = text.strip().lower().replace("-", "_")
        if key in self._targets:
            return self._canonical(key)
        accepted = self._accepted()
        close = difflib.get_close_matches(text.strip().lower(), accepted, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        raise InvalidInputError(
            f"unknown CPU level or microarchitecture '{shorten(text.strip())}'",
            hint=f"{hint}accepted names: {', '.join(accepted)}",
        )

    def arch(self, target: str) -> str:
        return str(self._get(target).family.name)

    def is_generic(self, target: str) -> bool:
        found = self._get(target)
        return bool(found.family == found)

    def rank(self, target: str) -> tuple[object, ...]:
        found = self._get(target)
        return (len(found.ancestors), len(found.features), target)

    def why_not(self, device: str, built: str) -> str | None:
        have = self._get(device)
        code = self._get(built)
        if code == have or code in have.ancestors:
            return None
        if code.family != have.family:
            family = have.family.name
            article = "an" if family[0] in "aeiou" else "a"
            return f"{built} is {code.family.name} code and {device} is {article} {family} CPU"
        # Decided by instruction-set features, not archspec's tree: the compiler emits for
        # `-march=<built>` only what that target's features allow, so a machine with every one
        # of them runs the code (a Zen runs sandybridge code although archspec files them on
        # different branches). nixpkgs' lib/systems/architectures.nix goes further and lists
        # skylake among znver1's inferiors (from user reports); skylake code may use ADX and
        # RDRAND, which archspec's Zen entries do not list, so capplan does not follow it there.
        missing = sorted(set(code.features) - set(have.features))
        if missing:
            return f"{device} lacks {', '.join(missing)}, which {built} code may use"
        return None

    def x86_levels(self, device: str) -> dict[str, str | None]:
        """For each x86-64 level, lowest first: None when ``device`` runs code built for it,
        else why not (the features it lacks)."""
        return {level: self.why_not(device, level) for level in X86_64_LEVELS}

    def label(self, target: str) -> str:
        return target.replace("_", "-")

    def cflags(self, target: str) -> tuple[str, ...]:
        found = self._get(target)
        try:
            flags = str(found.optimization_flags("gcc", _GCC))
        except Exception:  # archspec raises its own error for a target GCC cannot name
            flags = f"-march={target}"
        return tuple(flags.split())

    def gcc_arch(self, target: str) -> str:
        """The architecture GCC is given for the target (``-march=``, else ``-mcpu=``): what
        nixpkgs calls ``gcc.arch`` and names the ``gccarch-<arch>`` system feature after."""
        for flag in self.cflags(target):
            for prefix in ("-march=", "-mcpu="):
                if flag.startswith(prefix):
                    return flag[len(prefix) :]
        return target

    def gcc_names(self) -> dict[str, str]:
        """Each target capplan plans for (its label, ``zen4``), to GCC's name (``znver4``)."""
        return {self.label(name): self.gcc_arch(name) for name in self._accepted()}

    def gcc_arches(self) -> dict[str, frozenset[str]]:
        """Every GCC name of a target capplan plans for (the ``gccarch-<arch>`` features its
        jobs can require), to the Nix systems whose CPUs run it."""
        systems = {"x86_64": "x86_64-linux", "aarch64": "aarch64-linux"}
        found: dict[str, set[str]] = {}
        for name in self._accepted():
            system = systems.get(self.arch(name))
            if system is not None:
                found.setdefault(self.gcc_arch(name), set()).add(system)
        return {arch: frozenset(where) for arch, where in found.items()}

    def features(self, target: str) -> tuple[str, ...]:
        """The instruction-set features (as /proc/cpuinfo names them) code built for the
        target may use."""
        return tuple(sorted(self._get(target).features))

    def generic(self, target: str) -> str:
        """The most specific generic target code for ``target`` also is (archspec's
        ``generic``): its x86-64 psABI level (``x86-64-v4`` for zen4), its Arm architecture
        version (``armv9.0a`` for neoverse_v2), or the family itself."""
        return self._canonical(str(self._get(target).generic.name))

    def psabi_level(self, target: str) -> str | None:
        return target if target in _PSABI else None

    def package(self, name: str) -> CpuPackagePolicy | None:
        return self.policies.get(name)

    def override(self, package: str, target: str) -> tuple[tuple[str, object], ...]:
        features = set(self._get(target).features)
        fixed = tuple(sorted(self.always.get(package, {}).items()))
        for rule in self.overrides.get(package, ()):
            if rule.features <= features:
                return ((rule.argument, rule.value), *fixed)
        return fixed


def load_cpu_model(directory: Path | None = None, *, packages: bool = True) -> ArchspecCpuModel:
    """The CPU model the CLI plans with: archspec's targets, and the CPU knowledge base's
    package entries from ``kb/cpu_packages.json`` (``directory``, else ``CAPPLAN_KB_DIR``, else
    the packaged file). A broken file, or an override rule naming a feature archspec does not
    know (it would never match), is a DataError (exit 6). ``packages=False``: archspec's
    targets alone, for the commands that only judge a CPU (detect, doctor), which never read
    the package file."""
    from capplan.adapters.kb import load_kb_file
    from capplan.core.families.cpu.kb import CpuPackagesFile

    if not packages:
        return ArchspecCpuModel(policies={})
    if directory is None:
        env = os.environ.get("CAPPLAN_KB_DIR")
        directory = Path(env) if env else None
    data = load_kb_file("cpu_packages.json", CpuPackagesFile, directory)
    model = ArchspecCpuModel(policies={})
    known = {f for target in model._targets.values() for f in target.features}
    policies: dict[str, CpuPackagePolicy] = {}
    overrides: dict[str, list[OverrideRule]] = {}
    always: dict[str, dict[str, object]] = {}
    for entry in data.packages:
        policies[entry.package] = CpuPackagePolicy(
            package=entry.package,
            attr=entry.attr,
            dispatch=entry.dispatch,
            mechanism=entry.mechanism,
            reason=entry.reason,
            source=entry.source,
            hwcaps=entry.hwcaps,
            minutes=entry.minutes,
            size_mb=entry.size_mb,
        )
        if entry.always:
            always[entry.package] = dict(entry.always)
        for rule in entry.overrides:
            unknown = sorted(set(rule.features) - known)
            if unknown:
                raise DataError(
                    f"knowledge-base file cpu_packages.json: package '{entry.package}': "
                    f"override feature {', '.join(repr(f) for f in unknown)} is not an "
                    "archspec feature name",
                    hint="fix that entry",
                )
            overrides.setdefault(entry.package, []).append(
                OverrideRule(frozenset(rule.features), rule.argument, rule.value)
            )
    model.policies = policies
    model.overrides = overrides
    model.always = always
    return model
