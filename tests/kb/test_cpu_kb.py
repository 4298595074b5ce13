"""The CPU knowledge base (kb/cpu_packages.json, docs/cpu-planning.md "Knowledge base"): every
entry validates and cites a file, override rules use the arguments and values the recipe
accepts and features archspec knows; planning with the real model (not test entries) gives
per-level GROMACS builds with the recipe's cpuAcceleration values and one generic build of the
packages that dispatch at run time; the CLI end to end, and a broken file as exit 6."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("archspec", reason="archspec (the CPU target database) is not installed")

import archspec.cpu  # type: ignore[import-untyped]
from pydantic import ValidationError

from capplan.adapters.cpu_archspec import load_cpu_model
from capplan.adapters.kb import kb_path, load_kb, load_kb_file
from capplan.core.families.cpu.kb import CpuPackageEntry, CpuPackagesFile
from capplan.core.model.kb_schema import validate_record
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import plan_json
from capplan.core.planning.planner import make_plan
from capplan.errors import DataError, ExitCode

RAW: dict[str, Any] = json.loads(kb_path("cpu_packages.json").read_text())
ENTRIES: dict[str, dict[str, Any]] = {e["package"]: e for e in RAW["packages"]}
MODEL = load_cpu_model()
KB = load_kb()
FEATURES = {f for t in archspec.cpu.TARGETS.values() for f in t.features}
# A file path with a directory and an extension, e.g. pkgs/by-name/op/openblas/package.nix.
PATH = re.compile(r"[\w.+-]+(/[\w.+-]+)+\.(nix|cpp|c|h|build|txt|cmake|py)\b")


def test_the_file_validates_and_the_loader_reads_every_entry() -> None:
    data = load_kb_file("cpu_packages.json", CpuPackagesFile)
    assert {e.package for e in data.packages} == set(ENTRIES)
    assert set(MODEL.policies) == set(ENTRIES)
    for raw in RAW["packages"]:
        validate_record(CpuPackageEntry, raw)  # each entry on its own, too


@pytest.mark.parametrize("package", sorted(ENTRIES))
def test_every_entry_cites_a_file(package: str) -> None:
    assert PATH.search(ENTRIES[package]["source"]), ENTRIES[package]["source"]


@pytest.mark.parametrize("package", sorted(ENTRIES))
def test_override_rules_fit_the_mechanism_and_name_archspec_features(package: str) -> None:
    entry = ENTRIES[package]
    rules = entry.get("overrides", [])
    if entry["mechanism"] == "cflags":
        assert not rules and not entry.get("arguments")
        return
    assert rules
    for rule in rules:
        assert rule["argument"] in entry["arguments"]
        assert rule["value"] in entry["arguments"][rule["argument"]]
        assert set(rule["features"]) <= FEATURES, rule


def test_gromacs_levels_map_to_the_recipes_simd_names() -> None:
    # GMX_SIMD's values of GROMACS 2026 (no AVX_512_KNL, MIC or 32-bit ARM_NEON any more);
    # AVX_512, AVX2_256, SSE4.1 and ARM_NEON_ASIMD are the ones a level maps to (highest
    # first). Every per-level build is the CPU gromacs: the 2026.x recipe reads
    # `enableCuda ? config.cudaSupport`, so the variant sets enableCuda = false.
    cpu = ("enableCuda", False)
    assert MODEL.override("gromacs", "sapphirerapids") == (("cpuAcceleration", "AVX_512"), cpu)
    assert MODEL.override("gromacs", "zen4") == (("cpuAcceleration", "AVX_512"), cpu)
    assert MODEL.override("gromacs", "x86-64-v3") == (("cpuAcceleration", "AVX2_256"), cpu)
    assert MODEL.override("gromacs", "x86-64-v2") == (("cpuAcceleration", "SSE4.1"), cpu)
    assert MODEL.override("gromacs", "neoverse_v2") == (
        ("cpuAcceleration", "ARM_NEON_ASIMD"),
        cpu,
    )
    values = ENTRIES["gromacs"]["arguments"]["cpuAcceleration"]
    assert not {"AVX_512_KNL", "MIC", "ARM_NEON"} & set(values)


def test_llama_cpp_dispatches_its_cpu_code_at_run_time() -> None:
    # pkgs/by-name/ll/llama-cpp/package.nix: cpuArchDynamicDispatch ? true builds every ggml
    # CPU variant and loads the best at start, so no per-level llama-cpp is planned.
    assert ENTRIES["llama-cpp"]["dispatch"] == "runtime-dispatch"
    assert "cpuArchDynamicDispatch" in ENTRIES["llama-cpp"]["source"]
    plan = _plan(["x86-64-v3", "sapphirerapids"], ["llama-cpp"])
    assert [v.name for v in plan.variants] == ["llama-cpp"]
    assert plan_json(plan)["variants"]["llama-cpp"]["cpu"] is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"mechanism": "cflags"}, "takes no overrides"),
        ({"always": {"cpuAcceleration": True}}, "which an override rule also sets"),
        ({"overrides": []}, "at least one rule"),
        ({"arguments": {"simd": ["AVX_512"]}}, "not one of the recipe's arguments"),
        ({"arguments": {"cpuAcceleration": ["SSE4.1"]}}, "not one the recipe accepts"),
        ({"dispatch": "sometimes"}, "dispatch"),
        ({"minutes": 0}, "minutes"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_the_model_refuses_bad_entries(change: dict[str, Any], message: str) -> None:
    entry = {**ENTRIES["gromacs"], **change}
    with pytest.raises(ValidationError, match=message):
        validate_record(CpuPackageEntry, entry)


def test_a_package_listed_twice_is_refused() -> None:
    with pytest.raises(ValidationError, match="listed twice"):
        validate_record(
            CpuPackagesFile, {"source": "x", "packages": [ENTRIES["numpy"], ENTRIES["numpy"]]}
        )


def _kb_copy(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "kb"
    shutil.copytree(kb_path("cpu_packages.json").parent, directory)
    (directory / "cpu_packages.json").write_text(text)
    return directory


def test_an_unknown_feature_name_is_a_data_error(tmp_path: Path) -> None:
    raw = json.loads(json.dumps(RAW))
    raw["packages"][0]["overrides"][0]["features"] = ["avx-512"]
    with pytest.raises(DataError, match="not an archspec feature name"):
        load_cpu_model(_kb_copy(tmp_path, json.dumps(raw)))


def test_load_cpu_model_reads_capplan_kb_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = {"source": "test", "packages": [ENTRIES["numpy"]]}
    monkeypatch.setenv("CAPPLAN_KB_DIR", str(_kb_copy(tmp_path, json.dumps(raw))))
    assert set(load_cpu_model().policies) == {"numpy"}


# -- planning with the real knowledge base -----------------------------------------------------


def _plan(cpus: list[str], packages: list[str]) -> Any:
    config = config_from_mapping(
        {"fleet": {"cpus": cpus}, "packages": {p: {} for p in packages}}, origin="test"
    )
    return make_plan(KB, config, cpu=MODEL)


def test_mixed_fleet_gets_gromacs_per_level_and_one_generic_numpy_and_openblas() -> None:
    # x86-64-v3 lacks avx512f and sapphirerapids has it: two GROMACS SIMD levels.
    assert "avx512f" not in archspec.cpu.TARGETS["x86_64_v3"].features
    assert "avx512f" in archspec.cpu.TARGETS["sapphirerapids"].features
    plan = _plan(["x86-64-v3", "sapphirerapids"], ["gromacs", "numpy", "openblas"])
    data = plan_json(plan)["variants"]
    assert sorted(n for n in data if n.startswith("gromacs")) == [
        "gromacs-sapphirerapids",
        "gromacs-x86-64-v3",
    ]
    assert data["gromacs-x86-64-v3"]["cpu"]["override"] == {
        "cpuAcceleration": "AVX2_256",
        "enableCuda": False,
    }
    assert data["gromacs-sapphirerapids"]["cpu"]["override"] == {
        "cpuAcceleration": "AVX_512",
        "enableCuda": False,
    }
    assert data["gromacs-x86-64-v3"]["cpu"]["mechanism"] == "override"
    for package in ("numpy", "openblas"):
        assert [n for n in data if n.startswith(package)] == [package]
        assert data[package]["cpu"] is None
        reasons = [d.reason for d in plan.decisions if d.package == package]
        assert len(reasons) == 1 and ENTRIES[package]["reason"] in reasons[0]
        assert ENTRIES[package]["source"] in reasons[0]
    # GROMACS' entry says its CPU code is not laid out for glibc-hwcaps: no gromacs-hwcaps.
    assert "gromacs-hwcaps" not in data


def test_one_fleet_level_gives_one_gromacs_build() -> None:
    plan = _plan(["x86-64-v3"], ["gromacs"])
    names = [v.name for v in plan.variants if v.package == "gromacs"]
    assert names == ["gromacs-x86-64-v3"]
    assert plan_json(plan)["variants"]["gromacs-x86-64-v3"]["cpu"]["override"] == {
        "cpuAcceleration": "AVX2_256",
        "enableCuda": False,
    }


# -- the CLI -----------------------------------------------------------------------------------

CONFIG = """
[fleet]
cpus = ["x86-64-v3", "sapphirerapids"]
[packages.gromacs]
[packages.numpy]
"""


def test_plan_json_shows_the_gromacs_variants_with_cpu_fields(
    capplan_in: Any, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(CONFIG)
    result = capplan_in("plan", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    variants = {v["name"]: v for v in data["variants"]}
    # plan --json names each build's CPU target (null: generic CPU code).
    assert {n: v["cpu"] for n, v in variants.items()} == {
        "gromacs-x86-64-v3": "x86-64-v3",
        "gromacs-sapphirerapids": "sapphirerapids",
        "numpy": None,
    }
    numpy = [d["reason"] for d in data["decisions"] if d["package"] == "numpy"]
    assert len(numpy) == 1 and ENTRIES["numpy"]["reason"] in numpy[0]


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"source": "x", "packages": [{**ENTRIES["gromacs"], "hwcaps": "maybe"}]}),
        json.dumps({"packages": []}),
    ],
)
def test_a_broken_cpu_kb_is_exit_6_in_one_line(capplan_in: Any, tmp_path: Path, text: str) -> None:
    (tmp_path / "capplan.toml").write_text(CONFIG)
    directory = _kb_copy(tmp_path, text)
    result = capplan_in("plan", "--json", env={"CAPPLAN_KB_DIR": str(directory)})
    assert result.exit_code == int(ExitCode.DATA), (result.exit_code, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("capplan: error: "), result.stderr
    assert "cpu_packages.json" in lines[0]
