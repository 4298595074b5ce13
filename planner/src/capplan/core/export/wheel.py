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
from typing import Any, NamedTuple

from capplan.core.export.common import Export, ExportFile, export_variants
from capplan.core.families.registry import export_writer
from capplan.core.planning.plan import Plan, Variant

__all__ = [
    "AARCH64_FEATURES",
    "NULL_LABEL",
    "PROVIDERS",
    "SCHEMA_URL",
    "X86_64_FEATURES",
    "CpuGeneric",
    "Properties",
    "Translation",
    "WheelContext",
    "digest_label",
    "normalize_name",
    "wheel_label",
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
X86_64_FEATURES = frozenset(
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
AARCH64_FEATURES = frozenset(
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


class WheelContext(NamedTuple):
    """What a family's wheel translation (``<family>_wheel`` in core/families/<family>/
    export.py) may need besides the variant: the package's exported variants (CUDA's fat
    build ranks below its single-target wheels), the CPU targets' generic levels, the ROCm
    release."""

    variants: tuple[Variant, ...]
    cpu_generic: CpuGeneric
    rocm_version: str | None


# A family's translation of a variant: its label (None: no wheel), properties, notes, and
# why a variant has no wheel.
Translation = tuple[str | None, Properties, list[str], str]


def normalize_name(name: str) -> str:
    """A distribution name as wheel file names spell it (the binary distribution format)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_label(stem: str, parts: list[str], properties: Properties) -> str:
    """``cu129_sm86``; a label that would pass 16 characters ends in a digest of its properties
    instead, so it stays unique and stable."""
    label = "_".join([stem, *parts]) if parts else stem
    return label if _LABEL.fullmatch(label) else digest_label(stem, properties)


def digest_label(stem: str, properties: Properties) -> str:
    digest = hashlib.sha256(json.dumps(properties, sort_keys=True).encode()).hexdigest()
    stem = stem[:8]
    return f"{stem}_{digest[: 15 - len(stem)]}"


def _document(properties_by_label: dict[str, Properties], namespaces: list[str]) -> dict[str, Any]:
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": namespaces},
        "providers": {ns: PROVIDERS[ns] for ns in namespaces},
        "variants": dict(sorted(properties_by_label.items())),
    }


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
    context = WheelContext(variants, cpu_generic, rocm_version)
    for v in variants:
        # The variant's family translates it into the providers' vocabulary
        # (core/families/<family>/export.py); None: no wheel, and why.
        _, translate = export_writer("wheel", v)
        label, properties, notes, why = translate(plan, v, context)
        if label is None:
            left_out.append(_left_out(v, notes, why))
            continue
        if label in by_label and by_label[label] != properties:
            # Two builds the plan names alike (the fat builds of two systems) that differ:
            # PEP 825 gives each property set its own label.
            label = digest_label(label.split("_")[0], properties)
        twin = next((o for o, p in by_label.items() if p == properties and o != label), None)
        if twin is not None and v.system not in systems_of[twin]:
            # Equal properties on another system: one label, the wheels differ in their
            # platform tag (the fat build of aarch64 and the sm90 build of x86_64).
            label, twin = twin, None
        _, width = export_writer("wheel_breadth", v)
        breadth[label] = max(breadth.get(label, 0), width(v))
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


def _left_out(v: Variant, notes: list[str], why: str) -> dict[str, Any]:
    return {
        "label": None,
        "properties": None,
        "variants": [v.name],
        "notes": [*notes, f"not in the index: {why}"],
    }


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True) + "\n"
