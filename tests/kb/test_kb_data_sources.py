"""Invariants of the knowledge-base data files gpus.json, cuda.json and packages.json.

These tests read the JSON with the standard library only (not capplan's pydantic models), so a
broken file is caught even if the models are lenient, and they cross-check the data against the
independent facts in ../shared (nixpkgs' capability table and CUDA.md).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
KB = REPO / "planner" / "src" / "capplan" / "kb"
SHARED = REPO.parent / "shared"
TSV = SHARED / "data" / "nixpkgs-cuda-capabilities.tsv"
CUDA_MD = SHARED / "CUDA.md"

# Real capabilities missing from nixpkgs' table, listed in CUDA.md "Capabilities".
CUDA_MD_EXTRA_BASES = ("3.0", "3.2", "5.3", "6.2", "8.8", "10.7")

CANONICAL_CAP = re.compile(r"^[0-9]+\.[0-9]+[af]?$")
CUDA_VERSION = re.compile(r"^[0-9]+\.[0-9]+$")
DRIVER = re.compile(r"^[0-9]+(\.[0-9]+)*$")

SEGMENTS = {"datacenter", "workstation", "consumer", "embedded"}
KINDS = {"capability-dependent", "capability-independent", "ignores-capabilities"}
PTX_MODES = {"gpu-targets", "forward-compat", "inherited", "none"}
SUFFIXES = {"", "a", "f"}


# -- helpers ------------------------------------------------------------------------------------


def _load(name: str) -> Any:
    return json.loads((KB / name).read_text(encoding="utf-8"))


def _cap_key(cap: str) -> tuple[int, int, int]:
    assert CANONICAL_CAP.match(cap), f"not a canonical capability: {cap!r}"
    suffix = cap[-1] if cap[-1] in "af" else ""
    major, minor = (cap[:-1] if suffix else cap).split(".")
    return int(major), int(minor), {"": 0, "a": 1, "f": 2}[suffix]


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def _driver_key(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


@pytest.fixture(scope="module")
def shared() -> Path:
    if not TSV.is_file() or not CUDA_MD.is_file():
        pytest.skip(f"shared data not found at {SHARED} (expected ../shared beside the repository)")
    return SHARED


@pytest.fixture(scope="module")
def nix_rows(shared: Path) -> dict[str, dict[str, str]]:
    with TSV.open(encoding="utf-8", newline="") as fh:
        return {row["cudaCapability"]: row for row in csv.DictReader(fh, delimiter="\t")}


@pytest.fixture(scope="module")
def known_caps(nix_rows: dict[str, dict[str, str]]) -> set[str]:
    extra = {base + suffix for base in CUDA_MD_EXTRA_BASES for suffix in ("", "a", "f")}
    return set(nix_rows) | extra


@pytest.fixture(scope="module")
def gpus() -> dict[str, Any]:
    return dict(_load("gpus.json"))


@pytest.fixture(scope="module")
def cuda() -> dict[str, Any]:
    return dict(_load("cuda.json"))


@pytest.fixture(scope="module")
def packages() -> dict[str, Any]:
    return dict(_load("packages.json"))


def _assert_source(obj: dict[str, Any], where: str) -> None:
    source = obj.get("source")
    assert isinstance(source, str) and source.strip(), f"{where}: missing or empty 'source'"


# -- gpus.json ----------------------------------------------------------------------------------


def test_gpus_shape(gpus: dict[str, Any]) -> None:
    assert set(gpus) == {"source", "gpus"}
    _assert_source(gpus, "gpus.json")
    assert len(gpus["gpus"]) >= 60
    for gpu in gpus["gpus"]:
        where = f"gpus.json entry {gpu.get('name')!r}"
        assert set(gpu) - {"systems"} == {
            "name",
            "aliases",
            "capability",
            "segment",
            "chips",
            "source",
        }, where
        assert gpu["chips"] and all(isinstance(c, str) and c for c in gpu["chips"]), where
        # Host systems (issue 12): absent = a discrete card in an x86_64 server.
        systems = gpu.get("systems", ["x86_64-linux"])
        assert systems and set(systems) <= {"x86_64-linux", "aarch64-linux"}, where
        arm_only = gpu["segment"] == "embedded" or any(
            f"NVIDIA {chip}" in gpu["name"] for chip in ("GH200", "GB200", "GB300", "GB10")
        )
        assert (systems == ["aarch64-linux"]) == arm_only, where
        assert isinstance(gpu["name"], str) and gpu["name"].strip() == gpu["name"] != "", where
        assert isinstance(gpu["aliases"], list), where
        assert all(isinstance(a, str) and a.strip() == a != "" for a in gpu["aliases"]), where
        assert gpu["segment"] in SEGMENTS, where
        assert CANONICAL_CAP.match(gpu["capability"]), where
        _assert_source(gpu, where)


def test_gpu_names_and_aliases_unique_case_insensitively(gpus: dict[str, Any]) -> None:
    owner: dict[str, str] = {}
    for gpu in gpus["gpus"]:
        for label in [gpu["name"], *gpu["aliases"]]:
            key = label.casefold()
            assert key not in owner, f"{label!r} of {gpu['name']!r} already names {owner[key]!r}"
            owner[key] = gpu["name"]


def test_gpus_sorted_by_capability_then_name(gpus: dict[str, Any]) -> None:
    # Names compare by code point, as the file's source states ("Orin NX" < "Orin Nano").
    keys = [(_cap_key(g["capability"]), g["name"]) for g in gpus["gpus"]]
    assert keys == sorted(keys)


def test_gpu_capabilities_are_known(gpus: dict[str, Any], known_caps: set[str]) -> None:
    unknown = {
        g["name"]: g["capability"] for g in gpus["gpus"] if g["capability"] not in known_caps
    }
    assert not unknown, (
        f"capabilities neither in nixpkgs' table nor in CUDA.md's extra list: {unknown}"
    )


def test_embedded_segment_matches_nixpkgs_jetson_flag(
    gpus: dict[str, Any], nix_rows: dict[str, dict[str, str]]
) -> None:
    # Jetson capabilities are exactly the embedded GPUs; 5.3/6.2 (Tegra X1/X2) are Jetson-only
    # per CUDA.md although nixpkgs' table lacks them.
    for gpu in gpus["gpus"]:
        cap = gpu["capability"]
        row = nix_rows.get(cap)
        jetson = row["isJetson"] == "true" if row is not None else cap in {"3.2", "5.3", "6.2"}
        assert jetson == (gpu["segment"] == "embedded"), f"{gpu['name']} ({cap})"


def test_every_segment_is_represented(gpus: dict[str, Any]) -> None:
    counts = {s: sum(g["segment"] == s for g in gpus["gpus"]) for s in SEGMENTS}
    assert all(n >= 3 for n in counts.values()), counts


# The loose names issue 2 requires, with capabilities from CUDA.md "GPU models -> capability".
REQUIRED_LOOKUPS = {
    "a100": "8.0",
    "NVIDIA A100-SXM4-80GB": "8.0",
    "RTX 3090": "8.6",
    "GeForce RTX 4090": "8.9",
    "Tesla V100-SXM2-32GB": "7.0",
    "NVIDIA H100 80GB HBM3": "9.0",
    "T4": "7.5",
    "L4": "8.9",
    "RTX 5090": "12.0",
    "B300": "10.3",
    "GB10": "12.1",
    "Jetson Orin": "8.7",
    "Thor": "11.0",
}


@pytest.mark.parametrize(("label", "cap"), sorted(REQUIRED_LOOKUPS.items()))
def test_required_names_resolve(gpus: dict[str, Any], label: str, cap: str) -> None:
    hits = [
        g
        for g in gpus["gpus"]
        if label.casefold() in {x.casefold() for x in [g["name"], *g["aliases"]]}
    ]
    assert len(hits) == 1, f"{label!r} matches {len(hits)} entries"
    assert hits[0]["capability"] == cap


# -- cuda.json ----------------------------------------------------------------------------------


def test_cuda_shape(cuda: dict[str, Any]) -> None:
    assert set(cuda) == {"source", "releases"}
    _assert_source(cuda, "cuda.json")
    for rel in cuda["releases"]:
        where = f"cuda.json release {rel.get('version')!r}"
        assert set(rel) == {"version", "min_driver", "toolkit_driver", "nixpkgs_set", "source"}, (
            where
        )
        assert CUDA_VERSION.match(rel["version"]), where
        assert DRIVER.match(rel["min_driver"]), where
        assert DRIVER.match(rel["toolkit_driver"]), where
        assert rel["nixpkgs_set"] is None or isinstance(rel["nixpkgs_set"], str), where
        _assert_source(rel, where)


def test_cuda_sorted_unique_and_complete(cuda: dict[str, Any]) -> None:
    versions = [r["version"] for r in cuda["releases"]]
    assert versions == sorted(versions, key=_version_key)
    assert len(set(versions)) == len(versions)
    expected = (
        [f"11.{m}" for m in range(9)]
        + [f"12.{m}" for m in range(10) if m != 7]  # 12.7 was never released
        + [f"13.{m}" for m in range(5)]
    )
    assert versions == expected


def test_min_driver_matches_cuda_md(shared: Path, cuda: dict[str, Any]) -> None:
    text = CUDA_MD.read_text(encoding="utf-8")
    floors = dict(re.findall(r"(\d+)\.x >= ([0-9]+(?:\.[0-9]+)*)", text))
    assert set(floors) >= {"11", "12", "13"}, floors
    for rel in cuda["releases"]:
        major = rel["version"].split(".")[0]
        floor = floors[major]
        # CUDA.md gives 13.x only as "580"; the KB may be more precise but must stay in that branch.
        assert rel["min_driver"] == floor or rel["min_driver"].startswith(floor + "."), rel


def test_min_driver_constant_within_a_major(cuda: dict[str, Any]) -> None:
    by_major: dict[str, set[str]] = {}
    for rel in cuda["releases"]:
        by_major.setdefault(rel["version"].split(".")[0], set()).add(rel["min_driver"])
    assert all(len(v) == 1 for v in by_major.values()), by_major


def test_toolkit_drivers_never_go_backwards(cuda: dict[str, Any]) -> None:
    drivers = [_driver_key(r["toolkit_driver"]) for r in cuda["releases"]]
    assert drivers == sorted(drivers)


def test_nixpkgs_sets_match_the_nixpkgs_table(
    cuda: dict[str, Any], nix_rows: dict[str, dict[str, str]]
) -> None:
    # The TSV has one default@X.Y column per CUDA package set nixpkgs offers (NIXPKGS.md section 3).
    any_row = next(iter(nix_rows.values()))
    table_sets = {k.removeprefix("default@") for k in any_row if k.startswith("default@")}
    kb_sets = {}
    for rel in cuda["releases"]:
        if rel["nixpkgs_set"] is not None:
            major, minor = rel["version"].split(".")
            assert rel["nixpkgs_set"] == f"cudaPackages_{major}_{minor}", rel
            kb_sets[rel["version"]] = rel["nixpkgs_set"]
    assert set(kb_sets) == table_sets


# -- packages.json ------------------------------------------------------------------------------

PACKAGE_KEYS = {
    "attr",
    "kind",
    "depends",
    "ptx",
    "limits",
    "cost",
    "big_parallel",
    "note",
    "source",
}
LIMIT_KEYS = {"allow_from", "allow", "exclude", "min", "max", "suffixes", "cuda", "source"}
COST_KEYS = {
    "base_minutes",
    "per_target_minutes",
    "base_size_mb",
    "per_target_size_mb",
    "source",
    "basis",
}
MEASURED_COST_KEYS = {
    "peak_mb_per_compile",
    "reference_cores",
    "reference_cpu",
    "longest_unit_minutes",
    "longest_unit_per_target_minutes",
}


def test_packages_shape(packages: dict[str, Any]) -> None:
    assert set(packages) == {"source", "packages"}
    _assert_source(packages, "packages.json")
    for name, pkg in packages["packages"].items():
        where = f"packages.json package {name!r}"
        assert set(pkg) - {"optional"} == PACKAGE_KEYS, where
        assert set(pkg.get("optional", [])) <= set(pkg["depends"]), where
        assert isinstance(pkg["attr"], str) and pkg["attr"], where
        assert pkg["kind"] in KINDS, where
        assert pkg["ptx"] in PTX_MODES, where
        assert isinstance(pkg["big_parallel"], bool), where
        assert isinstance(pkg["note"], str), where
        assert isinstance(pkg["depends"], list), where
        _assert_source(pkg, where)
        limits, cost = pkg["limits"], pkg["cost"]
        assert set(limits) == LIMIT_KEYS, where
        # Every cost says its basis as a field (issue 40); peak_mb_per_compile, the reference
        # machine's CPU and the longest unit only where measured (issues 34, 40), each named
        # in the source.
        assert set(cost) - MEASURED_COST_KEYS == COST_KEYS, where
        assert cost["basis"] in ("measured", "estimate"), where
        assert cost["source"].startswith(cost["basis"]), where
        for key in sorted(set(cost) & MEASURED_COST_KEYS):
            assert cost["basis"] == "measured", (where, key)
            assert key in cost["source"] or key.startswith(("reference", "longest")), where
        if cost["basis"] == "measured":
            assert set(cost) >= MEASURED_COST_KEYS, where
        _assert_source(limits, f"{where} limits")
        _assert_source(cost, f"{where} cost")
        assert set(limits["suffixes"]) <= SUFFIXES and limits["suffixes"], where
        assert limits["allow_from"] is None or re.match(
            r"^torch@[0-9]+\.[0-9]+$", limits["allow_from"]
        ), where
        assert limits["cuda"] is None or all(CUDA_VERSION.match(v) for v in limits["cuda"]), where
        for field in ("base_minutes", "per_target_minutes", "base_size_mb", "per_target_size_mb"):
            value = cost[field]
            assert isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0, (
                where
            )


def test_package_keys_sorted(packages: dict[str, Any]) -> None:
    names = list(packages["packages"])
    assert names == sorted(names)


def test_limit_capabilities_are_known(packages: dict[str, Any], known_caps: set[str]) -> None:
    for name, pkg in packages["packages"].items():
        limits = pkg["limits"]
        caps = list(limits["exclude"]) + list(limits["allow"] or [])
        caps += [c for c in (limits["min"], limits["max"]) if c is not None]
        unknown = [c for c in caps if c not in known_caps]
        assert not unknown, f"{name}: unknown capabilities {unknown}"


def test_depends_resolve_and_are_acyclic(packages: dict[str, Any]) -> None:
    pkgs = packages["packages"]
    for name, pkg in pkgs.items():
        missing = [d for d in pkg["depends"] if d not in pkgs]
        assert not missing, f"{name} depends on unknown {missing}"
        assert name not in pkg["depends"], name
        assert len(set(pkg["depends"])) == len(pkg["depends"]), name

    state: dict[str, int] = {}

    def visit(node: str, path: tuple[str, ...]) -> None:
        if state.get(node) == 2:
            return
        assert state.get(node) != 1, f"dependency cycle: {' -> '.join((*path, node))}"
        state[node] = 1
        for dep in pkgs[node]["depends"]:
            visit(dep, (*path, node))
        state[node] = 2

    for name in pkgs:
        visit(name, ())


def test_cost_matches_kind(packages: dict[str, Any]) -> None:
    # Only capability-dependent packages compile device code per target (CUDA.md: cost linear in
    # targets); binaries and capability-ignoring builds are one job whatever the list.
    for name, pkg in packages["packages"].items():
        cost = pkg["cost"]
        if pkg["kind"] == "capability-dependent":
            assert cost["per_target_minutes"] > 0 and cost["per_target_size_mb"] > 0, name
            # PTX unless the package's own source says it builds SASS only (ollama's realArches).
            assert pkg["ptx"] != "none" or "no PTX" in pkg["limits"]["source"], name
        else:
            assert cost["per_target_minutes"] == 0 and cost["per_target_size_mb"] == 0, name
            assert pkg["ptx"] == "none", name
            assert pkg["limits"]["allow_from"] is None, name


def test_planned_default_packages_present(packages: dict[str, Any]) -> None:
    # Issue 3's embedded default config plans these; their kinds follow NIXPKGS.md section 5.
    pkgs = packages["packages"]
    expected = {
        "torch": "capability-dependent",
        "torchvision": "capability-dependent",
        "magma": "capability-dependent",
        "nccl": "capability-dependent",
        "onnxruntime": "capability-dependent",
        "cupy": "ignores-capabilities",
        "cudnn": "capability-independent",
        "cublas": "capability-independent",
    }
    assert {k: pkgs[k]["kind"] for k in expected if k in pkgs} == expected
    assert "torch" in pkgs["torchvision"]["depends"]
    assert {"magma", "nccl", "cudnn"} <= set(pkgs["torch"]["depends"])


def test_capability_dependent_deps_of_torch_do_not_reject_torch_capabilities(
    packages: dict[str, Any],
) -> None:
    # A variant of torch needs its capability-dependent deps built for the same capability; a
    # dependency that excludes a capability torch can target would make that variant unbuildable
    # on x86_64 (Jetson excludes aside: torch is not planned for Jetson on x86_64).
    pkgs = packages["packages"]
    torch_excl = set(pkgs["torch"]["limits"]["exclude"])
    for dep in pkgs["torch"]["depends"]:
        if pkgs[dep]["kind"] != "capability-dependent":
            continue
        dep_excl = set(pkgs[dep]["limits"]["exclude"]) - torch_excl
        assert dep_excl <= {"7.2", "8.7"}, f"{dep} excludes {sorted(dep_excl)}"


def test_ptx_modes_follow_the_nixpkgs_recipes(packages: dict[str, Any]) -> None:
    # torch: `gpuTargets` ("8.6+PTX", torch/source/default.nix); torchvision: no gpuTargets
    # argument, TORCH_CUDA_ARCH_LIST from torch.cudaCapabilities (torchvision/default.nix);
    # nccl, magma, onnxruntime build from cudaPackages.flags (cudaForwardCompat).
    modes = {name: pkg["ptx"] for name, pkg in packages["packages"].items()}
    assert modes["torch"] == "gpu-targets"
    assert modes["torchvision"] == "inherited"
    assert {modes[n] for n in ("nccl", "magma", "onnxruntime")} == {"forward-compat"}
