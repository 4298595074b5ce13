"""What the planner starts from: the allowed CUDA versions (rule 3's order: nixpkgs' default first)
and the fleet, each GPU resolved to a capability and the system it lives on.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from capplan.core.families.cuda.fleet import FleetGpu
from capplan.core.families.cuda.gpus import resolve_device
from capplan.core.families.cuda.kb import nvidia
from capplan.core.families.cuda.version import CudaVersion
from capplan.core.model.kb import KnowledgeBase
from capplan.core.planning.config import Config, gpu_system
from capplan.errors import InvalidInputError, shorten

__all__ = [
    "NIXPKGS_DEFAULT_CUDA",
    "nixpkgs_cuda_version",
    "resolve_cuda_policy",
    "resolve_fleet",
]

# NIXPKGS.md §3: `cudaPackages = cudaPackages_12_9` in nixos-unstable (mid-2026).
NIXPKGS_DEFAULT_CUDA = CudaVersion(12, 9)


def resolve_cuda_policy(kb: KnowledgeBase, wanted: Sequence[str] | None) -> tuple[CudaVersion, ...]:
    """Allowed CUDA versions, preferred first; default: nixpkgs' default, then newest first."""
    available = nvidia(kb).nixpkgs_cuda()
    if wanted is None:
        rest = sorted((v for v in available if v != NIXPKGS_DEFAULT_CUDA), reverse=True)
        return (NIXPKGS_DEFAULT_CUDA, *rest)
    result: list[CudaVersion] = []
    for text in wanted:
        version = nixpkgs_cuda_version(kb, text, "policy.cuda")
        if version not in result:
            result.append(version)
    if not result:
        raise InvalidInputError("policy.cuda is empty", hint="list at least one CUDA version")
    return tuple(result)


def nixpkgs_cuda_version(kb: KnowledgeBase, text: str, where: str) -> CudaVersion:
    """``text`` as a CUDA version nixpkgs has a package set for (``where`` names the setting);
    exit 4 with the versions that exist otherwise."""
    version = CudaVersion.parse(text)
    found = next((r for r in nvidia(kb).cuda_releases if r.version == version), None)
    if found is None or found.nixpkgs_set is None:
        known = ", ".join(str(v) for v in nvidia(kb).nixpkgs_cuda())
        what = "is not a CUDA release" if found is None else "has no package set in nixpkgs"
        raise InvalidInputError(
            f"{where} = '{text.strip()[:40]}': CUDA {version} {what}",
            hint=f"{where} may be one of: {known}",
        )
    return version


def resolve_fleet(
    kb: KnowledgeBase, config: Config, others: Collection[str]
) -> tuple[FleetGpu, ...]:
    """The NVIDIA entries of ``fleet.gpus`` (``others``: the labels the other GPU families
    claimed and resolve themselves, so no entry is classified twice)."""
    fleet: list[FleetGpu] = []
    for label in config.fleet.gpus:
        if label in others:
            continue
        capability, model = resolve_device(label, nvidia(kb).gpus)
        info = nvidia(kb).capability(capability)
        if capability.suffix:
            raise InvalidInputError(
                f"fleet entry '{shorten(label)}' is a build target ({capability}), not a GPU",
                hint=f"list the device capability {capability.base} instead",
            )
        fleet.append(
            FleetGpu(
                label=label,
                capability=capability,
                model=model.name if model else None,
                jetson=info.jetson,
                count=config.fleet.count.get(label, 1),
                system=gpu_system(label, info.jetson, model.systems if model else None, config),
            )
        )
    unknown = sorted(set(config.fleet.count) - set(config.fleet.gpus) - set(config.fleet.cpus))
    if unknown:
        raise InvalidInputError(
            f"fleet.count names '{shorten(unknown[0])}', which is not in fleet.gpus"
            + (" or fleet.cpus" if config.fleet.cpus else ""),
            hint="add it to fleet.gpus (or fleet.cpus) or remove the count",
        )
    unknown = sorted(set(config.fleet.systems) - set(config.fleet.gpus))
    if unknown:
        raise InvalidInputError(
            f"fleet.systems names '{unknown[0]}', which is not in fleet.gpus",
            hint="add it to fleet.gpus or remove it from fleet.systems",
        )
    return tuple(fleet)
