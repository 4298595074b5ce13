"""Target families: the one interface every axis of device code implements.

A *target family* is a kind of build target a package can be specialised for: CUDA
capabilities (``sm86``), ROCm gfx processors (``gfx942``), and next CPU levels (``x86-64-v3``).
Each family answers the same six questions, so the planner, ``explain``, ``detect`` and the
plan.json writer ask them through this interface instead of branching on the vendor:

1. **parse and order** its targets: :meth:`TargetFamily.parse` takes every spelling users
   write, :meth:`TargetFamily.sort_key` is the family's documented order;
2. **runs on**: :meth:`TargetFamily.runs_on` is the best way a device runs a build holding some
   targets, with the reason (explaining never raises);
3. **limits**: :meth:`GpuFamily.package_limit` is why a GPU family's knowledge base says a
   package cannot build a target (None when it can; CPU levels have no such limit);
4. **naming**: :meth:`TargetFamily.label` is a target's part of a variant name (``torch-sm86``,
   ``torch-gfx942``);
5. **Nix**: how plan.json hands the targets to Nix lives with each family's planning
   (:class:`FamilyPlanning` below);
6. **pick**: :meth:`TargetFamily.pick` is, for each package, the plan's variant to use on a
   :class:`Machine` (its system and one of its devices) or why none runs, as one :class:`Pick`
   type for every family: what all share (variant, level, reason), the variant the answer is
   about (``named``) and the family's own facts in ``detail``. ``capplan detect`` asks it of
   every family instead of calling three pickers.

:meth:`GpuFamily.claims` says which family a user's spelling in ``packages.<name>.extra`` /
``exclude`` belongs to. The implementations live in ``core/families/<family>/``, and
:mod:`capplan.core.families.registry` names them. This follows archspec's shape (Spack's
microarchitecture database): data with provenance, a partial order, and a small query API.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, runtime_checkable

# Shared value types the families answer with (below the families and the plan: plan.py imports
# them from there, so the plan and this interface do not import each other).
from capplan.core.model.runs import RunLevel, RunsOn

if TYPE_CHECKING:
    from capplan.core.model.drift import Drift
    from capplan.core.model.fleet import PlanPart
    from capplan.core.planning.plan import CpuCosts, Decision, Plan, Variant


__all__ = [
    "AsksNixpkgs",
    "ChecksPackage",
    "ChecksTargets",
    "ChecksVendors",
    "ClaimsFleet",
    "CostPart",
    "Device",
    "DispatchCost",
    "Dispatcher",
    "Explained",
    "FamilyPlanning",
    "FamilyResult",
    "Found",
    "GpuFamily",
    "GpuNames",
    "KnowsPackages",
    "Machine",
    "NixpkgsCheck",
    "Pick",
    "PreparesPolicy",
    "PricesCpuBuilds",
    "ReadsKbFile",
    "ReliesOnArguments",
    "ReportsUnplanned",
    "RunLevel",
    "RunsOn",
    "TargetFamily",
    "ValidatesFleet",
    "Verified",
    "Verifier",
]

T = TypeVar("T")
M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class Machine:
    """Where a planned build would run (``capplan detect``): the machine's system and one of its
    devices, as the family spells it (a CUDA capability, an AMD gfx target, a CPU name)."""

    system: str
    device: Any  # None: the machine's device is not known (no answers)
    driver: str | None = None  # the GPU driver's version, when the family asks for one
    # What ``packages.<name>.vendors`` lets each package build for (None: every vendor); a
    # family names it when it is why no variant runs here.
    vendors: Mapping[str, Sequence[str] | None] = field(default_factory=dict)
    # Whether the answer keeps to the capability-independent builds this device's kind needs
    # (CUDA: the Jetson or the SBSA redistributables), as ``detect`` asks; False: every build
    # of the system, as ``doctor`` judges a plan it found a package of.
    own_kind_only: bool = True


@dataclass(frozen=True, slots=True)
class Pick:
    """One package's answer on a machine, the same for every family: the variant to use (None
    when none runs here), how well it runs and why. ``named`` is the variant the answer is
    about when it is not the one to use (CUDA: one a newer driver would run); ``detail`` holds
    the family's own facts (CUDA: ``driver_ok``, ``needs_driver``)."""

    package: str
    variant: Variant | None
    level: RunLevel
    reason: str
    named: Variant | None = None
    detail: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Device:
    """One device a family's detector found on this machine (``capplan detect`` and ``doctor``
    ask every detector the registry names, and hand each device to its vendor's family)."""

    name: str
    vendor: str  # the family's vendor ("nvidia", "amd"): whose family answers for it
    target: Any  # in the family's own target type; None: the detector could not tell
    source: str | None  # where the answer came from (nvml, nvidia-smi, sysfs, kfd, rocminfo)
    driver: str | None = None  # the GPU driver's version, where the family has one
    pci_id: str | None = None
    note: str = ""  # e.g. why the target is unknown


@dataclass(frozen=True, slots=True)
class Found:
    """What one family's detector found: its devices, notes worth showing (skipped nodes),
    and, when it found none, why (``missing``, one phrase of the "no GPU" error) and what to
    do (``hint``)."""

    devices: tuple[Device, ...]
    notes: tuple[str, ...] = ()
    missing: str = ""
    hint: str = ""


class TargetFamily(Protocol[T]):
    """One family of build targets (see the module docstring)."""

    @property
    def name(self) -> str:
        """``"cuda"``, ``"rocm"`` (plan.json and ``--json`` spell families this way)."""
        ...

    @property
    def vendor(self) -> str | None:
        """The GPU vendor ``packages.<name>.vendors`` names for the family; None for a family
        every package has (CPU levels)."""
        ...

    def parse(self, text: str) -> T:
        """A target from any spelling users write; bad input is an InvalidInputError (exit 4)."""
        ...

    def sort_key(self, target: T) -> tuple[object, ...]:
        """The family's documented order of targets."""
        ...

    def label(self, target: T) -> str:
        """The target's part of a variant name: ``sm86``, ``gfx942``."""
        ...

    def runs_on(self, device: T, built: Sequence[T]) -> RunsOn:
        """The best way ``device`` runs a build holding ``built``, with the reason."""
        ...

    def pick(self, plan: Plan, machine: Machine) -> tuple[Pick, ...]:
        """For each package the family answers on ``machine``, the plan's variant to use there
        (best first by the family's order) or why none runs."""
        ...


class Explained(NamedTuple):
    """``capplan explain``'s answer: the ``--json`` object and how its one line of text names
    the device (``8.6``, ``gfx1100``)."""

    fields: dict[str, object]
    device: str


class GpuFamily(TargetFamily[T], Protocol[T]):
    """A family of GPU targets: ``capplan explain`` asks it about a device, and a user's
    ``packages.<name>.extra`` / ``exclude`` spelling belongs to one of them (CPU levels are
    named in ``fleet.cpus`` only)."""

    def claims(self, text: str) -> bool:
        """Whether a user's target spelling belongs to this family (it is then parsed by it,
        and a bad spelling is an error of this family's)."""
        ...

    def owns_device(self, text: str) -> bool:
        """Whether a device spelling (a GPU name, a target) is one of this family's GPUs; a
        name no family knows is an InvalidInputError with "did you mean" (exit 4)."""
        ...

    def knows_device(self, text: str) -> bool:
        """Whether a device spelling is one of this family's targets or a GPU name its
        knowledge base matches; never an error (another family may know it: ROCm's fleet
        claim asks the others before its own lookup)."""
        ...

    def device_suggestions(self, text: str) -> list[str]:
        """This family's GPU names closest to a device spelling (the "did you mean" of a name
        no family knows)."""
        ...

    def package_limit(self, package: str, target: T) -> str | None:
        """Why the knowledge base says ``package`` cannot build ``target``; None when it can
        (or the knowledge base has no entry of this family for the package). A GPU family's
        question only: a package that compiles for one CPU level compiles for any."""
        ...

    def explain(self, targets: str, device: str) -> Explained:
        """How a build of ``targets`` (comma-separated, the user's spelling) runs on ``device``,
        and why."""
        ...

    def device_fields(self, device: T | None, driver: str | None) -> dict[str, object]:
        """``capplan detect``'s fields of one of the family's GPUs (its target, the overlay
        line to build for it, what its driver runs); ``device`` None: not known."""
        ...


class GpuNames(Protocol):
    """The table of GPU models by the names people type, with their PCI ids and host systems:
    the family that has one (NVIDIA's, from :func:`capplan.core.families.registry.gpu_names`)
    answers ``capplan gpus`` and ``dispatch --device`` with it, without loading any other
    family."""

    def rows(self, query: str | None) -> list[dict[str, Any]]:
        """``capplan gpus``' rows (its ``--json`` objects) of every model, or of the models
        matching ``query``, best match first; empty when none matches."""
        ...

    def pci_rows(self, pci_id: str) -> list[dict[str, Any]]:
        """The rows of a PCI id's models (``capplan gpus --pci``); a bad or unknown id is an
        InvalidInputError (exit 4)."""
        ...

    def suggestions(self, query: str) -> list[str]:
        """Model names close to a name no model matches (for "did you mean")."""
        ...

    def targets(self, texts: Sequence[str]) -> tuple[str, ...]:
        """Each device's target as the family writes it (a capability: ``8.6``), from a target
        or a GPU name; every spelling is resolved before any target is checked against the
        knowledge base (exit 4 for the first that fails)."""
        ...


# A target family's planning: the part of the interface that the planner loops over.
#
# :func:`capplan.core.planning.planner.make_plan` runs every family through the same phases, in
# this order, so that the first bad input any family finds is the one reported. Every family
# has the phases of :class:`FamilyPlanning`; a phase only some families have is a narrower
# protocol below, and the planner asks only the families that implement it (in planning order):
#
# 1. :meth:`PreparesPolicy.prepare`: the family's own policy inputs (CUDA: ``policy.cuda``;
#    CPU: ``fleet.cpus``);
# 2. fleet: :meth:`ClaimsFleet.claims_gpu` gives each ``fleet.gpus`` entry to one family
#    (the fallback last), :meth:`ClaimsFleet.resolve_fleet` resolves what it was given;
# 3. per requested package: :meth:`KnowsPackages.knows` (a package no family knows is an
#    unknown package), :meth:`ChecksVendors.check_vendors`, then each ``extra`` / ``exclude``
#    value through the GPU family that claims it (:meth:`ChecksTargets.check_target`), then
#    :meth:`ChecksPackage.check_package`;
# 4. :meth:`ValidatesFleet.validate` (the fleet against the family's policy and knowledge base);
# 5. :meth:`ReportsUnplanned.unplanned` (fleet entries on systems the plan leaves out);
# 6. :meth:`FamilyPlanning.plan`: the family's variants, decisions and unserved entries;
# 7. :meth:`FamilyPlanning.costs`: the family's part of the reference strategies.
#
# How Nix receives a family's targets is its ``nix_keys`` function (the plan.json keys of a
# variant, :func:`capplan.core.families.registry.nix_keys`); :meth:`FamilyPlanning.plan_part`
# is the family's part of the Plan.


@dataclass
class FamilyResult:
    """What one family planned."""

    variants: list[Variant] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    unserved: list[Decision] = field(default_factory=list)
    active_systems: tuple[str, ...] = ()  # the systems the family planned builds on


@dataclass(frozen=True, slots=True)
class CostPart:
    """A family's share of the reference strategies (Baselines): nixpkgs' default build and
    the naive one-build-per-fleet-target plan."""

    default_minutes: float = 0.0
    default_size_mb: float = 0.0
    default_jobs: int = 0
    naive_minutes: float = 0.0
    naive_size_mb: float = 0.0
    naive_jobs: int = 0


class FamilyPlanning(Protocol):
    """One family's planning for one (knowledge base, config); made per plan. The phases
    every family has; the narrower protocols below are the ones only some have."""

    @property
    def family(self) -> TargetFamily[Any]: ...

    def fleet_labels(self) -> tuple[str, ...]:
        """The fleet entries the family resolved."""
        ...

    def plan(self, requested: Sequence[str], earlier: FamilyResult) -> FamilyResult:
        """``earlier``: what the families before this one planned (variants, decisions) and
        what the plan left unserved so far."""
        ...

    def costs(self, requested: Sequence[str], result: FamilyResult) -> CostPart: ...

    def plan_part(self) -> PlanPart | None:
        """The family's part of the Plan (its fleet entries and policy, in its own types);
        None: the family keeps nothing in the plan but its variants."""
        ...


@runtime_checkable
class PreparesPolicy(Protocol):
    """Phase 1: a family with policy inputs of its own resolves them first."""

    def prepare(self) -> None: ...


@runtime_checkable
class ClaimsFleet(Protocol):
    """Phase 2: a GPU family takes its ``fleet.gpus`` entries (CPUs come from ``fleet.cpus``)."""

    @property
    def fallback(self) -> bool:
        """Whether the family takes every fleet entry and spelling no other family claims."""
        ...

    def claims_gpu(self, label: str) -> bool: ...

    def resolve_fleet(self, labels: Sequence[str]) -> None: ...


@runtime_checkable
class KnowsPackages(Protocol):
    """Phase 3: a family with a package list of its own in the knowledge base."""

    def knows(self, package: str) -> bool:
        """Whether the family's knowledge base has the package."""
        ...


@runtime_checkable
class ChecksVendors(Protocol):
    """Phase 3: a family that judges ``packages.<name>.vendors`` against its builds."""

    def check_vendors(self, package: str) -> None: ...


@runtime_checkable
class ChecksTargets(Protocol):
    """Phase 3: a family whose targets a user names in ``packages.<name>.extra`` / ``exclude``
    (a GPU family, which claims the spellings; the fallback takes what no other claims)."""

    @property
    def family(self) -> GpuFamily[Any]: ...

    @property
    def fallback(self) -> bool: ...

    def check_target(self, package: str, key: str, text: str) -> None: ...


@runtime_checkable
class ChecksPackage(Protocol):
    """Phase 3: a family with per-package settings of its own (CUDA: ``packages.<name>.cuda``)."""

    def check_package(self, package: str) -> None: ...


@runtime_checkable
class ValidatesFleet(Protocol):
    """Phase 4: a family that checks its fleet against its policy and knowledge base."""

    def validate(self, requested: Sequence[str]) -> None: ...


@runtime_checkable
class ReportsUnplanned(Protocol):
    """Phase 5: a family whose fleet entries can live on systems the plan leaves out (CPU's
    are known once the GPU families have planned, in its :meth:`FamilyPlanning.plan`)."""

    def unplanned(self, requested: Sequence[str]) -> list[Decision]: ...


@runtime_checkable
class PricesCpuBuilds(Protocol):
    """After planning: a family that prices the CPU-side builds three ways (the plan's
    ``cpu_costs``; None when the fleet lists no CPUs)."""

    @property
    def cpu_costs(self) -> CpuCosts | None: ...


# -- knowledge base -------------------------------------------------------------------------------
class ReadsKbFile(Protocol):
    """How a family's knowledge base reads one of its files (``kb/<name>``) as its record
    model: the adapters' loader (:mod:`capplan.adapters.kb`), by the same rules for every
    family's file (a broken one is one DataError naming the file, the entry and the field)."""

    def __call__(self, name: str, model: type[M], /) -> M: ...


# -- dispatch ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DispatchCost:
    """Output sizes (MB) of the ways to give every fleet GPU of one system one package."""

    package: str
    system: str
    variants: int
    dispatch_mb: float  # every single-target variant with its per-variant dependencies
    fat_mb: float  # one build for every target the variants hold
    one_variant_mb: float  # the largest single variant with its dependencies

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "system": self.system,
            "variants": self.variants,
            "dispatch_mb": self.dispatch_mb,
            "fat_mb": self.fat_mb,
            "one_variant_mb": self.one_variant_mb,
        }


class Dispatcher(Protocol):
    """What a ``<package>-dispatch`` output needs of the family whose variants it starts (the
    standalone selector, :mod:`capplan.runtime.selector`, picks among them at each start): from
    :func:`capplan.core.families.registry.dispatcher`, on one knowledge base. Only CUDA
    dispatches today (``core/families/cuda/dispatch.py``); ROCm variants are chosen with
    ``capplan detect``."""

    def packages(self, plan: Plan, system: str | None = None) -> tuple[str, ...]:
        """The requested packages a dispatch output can serve (on ``system``, when given)."""
        ...

    def resolve_fallback(self, plan: Plan, package: str, fallback: str) -> str:
        """``[dispatch] fallback`` for ``package``: ``"error"`` or a planned variant's name; a
        fallback naming nothing planned is a ConfigError."""
        ...

    def table(
        self, plan: Plan, package: str, *, fallback: str, system: str | None = None
    ) -> dict[str, Any]:
        """The selector's table for ``package`` (without the variants' store paths)."""
        ...

    def section(self, plan: Plan, *, fallback: str) -> dict[str, Any]:
        """The ``dispatch`` part of overlays/plan.json."""
        ...

    def cost(self, plan: Plan, package: str, system: str | None = None) -> DispatchCost:
        """What a dispatch closure of ``package`` holds against one fat build and one variant."""
        ...


# -- nixpkgs check --------------------------------------------------------------------------------
# ``capplan nixpkgs check`` (core/planning/nixpkgs_check.py) asks each family's part
# (core/families/<family>/nixpkgs.py, from registry.nixpkgs_checks) what the plan relies on in
# nixpkgs: the recipe arguments of the plan's packages (every family has some) and, for a family
# with facts of its own in nixpkgs (CUDA's package sets, ROCm's targets), its questions. The
# plan is plan.json's data: ``variants`` (name -> variant) and its ``packages``, sorted.


@runtime_checkable
class ReliesOnArguments(Protocol):
    """A family whose builds rely on recipe arguments nixpkgs' recipes must take."""

    def arguments(
        self, variants: Mapping[str, Mapping[str, Any]], packages: Sequence[str]
    ) -> Iterable[tuple[str, tuple[str, ...], str]]:
        """(package, attribute path, argument) of each argument the plan's packages rely on."""
        ...


@runtime_checkable
class AsksNixpkgs(Protocol):
    """A family with facts of its own to check against nixpkgs."""

    def request(
        self, variants: Mapping[str, Mapping[str, Any]], packages: Sequence[str]
    ) -> dict[str, Any]:
        """The family's questions: keys of the JSON request, which its ``compare`` reads."""
        ...

    def compare(self, request: Mapping[str, Any], answer: Mapping[str, Any]) -> Iterable[Drift]:
        """Where nixpkgs' ``answer`` to the family's questions says otherwise (an answer of
        the wrong type is a drift of its fact, never an exception)."""
        ...


NixpkgsCheck = ReliesOnArguments | AsksNixpkgs


# -- verify ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Verified:
    """``capplan verify``'s answer of one family on a build: the ``--json`` fields, the text
    report's lines, and what fails (exit 9)."""

    fields: dict[str, Any]
    lines: tuple[str, ...]
    ok: bool  # the build holds exactly the expected code (and runs on the device, if one)
    failures: tuple[str, ...]  # each difference, then "cannot run on <device>"
    problems: tuple[str, ...]  # files read only in part, "<path>: <problem>"
    what: str  # what the build should hold: "the planned device code"
    hint: str
    markup: bool  # whether the lines go through rich markup (as the command always did)


class Verifier(Protocol):
    """A GPU family's part of ``capplan verify`` (``core/families/<family>/verify.py``, from
    :func:`capplan.core.families.registry.gpu_verifiers`): the expected targets, the device,
    and the comparison. Its knowledge base is read only when a question needs it, so ``verify
    --expect 8.6`` loads no GPU table."""

    code: str  # how messages name the family's device code: "CUDA", "AMD"
    fallback: bool  # takes every ``--expect`` item no other family claims
    jetson: bool  # whether ``--jetson`` applies to the family's devices
    # Whether the family's GPU lookup matches loose names (a model name's fragment), so that
    # another family's exact target spelling is refused before it.
    loose_lookup: bool

    def claims(self, text: str) -> bool:
        """Whether an ``--expect`` item or ``--device`` spelling is the family's own."""
        ...

    def owns(self, target: object) -> bool:
        """Whether a planned variant's target is one of the family's."""
        ...

    def expected(self, text: str, items: Sequence[str]) -> tuple[Any, ...]:
        """The targets ``--expect`` names (``text``, split into ``items``)."""
        ...

    def target_spelling(self, text: str) -> str | None:
        """What ``text`` is when it spells one of the family's targets rather than a GPU
        (``"a CUDA capability"``), else None."""
        ...

    def lookup(self, text: str) -> tuple[Any, bool]:
        """The device ``--device`` names and whether it is a Jetson; bad input is an
        InvalidInputError with the family's suggestions."""
        ...

    def describe(self, device: Any) -> str:
        """A found device in a message: ``"an NVIDIA GPU (8.6)"``."""
        ...

    def verify(
        self, expected: Sequence[Any], reports: Sequence[Any], device: Any, jetson: bool
    ) -> Verified:
        """What ``reports`` (the binary reader's, one per file) hold against ``expected``,
        and how it runs on ``device`` (None: not asked)."""
        ...
