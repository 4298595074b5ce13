"""Issue 42: a Variant holds one typed family field, its family's own spec, and each family
writes its spec (plan.json's keys, ``plan --json``, the matrix) itself."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from capplan.adapters.families import cpu_model
from capplan.adapters.kb import load_kb
from capplan.core.families.cpu.fleet import CpuPart, cpu_part
from capplan.core.families.cpu.spec import CpuSpec
from capplan.core.families.cuda.fleet import CudaPart, cuda_part
from capplan.core.families.cuda.spec import CudaSpec
from capplan.core.families.registry import (
    is_cpu_level,
    job_keys,
    nix_keys,
    plan_keys,
    table_keys,
)
from capplan.core.families.rocm.fleet import RocmPart, rocm_part
from capplan.core.families.rocm.spec import RocmSpec
from capplan.core.model.fleet import PlanPart
from capplan.core.model.spec import FamilySpec, spec_order, spec_toolkit
from capplan.core.planning import plan as plan_module
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import plan_dict
from capplan.core.planning.plan import Plan, Variant
from capplan.core.planning.planner import make_plan

# What each family's variants held side by side before issue 42 (CUDA's release, package set
# and Jetson redistributables included).
OLD_FIELDS = {
    "capabilities",
    "ptx",
    "gpu_targets",
    "forward_compat",
    "rocm",
    "cpu",
    "cuda",
    "cuda_set",
    "jetson",
}
# The Plan's fields per family before issue 42 (now each family's PlanPart).
OLD_PLAN_FIELDS = {"cuda_policy", "fleet", "amd_fleet", "rocm_scope", "amd_default_targets"}
# plan.json's keys of a variant beside system/package/attr/independent (pkgs/variant.nix).
CUDA_KEYS = {"capabilities", "cuda", "cuda_set", "forward_compat", "gpu_targets", "cpu"}


@pytest.fixture(scope="module")
def mixed() -> Plan:
    data: dict[str, Any] = {
        "fleet": {"gpus": ["A100", "RTX 3090", "MI300X"], "cpus": ["x86-64-v3", "sapphirerapids"]},
        "packages": {"torch": {}, "magma": {}, "gromacs": {}, "numpy": {}},
        "policy": {"ptx": "newest"},
    }
    return make_plan(load_kb(), config_from_mapping(data, origin="test"), cpu=cpu_model())


def test_a_variant_holds_one_family_field() -> None:
    assert "spec" in Variant._fields
    assert OLD_FIELDS.isdisjoint(Variant._fields)
    assert OLD_FIELDS.isdisjoint(name for name in dir(Variant) if not name.startswith("_"))
    # Typed by the base below the families, not by any family's own type.
    hints = typing.get_type_hints(Variant, vars(plan_module))
    assert hints["spec"] == FamilySpec | None
    assert {"CudaSpec", "RocmSpec", "CpuSpec"}.isdisjoint(vars(plan_module))


def test_each_variant_holds_its_own_familys_spec(mixed: Plan) -> None:
    kinds: set[type[FamilySpec] | None] = set()
    for v in mixed.variants:
        spec = v.spec
        kinds.add(None if spec is None else type(spec))
        if v.vendor == "nvidia":
            assert isinstance(spec, CudaSpec) and spec.family == "cuda"
        elif v.vendor == "amd":
            assert isinstance(spec, RocmSpec) and spec.family == "rocm"
        else:
            assert spec is None or (isinstance(spec, CpuSpec) and spec.family == "cpu")
        assert is_cpu_level(v) == isinstance(spec, CpuSpec)
    assert kinds == {CudaSpec, RocmSpec, CpuSpec, None}


def test_each_family_writes_its_own_plan_json_keys(mixed: Plan) -> None:
    for v in mixed.variants:
        keys = nix_keys(v)
        spec = v.spec
        if isinstance(spec, CudaSpec):
            assert set(keys) == CUDA_KEYS
            assert keys["capabilities"] == [str(c) for c in spec.capabilities]
            assert keys["gpu_targets"] == list(spec.gpu_targets)
            assert keys["forward_compat"] == spec.forward_compat and keys["cpu"] is None
        elif isinstance(spec, RocmSpec):
            assert set(keys) == CUDA_KEYS | {"vendor", "rocm"}
            assert keys["vendor"] == "amd" and keys["capabilities"] == []
            assert keys["rocm"]["targets"] == [str(t) for t in spec.targets]
            assert keys["rocm"]["scope"] == spec.scope and keys["cpu"] is None
        else:
            assert set(keys) == CUDA_KEYS | {"vendor"} and keys["vendor"] is None
            assert keys["capabilities"] == [] and keys["cuda"] is None
            if isinstance(spec, CpuSpec) and spec.target is not None:
                assert keys["cpu"]["target"] == spec.target
                assert keys["cpu"]["gccarch"] == spec.gccarch
            elif spec is None:
                assert keys["cpu"] is None


def test_plan_json_matrix_and_tables_read_the_spec(mixed: Plan) -> None:
    for v in mixed.variants:
        spec, fields, job, cells = v.spec, plan_keys(v), job_keys(v), table_keys(v)
        assert set(fields) == {"cuda", "capabilities", "ptx", "gpu_targets", "forward_compat"} | {
            "gfx_targets",
            "rocm_scope",
            "cpu",
        }
        if isinstance(spec, CudaSpec):
            assert fields["ptx"] == [str(c) for c in spec.ptx]
            assert spec.version is not None and fields["cuda"] == str(spec.version)
            assert job == {
                "cuda": spec.version.text,
                "capabilities": [c.text for c in spec.capabilities],
                "ptx": [c.text for c in spec.ptx],
            }
            assert cells["targets"] == ", ".join(map(str, spec.capabilities))
        elif isinstance(spec, RocmSpec):
            assert fields["gfx_targets"] == [str(t) for t in spec.targets]
            assert job["gfx_targets"] == fields["gfx_targets"] and job["vendor"] == "amd"
            assert cells["toolkit"].startswith("ROCm")
        else:
            assert fields["cpu"] == (spec.target if isinstance(spec, CpuSpec) else None)
            assert ("cpu_features" in job) == (isinstance(spec, CpuSpec) and bool(spec.gccarch))
            assert cells["cpu"] != ""


def test_a_packages_variants_follow_their_familys_order(mixed: Plan) -> None:
    # torch: the CUDA variants by capability list, then the ROCm ones; single before fat.
    torch = [v for v in mixed.variants_of("torch") if not v.fat]
    keys = [spec_order(v.spec) for v in torch]
    assert keys == sorted(keys)
    ranks = [k[0] for k in keys]
    assert 0 in ranks and 1 in ranks and ranks == sorted(ranks)
    # What a capability-dependent dependency shares: CUDA's capability list.
    checked = 0
    for v in mixed.variants:
        if isinstance(v.spec, CudaSpec) and not v.independent:
            for name in v.needs:
                dep = mixed.variant(name)
                assert dep is not None
                if not dep.independent:
                    assert dep.spec is not None
                    assert dep.spec.dependency_targets() == v.spec.capabilities
                    checked += 1
    assert checked


def test_compiled_targets_count_sass_and_ptx(mixed: Plan) -> None:
    with_ptx = [v for v in mixed.variants if isinstance(v.spec, CudaSpec) and v.spec.ptx]
    assert with_ptx
    for v in with_ptx:
        assert isinstance(v.spec, CudaSpec)
        assert v.spec.compiled_targets() == len(v.spec.capabilities) + len(v.spec.ptx)
    assert CudaSpec(capabilities=()).compiled_targets() == 0


def test_a_format_a_family_does_not_write_is_one_error_line(mixed: Plan) -> None:
    # The CPU family writes no conda rows, and a new family may come before its export.py: the
    # registry says which build and family, as an input error (exit 4), never a KeyError.
    from capplan.core.families.registry import export_writer
    from capplan.errors import ExitCode, InvalidInputError

    cpu = next(v for v in mixed.variants if isinstance(v.spec, CpuSpec))
    with pytest.raises(InvalidInputError) as caught:
        export_writer("conda", cpu)
    assert caught.value.exit_code == ExitCode.INVALID_INPUT
    assert f"{cpu.name} is a build of the cpu family, which writes no conda export" in str(
        caught.value
    )
    cuda = next(v for v in mixed.variants if isinstance(v.spec, CudaSpec))
    assert export_writer("conda", cuda)[0] == "cuda"


def test_a_plan_holds_one_part_per_family(mixed: Plan) -> None:
    # The fleets and policies are each family's part, in the registry's order, typed by the
    # base below the families (the plan names no family's type).
    assert [type(p) for p in mixed.parts] == [CudaPart, RocmPart, CpuPart]
    assert OLD_PLAN_FIELDS.isdisjoint(name for name in dir(Plan) if not name.startswith("_"))
    hints = typing.get_type_hints(Plan, vars(plan_module))
    assert hints["parts"] == tuple[PlanPart, ...]
    assert [g.label for g in cuda_part(mixed).fleet] == ["A100", "RTX 3090"]
    assert str(cuda_part(mixed).policy[0]) == "12.9"  # nixpkgs' default first
    assert [(g.label, str(g.target)) for g in rocm_part(mixed).fleet] == [("MI300X", "gfx942")]
    assert rocm_part(mixed).scope == "package" and rocm_part(mixed).default_targets
    assert sorted(e.label for e in cpu_part(mixed).fleet) == ["sapphirerapids", "x86-64-v3"]
    # The summary counts GPUs only; the CPU fleet is not among them.
    assert [g.label for g in mixed.gpus()] == ["A100", "RTX 3090", "MI300X"]


def test_each_part_writes_its_plan_json_fields_in_the_registry_order(mixed: Plan) -> None:
    keys = list(plan_dict(mixed))
    start = keys.index("share") + 1
    assert keys[start : start + 5] == [
        "cuda_policy",
        "fleet",
        "amd_fleet",
        "rocm_scope",
        "cpu_fleet",
    ]
    data = plan_dict(mixed)
    assert data["fleet"][0] == {
        "gpu": "A100",
        "capability": "8.0",
        "model": "NVIDIA A100-SXM4-80GB",
        "jetson": False,
        "count": 1,
        "system": "x86_64-linux",
    }
    assert data["amd_fleet"][0]["target"] == "gfx942" and data["rocm_scope"] == "package"


def test_a_part_missing_from_a_plan_reads_as_empty(mixed: Plan) -> None:
    from dataclasses import replace

    bare = replace(mixed, parts=())
    assert cuda_part(bare).fleet == () and cuda_part(bare).policy == ()
    assert rocm_part(bare).default_targets == () and cpu_part(bare).fleet == ()
    assert bare.gpus() == ()


def test_the_cuda_release_is_the_cuda_specs_own(mixed: Plan) -> None:
    # The toolkit release a build is compiled with: CUDA's version text; None elsewhere. The
    # variant order puts CUDA builds of one capability list by release, others after.
    for v in mixed.variants:
        spec = v.spec
        if isinstance(spec, CudaSpec):
            assert spec.version is not None and spec_toolkit(spec) == spec.version.text
            assert spec.order()[2:] == (False, (spec.version,))
        else:
            assert spec_toolkit(spec) is None
            assert spec_order(spec)[2:] == (True, ())
    assert CudaSpec.measured_costs and not RocmSpec.measured_costs and not CpuSpec.measured_costs


def test_the_graph_checks_dependencies_share_the_toolkit_release(mixed: Plan) -> None:
    from dataclasses import replace

    from capplan.core.families.cuda.version import CudaVersion
    from capplan.core.planning.graph import build_job_graph
    from capplan.errors import GraphError

    build_job_graph(mixed.variants)  # the planner's own plan is consistent
    v = next(v for v in mixed.variants if isinstance(v.spec, CudaSpec) and v.needs)
    dep = mixed.variant(v.needs[0])
    assert dep is not None and isinstance(dep.spec, CudaSpec)
    other = dep._replace(spec=replace(dep.spec, version=CudaVersion(12, 6)))
    variants = [other if x.name == dep.name else x for x in mixed.variants]
    with pytest.raises(GraphError, match=r"CUDA 12\.6, x86_64-linux"):
        build_job_graph(variants)
