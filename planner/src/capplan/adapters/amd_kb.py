"""Load the AMD knowledge base (``kb/amd_targets.json``, ``amd_gpus.json``, ``amd_packages.json``).

Same rules as :mod:`capplan.adapters.kb`: the packaged files, or a directory (``CAPPLAN_KB_DIR``
where the CLI passes one); a broken file is one :class:`DataError` naming the file and entry.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from capplan.adapters.kb import load_kb_file
from capplan.core.families.rocm.kb import (
    AmdGpusFile,
    AmdKnowledgeBase,
    AmdPackagesFile,
    AmdTargetsFile,
)

__all__ = ["AMD_KB_FILES", "load_amd_kb"]

AMD_KB_FILES: dict[str, type] = {
    "amd_gpus.json": AmdGpusFile,
    "amd_packages.json": AmdPackagesFile,
    "amd_targets.json": AmdTargetsFile,
}


@lru_cache(maxsize=4)
def load_amd_kb(directory: Path | None = None) -> AmdKnowledgeBase:
    targets = load_kb_file("amd_targets.json", AmdTargetsFile, directory)
    gpus = load_kb_file("amd_gpus.json", AmdGpusFile, directory)
    packages = load_kb_file("amd_packages.json", AmdPackagesFile, directory)
    return AmdKnowledgeBase(
        targets=tuple(sorted(targets.targets, key=lambda t: t.target)),
        nixpkgs_default_targets=targets.nixpkgs_default_targets,
        nixpkgs_family_scopes=dict(sorted(targets.nixpkgs_family_scopes.items())),
        gpus=gpus.gpus,
        packages=dict(sorted(packages.packages.items())),
        builds=dict(sorted(packages.builds.items())),
        stack_libraries=dict(sorted(packages.stack_libraries.items())),
    )
