"""CPU-level jobs in the generated workflow (issue 30): a job whose derivation requires
`gccarch-<arch>` (make-derivation.nix's feature of a gcc.arch build, which pkgs/variant.nix gives
every CPU-level variant) goes only to runners `[policy.runners_os]` declares for that feature;
its first step reads the runner's /proc/cpuinfo and fails with one clear line when the CPU lacks
a feature the level's code may use, and only otherwise tells Nix the runner has the feature.

The workflow is the real one `capplan ci github` writes (actionlint-clean), its matrix rows the
ones the plan job's `capplan matrix --format github-output` prints, and the check step is run by
bash from the workflow's own text against fake cpuinfo files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_ci_github import (
    actionlint,  # noqa: F401 (a fixture)
    assert_structure,
    one_line_error,
    plan_job_argv,
    plan_jobs,
    workflow_of,
    write,
)

from capplan.errors import ExitCode

archspec = pytest.importorskip("archspec.cpu", reason="archspec (CPU targets) is not installed")

CPU_FLEET = (
    '[fleet]\ncpus = ["x86-64-v3", "sapphirerapids"]\n'
    "[packages.gromacs]\n[packages.llama-cpp]\n[packages.openblas]\n"
)
RUNNERS = (
    "[policy.runners_os]\n"
    '"gccarch-sapphirerapids" = ["self-hosted", "avx512"]\n'
    '"x86_64-linux/gccarch-x86-64-v3" = ["self-hosted", "avx2"]\n'
)


def _features(target: str) -> list[str]:
    return sorted(archspec.TARGETS[target.replace("-", "_")].features)


def _rows(capplan_in: Any, doc: dict[str, Any], tmp: Path) -> dict[str, dict[str, Any]]:
    out = capplan_in(*plan_job_argv(doc, tmp / "rows.tsv"), "--offline")
    assert out.exit_code == 0, out.stderr
    matrices = assert_structure(doc, out.stdout, tmp / "rows.tsv", plan_jobs(capplan_in))
    return {r["name"]: r for m in matrices.values() for r in m["include"]}


def test_cpu_level_jobs_go_to_the_runners_declared_for_their_feature(
    capplan_in: Any,
    tmp_path: Path,
    actionlint: Callable[[str], str],  # noqa: F811 (the fixture imported above)
) -> None:
    write(tmp_path, CPU_FLEET + RUNNERS)
    result = capplan_in("ci", "github", "--cache", "c")
    assert actionlint(result.stdout) == ""
    rows = _rows(capplan_in, workflow_of(result), tmp_path)
    jobs = plan_jobs(capplan_in)
    # llama-cpp and openblas dispatch at run time: one generic build each, on the default runner.
    assert sorted(rows) == ["gromacs-sapphirerapids", "gromacs-x86-64-v3", "llama-cpp", "openblas"]
    spr, v3 = rows["gromacs-sapphirerapids"], rows["gromacs-x86-64-v3"]
    assert spr["os"] == ["self-hosted", "avx512", "X64"]
    assert v3["os"] == ["self-hosted", "avx2", "X64"]
    assert jobs["gromacs-sapphirerapids"]["required_system_features"] == ["gccarch-sapphirerapids"]
    assert (spr["gccarch"], v3["gccarch"]) == ("sapphirerapids", "x86-64-v3")
    assert spr["cpu_features"].split() == _features("sapphirerapids")
    assert "avx512f" in spr["cpu_features"].split() and "avx512f" not in v3["cpu_features"]
    for generic in ("llama-cpp", "openblas"):
        assert rows[generic]["os"] == ["ubuntu-latest"]
        assert "gccarch" not in rows[generic] and jobs[generic]["required_system_features"] == []


def test_a_cpu_level_job_without_a_declared_runner_is_a_config_error(
    capplan_in: Any, tmp_path: Path
) -> None:
    # No runner vouches for an AVX-512 CPU: the job is not sent to ubuntu-latest on a hope.
    write(tmp_path, CPU_FLEET + '[policy.runners_os]\n"gccarch-x86-64-v3" = ["self-hosted"]\n')
    err = one_line_error(capplan_in("ci", "github", "--cache", "c"), ExitCode.CONFIG)
    assert "gromacs-sapphirerapids needs a runner whose CPU runs sapphirerapids code" in err
    assert '"gccarch-sapphirerapids"' in err


def test_a_bad_gccarch_runner_key_is_a_config_error(capplan_in: Any, tmp_path: Path) -> None:
    write(tmp_path, CPU_FLEET + '[policy.runners_os]\n"gccarch-" = ["self-hosted"]\n')
    err = one_line_error(capplan_in("ci", "github", "--cache", "c"), ExitCode.CONFIG)
    assert "runners_os key 'gccarch-'" in err


CPUINFO_X86 = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: test CPU
flags\t\t: {flags}
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: {flags}
"""
CPUINFO_ARM = """\
processor\t: 0
BogoMIPS\t: 2000.00
Features\t: {flags}
CPU implementer\t: 0x41
"""


@pytest.fixture(scope="module")
def check_step(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The CPU check step of the generated workflow, as written."""
    from click.testing import CliRunner

    from capplan.cli.main import cli

    folder = tmp_path_factory.mktemp("cpu-check")
    (folder / "capplan.toml").write_text(CPU_FLEET + RUNNERS)
    old = Path.cwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(cli, ["ci", "github", "--cache", "c"], catch_exceptions=False)
    finally:
        os.chdir(old)
    doc = workflow_of(result)
    build = next(j for k, j in doc["jobs"].items() if k.startswith("stage"))
    (step,) = [s for s in build["steps"] if s.get("id") == "cpu"]
    install = build["steps"][build["steps"].index(step) + 1]
    # Nix is installed after the check, with what the check granted and nothing else.
    assert install["uses"].startswith("cachix/install-nix-action@")
    assert install["with"] == {"extra_nix_config": "${{ steps.cpu.outputs.nix_config }}"}
    assert step["env"] == {
        "GCCARCH": "${{ steps.row.outputs.gccarch }}",
        "CPU_FEATURES": "${{ steps.row.outputs.cpu_features }}",
    }
    return step


def _run(step: dict[str, Any], tmp: Path, cpuinfo: str, gccarch: str, features: str) -> Any:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found (GitHub's ubuntu runners run steps with bash)")
    (tmp / "cpuinfo").write_text(cpuinfo)
    output = tmp / "github_output"
    output.write_text("")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GCCARCH": gccarch,
        "CPU_FEATURES": features,
        "CAPPLAN_CPUINFO": str(tmp / "cpuinfo"),
        "GITHUB_OUTPUT": str(output),
    }
    # GitHub runs a `run:` step as `bash -e {0}` (docs: "Workflow syntax", defaults.run.shell).
    proc = subprocess.run(
        [bash, "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", step["run"]],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc, output.read_text()


def test_the_check_grants_the_feature_where_the_cpu_has_every_flag(
    check_step: dict[str, Any], tmp_path: Path
) -> None:
    wanted = _features("sapphirerapids")
    flags = " ".join(["fpu", "vme", *wanted, "hypervisor"])
    proc, output = _run(
        check_step, tmp_path, CPUINFO_X86.format(flags=flags), "sapphirerapids", " ".join(wanted)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert output == "nix_config=extra-system-features = gccarch-sapphirerapids\n"


def test_the_check_fails_with_one_line_where_a_flag_is_missing(
    check_step: dict[str, Any], tmp_path: Path
) -> None:
    # An x86-64-v3 machine (AVX2, no AVX-512) given a Sapphire Rapids job.
    have = " ".join(_features("x86_64_v3"))
    wanted = " ".join(_features("sapphirerapids"))
    proc, output = _run(
        check_step, tmp_path, CPUINFO_X86.format(flags=have), "sapphirerapids", wanted
    )
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("::error::this runner's CPU cannot run")
    assert " avx512f" in lines[0] and "sapphirerapids" in lines[0]
    assert " avx2" not in lines[0]  # only what is missing is named
    assert output == ""  # no system feature for a CPU that cannot run the code


def test_the_check_reads_arm_features_and_passes_other_jobs_through(
    check_step: dict[str, Any], tmp_path: Path
) -> None:
    wanted = _features("neoverse_v2")
    arm = CPUINFO_ARM.format(flags=" ".join(wanted))
    proc, output = _run(check_step, tmp_path, arm, "neoverse-v2", " ".join(wanted))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert output == "nix_config=extra-system-features = gccarch-neoverse-v2\n"
    # A job with no CPU level (a GPU build, a generic build): nothing checked, nothing granted,
    # even on a machine whose cpuinfo says nothing useful.
    proc, output = _run(check_step, tmp_path, "garbage\n", "", "")
    assert proc.returncode == 0 and output == ""
    # A substring is not a flag: "avx512" does not stand for avx512f.
    proc, _ = _run(check_step, tmp_path, CPUINFO_X86.format(flags="avx512 sse"), "x", "avx512f")
    assert proc.returncode == 1


def test_matrix_json_names_the_cpu_features_of_cpu_level_jobs(
    capplan_in: Any, tmp_path: Path
) -> None:
    write(tmp_path, CPU_FLEET)
    out = capplan_in("matrix", "--json")
    assert out.exit_code == 0, out.stderr
    jobs = {j["name"]: j for j in json.loads(out.stdout)["jobs"]}
    assert jobs["gromacs-x86-64-v3"]["required_system_features"] == ["gccarch-x86-64-v3"]
    assert jobs["gromacs-x86-64-v3"]["cpu_features"] == _features("x86_64_v3")
    assert "cpu_features" not in jobs["llama-cpp"]
