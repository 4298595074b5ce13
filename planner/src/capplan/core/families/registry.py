"""The target families capplan knows, in one table: the only module that names them.

Everything else reaches a family through :mod:`capplan.core.families.base` and the functions
here. Adding a family (Intel GPUs, say) is one package under ``core/families/`` and one line in
``_FAMILIES`` below (docs/layout.md, "How to add a family"): the package's ``entry.py`` says
what the family has (a GPU family, a verifier, a detector, its planning), its ``keys.py`` how
its spec of a variant is written. A family's modules are imported when first asked for, so a
command that only looks a GPU up never loads the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capplan.core.binaries.doctor import Driver, Gpu
    from capplan.core.binaries.reading import BinaryReader

    # The interface, for annotations only: a command that asks one family one question
    # (gpus "RTX 3090", inspect's readers) does not load base.py's protocols and dataclasses
    # (about 5 ms of its start, issue 42).
    from capplan.core.families.base import (
        Dispatcher,
        FamilyPlanning,
        GpuFamily,
        GpuNames,
        NixpkgsCheck,
        ReadsKbFile,
        TargetFamily,
        Verifier,
    )

    # Re-exported for annotations: the CPU family's target model, which the CPU adapter gives
    # (cpu_adapter below) and the planner takes, and the families' knowledge bases, which the
    # knowledge-base loader (capplan.adapters.kb) reads through amd_kb and cpu_packages below.
    from capplan.core.families.cpu.kb import CpuPackagesFile as CpuPackagesFile
    from capplan.core.families.cpu.planning import CpuModel as CpuModel
    from capplan.core.families.cuda.kb import NvidiaKnowledgeBase
    from capplan.core.families.rocm.kb import AmdKnowledgeBase as AmdKnowledgeBase
    from capplan.core.model.kb import KnowledgeBase, PackageInfo
    from capplan.core.planning.config import Config
    from capplan.core.planning.plan import Plan, Variant

__all__ = [
    "adapter_owners",
    "amd_kb",
    "amd_kb_files",
    "binary_readers",
    "capability_kb",
    "cpu_adapter",
    "cpu_detector",
    "cpu_family",
    "cpu_packages",
    "detected_gpu",
    "dispatcher",
    "doctor_driver",
    "doctor_gpu",
    "export_writer",
    "export_writers",
    "family_for_text",
    "gccarch_feature",
    "gpu_detectors",
    "gpu_families",
    "gpu_names",
    "gpu_verifiers",
    "has_export",
    "is_cpu_level",
    "is_cpu_side",
    "is_driver_version",
    "job_keys",
    "machine_names",
    "machine_section",
    "nix_keys",
    "nixpkgs_checks",
    "nvidia_kb",
    "nvidia_kb_files",
    "plan_keys",
    "planning_families",
    "table_keys",
    "verify_targets",
]


# The families, one line each, in planning order (decisions and error messages follow it; the
# CPU family plans last: it keeps CPU levels to the packages no GPU family built). The order is
# also the GPU detectors' (the order detect lists GPUs in) and the order each family's keys are
# written in; GPU families claim fleet entries and spellings in it, the fallback last.
_FAMILIES = (
    "capplan.core.families.cuda",
    "capplan.core.families.rocm",
    "capplan.core.families.cpu",
)


@cache
def _entries() -> tuple[Any, ...]:
    return tuple(import_module(f"{package}.entry") for package in _FAMILIES)


def _gpu_entries() -> tuple[Any, ...]:
    """The GPU families' entries in claiming order: the fallback last."""
    gpus = [e for e in _entries() if hasattr(e, "gpu_family")]
    return tuple(sorted(gpus, key=lambda e: bool(e.FALLBACK)))


def gpu_families(kb: KnowledgeBase) -> tuple[GpuFamily[Any], ...]:
    """The GPU families in claiming order: the fallback (CUDA) last."""
    return tuple(e.gpu_family(kb) for e in _gpu_entries())


def gpu_names(kb: KnowledgeBase) -> GpuNames:
    """The GPU models by name and PCI id of the family whose entry has ``gpu_names`` (NVIDIA's:
    ``capplan gpus`` answers from it); only that family's modules are imported, so an NVIDIA
    answer loads no other family."""
    names: GpuNames = next(e.gpu_names(kb) for e in _entries() if hasattr(e, "gpu_names"))
    return names


def gpu_verifiers(
    kb: Callable[[], KnowledgeBase],
    capability_kb: Callable[[], KnowledgeBase],
    amd_kb: Callable[[], AmdKnowledgeBase],
) -> tuple[Verifier, ...]:
    """What ``capplan verify`` asks each GPU family, in claiming order (the fallback, CUDA,
    last). The loaders are called only when a question needs them: the whole knowledge base,
    the capability table alone, the AMD knowledge base."""
    loaders = {"kb": kb, "capability_kb": capability_kb, "amd_kb": amd_kb}
    return tuple(e.verifier(**loaders) for e in _gpu_entries() if hasattr(e, "verifier"))


@cache
def binary_readers() -> tuple[BinaryReader, ...]:
    """Each GPU family's reader of its device code in binaries (``capplan inspect``), in the
    table's order: a reader skips what the earlier ones found (no AMD bundle sits inside a
    valid NVIDIA fatbin container)."""
    return tuple(e.binary_reader() for e in _entries() if hasattr(e, "binary_reader"))


# Each family's adapters, which read the machine or a database and so live in capplan.adapters
# (core/ imports none of them): named here as "module:function", imported by
# capplan.adapters.families when a command asks. A GPU detector's function takes the knowledge
# base and board= (whether to read a board's own description, the Jetson device tree, when no
# driver tool answers) and returns a base.Found; the detection order is the order detect lists
# the GPUs in. Each GPU family's is its entry's DETECTOR.
_CPU_DETECTOR = "capplan.adapters.detect.cpu:detect_cpu"
# The CPU family's target model (archspec's, with kb/cpu_packages.json's package entries).
_CPU_ADAPTER = "capplan.adapters.cpu_archspec:load_cpu_model"


def gpu_detectors() -> tuple[str, ...]:
    """Every GPU family's detector, as ``module:function``, in detection order."""
    return tuple(e.DETECTOR for e in _entries() if hasattr(e, "DETECTOR"))


def cpu_detector() -> str:
    """The CPU family's detector (``module:function``): this machine's CPU and, when none is
    known, why."""
    return _CPU_DETECTOR


def cpu_adapter() -> str:
    """The loader of the CPU family's target model (``module:function``; its ``packages=False``
    skips the package file)."""
    return _CPU_ADAPTER


def nvidia_kb_files() -> dict[str, type]:
    """The CUDA family's knowledge-base files (``kb/capabilities.json``, ``packages.json``,
    ...) and the model of each."""
    from capplan.core.families.cuda.kb import NVIDIA_KB_FILES

    return dict(NVIDIA_KB_FILES)


def nvidia_kb(read: ReadsKbFile) -> tuple[Mapping[str, PackageInfo], NvidiaKnowledgeBase]:
    """The package list every family plans from (kb/packages.json, written with CUDA's
    capability limits) and the CUDA family's part of the knowledge base, their files read
    through ``read`` (the loader's)."""
    from capplan.core.families.cuda.kb import read_nvidia_kb

    return read_nvidia_kb(read)


def capability_kb(read: ReadsKbFile) -> NvidiaKnowledgeBase:
    """The CUDA family's capability table and releases alone (``caps``, ``verify
    --expect``)."""
    from capplan.core.families.cuda.kb import read_capability_kb

    return read_capability_kb(read)


def amd_kb_files() -> dict[str, type]:
    """The ROCm family's knowledge-base files (``kb/amd_*.json``) and the model of each."""
    from capplan.core.families.rocm.kb import AMD_KB_FILES

    return dict(AMD_KB_FILES)


def amd_kb(read: ReadsKbFile) -> AmdKnowledgeBase:
    """The ROCm family's knowledge base, its files read through ``read`` (the loader's)."""
    from capplan.core.families.rocm.kb import read_amd_kb

    return read_amd_kb(read)


def cpu_packages(read: ReadsKbFile) -> CpuPackagesFile:
    """The CPU family's package file (``kb/cpu_packages.json``), read through ``read``."""
    from capplan.core.families.cpu.kb import read_cpu_packages

    return read_cpu_packages(read)


def doctor_gpu(kb: KnowledgeBase, text: str) -> Gpu:
    """The GPU ``capplan doctor --device`` names, as the first GPU family that knows the
    spelling builds it (core/families/<family>/doctor.py, in claiming order: the fallback,
    CUDA, last, refuses a name no family knows with "did you mean")."""
    found = (e.doctor_gpu(kb, text) for e in _gpu_entries() if hasattr(e, "doctor_gpu"))
    gpu: Gpu = next(g for g in found if g is not None)
    return gpu


def detected_gpu(vendor: str, name: str, target: object, kb: KnowledgeBase) -> Gpu:
    """A device a family's detector found (``base.Device``: its vendor, name and target) as
    ``capplan doctor`` judges it, built by that vendor's family."""
    entries = {e.VENDOR: e for e in _gpu_entries() if hasattr(e, "detected_gpu")}
    gpu: Gpu = entries[vendor].detected_gpu(name, target, kb)
    return gpu


def _driver_entry() -> Any:
    # The family whose GPU driver doctor checks (``--driver``: the NVIDIA driver).
    return next(e for e in _entries() if hasattr(e, "driver_facts"))


def doctor_driver(kb: KnowledgeBase, version: str | None) -> Driver:
    """The GPU driver ``version`` (None: unknown) with the knowledge base's driver table, as
    ``capplan doctor`` checks it."""
    driver: Driver = _driver_entry().driver_facts(kb, version)
    return driver


def is_driver_version(text: str) -> bool:
    """Whether ``text`` (stripped) spells a version of the driver doctor checks."""
    spells: bool = _driver_entry().is_driver_version(text)
    return spells


def adapter_owners() -> dict[str, str]:
    """The adapter modules a family declares its own (its entry's ``ADAPTERS``), each with the
    family's short name (``"cpu"``): they may import that family's modules, as its detector
    does."""
    return {
        module: package.rpartition(".")[2]
        for package, entry in zip(_FAMILIES, _entries(), strict=True)
        for module in getattr(entry, "ADAPTERS", ())
    }


def cpu_family(model: CpuModel) -> TargetFamily[str]:
    """The CPU family, judging CPUs with ``model`` (archspec's, from the adapters)."""
    from capplan.core.families.cpu.planning import CpuFamily

    return CpuFamily(model)


def is_cpu_side(v: Variant) -> bool:
    """Whether ``v`` is a CPU-side package's build (generic, per level or hwcaps) rather than a
    GPU family's variant."""
    from capplan.core.families.cpu.planning import is_cpu_side as cpu_side

    return cpu_side(v)


def gccarch_feature(v: Variant) -> str | None:
    """The ``gccarch-<arch>`` system feature a CPU-level variant's job requires (None for
    every other variant): the matrix's part of the CPU family."""
    spec = v.spec
    # Asked of every job of a matrix: a GPU family's variant is answered without a call.
    if spec is None or spec.family != "cpu":
        return None
    return _cpu_feature()(v)


@cache
def _cpu_feature() -> Callable[[Variant], str | None]:
    from capplan.core.families.cpu.keys import gccarch_feature as feature

    return feature


def dispatcher(kb: KnowledgeBase) -> Dispatcher:
    """What the ``<package>-dispatch`` outputs need (their tables, the fallback, their cost),
    from the family whose variants they start: the one whose entry has ``dispatcher``
    (CUDA's; its selector picks by capability)."""
    found: Dispatcher = next(e.dispatcher(kb) for e in _entries() if hasattr(e, "dispatcher"))
    return found


def nixpkgs_checks(
    kb: KnowledgeBase,
    *,
    policy_cuda: Sequence[str] | None,
    cpu_packages: CpuPackagesFile | None,
) -> tuple[NixpkgsCheck, ...]:
    """Each family's part of ``capplan nixpkgs check``, in the table's order: ``policy_cuda``
    is a config's ``policy.cuda`` as written (the CUDA family resolves it as the planner does:
    an unknown version is its InvalidInputError), ``cpu_packages`` the CPU package file
    (adapters/kb.py's load_cpu_packages; None: no CPU facts)."""
    return tuple(
        e.nixpkgs_check(kb, policy_cuda=policy_cuda, cpu_packages=cpu_packages)
        for e in _entries()
        if hasattr(e, "nixpkgs_check")
    )


def family_for_text(families: Sequence[GpuFamily[Any]], text: str) -> GpuFamily[Any]:
    """The first family that claims a user's spelling (``families`` ends with a fallback)."""
    return next(f for f in families if f.claims(text))


def planning_families(
    kb: KnowledgeBase, config: Config, cpu: CpuModel | None = None
) -> tuple[FamilyPlanning, ...]:
    """Every family's planning for one plan, in planning order (decisions and error messages
    follow it); the fallback family (CUDA) claims what the others leave. The CPU family plans
    last: it keeps CPU levels to the packages no GPU family built."""
    entries = _entries()
    # What the fallback leaves to the others: the spellings the other GPU families claim.
    others = tuple(e.gpu_family(kb) for e in _gpu_entries() if not e.FALLBACK)
    found = {
        e: e.planning(kb, config, others=others if getattr(e, "FALLBACK", False) else (), cpu=cpu)
        for e in sorted(entries, key=lambda e: bool(getattr(e, "FALLBACK", False)))
    }
    return tuple(found[e] for e in entries)


@cache
def _key_functions(kind: str) -> tuple[tuple[str, Callable[..., Any]], ...]:
    # Each family's writers of a variant's spec (core/families/<family>/keys.py, functions
    # named <family>_<kind>), with the family's name: its plan.json keys (pkgs/variant.nix
    # reads them), its ``capplan plan --json`` fields, its matrix job fields, ...; a family
    # without the writer (the CPU family has no verify targets) is left out.
    found = []
    for package in _FAMILIES:
        name = package.rpartition(".")[2]
        function = getattr(import_module(f"{package}.keys"), f"{name}_{kind}", None)
        if function is not None:
            found.append((name, function))
    return tuple(found)


def _merged(kind: str, v: Variant) -> dict[str, Any]:
    """Every family's ``kind`` keys of ``v``, in the table's order; where two write one key
    (CUDA writes its keys on every variant, empty on others'), the variant's own family's
    value stands."""
    found: dict[str, Any] = {}
    owner = None if v.spec is None else v.spec.family
    own: dict[str, Any] = {}
    for name, keys in _key_functions(kind):
        written = keys(v)
        found.update(written)
        if name == owner:
            own = written
    found.update(own)
    return found


def nix_keys(v: Variant) -> dict[str, Any]:
    """Every family's plan.json keys of ``v``."""
    return _merged("nix_keys", v)


def plan_keys(v: Variant) -> dict[str, Any]:
    """Every family's ``capplan plan --json`` fields of ``v``."""
    return _merged("plan_keys", v)


def job_keys(v: Variant) -> dict[str, Any]:
    """Every family's fields of ``v``'s matrix job."""
    return _merged("job_keys", v)


def table_keys(v: Variant) -> dict[str, str]:
    """Every family's cells of ``v`` in ``capplan plan``'s tables: ``targets``, ``toolkit``
    (the CUDA column) and ``ptx`` of a GPU family's variant, ``cpu`` of a CPU-side build."""
    return _merged("table_keys", v)


@cache
def _export_functions(kind: str) -> dict[str, Callable[..., Any]]:
    # Each family's exporters (core/families/<family>/export.py, functions named
    # <family>_<kind>), by the family's name in the table's order; a family without the module
    # or the function (the CPU family writes no conda row) is left out.
    found: dict[str, Callable[..., Any]] = {}
    for package in _FAMILIES:
        name = package.rpartition(".")[2]
        if find_spec(f"{package}.export") is None:
            continue
        function = getattr(import_module(f"{package}.export"), f"{name}_{kind}", None)
        if function is not None:
            found[name] = function
    return found


def _export_family(v: Variant) -> str:
    # A generic CPU build (no spec) is the CPU family's.
    return "cpu" if v.spec is None else v.spec.family


def has_export(kind: str, v: Variant) -> bool:
    """Whether ``v``'s family has a ``kind`` exporter (``conda``: the GPU families)."""
    return _export_family(v) in _export_functions(kind)


def export_writer(kind: str, v: Variant) -> tuple[str, Callable[..., Any]]:
    """The family that owns ``v`` with its ``kind`` exporter: ``<family>_<kind>`` in
    core/families/<family>/export.py (``spack``: the variant's Spack specs and notes;
    ``wheel``: its PEP 825 translation; ``conda``: its rattler-build row)."""
    name = _export_family(v)
    function = _export_functions(kind).get(name)
    if function is None:
        # A family may plan and build without writing every format (a new family before its
        # export.py): the user hears which, never a KeyError's exit 1.
        from capplan.errors import InvalidInputError

        raise InvalidInputError(
            f"{v.name} is a build of the {name} family, which writes no {kind} export",
            hint=f"leave {name} builds out of this export, or give core/families/{name}/export.py "
            f"a {name}_{kind} function",
        )
    return name, function


def export_writers(kind: str) -> tuple[Callable[..., Any], ...]:
    """Every family's ``kind`` exporter, in the table's order (``conda_fallbacks``: the rows
    for clients without a family's virtual package)."""
    return tuple(_export_functions(kind).values())


def is_cpu_level(v: Variant) -> bool:
    """Whether ``v`` is built for a CPU target (a level, a microarchitecture, or a
    glibc-hwcaps layout of levels) rather than generic CPU code or a GPU family's targets."""
    spec = v.spec
    return spec is not None and spec.family == "cpu"


def verify_targets(
    plan: Plan, v: Variant, kb: Callable[[], KnowledgeBase]
) -> tuple[object, ...] | None:
    """The targets ``v``'s build must hold (``capplan verify --variant``), in its family's
    target type (the family whose verifier owns them checks them); None when the variant has
    no planned device code (a capability-independent or CPU-side build). ``kb`` loads the
    knowledge base when a family's question needs it."""
    for _, targets in _key_functions("verify_targets"):
        found: tuple[object, ...] | None = targets(plan, v, kb)
        if found is not None:
            return found
    return None


def machine_section(kb: KnowledgeBase, plan: Plan, cpu: CpuModel | None) -> dict[str, Any]:
    """plan.json's ``machine`` section (pkgs/machine.nix reads it): per family, the variants
    that run on each target it knows (``core/families/<family>/machine.py``), how a
    nixos-facter report's PCI ids name its GPUs, and every GPU spelling the families know
    exactly, each resolved by the one rule of the CLI (:func:`doctor_gpu`: a name matching
    models of several targets keeps the CLI's own "ambiguous" line), keyed by the exact key
    Nix computes the same way (``exact_key``: case, spacing, punctuation and "NVIDIA" aside).
    ``cpu``: the CPU model (archspec's) when the plan has per-level builds, else None; tests/kb
    checks every name against :func:`doctor_gpu`."""
    families: dict[str, Any] = {}
    for package in _machine_families():
        name = package.rpartition(".")[2]
        module = import_module(f"{package}.machine")
        families[name] = module.machine_targets(plan, kb, cpu)
        if hasattr(module, "machine_pci"):
            families[name]["pci"] = module.machine_pci(kb)
        if hasattr(module, "machine_models"):
            families[name]["models"] = module.machine_models(kb)
    found = machine_names(kb)
    return {"version": 1, "families": families, "names": found}


def machine_names(kb: KnowledgeBase) -> dict[str, dict[str, str]]:
    """Every GPU spelling the families know exactly, by exact key, each answered as
    :func:`doctor_gpu` answers it (``{"vendor", "target", "name"}``, or ``{"error"}`` for a
    key two spellings give different answers): plan.json's ``machine.names``."""
    # The exact key of a GPU name (case, spacing, punctuation and "NVIDIA" aside), the
    # rule every family's exact names follow and pkgs/machine.nix's exactKey computes.
    from capplan.core.families.cuda.gpus import exact_key

    names: dict[str, dict[str, str]] = {}
    for package in _machine_families():
        module = import_module(f"{package}.machine")
        if hasattr(module, "machine_names"):
            theirs = module.machine_names(kb, exact_key)
            # A gfx processor is ROCm's whoever else spells it; any other key the family
            # before claims (the CLI asks NVIDIA's names before AMD's) stays its.
            names.update({k: v for k, v in theirs.items() if k not in names or k.startswith("gfx")})
    return dict(sorted(names.items()))


def _machine_families() -> tuple[str, ...]:
    # The families with a machine side (core/families/<family>/machine.py): a family without
    # one plans and builds as before, and no machine is given its variants.
    return tuple(p for p in _FAMILIES if find_spec(f"{p}.machine") is not None)
