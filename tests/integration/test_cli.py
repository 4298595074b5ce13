"""The CLI end to end: bad input gets one line and its exit code; generate; detect; matrix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capplan.errors import ExitCode


def write(folder: Path, text: str) -> Path:
    path = folder / "capplan.toml"
    path.write_text(text)
    return path


def one_line_error(result: object, code: ExitCode) -> str:
    assert result.exit_code == int(code), (result.exit_code, result.stderr)  # type: ignore[attr-defined]
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert err.startswith("capplan: error: ") and "\n" not in err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("toml", "code", "fragment"),
    [
        ('[fleet]\ngpus = ["RTX 9999 Ultra"]\n[packages.torch]\n', ExitCode.INVALID_INPUT, "RTX 9999"),
        ('[fleet]\ngpus = ["A100"]\n[packages.trorch]\n', ExitCode.INVALID_INPUT, "did you mean 'torch'"),
        ('[fleet]\ngpus = ["sm_999x"]\n[packages.torch]\n', ExitCode.INVALID_INPUT, "sm_999x"),
        ('[fleet]\ngpus = ["GTX 1080 Ti"]\n[packages.nccl]\n[policy]\ncuda = ["13.0"]\n',
         ExitCode.INFEASIBLE, "no allowed CUDA"),
        ('[fleet]\ngpus = ["P100"]\n[packages.nccl]\ncuda = "13.0"\n', ExitCode.INFEASIBLE, "nccl"),
        ('[fleet]\ngpus = ["A100"]\n[packages.torch]\n[policy]\nshar = "exact"\n',
         ExitCode.CONFIG, "did you mean 'share'"),
        ('[fleet]\ngpus = ["A100"\n', ExitCode.CONFIG, "Unclosed array"),
        ('[fleet]\ngpus = ["A100"]\n[packages.torch]\n[policy]\ncuda = ["12.x"]\n',
         ExitCode.INVALID_INPUT, "12.x"),
        ('[fleet]\ngpus = []\n[packages.torch]\n', ExitCode.NOTHING_TO_DO, "nothing to build"),
    ],
)  # fmt: skip
def test_bad_config_is_one_clear_line(
    capplan_in: object, tmp_path: Path, toml: str, code: ExitCode, fragment: str
) -> None:
    write(tmp_path, toml)
    err = one_line_error(capplan_in("plan"), code)  # type: ignore[operator]
    assert fragment in err


def test_invalid_toml_names_line_and_column(capplan_in: object, tmp_path: Path) -> None:
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.torch]\nbroken = = 1\n')
    err = one_line_error(capplan_in("matrix"), ExitCode.CONFIG)  # type: ignore[operator]
    assert "line 4" in err and "column" in err


def test_dependency_cycle_exit_code(capplan_in: object, tmp_path: Path) -> None:
    import shutil

    from capplan.adapters.kb import kb_path

    kb = tmp_path / "kb"
    shutil.copytree(kb_path("packages.json").parent, kb)
    data = json.loads((kb / "packages.json").read_text())
    data["packages"]["magma"]["depends"] = ["torch"]
    (kb / "packages.json").write_text(json.dumps(data))
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.torch]\n')
    result = capplan_in("matrix", env={"CAPPLAN_KB_DIR": str(kb)})  # type: ignore[operator]
    assert "cycle" in one_line_error(result, ExitCode.GRAPH)


def test_unknown_capability_and_malformed_cuda(capplan_cli: object) -> None:
    err = one_line_error(capplan_cli("explain", "8.6", "--device", "sm_8"), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert "sm_8" in err
    err = one_line_error(capplan_cli("caps", "--cuda", "twelve"), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert "'twelve'" in err and "MAJOR.MINOR" in err
    err = one_line_error(capplan_cli("gpus", "RTX 3909"), ExitCode.INVALID_INPUT)  # type: ignore[operator]
    assert "did you mean" in err


def test_unknown_environment_variable_says_did_you_mean(capplan_cli: object) -> None:
    result = capplan_cli("plan", env={"CAPPLAN_CUDE": "12.9"})  # type: ignore[operator]
    assert "CAPPLAN_CUDA" in one_line_error(result, ExitCode.CONFIG)


def test_cascade_env_then_flags_override_the_file(capplan_in: object, tmp_path: Path) -> None:
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n[policy]\ncuda = ["12.9"]\n')
    ids = capplan_in("plan", "--print-identifiers", env={"CAPPLAN_GPUS": "RTX 3090"}).stdout  # type: ignore[operator]
    assert "nccl-sm86" in ids and "nccl-sm80" not in ids
    ids = capplan_in(  # type: ignore[operator]
        "plan", "--print-identifiers", "--gpu", "L4", env={"CAPPLAN_GPUS": "RTX 3090"}
    ).stdout
    assert "nccl-sm89" in ids and "nccl-sm86" not in ids
    ids = capplan_in("plan", "--print-identifiers", "--cuda", "13.0,12.9").stdout  # type: ignore[operator]
    assert "nccl-sm80\n" in ids  # 13.0 first now, so no -cu suffix on a 13.0 build


def test_pyproject_tool_table(capplan_in: object, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.capplan.fleet]\ngpus = ["T4"]\n[tool.capplan.packages.nccl]\n'
    )
    assert capplan_in("plan", "--print-identifiers").stdout.split() == [  # type: ignore[operator]
        "cuda_cudart",
        "nccl-sm75",
    ]


def test_print_identifiers_prints_names_only(capplan_cli: object) -> None:
    out = capplan_cli("plan", "--print-identifiers").stdout.split("\n")  # type: ignore[operator]
    assert "torch-sm86" in out and "torchvision-sm86" in out and "cupy" in out
    assert all(" " not in line for line in out)


def test_matrix_json_shape_and_dependencies(capplan_cli: object) -> None:
    data = json.loads(capplan_cli("matrix", "--format", "json", "--runners", "3").stdout)  # type: ignore[operator]
    jobs = {j["name"]: j for j in data["jobs"]}
    keys = {"name", "package", "attr", "system", "capabilities", "cuda", "ptx", "needs", "stage",
            "estimated_minutes", "required_system_features"}  # fmt: skip
    assert all(keys <= set(j) for j in jobs.values())
    assert "torch-sm86" in jobs["torchvision-sm86"]["needs"]
    for job in jobs.values():
        for need in job["needs"]:
            assert jobs[need]["stage"] < job["stage"]
            finish = jobs[need]["start_minute"] + jobs[need]["estimated_minutes"]
            assert job["start_minute"] >= finish - 1e-6
    assert jobs["torch-sm86"]["required_system_features"] == ["big-parallel"]
    summary = data["summary"]
    # The default plan has two systems: --runners 3 sizes each system's pool.
    assert {s: p["runners"] for s, p in summary["pools"].items()} == {
        "x86_64-linux": 3,
        "aarch64-linux": 3,
    }
    assert summary["runners"] == 6
    assert summary["makespan_minutes"] >= summary["lower_bound_minutes"]
    for pool in summary["pools"].values():
        assert pool["makespan_minutes"] >= pool["lower_bound_minutes"]
    assert jobs["torch-sm87-aarch64"]["system"] == "aarch64-linux"
    assert jobs["torch-sm87-aarch64"]["attr"] == "legacyPackages.aarch64-linux.torch-sm87-aarch64"
    # Jetson Orin is served on aarch64-linux now; only nccl and cupy (which links nccl) refuse
    # pre-Thor Jetson.
    # The AMD GPUs: nccl and cupy are CUDA-only in nixpkgs, magma-hip's list lacks gfx942 and
    # gfx1100.
    assert {(u["package"], u["gpu"]) for u in summary["unserved"]} == {
        ("nccl", "Jetson Orin"),
        ("cupy", "Jetson Orin"),
        *((p, gpu) for p in ("nccl", "cupy", "magma") for gpu in ("MI300X", "Radeon RX 7900 XTX")),
    }
    assert jobs["torch-gfx942"]["gfx_targets"] == ["gfx942"]
    assert jobs["torch-gfx942"]["cuda"] is None


def test_github_matrix_splits_in_dependency_order(capplan_cli: object) -> None:
    data = json.loads(capplan_cli("matrix", "--format", "github", "--max-jobs", "7").stdout)  # type: ignore[operator]
    chunks = data["matrices"]
    assert all(len(c["include"]) <= 7 for c in chunks) and len(chunks) > 1
    seen: set[str] = set()
    for chunk in chunks:
        for row in chunk["include"]:
            assert {"name", "system", "os", "attr"} <= set(row)
            assert set(row["needs"]) <= seen | {r["name"] for r in chunk["include"]}
        seen |= {r["name"] for r in chunk["include"]}


def test_generate_writes_and_check_detects_staleness(capplan_in: object, tmp_path: Path) -> None:
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.nccl]\n')
    result = capplan_in("generate")  # type: ignore[operator]
    assert result.exit_code == 0
    path = tmp_path / "overlays" / "plan.json"
    data = json.loads(path.read_text())
    assert set(data["variants"]) == {"cuda_cudart", "nccl-sm80"}
    assert capplan_in("generate", "--check").exit_code == 0  # type: ignore[operator]
    write(tmp_path, '[fleet]\ngpus = ["A100", "L4"]\n[packages.nccl]\n')
    before = path.read_text()
    stale = capplan_in("generate", "--check")  # type: ignore[operator]
    assert stale.exit_code == int(ExitCode.STALE)
    assert '+    "nccl-sm89"' in stale.stdout
    assert path.read_text() == before  # --check writes nothing
    assert not list(path.parent.glob(".plan.json.*"))  # no temporary files left behind


def test_impossible_capability_is_refused_before_nix(capplan_in: object, tmp_path: Path) -> None:
    before = "untouched\n"
    (tmp_path / "overlays").mkdir()
    (tmp_path / "overlays" / "plan.json").write_text(before)
    write(tmp_path, '[fleet]\ngpus = ["A100"]\n[packages.nccl]\nextra = ["3.5"]\n')
    err = one_line_error(capplan_in("generate"), ExitCode.INFEASIBLE)  # type: ignore[operator]
    assert "3.5" in err
    assert (tmp_path / "overlays" / "plan.json").read_text() == before


FAKE_SMI = """#!/bin/sh
cat <<'CSV'
NVIDIA A100-SXM4-80GB, 8.0, 535.104.05
NVIDIA GeForce RTX 4090, 8.9, 580.65.06
CSV
"""


def test_detect_says_a_driver_runs_any_release_of_its_major(
    capplan_cli: object, tmp_path: Path
) -> None:
    # Issue 38: minor-version compatibility has no ceiling within a major, so a 535 driver runs
    # any 12.x (12.9 included), not "CUDA up to 12.2"; only new PTX stops at its toolkit's.
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    result = capplan_cli("detect", env={"PATH": f"{tmp_path}:/usr/bin:/bin"})  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())  # the lines wrap at the terminal's width
    assert "driver 535.104.05 (runs any CUDA 12.x; new PTX up to 12.2)" in text, text
    assert "driver 580.65.06 (runs any CUDA 13.x; new PTX up to 13.0)" in text, text


def test_detect_with_a_fake_nvidia_smi_on_path(capplan_cli: object, tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    result = capplan_cli("detect", "--json", env={"PATH": f"{tmp_path}:/usr/bin:/bin"})  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    gpus = json.loads(result.stdout)["gpus"]
    assert [g["name"] for g in gpus] == ["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"]
    a100, rtx = gpus
    assert a100["variants"]["torch"] == "torch-sm80"
    assert a100["how"]["torch"]["command"] == "nix build .#torch-sm80"
    assert a100["max_cuda_minor_compat"].startswith("12.")  # 535 runs 12.x, not 13.x
    assert (
        rtx["variants"]["torch"] == "torch-sm89"
        and rtx["overlay"] == 'cudaCapabilities = [ "8.9" ];'
    )
    assert rtx["variants"]["cupy"] == "cupy"


def test_detect_without_a_gpu(capplan_cli: object, tmp_path: Path) -> None:
    result = capplan_cli("detect", env={"PATH": str(tmp_path)})  # type: ignore[operator]
    err = one_line_error(result, ExitCode.NO_GPU)
    assert "no NVIDIA GPU" in err


def test_detect_jetson_from_a_fake_device_tree(capplan_cli: object, tmp_path: Path) -> None:
    tree = tmp_path / "root" / "proc" / "device-tree"
    tree.mkdir(parents=True)
    (tree / "model").write_bytes(b"NVIDIA Jetson AGX Orin Developer Kit\0")
    (tree / "compatible").write_bytes(b"nvidia,p3701-0005\0nvidia,tegra234\0")
    env = {
        "PATH": str(tmp_path),
        "CAPPLAN_SYSTEM": "aarch64-linux",
        "CAPPLAN_ROOT": str(tmp_path / "root"),
    }
    result = capplan_cli("detect", "--json", env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    assert gpu["system"] == "aarch64-linux" and gpu["capability"] == "8.7"
    assert gpu["variants"]["torch"] == "torch-sm87-aarch64"
    assert gpu["how"]["torch"]["command"] == "nix build .#torch-sm87-aarch64"
    assert gpu["variants"]["nccl"] is None  # nccl refuses pre-Thor Jetson


GH200_SMI = """#!/bin/sh
echo 'NVIDIA GH200 480GB, 9.0, 580.65.06'
"""


def test_detect_on_aarch64_recommends_that_systems_variants(
    capplan_cli: object, tmp_path: Path
) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(GH200_SMI)
    smi.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "CAPPLAN_SYSTEM": "aarch64-linux"}
    result = capplan_cli("detect", "--json", env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    assert gpu["variants"]["torch"] == "torch-sm90-aarch64"  # not x86_64's torch-sm90
    assert gpu["variants"]["cupy"] == "cupy-aarch64"
