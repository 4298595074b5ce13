"""``capplan export`` (issue 35): each format checked against the plan it comes from and
against the format's own rules.

wheel-variants: every file validates against the PEP 825 v0.1.1 schema (tests/data/pep825, a
verbatim copy) with jsonschema. conda and spack: neither conda-build, rattler-build nor Spack is
on PyPI or in Debian here, so their files are read with PyYAML and checked against the rules
their documentation states (conda-build: every variant key a list, zipped keys of equal length,
``# [expr]`` selectors drop lines; Spack: ``spack:`` with ``definitions``, ``specs`` and
``concretizer.unify``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from capplan.errors import ExitCode

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (dev extra) is not installed")
yaml = pytest.importorskip("yaml", reason="PyYAML (dev extra) is not installed")

SCHEMA = json.loads(
    (Path(__file__).parents[1] / "data" / "pep825" / "variant-schema-0.1.1.json").read_text()
)
# The acceptance fleet.
FLEET = """
[fleet]
gpus = ["RTX 3090", "A100", "H100", "RTX 4090", "GTX 1080 Ti", "MI300X"]
[packages.torch]
[policy]
system = "x86_64-linux"
"""
LABEL = re.compile(r"[0-9a-z_.]{1,16}")  # PEP 825 "Variant label"


def validate(document: dict[str, Any]) -> None:
    """PEP 825's schema for all but PEP 850's ``providers`` (which v0.1.1 does not know and
    every installer needs: test_export_clients.py loads the files with variantlib and uv)."""
    providers = document.get("providers")
    if providers is not None:
        assert set(providers) == set(document["default-priorities"]["namespace"])
    pep825 = {key: value for key, value in document.items() if key != "providers"}
    jsonschema.Draft202012Validator(SCHEMA).validate(pep825)


def one_line_error(result: Any, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("capplan: error: "), result.stderr
    return str(lines[0])


def planned(capplan_in: Any, *flags: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The plan as `capplan plan --json` gives it, and torch's per-target builds."""
    result = capplan_in("plan", "--json", *flags)
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    torch = [v for v in plan["variants"] if v["package"] == "torch" and not v["independent"]]
    return plan, torch


def export(capplan_in: Any, *args: str) -> dict[str, Any]:
    result = capplan_in("export", *args, "--json")
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def capability_key(text: str) -> tuple[int, int]:
    major, minor = text.rstrip("af").split(".")
    return int(major), int(minor)


# -- wheel variants --------------------------------------------------------------------------------
def test_wheel_variants_validate_and_name_every_planned_variant(
    capplan_in: Any, tmp_path: Path
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    _, torch = planned(capplan_in)
    out = tmp_path / "out"
    data = export(
        capplan_in,
        "wheel-variants",
        "--package",
        "torch",
        "--version",
        "2.9.0",
        "--output",
        str(out),
    )
    index = json.loads((out / "torch-2.9.0-variants.json").read_text())
    validate(index)
    labels = set(index["variants"])
    assert labels == {e["label"] for e in data["entries"]}
    assert all(LABEL.fullmatch(label) for label in labels)
    for label in labels:
        document = json.loads((out / "variants" / label / "variant.json").read_text())
        validate(document)
        assert list(document["variants"]) == [label]  # exactly the wheel's own label
        assert document["variants"][label] == index["variants"][label]
        assert document["default-priorities"] == index["default-priorities"]
    by_variant = {name: e for e in data["entries"] for name in e["variants"]}
    assert set(by_variant) == {v["name"] for v in torch}  # every planned build, no other
    for v in torch:
        properties = by_variant[v["name"]]["properties"]
        if v["vendor"] == "amd":
            assert properties["amd"]["gfx_arch"] == v["gfx_targets"]
        else:
            sm = [f"{c.replace('.', '')}_real" for c in v["capabilities"]]
            assert properties["nvidia"]["sm_arch"] == sm
            assert properties["nvidia"]["cuda_version_lower_bound"] == [v["cuda"]]
    namespaces = {ns for e in data["entries"] for ns in e["properties"]}
    assert set(index["default-priorities"]["namespace"]) == namespaces == {"nvidia", "amd"}
    assert by_variant["torch-sm86"]["wheel"] == "torch-2.9.0-{tags}-cu129_sm86.whl"


def test_the_schema_check_can_fail() -> None:
    # The validation above is live: the schema refuses what PEP 825 forbids.
    good = {"$schema": "x", "default-priorities": {"namespace": ["nvidia"]}, "variants": {}}
    validate(good)
    for bad in (
        {**good, "variants": {"Cu129": {}}},  # a label with an upper-case letter
        {**good, "variants": {"cu129": {"nvidia": {"sm_arch": []}}}},  # no value
        {**good, "default-priorities": {"namespace": []}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)


def test_mixed_machines_are_said_per_variant(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    data = export(
        capplan_in, "wheel-variants", "--package", "torch", "--output", str(tmp_path / "w")
    )
    notes = {e["label"]: " ".join(e["notes"]) for e in data["entries"]}
    # The provider keys on the highest GPU: an H100 machine that also holds an A100 gets sm90.
    assert "highest GPU" in notes["cu129_sm90"] and "A100 (8.0)" in notes["cu129_sm90"]
    assert "GTX 1080 Ti (6.1)" in notes["cu129_sm80"]
    assert "highest GPU" not in notes["cu129_sm61"]  # the lowest GPU: nothing below it
    assert "rocm_version is not stated" in notes["rocm_gfx942"]


def test_rocm_version_is_major_minor(capplan_in: Any, tmp_path: Path) -> None:
    # The AMD provider offers rocm_version as major.minor: 7.2.3 is stated as 7.2.
    (tmp_path / "capplan.toml").write_text(FLEET)
    data = export(
        capplan_in,
        "wheel-variants",
        "--package",
        "torch",
        "--rocm-version",
        "7.2.3",
        "--output",
        str(tmp_path / "w"),
    )
    (rocm,) = [e for e in data["entries"] if e["label"] == "rocm_gfx942"]
    assert rocm["properties"]["amd"]["rocm_version"] == ["7.2"]


def test_ptx_fat_and_several_cuda_versions(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["RTX 3090", "H100", "RTX 5090", "GTX 1080"]\n[packages.torch]\n'
        '[policy]\nsystem = "x86_64-linux"\ncuda = ["12.6", "12.9"]\nptx = "newest"\n'
        'fat = "fleet"\n'
    )
    _, torch = planned(capplan_in)
    # The fixture needs two CUDA versions: the RTX 5090 needs 12.8 or later, the rest take 12.6
    # (nixpkgs' torch refuses CUDA 13: see the knowledge base's torch limits).
    assert {v["cuda"] for v in torch} == {"12.6", "12.9"}
    out = tmp_path / "w"
    data = export(
        capplan_in,
        "wheel-variants",
        "--package",
        "torch",
        "--version",
        "2.9",
        "--rocm-version",
        "7.2.3",
        "--wheel-name",
        "torch-2.9-cp312-cp312-manylinux_2_28_x86_64.whl",
        "--output",
        str(out),
    )
    validate(json.loads((out / "torch-2.9-variants.json").read_text()))
    by_variant = {name: e for e in data["entries"] for name in e["variants"]}
    assert set(by_variant) == {v["name"] for v in torch}
    sm120 = by_variant["torch-sm120-cu129"]
    assert sm120["properties"]["nvidia"]["sm_arch"] == ["120_real", "120_virtual"]
    assert sm120["wheel"] == "torch-2.9-cp312-cp312-manylinux_2_28_x86_64-cu129_sm120p.whl"
    sm86 = by_variant["torch-sm86"]
    # compute_86 cannot be stated as 80_virtual (it would claim an A100): left out, and said.
    assert sm86["properties"]["nvidia"]["sm_arch"] == ["86_real"]
    assert any("PTX compute_86 is not stated" in n for n in sm86["notes"])
    assert any("later majors" in n for n in sm86["notes"])
    fat = next(e for e in data["entries"] if (e["label"] or "").endswith("_fat"))
    # Every SASS target of the fat build has a single-target wheel: it keeps only what ranks
    # below them (the X0_virtual of its X.0 SASS), so it never wins a GPU they run on.
    sm_arch = fat["properties"]["nvidia"]["sm_arch"]
    assert sm_arch and all(value.endswith("_virtual") for value in sm_arch), sm_arch


def test_cpu_levels_and_microarchitectures(capplan_in: Any, tmp_path: Path) -> None:
    pytest.importorskip("archspec", reason="archspec (the CPU target database) is not installed")
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ncpus = ["x86-64-v3", "zen4"]\n[packages.gromacs]\n'
        '[policy]\nsystem = "x86_64-linux"\n'
    )
    out = tmp_path / "w"
    data = export(
        capplan_in,
        "wheel-variants",
        "--package",
        "gromacs",
        "--version",
        "2022.4",
        "--output",
        str(out),
    )
    validate(json.loads((out / "gromacs-2022.4-variants.json").read_text()))
    by_variant = {name: e for e in data["entries"] for name in e["variants"]}
    assert by_variant["gromacs-x86-64-v3"]["properties"] == {"x86_64": {"level": ["v3"]}}
    assert by_variant["gromacs-x86-64-v3"]["label"] == "x86_64_v3"
    zen4 = by_variant["gromacs-zen4"]
    # zen4 runs x86-64-v4 code, and has features the level lacks: the provider's properties.
    assert zen4["properties"]["x86_64"]["level"] == ["v4"]
    assert zen4["properties"]["x86_64"]["clzero"] == ["on"]
    assert any("only level values" in n for n in zen4["notes"])


# -- conda -----------------------------------------------------------------------------------------
# rattler-build renders these files and py-rattler's solver picks the rows in
# test_export_clients.py; here the variant config's own rules and its rows against the plan.
def rows(config: dict[str, Any]) -> list[dict[str, Any]]:
    (zipped,) = config["zip_keys"]
    lengths = {key: len(config[key]) for key in zipped}
    assert len(set(lengths.values())) == 1, lengths  # zipped keys must have equal lengths
    for key, value in config.items():
        assert isinstance(value, list), key  # every variant key is a list
    return [
        dict(zip(zipped, values, strict=True))
        for values in zip(*(config[k] for k in zipped), strict=True)
    ]


def test_conda_has_one_row_per_gpu_variant(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    _, torch = planned(capplan_in)
    out = tmp_path / "c"
    export(capplan_in, "conda", "--package", "torch", "--output", str(out))
    config = yaml.safe_load((out / "variants.yaml").read_text())
    table = rows(config)
    assert set(config["zip_keys"][0]) == {
        "CUDAARCHS",
        "TORCH_CUDA_ARCH_LIST",
        "AMDGPU_TARGETS",
        "cuda_compiler_version",
        "gpu_requirement",
        "fallback",
        "priority",
    }
    per_gpu, fallback = table[:-1], table[-1]
    assert len(per_gpu) == len(torch)  # every NVIDIA and AMD build, no other
    for v in torch:
        if v["vendor"] == "amd":
            (row,) = [r for r in per_gpu if r["AMDGPU_TARGETS"] == ";".join(v["gfx_targets"])]
            assert row["gpu_requirement"] == "__amdgpu_arch ==9.4.2"  # gfx942's ISA version
            assert row["cuda_compiler_version"] == "None"
            continue
        archs = ";".join(f"{c.replace('.', '')}-real" for c in v["capabilities"])
        (row,) = [r for r in per_gpu if r["CUDAARCHS"] == archs]
        (cap,) = v["capabilities"]
        major = int(cap.split(".")[0])
        assert row["gpu_requirement"] == f"__cuda_arch >={cap},<{major + 1}"
        assert row["TORCH_CUDA_ARCH_LIST"] == " ".join(v["capabilities"])
        assert row["cuda_compiler_version"] == v["cuda"]
    # Newest first, as integers: priority falls row by row; the fallback is last, at 0.
    assert [r["priority"] for r in per_gpu] == list(range(len(per_gpu), 0, -1))
    assert (fallback["priority"], fallback["fallback"]) == (0, "yes")
    nvidia = {r["CUDAARCHS"] for r in per_gpu if r["CUDAARCHS"]}
    assert set(fallback["CUDAARCHS"].split(";")) == nvidia
    recipe = (out / "recipe.yaml").read_text()
    assert "schema_version: 1" in recipe
    for key in ("CUDAARCHS", "TORCH_CUDA_ARCH_LIST", "AMDGPU_TARGETS"):
        assert f"{key}: ${{{{ {key} }}}}" in recipe  # the build sees the row's key
    assert "number: ${{ (priority | int) * 100 }}" in recipe


def test_conda_several_cuda_versions_share_one_zip(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["RTX 3090", "H100", "GTX 1080"]\n[packages.magma]\n'
        '[policy]\nsystem = "x86_64-linux"\ncuda = ["13.0", "12.9"]\nptx = "newest"\n'
    )
    out = tmp_path / "c"
    data = export(capplan_in, "conda", "--package", "magma", "--output", str(out))
    text = (out / "variants.yaml").read_text()
    assert "TORCH_CUDA_ARCH_LIST" not in text  # magma is not torch-like
    assert "# [" not in text  # no selectors: they dropped every row when the config was read
    table = rows(yaml.safe_load(text))
    assert [r["CUDAARCHS"] for r in table] == [e["CUDAARCHS"] for e in data["entries"]]
    assert {r["cuda_compiler_version"] for r in table} == {"13.0", "12.9"}
    # No fallback row repeats a row (a CUDA version with one row needs none).
    for cuda in ("13.0", "12.9"):
        mine = [r["CUDAARCHS"] for r in table if r["cuda_compiler_version"] == cuda]
        assert len(mine) == len(set(mine)), mine


def test_conda_writes_a_variant_config_per_system(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["H100", "GH200"]\n[packages.torch]\n'
        '[policy]\nsystems = ["x86_64-linux", "aarch64-linux"]\n'
    )
    out = tmp_path / "c"
    data = export(capplan_in, "conda", "--package", "torch", "--output", str(out))
    assert sorted(data["files"]) == [
        "recipe.yaml",
        "variants-linux-64.yaml",
        "variants-linux-aarch64.yaml",
    ]
    for name in ("variants-linux-64.yaml", "variants-linux-aarch64.yaml"):
        table = rows(yaml.safe_load((out / name).read_text()))
        mine = [e for e in data["entries"] if e["variant_config"] == name]
        assert [r["CUDAARCHS"] for r in table] == [e["CUDAARCHS"] for e in mine]


def test_conda_refuses_a_package_without_gpu_builds(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ncpus = ["x86-64-v2", "x86-64-v4"]\n[packages.gromacs]\n'
        '[policy]\nsystem = "x86_64-linux"\n'
    )
    result = capplan_in("export", "conda", "--package", "gromacs", "--output", str(tmp_path / "c"))
    assert "no GPU builds" in one_line_error(result, ExitCode.INVALID_INPUT)
    assert not (tmp_path / "c").exists()


# -- spack -----------------------------------------------------------------------------------------
def test_spack_has_a_spec_per_variant(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    _, torch = planned(capplan_in)
    out = tmp_path / "s"
    export(capplan_in, "spack", "--package", "torch", "--version", "2.9.0", "--output", str(out))
    env = yaml.safe_load((out / "spack.yaml").read_text())["spack"]
    assert env["concretizer"]["unify"] is False  # several py-torch builds in one environment
    definitions = {name: specs for d in env["definitions"] for name, specs in d.items()}
    assert env["specs"] == [f"${name}" for name in definitions]
    specs = [s for group in definitions.values() for s in group]
    assert len(specs) == len(torch)
    for v in torch:
        if v["vendor"] == "amd":
            want = f"amdgpu_target={','.join(v['gfx_targets'])}"
            group = "rocm_x86_64"
        else:
            want = f"cuda_arch={','.join(c.replace('.', '') for c in v['capabilities'])}"
            group = "cuda_x86_64"
        matching = [s for s in definitions[group] if re.search(rf"{want}( |$)", s)]
        assert len(matching) == 1, (v["name"], definitions)
        assert matching[0].startswith("py-torch@2.9.0 ")
    # Spack's spec syntax: name@version, then +/~ flags and key=value variants, ^dependency.
    token = re.compile(r"[+~][a-z_]+|[a-z_]+=[0-9a-z_.,]+|\^[a-z-]+@[0-9.]+")
    for spec in specs:
        head, *rest = spec.split(" ")
        assert re.fullmatch(r"[a-z][a-z0-9-]*@[0-9.]+", head), spec
        assert all(token.fullmatch(t) for t in rest), spec


# -- the command -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["wheel-variants", "conda", "spack"])
def test_output_is_deterministic(capplan_in: Any, tmp_path: Path, name: str) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        export(capplan_in, name, "--package", "torch", "--version", "1", "--output", str(out))
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for path in files:
        assert (first / path).read_bytes() == (second / path).read_bytes()
        assert str(tmp_path) not in (first / path).read_text()  # no absolute paths


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("--package", "torhc"), ExitCode.INVALID_INPUT, "package 'torhc' is not in the plan"),
        (("--package", "torch", "--version", "two"), ExitCode.INVALID_INPUT, "--version 'two'"),
        (
            ("--package", "torch", "--wheel-name", "torch.zip"),
            ExitCode.INVALID_INPUT,
            "is not a wheel file name",
        ),
        (
            ("--package", "torch", "--wheel-name", "numpy-2.0-cp312-cp312-linux_x86_64.whl"),
            ExitCode.INVALID_INPUT,
            "a wheel of 'numpy'",
        ),
        (("--package", "torch", "--rocm-version", "seven"), ExitCode.INVALID_INPUT, "ROCm"),
    ],
)
def test_bad_input_is_one_line(
    capplan_in: Any, tmp_path: Path, args: tuple[str, ...], code: ExitCode, says: str
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    result = capplan_in("export", "wheel-variants", *args, "--output", str(tmp_path / "w"))
    assert says in one_line_error(result, code)
    assert not (tmp_path / "w").exists()


def test_a_package_with_one_build_has_nothing_to_split(capplan_in: Any, tmp_path: Path) -> None:
    # numpy dispatches at run time: one generic build serves every CPU level of the fleet.
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ncpus = ["x86-64-v2", "x86-64-v4"]\n[packages.numpy]\n[packages.gromacs]\n[packages.llama-cpp]\n'
        '[policy]\nsystem = "x86_64-linux"\n'
    )
    result = capplan_in("export", "spack", "--package", "numpy", "--output", str(tmp_path / "s"))
    assert "'numpy' has no per-target builds" in one_line_error(result, ExitCode.INVALID_INPUT)
    # llama-cpp picks its CPU code at run time too (cpuArchDynamicDispatch): nothing to split.
    result = capplan_in(
        "export", "spack", "--package", "llama-cpp", "--output", str(tmp_path / "s")
    )
    assert "'llama-cpp' has no per-target builds" in one_line_error(result, ExitCode.INVALID_INPUT)
    data = export(capplan_in, "spack", "--package", "gromacs", "--output", str(tmp_path / "s"))
    assert [s for e in data["entries"] for s in e["specs"]] == [
        "gromacs ~cuda target=x86_64_v2",  # gromacs is a CudaPackage: its CPU builds say ~cuda
        "gromacs ~cuda target=x86_64_v4",
    ]


@pytest.mark.parametrize("where", ["taken", "taken/below"])
def test_an_output_that_is_a_file_is_a_write_error(
    capplan_in: Any, tmp_path: Path, where: str
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEET)
    (tmp_path / "taken").write_text("x")
    result = capplan_in("export", "spack", "--package", "torch", "--output", str(tmp_path / where))
    assert "taken" in one_line_error(result, ExitCode.WRITE)
    assert (tmp_path / "taken").read_text() == "x"


def test_an_output_folder_is_made_but_never_its_missing_parents(
    capplan_in: Any, tmp_path: Path
) -> None:
    """--output names a folder: it is made when missing (export's own layout below it too), but a
    folder above it that does not exist is an error, as for every typed --output (limits.md)."""
    (tmp_path / "capplan.toml").write_text(FLEET)
    missing = tmp_path / "no" / "such" / "out"
    result = capplan_in("export", "spack", "--package", "torch", "--output", str(missing))
    assert "create it first" in one_line_error(result, ExitCode.WRITE)
    assert not (tmp_path / "no").exists()
    made = capplan_in(
        "export", "wheel-variants", "--package", "torch", "--output", str(tmp_path / "out")
    )
    assert made.exit_code == 0, made.stderr
    assert any((tmp_path / "out" / "variants").iterdir())
