"""``capplan export`` taken by the real clients (issue 39), installed from PyPI in the dev extra:
variantlib 0.2.2 loads every wheel-variant file, uv 0.13.9 installs from a PEP 503 index served
on 127.0.0.1 the wheel the plan picks for each GPU and for this machine's CPU, rattler-build
renders a v1 recipe with the exported variant config and py-rattler's solver picks the planned
row for a GPU's ``__cuda_arch``, and every Spack spec passes Spack's own environment schema and
spec grammar and names only packages and variants spack-packages' recipes have. A client that is
not installed skips its tests with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.integration.clients import build_index, served, uv_bin, uv_install

FLEETS = {
    # The default plan's fleet (capplan.toml's [fleet]) is tested through capplan_cli below.
    "mixed": (
        '[fleet]\ngpus = ["RTX 3090", "A100", "H100", "RTX 4090", "GTX 1080 Ti", "MI300X",'
        ' "MI210"]\n[packages.torch]\n[policy]\nsystem = "x86_64-linux"\n'
    ),
    "fat": (
        '[fleet]\ngpus = ["RTX 3090", "A100", "H100", "GTX 1080 Ti"]\n[packages.torch]\n'
        '[policy]\nsystem = "x86_64-linux"\nfat = "fleet"\n'
    ),
    "fat-group": (
        '[fleet]\ngpus = ["RTX 3090", "A100", "H100", "GTX 1080 Ti"]\n[packages.torch]\n'
        '[policy]\nsystem = "x86_64-linux"\nfat = { group = ["A100", "H100"] }\n'
    ),
    "cuda-mix": (
        '[fleet]\ngpus = ["RTX 3090", "H100", "RTX 5090", "GTX 1080"]\n[packages.torch]\n'
        '[policy]\nsystem = "x86_64-linux"\ncuda = ["12.6", "12.9"]\nptx = "newest"\n'
    ),
    # a/f targets (packages.<name>.extra) beside the fleet's own: magma accepts both kinds.
    "blackwell": (
        '[fleet]\ngpus = ["B200", "B300", "RTX 5090", "H100"]\n[packages.magma]\n'
        'extra = ["10.0a", "12.0f", "9.0a"]\n[policy]\nsystem = "x86_64-linux"\n'
        'cuda = ["12.9"]\n'
    ),
}
CPU_FLEET = (
    '[fleet]\ncpus = ["x86-64-v2", "x86-64-v3", "x86-64-v4", "haswell", "sapphirerapids",'
    ' "zen3", "zen4", "neoverse_v2", "neoverse_n1", "aarch64"]\n[packages.gromacs]\n'
    '[policy]\nsystems = ["x86_64-linux", "aarch64-linux"]\n'
)


def _capplan(fleet: str, capplan_cli: Any, capplan_in: Any, tmp_path: Path) -> Any:
    """capplan for a fleet: the default plan (the repository's capplan.toml) or FLEETS'."""
    if fleet == "default":
        return capplan_cli
    (tmp_path / "capplan.toml").write_text(FLEETS[fleet])
    return capplan_in


def _package(fleet: str) -> str:
    return "magma" if fleet == "blackwell" else "torch"


def _json(capplan: Any, *args: str) -> dict[str, Any]:
    result = capplan(*args, "--json")
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _export_wheels(capplan: Any, out: Path, package: str) -> dict[str, Any]:
    return _json(
        capplan,
        "export",
        "wheel-variants",
        "--package",
        package,
        "--version",
        "1.0",
        "--rocm-version",
        "7.2.3",
        "--output",
        str(out),
    )


def _planned_for(plan: dict[str, Any], package: str, gpu: str) -> str:
    """The build the plan picks for a fleet GPU: a single-target build it runs natively, else
    the build (the fat one) that serves it."""
    serving = [
        v
        for v in plan["variants"]
        if v["package"] == package and any(s["gpu"] == gpu for s in v["serves"])
    ]
    singles = [
        v
        for v in serving
        if not v["fat"] and any(s["gpu"] == gpu and s["level"] == "native" for s in v["serves"])
    ]
    chosen = singles or serving
    assert len(chosen) >= 1, (gpu, serving)
    return str(chosen[0]["name"])


# -- wheel variants: variantlib ----------------------------------------------------------------
def _variantlib_loads(out: Path) -> None:
    variants_json = pytest.importorskip(
        "variantlib.variants_json", reason="variantlib (dev extra) is not installed"
    )
    dist_info = pytest.importorskip("variantlib.variant_dist_info")
    (index_file,) = out.glob("*-variants.json")
    index = variants_json.VariantsJson(json.loads(index_file.read_text()))
    hashes: dict[str, str] = {}
    for path in sorted(out.glob("variants/*/variant.json")):
        info = dist_info.VariantDistInfo(path.read_bytes(), path.parent.name)
        index.merge(info)  # the check variantlib's generate-index-json makes per wheel
        digest = info.variant_desc.hexdigest
        # variantlib refuses an index whose wheels share their properties.
        assert digest not in hashes, (path.parent.name, hashes.get(digest))
        hashes[digest] = path.parent.name
    assert set(index.variants) == set(hashes.values())


@pytest.mark.parametrize("fleet", sorted(FLEETS))
def test_variantlib_loads_every_index_and_variant_json(
    capplan_in: Any, tmp_path: Path, fleet: str
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEETS[fleet])
    _export_wheels(capplan_in, tmp_path / "w", _package(fleet))
    _variantlib_loads(tmp_path / "w")


def test_variantlib_loads_the_default_plan_and_cpu_builds(
    capplan_cli: Any, capplan_in: Any, tmp_path: Path
) -> None:
    _export_wheels(capplan_cli, tmp_path / "default", "torch")
    _variantlib_loads(tmp_path / "default")
    (tmp_path / "capplan.toml").write_text(CPU_FLEET)
    data = _export_wheels(capplan_in, tmp_path / "cpu", "gromacs")
    _variantlib_loads(tmp_path / "cpu")
    by_variant = {name: e for e in data["entries"] for name in e["variants"]}
    # One level's microarchitectures carry distinct properties: the providers' feature ones.
    zen4 = by_variant["gromacs-zen4"]["properties"]["x86_64"]
    spr = by_variant["gromacs-sapphirerapids"]["properties"]["x86_64"]
    assert zen4["level"] == spr["level"] == ["v4"]
    assert "clzero" in zen4 and "clzero" not in spr and "movdir64b" in spr
    assert by_variant["gromacs-x86-64-v4"]["properties"] == {"x86_64": {"level": ["v4"]}}
    v2 = by_variant["gromacs-neoverse-v2-aarch64"]["properties"]["aarch64"]
    n1 = by_variant["gromacs-neoverse-n1-aarch64"]["properties"]["aarch64"]
    assert v2["version"] == ["9.0a"] and v2["sve2"] == ["on"] and n1["version"] == ["8.2a"]
    # Generic aarch64 code runs on every Arm CPU: the null variant, labelled "null".
    assert by_variant["gromacs-aarch64"]["label"] == "null"
    assert by_variant["gromacs-aarch64"]["properties"] == {}


# -- wheel variants: uv ------------------------------------------------------------------------
@pytest.mark.parametrize("fleet", ["default", *sorted(FLEETS)])
def test_uv_installs_the_planned_wheel_for_each_gpu(
    capplan_cli: Any, capplan_in: Any, tmp_path: Path, fleet: str
) -> None:
    uv = uv_bin()
    capplan_in = _capplan(fleet, capplan_cli, capplan_in, tmp_path)
    plan = _json(capplan_in, "plan")
    package = _package(fleet)
    data = _export_wheels(capplan_in, tmp_path / "w", package)
    label_of = {name: e["label"] for e in data["entries"] for name in e["variants"]}
    fat_labels = {
        label_of[v["name"]] for v in plan["variants"] if v["fat"] and v["package"] == package
    }
    labels = build_index(tmp_path / "w", tmp_path / "index", f"{package}-1.0-variants.json", "1.0")
    assert set(labels) == {label for label in label_of.values() if label is not None}
    with served(tmp_path / "index") as url:
        for gpu in plan["fleet"]:
            want = label_of[_planned_for(plan, package, gpu["gpu"])]
            env = {
                "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": gpu["capability"],
                "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": "13.0",
            }
            got = uv_install(uv, url, tmp_path / "t", tmp_path / "cache", env)
            assert got == want, (fleet, gpu["gpu"], got, want)
            if got in fat_labels:  # the fat wheel only where no single-target build runs
                assert not any(
                    not v["fat"] and v["package"] == package and s["gpu"] == gpu["gpu"]
                    for v in plan["variants"]
                    for s in v["serves"]
                ), gpu


def test_uv_installs_for_this_machines_cpu_what_detect_names(
    capplan_in: Any, tmp_path: Path
) -> None:
    uv = uv_bin()
    (tmp_path / "capplan.toml").write_text(CPU_FLEET)
    no_gpu = {"CAPPLAN_NVML": "0", "CAPPLAN_SYSFS_ROOT": str(tmp_path / "no-sysfs")}
    detected = capplan_in("detect", "--json", env=no_gpu)
    assert detected.exit_code == 0, detected.stderr
    cpu = json.loads(detected.stdout)["cpu"]
    named = cpu["variants"]["gromacs"]
    data = _export_wheels(capplan_in, tmp_path / "w", "gromacs")
    entry = next(e for e in data["entries"] if named in e["variants"])
    if set(entry["properties"] or {}) - {"x86_64"} or any(
        k != "level" for k in (entry["properties"] or {}).get("x86_64", {})
    ):
        pytest.skip(
            f"detect names {named} ({cpu['microarchitecture']}): uv 0.13.9's vendored x86-64 "
            "provider offers only `level`, so uv takes the level wheel for a microarchitecture "
            "build"
        )
    build_index(tmp_path / "w", tmp_path / "index", "gromacs-1.0-variants.json", "1.0")
    with served(tmp_path / "index") as url:
        got = uv_install(uv, url, tmp_path / "t", tmp_path / "cache")
    assert got == entry["label"], (named, got)


# -- conda: rattler-build and py-rattler -------------------------------------------------------
def _render(folder: Path, variants_file: str, subdir: str) -> list[dict[str, Any]]:
    """rattler-build's render of the exported recipe.yaml with the exported variant config."""
    rb = pytest.importorskip("rattler_build", reason="py-rattler-build (dev extra) is missing")
    recipe = rb.Stage0Recipe.from_file(str(folder / "recipe.yaml"))
    config = rb.VariantConfig.from_file(str(folder / variants_file))
    rendered = recipe.render(
        config, rb.RenderConfig(platform=rb.PlatformConfig(target_platform=subdir))
    )
    return [r.recipe.to_dict() for r in rendered]


def _channel(root: Path, subdir: str, packages: list[dict[str, Any]]) -> Path:
    """A local conda channel (repodata.json per subdir) holding one record per rendered row."""
    records = {}
    for p in packages:
        name, version = p["package"]["name"], p["package"]["version"]
        build = p["build"]["string"]
        records[f"{name}-{version}-{build}.conda"] = {
            "name": name,
            "version": version,
            "build": build,
            "build_number": p["build"]["number"],
            "depends": p.get("requirements", {}).get("run", []),
            "constrains": p.get("requirements", {}).get("run_constraints", []),
            "subdir": subdir,
        }
    for sub, found in ((subdir, records), ("noarch", {})):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "repodata.json").write_text(
            json.dumps({"info": {"subdir": sub}, "packages": {}, "packages.conda": found})
        )
    return root


def _solve(
    channel: Path, subdir: str, package: str, overrides: dict[str, str], monkeypatch: Any
) -> int:
    """py-rattler's solver for ``package`` on a machine whose virtual packages py-rattler
    detects under the CONDA_OVERRIDE_* values given: the build number it picks."""
    import asyncio

    rattler = pytest.importorskip("rattler", reason="py-rattler (dev extra) is not installed")
    for name in ("CUDA", "CUDA_ARCH", "AMDGPU", "AMDGPU_ARCH"):
        monkeypatch.setenv(f"CONDA_OVERRIDE_{name}", overrides.get(name, ""))
    found = rattler.VirtualPackage.detect(rattler.VirtualPackageOverrides.from_env())
    records = asyncio.run(
        rattler.solve(
            sources=[rattler.Channel(str(channel))],
            specs=[package],
            platforms=[subdir, "noarch"],
            virtual_packages=found,
        )
    )
    (record,) = [r for r in records if r.name.normalized == package]
    return int(record.build_number)


CONDA_FLEETS = ["default", "mixed", "cuda-mix", "fat", "blackwell"]
SUBDIRS = {"x86_64-linux": "linux-64", "aarch64-linux": "linux-aarch64"}


@pytest.mark.parametrize("fleet", CONDA_FLEETS)
def test_rattler_build_renders_the_rows_and_the_solver_picks_the_planned_one(
    capplan_cli: Any, capplan_in: Any, tmp_path: Path, fleet: str, monkeypatch: Any
) -> None:
    capplan = _capplan(fleet, capplan_cli, capplan_in, tmp_path)
    package = _package(fleet)
    plan = _json(capplan, "plan")
    out = tmp_path / "c"
    data = _json(
        capplan, "export", "conda", "--package", package, "--version", "1.0", "--output", str(out)
    )
    ranked = [r["priority"] for r in data["entries"] if not r["fallback"]]
    assert ranked == list(range(len(ranked), 0, -1))  # integers, newest first
    priority_of = {name: r["priority"] for r in data["entries"] for name in r["variants"]}
    for system in sorted({r["system"] for r in data["entries"]}):
        subdir = SUBDIRS[system]
        rows = [r for r in data["entries"] if r["system"] == system]
        rendered = _render(out, rows[0]["variant_config"], subdir)
        # One rendered package per row: mixed CUDA versions included, nothing dropped or doubled.
        assert len(rendered) == len(rows)
        for row in rows:
            matching = [
                p
                for p in rendered
                if p["build"]["number"] == row["priority"] * 100
                and p["build"]["script"]["env"].get("CUDAARCHS") == row.get("CUDAARCHS")
                and p["build"]["script"]["env"].get("AMDGPU_TARGETS") == row.get("AMDGPU_TARGETS")
            ]
            assert len(matching) == 1, (row, rendered)
            requirements = matching[0].get("requirements", {})
            where = "run_constraints" if row["fallback"] else "run"
            assert requirements[where] == [row["requires"]]
            if "cuda" in row:  # the row's CUDA reaches the build through the compiler
                assert requirements["build"] == [f"cuda-nvcc_{subdir} {row['cuda']}.*"]
            if package == "torch" and "cuda" in row:
                env = matching[0]["build"]["script"]["env"]
                assert env["TORCH_CUDA_ARCH_LIST"] == row["TORCH_CUDA_ARCH_LIST"]
        channel = _channel(tmp_path / "channel" / subdir, subdir, rendered)
        for gpu in plan["fleet"]:
            if gpu["system"] != system:
                continue
            want = priority_of[_planned_for(plan, package, gpu["gpu"])]
            overrides = {"CUDA": "13.0", "CUDA_ARCH": gpu["capability"]}
            got = _solve(channel, subdir, package, overrides, monkeypatch)
            assert got == want * 100, (fleet, gpu, got, want)
        for gpu in plan["amd_fleet"]:
            if gpu["system"] != system:
                continue
            from capplan.core.families.rocm.export import amdgpu_arch

            want = priority_of[_planned_for(plan, package, gpu["gpu"])]
            isa = amdgpu_arch(gpu["target"])
            assert isa is not None
            overrides = {"AMDGPU": "0", "AMDGPU_ARCH": isa}  # __amdgpu is always version 0
            got = _solve(channel, subdir, package, overrides, monkeypatch)
            assert got == want * 100, (fleet, gpu, got, want)
        if any(r["fallback"] for r in rows):  # a client without GPU virtual packages
            assert _solve(channel, subdir, package, {}, monkeypatch) == 0


def test_rattler_build_renders_each_systems_variant_config(capplan_in: Any, tmp_path: Path) -> None:
    (tmp_path / "capplan.toml").write_text(
        '[fleet]\ngpus = ["H100", "GH200", "RTX 3090"]\n[packages.torch]\n'
        '[policy]\nsystems = ["x86_64-linux", "aarch64-linux"]\n'
    )
    out = tmp_path / "c"
    data = _json(capplan_in, "export", "conda", "--package", "torch", "--output", str(out))
    for name, subdir in (
        ("variants-linux-64.yaml", "linux-64"),
        ("variants-linux-aarch64.yaml", "linux-aarch64"),
    ):
        rendered = _render(out, name, subdir)
        mine = [e for e in data["entries"] if e["variant_config"] == name]
        assert sorted(p["build"]["script"]["env"]["CUDAARCHS"] for p in rendered) == sorted(
            e["CUDAARCHS"] for e in mine
        )
        assert all(
            p["requirements"]["build"] == [f"cuda-nvcc_{subdir} {e['cuda']}.*"]
            for p in rendered
            for e in mine
        )


# -- Spack: its environment schema, spec grammar and spack-packages' recipes --------------------
SPACK_DATA = Path(__file__).parents[1] / "data" / "spack"


def _spack_recipes() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """tests/data/spack/packages.txt: package -> variants, and variant -> allowed values."""
    packages: dict[str, set[str]] = {}
    values: dict[str, set[str]] = {}
    for line in (SPACK_DATA / "packages.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(":")
        if name.startswith("values "):
            values[name.removeprefix("values ")] = set(rest.split())
        else:
            packages[name] = set(rest.split())
    return packages, values


def _spack_nodes(spec: str) -> list[dict[str, Any]]:
    """Spack's node grammar over its own tokens: per node its name, version and variants
    (``target`` and the other architecture keys kept apart); one version per node."""
    import importlib.util

    loaded = importlib.util.spec_from_file_location("spec_grammar", SPACK_DATA / "spec_grammar.py")
    assert loaded is not None and loaded.loader is not None
    grammar = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(grammar)
    nodes: list[dict[str, Any]] = [{"name": None, "version": None, "variants": {}, "arch": {}}]
    for kind, text in grammar.tokenize(spec):
        node = nodes[-1]
        if kind == "DEPENDENCY":
            nodes.append({"name": None, "version": None, "variants": {}, "arch": {}})
        elif kind == "UNQUALIFIED_PACKAGE_NAME":
            assert node["name"] is None and not node["variants"], spec  # a name starts a node
            node["name"] = text
        elif kind == "VERSION":
            assert node["version"] is None, f"Spec cannot have multiple versions: {spec}"
            node["version"] = text[1:]
        elif kind == "BOOL_VARIANT":
            assert text[1:] not in node["variants"], spec
            node["variants"][text[1:]] = text[0] == "+"
        elif kind == "KEY_VALUE_PAIR":
            match = grammar.SPLIT_KVP.match(text)
            assert match is not None
            key, _, value = match.groups()
            where = "arch" if key in ("target", "os", "platform", "arch") else "variants"
            assert key not in node[where], spec
            node[where][key] = value
        else:
            raise AssertionError(f"{kind} {text!r} in {spec!r}: capplan writes no such token")
    return nodes


def _check_spack(out: Path) -> list[str]:
    """spack.yaml against Spack's schema; every spec against its grammar and the recipes."""
    yaml = pytest.importorskip("yaml", reason="PyYAML (dev extra) is not installed")
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (dev extra) is missing")
    archspec = pytest.importorskip("archspec.cpu", reason="archspec is not installed")
    schema = yaml.safe_load((SPACK_DATA / "env_schema.yaml").read_text())
    document = yaml.safe_load((out / "spack.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(document)
    env = document["spack"]
    definitions = {name: specs for d in env["definitions"] for name, specs in d.items()}
    assert env["specs"] == [f"${name}" for name in definitions]  # every definition is built
    packages, values = _spack_recipes()
    specs = [spec for group in definitions.values() for spec in group]
    for spec in specs:
        nodes = _spack_nodes(spec)
        for node in nodes:
            assert node["name"] in packages, (spec, node["name"])
            for key, value in node["variants"].items():
                assert key in packages[node["name"]], (spec, node["name"], key)
                for item in str(value).split(",") if key in values else ():
                    assert item in values[key], (spec, key, item)
            if "target" in node["arch"]:
                assert node["arch"]["target"] in archspec.TARGETS, spec
        root = nodes[0]
        # Every spec says the CPU it is built for, on the package itself (a target written
        # after ^cuda@12.9 would constrain cuda).
        assert "target" in root["arch"], spec
        assert all("target" not in n["arch"] for n in nodes[1:]), spec
    return specs


@pytest.mark.parametrize("fleet", sorted(FLEETS))
def test_spack_specs_pass_spacks_schema_grammar_and_recipes(
    capplan_in: Any, tmp_path: Path, fleet: str
) -> None:
    (tmp_path / "capplan.toml").write_text(FLEETS[fleet])
    package = _package(fleet)
    data = _json(
        capplan_in,
        "export",
        "spack",
        "--package",
        package,
        "--version",
        "1.0",
        "--output",
        str(tmp_path / "s"),
    )
    specs = _check_spack(tmp_path / "s")
    assert len(specs) == len({s for e in data["entries"] for s in e["specs"]})


def test_spack_default_plan_cpu_and_dependent_packages(
    capplan_cli: Any, capplan_in: Any, tmp_path: Path
) -> None:
    _json(capplan_cli, "export", "spack", "--package", "torch", "--output", str(tmp_path / "d"))
    _check_spack(tmp_path / "d")
    (tmp_path / "capplan.toml").write_text(
        CPU_FLEET.replace(
            "[packages.gromacs]\n",
            "[packages.gromacs]\n[packages.torchvision]\n[packages.nccl]\n[packages.ollama]\n",
        ).replace("cpus = [", 'gpus = ["A100", "GH200", "MI300X"]\ncpus = [')
    )
    for package in ("gromacs", "torchvision", "nccl", "ollama"):
        _json(
            capplan_in, "export", "spack", "--package", package, "--output", str(tmp_path / package)
        )
        _check_spack(tmp_path / package)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ('"nccl ~rocm target=x86_64"', "rocm"),  # nccl has no rocm variant
        ('"onnxruntime +cuda target=x86_64"', "onnxruntime"),  # Spack's is py-onnxruntime
        ('"py-torchvision +cuda cuda_arch=80 target=x86_64"', "cuda"),
        ('"py-torch +cuda cuda_arch=85 target=x86_64"', "85"),  # no such cuda_arch value
        ('"py-torch +cuda cuda_arch=80 ^cuda@12.9 target=aarch64"', "target"),
        ('"py-torch +cuda cuda_arch=80"', "target"),  # the CI host's CPU would decide
        ('"py-torch@2.9@2.10 target=x86_64"', "multiple versions"),
        ('"py-torch target=x86_64 !"', "unexpected"),
    ],
)
def test_the_spack_checks_can_fail(tmp_path: Path, spec: str, why: str) -> None:
    (tmp_path / "spack.yaml").write_text(
        f"spack:\n  view: false\n  definitions:\n  - g:\n    - {spec}\n  specs:\n  - $g\n"
    )
    with pytest.raises((AssertionError, ValueError), match=why):
        _check_spack(tmp_path)


def test_the_spack_schema_refuses_what_spack_refuses(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (dev extra) is missing")
    (tmp_path / "spack.yaml").write_text("spack:\n  definition: []\n  specs: []\n")
    with pytest.raises(jsonschema.ValidationError):
        _check_spack(tmp_path)
