"""The CUDA family's part of the exports (``capplan export``): its variants as PEP 825 wheel
variants (the nvidia provider's properties, core/export/wheel.py), as rattler-build rows keyed
on ``__cuda_arch`` (core/export/conda.py's sources) and as Spack specs.

The spec grammar and recipes are core/export/spack.py's (spack-packages' CudaPackage gives
``cuda`` and ``cuda_arch``); the exporter asks the variant's family through the registry
(:func:`capplan.core.families.registry.export_writer`).
"""

from __future__ import annotations

from typing import Any

from capplan.core.export.spack import SPACK_PACKAGES, SpackPackage, generic_target
from capplan.core.export.wheel import Properties, Translation, WheelContext, wheel_label
from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import how_runs
from capplan.core.families.cuda.fleet import cuda_part
from capplan.core.families.cuda.keys import cuda_spec, cuda_version
from capplan.core.planning.plan import Plan, Variant

__all__ = [
    "cuda_arch_spec",
    "cuda_conda",
    "cuda_conda_fallbacks",
    "cuda_spack",
    "cuda_wheel",
    "cuda_wheel_breadth",
    "cuda_wheel_properties",
    "fleet_nvidia",
    "mixed_machine_misses",
]


def cuda_spack(
    plan: Plan, v: Variant, recipe: SpackPackage, version: str
) -> tuple[list[str], list[str]]:
    """(specs, notes): one spec, ``+cuda cuda_arch=...`` on the recipe or on the package that
    builds its CUDA code (py-torchvision's through py-torch)."""
    notes = []
    cuda = cuda_spec(v).version
    archs = ",".join(c.cmake for c in cuda_spec(v).capabilities)
    target = f"target={generic_target(v.system)}"
    gpu = f"+cuda cuda_arch={archs}"
    if recipe.cuda:
        rocm = " ~rocm" if recipe.rocm else ""
        spec = f"{recipe.name}{version} {gpu}{rocm} {target} ^cuda@{cuda}"
    else:
        carrier = SPACK_PACKAGES[recipe.via or ""]
        rocm = " ~rocm" if carrier.rocm else ""
        spec = f"{recipe.name}{version} {target} ^{carrier.name} {gpu}{rocm} ^cuda@{cuda}"
        notes.append(
            f"{recipe.name} has no cuda variant: the CUDA targets are {carrier.name}'s, which "
            "it builds its CUDA code with"
        )
    if cuda_spec(v).ptx:
        notes.append(
            "cuda_arch has no PTX choice: Spack's CudaPackage flags decide what PTX "
            f"is embedded, not the plan's compute_{max(cuda_spec(v).ptx).cmake}"
        )
    notes.append(
        f"target={generic_target(v.system)}: the plan's GPU builds carry generic CPU code "
        "(Spack's own ML stack pins x86_64_v3 instead)"
    )
    return [spec], notes


def cuda_wheel(plan: Plan, v: Variant, context: WheelContext) -> Translation:
    """``capplan export wheel-variants``' translation of a CUDA build (None for a fat build
    every one of whose GPUs a single-target wheel serves: as a wheel it could only tie with
    them, and PEP 825 gives no way to rank it below, so none)."""
    singles = (
        _singles_sm_arch(context.variants).get(v.system, frozenset()) if v.fat else frozenset()
    )
    label, properties, notes = cuda_wheel_properties(plan, v, singles)
    if "sm_arch" not in properties["nvidia"]:
        return None, properties, notes, "every GPU it runs on has a single-target wheel"
    return label, properties, notes, ""


def cuda_wheel_breadth(v: Variant) -> int:
    """How widely a CUDA build runs, for two builds of equal properties: arch-specific ('a')
    code on one capability, family ('f') code on its family, baseline code on every later
    minor."""
    suffixes = {c.suffix for c in cuda_spec(v).capabilities}
    return 0 if "a" in suffixes else 1 if "f" in suffixes else 2


def cuda_wheel_properties(
    plan: Plan, v: Variant, stated_by_singles: frozenset[str]
) -> tuple[str, Properties, list[str]]:
    """A CUDA build as the nvidia provider's properties (``cuda_version_lower_bound``,
    ``sm_arch``), its label and notes; ``stated_by_singles``: the sm_arch real values the
    package's single-target wheels on its system state (a fat build states none of them)."""
    notes: list[str] = []
    real: list[str] = []
    for c in cuda_spec(v).capabilities:
        value = f"{c.number}_real"
        if c.suffix == "a":
            notes.append(
                f"sm_{c.cmake} is stated as {value}: sm_arch has no 'a' values, and the nvidia "
                f"provider offers {value} to every later {c.major}.x GPU as well (a 10.3 GPU is "
                f"offered 100_real), where arch-specific code does not run: it runs only on "
                f"{c.base}"
            )
        # An 'f' target needs no note: family code runs on the later minors of its major,
        # which is what the provider offers X0_real to.
        if value not in real:
            real.append(value)
    virtual: list[str] = []
    for c in cuda_spec(v).ptx:
        value = f"{c.major}0_virtual"
        if c.minor == 0 and not c.suffix:
            if value not in virtual:
                virtual.append(value)
        else:
            notes.append(
                f"PTX compute_{c.cmake} is not stated: sm_arch names PTX per major "
                f"({value}), which would claim {c.major}.x GPUs below {c.base} too"
            )
    if v.fat:
        real, virtual = _fat_sm_arch(v, real, virtual, stated_by_singles, notes)
    if cuda_spec(v).ptx:
        newest = max(cuda_spec(v).ptx)
        notes.append(
            f"PTX compute_{newest.cmake} also runs (JIT-compiled) on GPUs of later majors; "
            "the nvidia provider offers a GPU only its own major's X0_virtual, so installers "
            "do not offer this wheel to them"
        )
    jit = sorted({s.gpu for s in v.serves if s.level is RunLevel.PTX_JIT})
    if jit:
        notes.append(f"serves {', '.join(jit)} through PTX only, which installers cannot see")
    misses = mixed_machine_misses(plan, v, keyed_on="highest")
    if misses:
        notes.append(
            "the nvidia provider keys on a machine's highest GPU: a machine that also holds "
            f"{', '.join(misses)} can be given this wheel, which does not run there"
        )
    cuda = cuda_spec(v).version
    assert cuda is not None
    properties: Properties = {"nvidia": {"cuda_version_lower_bound": [str(cuda)]}}
    if real or virtual:
        properties["nvidia"]["sm_arch"] = real + virtual
    if v.fat:
        parts = ["fat"]
    else:
        parts = [
            "sm"
            + "_".join(
                c.cmake + ("p" if c in cuda_spec(v).ptx else "") for c in cuda_spec(v).capabilities
            )
        ]
    return wheel_label(cuda.slug, parts, properties), properties, notes


def _fat_sm_arch(
    v: Variant,
    real: list[str],
    virtual: list[str],
    stated_by_singles: frozenset[str],
    notes: list[str],
) -> tuple[list[str], list[str]]:
    """A fat wheel must lose to every single-target wheel that runs on a GPU: an installer
    ranks wheels by their best value the GPU is offered, and a fat wheel holding every
    ``XY_real`` ties with each single-target wheel on it (and wins the tie by label). So it
    states only the real values no single-target wheel states, and its SASS for an X.0 as
    ``X0_virtual``, which the provider offers after every real value: SASS for X.0 runs on
    every X.y GPU, as the virtual value says."""
    kept = [value for value in real if value not in stated_by_singles]
    below = [value for value in real if value in stated_by_singles]
    lows = [
        f"{c.major}0_virtual"
        for c in cuda_spec(v).capabilities
        if c.minor == 0
        and not c.suffix
        and f"{c.number}_real" in below
        and f"{c.major}0_virtual" not in virtual
    ]
    virtual = virtual + sorted(set(lows), key=lambda text: int(text.split("_")[0]))
    if below:
        notes.append(
            f"{', '.join(below)} left out of the fat wheel's sm_arch: a single-target wheel "
            "states each, and the fat wheel must rank below it on those GPUs"
        )
    if lows:
        notes.append(
            f"SASS for {', '.join(v[: -len('0_virtual')] + '.0' for v in sorted(set(lows)))} "
            "is stated as the major's X0_virtual: it runs on every later minor of the major, "
            "and ranks below every real value"
        )
    return kept, virtual


def _singles_sm_arch(variants: tuple[Variant, ...]) -> dict[str, frozenset[str]]:
    """Per system, the sm_arch real values the single-target NVIDIA wheels state."""
    found: dict[str, set[str]] = {}
    for v in variants:
        if cuda_version(v) is not None and not v.fat:
            found.setdefault(v.system, set()).update(
                f"{c.number}_real" for c in cuda_spec(v).capabilities
            )
    return {system: frozenset(values) for system, values in found.items()}


def _cudaarchs(capabilities: tuple[Capability, ...], ptx: tuple[Capability, ...]) -> str:
    """CMake's CUDA_ARCHITECTURES: ``86-real`` is SASS alone, ``86`` SASS and PTX."""
    return ";".join(c.cmake if c in ptx else f"{c.cmake}-real" for c in capabilities)


def _torch_list(capabilities: tuple[Capability, ...], ptx: tuple[Capability, ...]) -> str:
    """torch's TORCH_CUDA_ARCH_LIST: ``8.6``, ``9.0a``, ``12.0+PTX``."""
    return " ".join(f"{c}+PTX" if c in ptx else str(c) for c in capabilities)


def cuda_arch_spec(capabilities: tuple[Capability, ...], ptx: tuple[Capability, ...]) -> str:
    """The ``__cuda_arch`` versions a build runs on, as a conda version spec: SASS for X.Y on
    X.Y up to the next major (the lowest minor of a major covers the others), PTX on X.Y and
    later, arch-specific code on X.Y alone."""
    lowest_sass: dict[int, Capability] = {}
    exact: list[Capability] = []
    later: list[Capability] = []
    for c in capabilities:
        if c.suffix == "a":
            exact.append(c)
        elif c in ptx:
            later.append(c)
        elif c.major not in lowest_sass or c < lowest_sass[c.major]:
            lowest_sass[c.major] = c
    sass = [c for _, c in sorted(lowest_sass.items())]
    if later:
        lowest_ptx = min(later)
        sass = [c for c in sass if (c.major, c.minor) < (lowest_ptx.major, lowest_ptx.minor)]
    parts = [f">={c.major}.{c.minor},<{c.major + 1}" for c in sass]
    if later:
        parts.append(f">={lowest_ptx.major}.{lowest_ptx.minor}")
    covered = {c.major: c for c in sass}
    for c in exact:  # arch-specific code: X.Y alone, unless a wider part holds it already
        held = covered.get(c.major)
        if (held is None or held.minor > c.minor) and not (
            later and (c.major, c.minor) >= (lowest_ptx.major, lowest_ptx.minor)
        ):
            parts.append(f"=={c.major}.{c.minor}")
    return "|".join(dict.fromkeys(parts))


def cuda_conda(plan: Plan, v: Variant, torch_like: bool) -> dict[str, Any]:
    """``capplan export conda``'s row of a CUDA build: CMake's and torch's target lists and
    the ``__cuda_arch`` versions it runs on (and its targets, for the fallback row)."""
    cuda = cuda_spec(v).version
    assert cuda is not None
    nvidia = fleet_nvidia(plan)
    served = [nvidia[s.gpu][0] for s in v.serves if s.gpu in nvidia]
    lowest = min(served) if served else min(cuda_spec(v).capabilities)
    notes = []
    misses = mixed_machine_misses(plan, v, keyed_on="lowest")
    if misses:
        notes.append(
            "__cuda_arch is a machine's lowest GPU: a machine that also holds "
            f"{', '.join(misses)} can be given this build, which does not run there"
        )
    row: dict[str, Any] = {
        "variants": [v.name],
        "system": v.system,
        "cuda": str(cuda),
        "CUDAARCHS": _cudaarchs(cuda_spec(v).capabilities, cuda_spec(v).ptx),
        "cuda_arch_min": str(lowest.base),
        "requires": f"__cuda_arch {cuda_arch_spec(cuda_spec(v).capabilities, cuda_spec(v).ptx)}",
        "serves": sorted({s.gpu for s in v.serves}),
        "notes": notes,
        # Rows serving fleet GPUs above rows for extra targets (an 'a' or 'f' build beside
        # the plain one): the plan picks those for its GPUs.
        "_key": (
            0,
            int(bool(served)),
            *lowest.base.sort_key,
            cuda.major,
            cuda.minor,
            *(-n for c in cuda_spec(v).capabilities for n in c.sort_key),
        ),
    }
    if torch_like:
        row["TORCH_CUDA_ARCH_LIST"] = _torch_list(cuda_spec(v).capabilities, cuda_spec(v).ptx)
    row.update(_caps=cuda_spec(v).capabilities, _ptx=cuda_spec(v).ptx)
    return row


def cuda_conda_fallbacks(
    plan: Plan, package: str, rows: list[dict[str, Any]], system: str, torch_like: bool
) -> list[dict[str, Any]]:
    """Per CUDA version of ``system``: the plan's fat build when it has one, else every target
    its rows hold in one build, unless a row already is that build."""
    found = []
    built = {v: cuda_version(v) for v in plan.variants_of(package) if v.system == system}
    cudas = sorted({c for c in built.values() if c})
    for cuda in cudas:
        fat = [v for v, c in built.items() if v.fat and c == cuda and not v.independent]
        mine = [r for r in rows if r["system"] == system and r["cuda"] == str(cuda)]
        if fat:
            capabilities, ptx = cuda_spec(fat[0]).capabilities, cuda_spec(fat[0]).ptx
        else:
            capabilities = tuple(sorted({c for r in mine for c in r["_caps"]}))
            ptx = tuple(sorted({c for r in mine for c in r["_ptx"]}))
        archs = _cudaarchs(capabilities, ptx)
        if not fat and any(r["CUDAARCHS"] == archs for r in mine):
            continue  # one row holds every target already: it is the fallback
        row: dict[str, Any] = {
            "variants": [v.name for v in fat],
            "system": system,
            "cuda": str(cuda),
            "CUDAARCHS": archs,
            "cuda_arch_min": str(min(capabilities).base),
            "requires": f"__cuda_arch {cuda_arch_spec(capabilities, ptx)}",
            "serves": sorted(
                {g for r in mine for g in r["serves"]} | {s.gpu for v in fat for s in v.serves}
            ),
            "notes": [
                "the fallback for clients without __cuda_arch: its __cuda_arch versions are a "
                "run constraint, which applies only where the virtual package exists, so such "
                "a client installs this row and no other"
            ],
            "fallback": True,
        }
        if torch_like:
            row["TORCH_CUDA_ARCH_LIST"] = _torch_list(capabilities, ptx)
        found.append(row)
    return found


def fleet_nvidia(plan: Plan) -> dict[str, tuple[Capability, bool, str]]:
    """Fleet label -> (capability, Jetson, system)."""
    return {g.label: (g.capability, g.jetson, g.system) for g in cuda_part(plan).fleet}


def _runs(plan: Plan, v: Variant, label: str) -> bool:
    nvidia = fleet_nvidia(plan)
    if label in nvidia:
        capability, jetson, _ = nvidia[label]
        spec = cuda_spec(v)
        verdict = how_runs(capability, spec.capabilities, spec.ptx, jetson=jetson)
        return verdict.level is not RunLevel.CANNOT_RUN
    return False


def mixed_machine_misses(plan: Plan, v: Variant, *, keyed_on: str) -> tuple[str, ...]:
    """The fleet's NVIDIA GPUs (of the variant's system) that this build cannot run, yet that
    share a machine with a GPU it is chosen for: an installer that keys on one GPU (the highest
    for the PEP 825 nvidia provider, ``keyed_on="highest"``; the lowest for CEP 46's
    ``__cuda_arch``, ``keyed_on="lowest"``) can give such a machine this build."""
    nvidia = fleet_nvidia(plan)
    served = [nvidia[s.gpu][0] for s in v.serves if s.gpu in nvidia]
    if not served:
        return ()
    misses = []
    for label, (capability, _, system) in nvidia.items():
        if system != v.system or _runs(plan, v, label):
            continue
        below = capability < max(served) if keyed_on == "highest" else capability > min(served)
        if below:
            misses.append(f"{label} ({capability})")
    where = f" on {v.system}" if len(plan.systems) > 1 else ""
    return tuple(f"{m}{where}" for m in sorted(set(misses)))
