"""PEP 825 wheel variants: one label and ``variant.json`` per planned build, and the index's
``{name}-{version}-variants.json``.

Read from python/peps, peps/pep-0825.rst (Draft, 2026-02) and its schema
peps/pep-0825/variant-schema-0.1.1.json (``$id``
https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json): a label is ``^[0-9a-z_.]{1,16}$``;
``variant.json`` holds exactly the wheel's label under ``variants``; the index file lists every
label; ``default-priorities.namespace`` must name every namespace used. A wheel is compatible
when, for every feature it lists, at least one value is compatible with the system.

The properties use the vocabulary of the issue's providers: ``nvidia :: cuda_version_lower_bound``,
``nvidia :: sm_arch`` (``86_real`` for SASS, ``X0_virtual`` for PTX of major X), ``amd ::
gfx_arch`` and ``amd :: rocm_version``, ``x86_64 :: level``. What a build does that this
vocabulary cannot say is a note on the variant, never dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from capplan.core.export.common import Export, ExportFile, export_variants, mixed_machine_misses
from capplan.core.families.base import RunLevel
from capplan.core.planning.plan import Plan, Variant

__all__ = ["SCHEMA_URL", "normalize_name", "wheel_variants"]

SCHEMA_URL = "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json"
_LABEL = re.compile(r"[0-9a-z_.]{1,16}")
_NAMESPACES = ("nvidia", "amd", "x86_64")  # default-priorities.namespace: GPUs before CPUs

Properties = dict[str, dict[str, list[str]]]


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


def _nvidia(plan: Plan, v: Variant) -> tuple[str, Properties, list[str]]:
    notes: list[str] = []
    real: list[str] = []
    for c in v.capabilities:
        value = f"{c.number}_real"
        if c.suffix == "a":
            notes.append(
                f"sm_{c.cmake} is stated as {value}: sm_arch has no 'a' values; arch-specific "
                f"code runs only on {c.base}, which {value} also means"
            )
        elif c.suffix == "f":
            notes.append(
                f"sm_{c.cmake} is stated as {value}: sm_arch has no 'f' values, so the later "
                f"minors of major {c.major} that family code also runs on are not offered it"
            )
        if value not in real:
            real.append(value)
    virtual: list[str] = []
    for c in v.ptx:
        if c.minor == 0 and not c.suffix:
            virtual.append(f"{c.major}0_virtual")
        else:
            notes.append(
                f"PTX compute_{c.cmake} is not stated: sm_arch names PTX per major "
                f"({c.major}0_virtual), which would claim {c.major}.x GPUs below {c.base} too"
            )
    if v.ptx:
        newest = max(v.ptx)
        notes.append(
            f"PTX compute_{newest.cmake} also runs (JIT-compiled) on GPUs of later majors; "
            "sm_arch cannot say so, so installers do not offer this wheel to them"
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
    properties: Properties = {
        "nvidia": {
            "cuda_version_lower_bound": [str(v.cuda)],
            "sm_arch": real + virtual,
        }
    }
    if v.fat:
        parts = ["fat"]
    else:
        parts = ["sm" + "_".join(c.cmake + ("p" if c in v.ptx else "") for c in v.capabilities)]
    return _label(v.cuda.slug, parts, properties), properties, notes


def _amd(plan: Plan, v: Variant, rocm_version: str | None) -> tuple[str, Properties, list[str]]:
    assert v.rocm is not None
    notes: list[str] = []
    targets = v.rocm.targets
    if not targets:
        targets = plan.amd_default_targets
        notes.append("a shared ROCm build: it holds nixpkgs' default gfx targets")
    amd: dict[str, list[str]] = {"gfx_arch": sorted({str(t.base) for t in targets})}
    if any(t != t.base for t in targets):
        notes.append("gfx_arch has no xnack/sramecc feature values: stated without them")
    if rocm_version is not None:
        amd["rocm_version"] = [rocm_version]
    else:
        notes.append(
            "rocm_version is not stated: the plan does not record the ROCm release "
            "(give --rocm-version)"
        )
    properties: Properties = {"amd": amd}
    parts = ["_".join(amd["gfx_arch"])] if v.rocm.targets else ["default"]
    return _label("rocm", parts, properties), properties, notes


def _cpu(v: Variant, level_of: Callable[[str], str | None]) -> tuple[str, Properties, list[str]]:
    notes: list[str] = []
    spec = v.cpu
    # Generic code, and a glibc-hwcaps layout (every level in one wheel, the loader choosing),
    # run on every CPU: no property is exactly right for them.
    if spec is None:
        return "generic", {}, notes
    if spec.target is None:
        return "hwcaps", {}, notes
    level = level_of(spec.target)
    if spec.arch != "x86_64" or level is None:
        notes.append(
            f"built for {spec.target} ({spec.arch}): only x86_64 :: level is in the vocabulary, "
            "so this wheel has no CPU property and installers offer it to every CPU"
        )
        return _label(spec.target.replace("-", "_"), [], {}), {}, notes
    value = level.rsplit("-", 1)[-1]  # x86-64-v3 -> v3
    if level != spec.target:
        notes.append(
            f"built for {spec.target}; stated as x86_64 :: level :: {value}: the property cannot "
            f"name a microarchitecture, so other {value} CPUs are offered it too"
        )
    properties: Properties = {"x86_64": {"level": [value]}}
    stem = spec.target.replace("-", "_") if level != spec.target else f"x86_64_{value}"
    return _label(stem, [], properties), properties, notes


Render = Callable[
    [Plan, Variant, Callable[[str], str | None], str | None], tuple[str, Properties, list[str]]
]
# Each target family's translation into the PEP 825 vocabulary (vendor None: CPU-side builds).
_FAMILIES: dict[str | None, Render] = {
    "nvidia": lambda plan, v, level, rocm: _nvidia(plan, v),
    "amd": lambda plan, v, level, rocm: _amd(plan, v, rocm),
    None: lambda plan, v, level, rocm: _cpu(v, level),
}


def _document(properties_by_label: dict[str, Properties]) -> dict[str, Any]:
    used = {ns for props in properties_by_label.values() for ns in props}
    namespaces = [ns for ns in _NAMESPACES if ns in used] or ["nvidia"]
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": namespaces},
        "variants": dict(sorted(properties_by_label.items())),
    }


def wheel_variants(
    plan: Plan,
    package: str,
    version: str,
    *,
    cpu_level: Callable[[str], str | None] = lambda target: None,
    rocm_version: str | None = None,
    wheel_name: str | None = None,
) -> Export:
    """The PEP 825 files for ``package``: ``variants/<label>/variant.json`` each, and the index's
    ``<name>-<version>-variants.json``. ``wheel_name``: a non-variant wheel's file name whose
    stem each label is appended to; without it, the wheel names keep ``{tags}`` for the
    python, ABI and platform tags the build system sets."""
    by_label: dict[str, Properties] = {}
    entries: dict[str, dict[str, Any]] = {}
    for v in export_variants(plan, package):
        label, properties, notes = _FAMILIES[v.vendor](plan, v, cpu_level, rocm_version)
        if label in by_label and by_label[label] != properties:
            # Two builds the plan names alike (the fat builds of two systems) that differ:
            # PEP 825 gives each property set its own label.
            label = _digest_label(label.split("_")[0], properties)
        by_label[label] = properties
        entry = entries.setdefault(
            label, {"label": label, "properties": properties, "variants": [], "notes": []}
        )
        entry["variants"].append(v.name)
        for note in notes:
            if note not in entry["notes"]:
                entry["notes"].append(note)
    name = normalize_name(package)
    stem = wheel_name[: -len(".whl")] if wheel_name else f"{name}-{version}-{{tags}}"
    files = [ExportFile(f"{name}-{version}-variants.json", _json(_document(by_label)))]
    for label in sorted(by_label):
        entries[label]["wheel"] = f"{stem}-{label}.whl"
        entries[label]["variant_json"] = f"variants/{label}/variant.json"
        document = _document({label: by_label[label]})
        # Every wheel of the version carries the index's namespace order (PEP 825 asks tools to
        # keep the files consistent; equal default-priorities is the simple way).
        document["default-priorities"] = _document(by_label)["default-priorities"]
        files.append(ExportFile(f"variants/{label}/variant.json", _json(document)))
    return Export(
        "wheel-variants",
        package,
        version,
        tuple(files),
        tuple(entries[label] for label in sorted(entries)),
    )


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True) + "\n"
