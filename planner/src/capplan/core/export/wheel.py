"""PEP 825 wheel variants: one label and ``variant.json`` per planned build, and the index's
``{name}-{version}-variants.json``, with PEP 850's ``providers`` table.

Read from python/peps, peps/pep-0825.rst (Draft, 2026-02) and its schema
peps/pep-0825/variant-schema-0.1.1.json (``$id``
https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json): a label is ``^[0-9a-z_.]{1,16}$``;
``variant.json`` holds exactly the wheel's label under ``variants``; the index file lists every
label; ``default-priorities.namespace`` must name every namespace used. A wheel is compatible
when, for every feature it lists, at least one value is compatible with the system. A variant
with no property is the null variant and must be labelled ``null`` (variantlib 0.2.2,
models/variant_info.py; uv refuses the file otherwise).

PEP 850 adds ``providers``: per namespace the package that says what a machine supports
(``requires``) and its ``plugin-api``. Installers (variantlib 0.2.2, uv 0.13.9) refuse a file
without it, and require ``default-priorities.namespace`` to name exactly its keys. The names
are the ones the installers run: uv vendors ``nvidia-variant-provider``
(``nvidia_variant_provider.plugin:NvidiaVariantPlugin``), ``x86-64-variant-provider`` and
``aarch64-variant-provider`` (uv-distribution src/variant/: a vendored provider is matched by
its package name and plugin API, whose default is the name as a module:
``x86_64_variant_provider``; checked with uv 0.13.9, which skips the namespace for any other
plugin API); AMD's is WheelNext's ``amd-variant-provider``
(``amd_variant_provider.plugin:AMDVariantPlugin``).

The properties are what those providers offer. nvidia: ``cuda_version_lower_bound`` (the
driver's CUDA and below) and ``sm_arch``, where a GPU X.Y is offered ``XZ_real`` for every
Z <= Y of its major, best first, then ``X0_virtual`` (uv 0.13.9, checked with
NV_VARIANT_PROVIDER_FORCE_SM_ARCH: a 10.3 GPU is offered 103_real, 101_real, 100_real,
100_virtual). amd: ``gfx_arch`` and ``rocm_version`` as major.minor (amd_variant_provider
plugin.py offers ``f"{major}.{minor}"``). x86_64: ``level`` (v1 to v4) and one ``<feature> ::
on`` per instruction-set feature (provider-variant-x86-64 0.0.1.post2, plugin.py); aarch64:
``version`` (``8a``, ``8.2a``, ``9.0a``) and the same feature properties
(provider-variant-aarch64 0.0.1.post2). What a build does that this vocabulary cannot say is a
note on the variant, never dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from capplan.core.export.common import Export, ExportFile, export_variants, mixed_machine_misses
from capplan.core.families.base import RunLevel
from capplan.core.families.cpu.keys import cpu_spec
from capplan.core.families.cuda.keys import cuda_spec
from capplan.core.families.rocm.keys import rocm_spec
from capplan.core.planning.plan import Plan, Variant

__all__ = [
    "NULL_LABEL",
    "PROVIDERS",
    "SCHEMA_URL",
    "CpuGeneric",
    "normalize_name",
    "wheel_variants",
]

SCHEMA_URL = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
NULL_LABEL = "null"
_LABEL = re.compile(r"[0-9a-z_.]{1,16}")
# default-priorities.namespace: GPUs before CPUs.
_NAMESPACES = ("nvidia", "amd", "x86_64", "aarch64")
PROVIDERS: dict[str, dict[str, Any]] = {
    "nvidia": {
        "requires": ["nvidia-variant-provider"],
        "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
    },
    "amd": {
        "requires": ["amd-variant-provider"],
        "plugin-api": "amd_variant_provider.plugin:AMDVariantPlugin",
    },
    # The default plugin API, the package name as a module (uv skips any other for these).
    "x86_64": {"requires": ["x86-64-variant-provider"], "plugin-api": "x86_64_variant_provider"},
    "aarch64": {
        "requires": ["aarch64-variant-provider"],
        "plugin-api": "aarch64_variant_provider",
    },
}
# The feature properties the CPU providers know (provider-variant-x86-64 and
# provider-variant-aarch64 0.0.1.post2, plugin.py ``all_features``; archspec's names): a
# microarchitecture build states those of its features that its generic level lacks.
_X86_64_FEATURES = frozenset(
    [
        "avx_vnni",
        "cppc",
        "ibrs_enhanced",
        "tsc_adjust",
        "flush_l1d",
        "movdir64b",
        "movdiri",
        "avx512_bf16",
        "avx512_bitalg",
        "avx512_vbmi2",
        "avx512_vnni",
        "avx512_vp2intersect",
        "avx512_vpopcntdq",
        "avx512ifma",
        "avx512vbmi",
        "rdpid",
        "sha_ni",
        "vaes",
        "vpclmulqdq",
        "clwb",
        "clzero",
        "avx512bw",
        "avx512cd",
        "avx512dq",
        "avx512f",
        "avx512vl",
        "clflushopt",
        "gfni",
        "rdseed",
        "xsavec",
        "xsaveopt",
        "adx",
        "avx2",
        "avx",
        "bmi2",
        "bmi1",
        "abm",
        "f16c",
        "fma",
        "movbe",
        "xsave",
        "rdrand",
        "aes",
        "pclmulqdq",
        "sse4a",
        "fsgsbase",
        "sse4_2",
        "sse4_1",
        "ssse3",
        "sse3",
        "cx16",
        "lahf_lm",
        "popcnt",
        "sse2",
        "sse",
        "mmx",
    ]
)
_AARCH64_FEATURES = frozenset(
    [
        "sve2",
        "flagm2",
        "frint",
        "sb",
        "btiecv",
        "paca",
        "pacg",
        "ssbs",
        "asimdfhm",
        "bf16",
        "dcpodp",
        "dgh",
        "dit",
        "flagm",
        "i8mm",
        "ilrcpc",
        "jscvt",
        "rng",
        "sha3",
        "sha512",
        "svebf16",
        "svei8mm",
        "uscat",
        "asimddp",
        "lrcpc",
        "asimdhp",
        "dcpop",
        "fcma",
        "fphp",
        "sve",
        "asimdrdmatomics",
        "aes",
        "asimd",
        "cpuid",
        "crc32",
        "evtstrm",
        "fp",
        "pmull",
        "sha1",
        "sha2",
    ]
)

Properties = dict[str, dict[str, list[str]]]
# target -> (its generic target: x86-64-v3, armv9.0a, aarch64; that generic target's features)
CpuGeneric = Callable[[str], tuple[str, tuple[str, ...]] | None]


def normalize_name(name: str) -> str:
    """A distribution name as wheel file names spell it (the binary distribution format)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _label(stem: str, parts: list[str], properties: Properties) -> str:
    """``cu129_sm86``; a label that would pass 16 characters ends in a digest of its properties
    instead, so it stays unique and stable."""
    label = "_".join([stem, *parts]) if parts else stem
    return label if _LABEL.fullmatch(label) else _digest_label(stem, properties)


def _digest_label(stem: str, properties: Properties) -> str:
    digest = hashlib.sha256(json.dumps(properties, sort_keys=True).encode()).hexdigest()
    stem = stem[:8]
    return f"{stem}_{digest[: 15 - len(stem)]}"


def _nvidia(
    plan: Plan, v: Variant, stated_by_singles: frozenset[str]
) -> tuple[str, Properties, list[str]]:
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
    assert v.cuda is not None
    properties: Properties = {"nvidia": {"cuda_version_lower_bound": [str(v.cuda)]}}
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
    return _label(v.cuda.slug, parts, properties), properties, notes


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


def _amd(plan: Plan, v: Variant, rocm_version: str | None) -> tuple[str, Properties, list[str]]:
    spec = rocm_spec(v)
    assert spec is not None
    notes: list[str] = []
    targets = spec.targets
    if not targets:
        targets = plan.amd_default_targets
        notes.append("a shared ROCm build: it holds nixpkgs' default gfx targets")
    amd: dict[str, list[str]] = {"gfx_arch": sorted({str(t.base) for t in targets})}
    if any(t != t.base for t in targets):
        notes.append("gfx_arch has no xnack/sramecc feature values: stated without them")
    if rocm_version is not None:
        # The AMD provider offers rocm_version as major.minor (7.2 for ROCm 7.2.3).
        amd["rocm_version"] = [".".join(rocm_version.split(".")[:2])]
    else:
        notes.append(
            "rocm_version is not stated: the plan does not record the ROCm release "
            "(give --rocm-version)"
        )
    properties: Properties = {"amd": amd}
    parts = ["_".join(amd["gfx_arch"])] if spec.targets else ["default"]
    return _label("rocm", parts, properties), properties, notes


def _arm_version(generic: str) -> str:
    """archspec's generic Arm target as the aarch64 provider's ``version``: aarch64 -> 8a,
    armv8.2a -> 8.2a (provider-variant-aarch64's _archspec_to_plugin)."""
    return "8a" if generic == "aarch64" else generic.removeprefix("armv")


def _cpu(v: Variant, generic_of: CpuGeneric) -> tuple[str, Properties, list[str]]:
    notes: list[str] = []
    spec = cpu_spec(v)
    # Generic code, and a glibc-hwcaps layout (every level in one wheel, the loader choosing),
    # run on every CPU: the null variant, which installers take when nothing better fits.
    if spec is None or spec.target is None:
        return NULL_LABEL, {}, notes
    found = generic_of(spec.target)
    if found is None:
        notes.append(f"built for {spec.target}: the CPU providers cannot name it")
        return NULL_LABEL, {}, notes
    generic, generic_features = found
    extra = sorted(set(spec.features) - set(generic_features))
    if spec.arch == "x86_64":
        namespace, known = "x86_64", _X86_64_FEATURES
        base = {"level": [generic.rsplit("-", 1)[-1]]} if generic.startswith("x86-64-v") else {}
    else:
        namespace, known = "aarch64", _AARCH64_FEATURES
        base = {"version": [_arm_version(generic)]}
    stated = [f for f in extra if f in known]
    unknown = [f for f in extra if f not in known]
    properties: Properties = {namespace: {**base, **{f: ["on"] for f in stated}}}
    if not properties[namespace]:
        return NULL_LABEL, {}, notes
    if unknown:
        notes.append(
            f"{', '.join(unknown)} of {spec.target} "
            f"{'has' if len(unknown) == 1 else 'have'} no {namespace} provider property: not "
            "stated, so CPUs that lack it but have the stated ones are offered this wheel too"
        )
    if stated:
        notes.append(
            f"built for {spec.target}: stated as its generic level {generic} and the features "
            f"it has beyond it; uv 0.13.9's vendored {namespace} provider offers only "
            f"{next(iter(base), 'no')} values, so uv installs it nowhere and takes the level's "
            "wheel instead"
        )
    stem = spec.target.replace("-", "_")
    return _label(stem, [], properties), properties, notes


def _document(properties_by_label: dict[str, Properties], namespaces: list[str]) -> dict[str, Any]:
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": namespaces},
        "providers": {ns: PROVIDERS[ns] for ns in namespaces},
        "variants": dict(sorted(properties_by_label.items())),
    }


Translate = Callable[
    [Plan, Variant, CpuGeneric, str | None, frozenset[str]], tuple[str, Properties, list[str]]
]
# Each target family's translation into the providers' vocabulary (vendor None: CPU-side
# builds).
_FAMILIES: dict[str | None, Translate] = {
    "nvidia": lambda plan, v, generic_of, rocm, singles: _nvidia(plan, v, singles),
    "amd": lambda plan, v, generic_of, rocm, singles: _amd(plan, v, rocm),
    None: lambda plan, v, generic_of, rocm, singles: _cpu(v, generic_of),
}


def _singles_sm_arch(plan: Plan, variants: tuple[Variant, ...]) -> dict[str, frozenset[str]]:
    """Per system, the sm_arch real values the single-target NVIDIA wheels state."""
    found: dict[str, set[str]] = {}
    for v in variants:
        if v.cuda is not None and not v.fat:
            found.setdefault(v.system, set()).update(
                f"{c.number}_real" for c in cuda_spec(v).capabilities
            )
    return {system: frozenset(values) for system, values in found.items()}


def wheel_variants(
    plan: Plan,
    package: str,
    version: str,
    *,
    cpu_generic: CpuGeneric = lambda target: None,
    rocm_version: str | None = None,
    wheel_name: str | None = None,
) -> Export:
    """The PEP 825 files for ``package``: ``variants/<label>/variant.json`` each, and the index's
    ``<name>-<version>-variants.json``. ``wheel_name``: a non-variant wheel's file name whose
    stem each label is appended to; without it, the wheel names keep ``{tags}`` for the
    python, ABI and platform tags the build system sets."""
    by_label: dict[str, Properties] = {}
    entries: dict[str, dict[str, Any]] = {}
    left_out: list[dict[str, Any]] = []
    breadth: dict[str, int] = {}
    systems_of: dict[str, set[str]] = {}
    variants = export_variants(plan, package)
    singles = _singles_sm_arch(plan, variants)
    for v in variants:
        label, properties, notes = _FAMILIES[v.vendor](
            plan, v, cpu_generic, rocm_version, singles.get(v.system, frozenset())
        )
        if v.cuda is not None and "sm_arch" not in properties["nvidia"]:
            # A fat build every one of whose GPUs a single-target wheel serves: as a wheel it
            # could only tie with them (PEP 825 gives no way to rank it below), so none.
            left_out.append(_left_out(v, notes, "every GPU it runs on has a single-target wheel"))
            continue
        if label in by_label and by_label[label] != properties:
            # Two builds the plan names alike (the fat builds of two systems) that differ:
            # PEP 825 gives each property set its own label.
            label = _digest_label(label.split("_")[0], properties)
        twin = next((o for o, p in by_label.items() if p == properties and o != label), None)
        if twin is not None and v.system not in systems_of[twin]:
            # Equal properties on another system: one label, the wheels differ in their
            # platform tag (the fat build of aarch64 and the sm90 build of x86_64).
            label, twin = twin, None
        breadth[label] = max(breadth.get(label, 0), _breadth(v))
        if twin is not None:
            # Installers refuse two labels with the same properties (variantlib: "share the
            # same variant properties"): the build that runs on more GPUs keeps the label.
            if breadth[label] <= breadth[twin]:
                why = f"its properties are those of {twin}, which runs wherever it does"
                left_out.append(_left_out(v, notes, why))
                continue
            moved = entries.pop(twin)
            del by_label[twin]
            why = f"its properties are those of {label}, which runs wherever it does"
            moved["notes"].append(f"not in the index: {why}")
            moved["label"] = None
            left_out.append(moved)
        systems_of.setdefault(label, set()).add(v.system)
        by_label[label] = properties
        entry = entries.setdefault(
            label, {"label": label, "properties": properties, "variants": [], "notes": []}
        )
        entry["variants"].append(v.name)
        for note in notes:
            if note not in entry["notes"]:
                entry["notes"].append(note)
    used = {ns for props in by_label.values() for ns in props}
    namespaces = [ns for ns in _NAMESPACES if ns in used] or ["nvidia"]
    name = normalize_name(package)
    stem = wheel_name[: -len(".whl")] if wheel_name else f"{name}-{version}-{{tags}}"
    files = [ExportFile(f"{name}-{version}-variants.json", _json(_document(by_label, namespaces)))]
    for label in sorted(by_label):
        entries[label]["wheel"] = f"{stem}-{label}.whl"
        entries[label]["variant_json"] = f"variants/{label}/variant.json"
        # Every wheel of the version carries the index's namespace order and providers
        # (PEP 825 asks tools to keep the files consistent; installers merge them).
        document = _document({label: by_label[label]}, namespaces)
        files.append(ExportFile(f"variants/{label}/variant.json", _json(document)))
    ordered = [entries[label] for label in sorted(entries)]
    ordered.extend(sorted(left_out, key=lambda e: e["variants"]))
    return Export("wheel-variants", package, version, tuple(files), tuple(ordered))


def _breadth(v: Variant) -> int:
    """How widely a build runs, for two builds of equal properties: arch-specific ('a') code
    on one capability, family ('f') code on its family, baseline code on every later minor; a
    microarchitecture build on fewer CPUs than its level's."""
    cpu = cpu_spec(v)
    if cpu is not None and cpu.target is not None and "-v" not in cpu.target:
        return 0
    suffixes = {c.suffix for c in cuda_spec(v).capabilities}
    return 0 if "a" in suffixes else 1 if "f" in suffixes else 2


def _left_out(v: Variant, notes: list[str], why: str) -> dict[str, Any]:
    return {
        "label": None,
        "properties": None,
        "variants": [v.name],
        "notes": [*notes, f"not in the index: {why}"],
    }


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True) + "\n"
