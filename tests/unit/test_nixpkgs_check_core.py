"""The pure half of `capplan nixpkgs check` (core/planning/nixpkgs_check.py) and the reading of
flake.lock and --nixpkgs (adapters/nixpkgs.py); tests/nix runs it against real Nix."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Cli, unprivileged

from capplan.adapters.kb import load_cpu_packages, load_kb
from capplan.adapters.nixpkgs import LockedNixpkgs, locked_nixpkgs, nixpkgs_reference
from capplan.core.families.base import NixpkgsCheck
from capplan.core.families.registry import nixpkgs_checks
from capplan.core.planning.config import config_from_mapping
from capplan.core.planning.matrix import plan_json
from capplan.core.planning.nixpkgs_check import compare, nixpkgs_request
from capplan.core.planning.planner import make_plan
from capplan.errors import DataError, InvalidInputError

KB = load_kb()
CPU = load_cpu_packages()


def checks(policy_cuda: list[str] | None = None) -> tuple[NixpkgsCheck, ...]:
    """Every family's part of the check, as `capplan nixpkgs check` asks them."""
    return nixpkgs_checks(KB, policy_cuda=policy_cuda, cpu_packages=CPU)


CHECKS = checks()


def request_for(gpus: list[str], packages: dict[str, Any], **policy: Any) -> dict[str, Any]:
    config = config_from_mapping(
        {"fleet": {"gpus": gpus}, "packages": packages, "policy": policy}, origin="test"
    )
    return nixpkgs_request(checks(policy.get("cuda")), plan_json(make_plan(KB, config)))


def agreeing_answer(request: dict[str, Any]) -> dict[str, Any]:
    """What a nixpkgs that is exactly as the knowledge base says would answer."""
    rocm = request.get("rocm")
    taken: dict[str, list[str]] = {}
    for f in request["arguments"]:  # one recipe may be asked several arguments
        taken.setdefault(".".join(f["attr"]), ["stdenv"]).append(f["argument"])
    answer: dict[str, Any] = {
        "arguments": taken,
        "cuda_sets": list(request["cuda_sets"]),
        "default_cuda": request["default_cuda"],
        "torch_broken": {n: n.startswith("cudaPackages_13") for n in request.get("torch_cuda", [])},
    }
    if rocm is not None:
        answer["rocm"] = {
            "default_targets": list(rocm["default_targets"]),
            "scopes": dict(rocm["scopes"]),
            "scope_names": list(rocm["scopes"]),
            "scope_packages": {
                f"{i['scope']}.{i['package']}": not (
                    i["package"] == "composable_kernel"
                    and not any(t.startswith("gfx9") for t in rocm["planned_scopes"][i["scope"]])
                )
                for i in rocm["scope_packages"]
            },
        }
    return answer


MIXED = (["MI300X", "Radeon RX 7900 XTX", "RTX 4090"], {"torch": {}, "magma": {}, "llama-cpp": {}})


def test_the_request_names_what_the_plan_relies_on() -> None:
    request = request_for(*MIXED, rocm_scope="stack")
    facts = {(f["package"], ".".join(f["attr"]), f["argument"]) for f in request["arguments"]}
    assert ("torch", "python3Packages.torch", "gpuTargets") in facts
    assert ("llama-cpp", "llama-cpp", "rocmGpuTargets") in facts
    assert ("magma", "magma-hip", "gpuTargets") in facts
    # torch's CUDA versions: every one the policy allows (none set: all of nixpkgs' sets).
    assert request["torch_cuda"] == [
        f"cudaPackages_{v}" for v in ("12_6", "12_8", "12_9", "13_0", "13_1", "13_2", "13_3")
    ]
    narrow = request_for(["A100"], {"torch": {}}, cuda=["12.8", "13.0"])
    assert narrow["torch_cuda"] == ["cudaPackages_12_8", "cudaPackages_12_9", "cudaPackages_13_0"]
    assert request["rocm"]["planned_scopes"] == {"gfx1100": ["gfx1100"], "gfx942": ["gfx942"]}
    assert request["rocm"]["scopes"]["gfx9"] == ["gfx906", "gfx908", "gfx90a", "gfx942"]
    assert json.loads(json.dumps(request)) == request  # JSON for builtins.fromJSON


def test_a_scope_is_checked_as_the_plan_changes_it() -> None:
    """gfx1100's stack has no gfx9 target: the plan builds its MIOpen without composable_kernel
    (plan.json's scope_overrides), so that MIOpen is what is evaluated, and the argument the plan
    sets is a fact of its own; gfx942's stack is evaluated as nixpkgs has it."""
    request = request_for(*MIXED, rocm_scope="stack")
    items = {(i["scope"], i["package"]): i["overrides"] for i in request["rocm"]["scope_packages"]}
    assert items[("gfx1100", "miopen")] == {"miopen": {"withComposableKernel": False}}
    assert items[("gfx942", "miopen")] == {}
    facts = {(f["package"], ".".join(f["attr"]), f["argument"]) for f in request["arguments"]}
    assert ("miopen", "rocmPackages.miopen", "withComposableKernel") in facts
    assert request["arguments"] == sorted(
        request["arguments"], key=lambda f: (f["package"], f["attr"], f["argument"])
    )


def test_cpu_arguments_come_from_the_cpu_knowledge_base() -> None:
    request = nixpkgs_request(
        CHECKS, {"system": "x86_64-linux", "variants": {"g": {"package": "gromacs"}}}
    )
    assert {"package": "gromacs", "attr": ["gromacs"], "argument": "cpuAcceleration"} in request[
        "arguments"
    ]
    # issue 41: every recipe argument the plan relies on is asked: what a per-level build
    # always sets (gromacs' enableCuda = false) and what a verdict rests on (llama-cpp is one
    # generic build because of cpuArchDynamicDispatch ? true).
    assert {"package": "gromacs", "attr": ["gromacs"], "argument": "enableCuda"} in request[
        "arguments"
    ]
    llama = nixpkgs_request(
        CHECKS, {"system": "x86_64-linux", "variants": {"l": {"package": "llama-cpp"}}}
    )
    assert {
        "package": "llama-cpp",
        "attr": ["llama-cpp"],
        "argument": "cpuArchDynamicDispatch",
    } in llama["arguments"]
    answer = agreeing_answer(llama)
    answer["arguments"]["llama-cpp"].remove("cpuArchDynamicDispatch")  # a b5760-era pin
    assert [d.line() for d in compare(CHECKS, llama, answer)] == [
        "llama-cpp: recipe argument cpuArchDynamicDispatch of llama-cpp: knowledge base says it "
        "takes it; nixpkgs says its arguments are [rocmGpuTargets, stdenv]"
    ]


def test_an_agreeing_nixpkgs_gives_no_drift() -> None:
    request = request_for(*MIXED, rocm_scope="stack")
    assert compare(CHECKS, request, agreeing_answer(request)) == ()


def test_each_disagreement_is_one_drift() -> None:
    request = request_for(*MIXED, rocm_scope="stack")
    answer = agreeing_answer(request)
    answer["arguments"]["llama-cpp"] = ["cudaSupport", "rocmSupport"]
    answer["arguments"]["magma-hip"] = None
    answer["cuda_sets"] = [*request["cuda_sets"], "cudaPackages_13_4"]
    answer["torch_broken"]["cudaPackages_12_9"] = True
    answer["rocm"]["default_targets"] = answer["rocm"]["default_targets"][:-1]
    answer["rocm"]["scope_packages"]["gfx942.composable_kernel"] = False
    drifts = compare(CHECKS, request, answer)
    facts = [(d.package, d.fact) for d in drifts]
    # llama-cpp's recipe lost two arguments the plan relies on: two facts
    assert facts == sorted(facts) and len(facts) == 7, facts
    lines = [d.line() for d in drifts]
    assert (
        "llama-cpp: recipe argument rocmGpuTargets of llama-cpp: knowledge base says it takes it; "
        "nixpkgs says its arguments are [cudaSupport, rocmSupport]"
    ) in lines
    assert (
        "magma: recipe argument gpuTargets of magma-hip: knowledge base says it takes it; "
        "nixpkgs says there is no magma-hip" in lines
    )
    assert any("CUDA package sets" in x and "cudaPackages_13_4" in x for x in lines)
    assert (
        "torch: torch on CUDA 12.9: knowledge base says it builds there; "
        "nixpkgs says it is meta.broken there"
    ) in lines
    assert any(x.startswith("rocmPackages: default targets (clr.gpuTargets):") for x in lines)
    assert (
        "composable_kernel: rocmPackages.gfx942.composable_kernel: knowledge base says it "
        "evaluates; nixpkgs says it does not evaluate"
    ) in lines


def test_torch_allowlist_and_capability_table_drift() -> None:
    request = request_for(["A100"], {"torch": {}})
    table = list(request["torch_capabilities"])
    assert "8.6" in table and "10.0f" in table and "12.1" in table
    answer = agreeing_answer(request)
    # torch 2.12's allowlist has no f capabilities: an agreeing nixpkgs keeps the others.
    agreeing = [c for c in table if not c.endswith("f")]
    answer["torch_capabilities"] = {"requested": table, "kept": agreeing}
    assert compare(CHECKS, request, answer) == ()
    drifted = [c for c in agreeing if c != "8.6"] + ["10.0f"]
    answer["torch_capabilities"] = {"requested": table, "kept": drifted}
    (drift,) = compare(CHECKS, request, answer)
    assert (drift.package, drift.fact) == ("torch", "capability allowlist on CUDA 12.9")
    assert drift.nixpkgs.endswith("(more: [10.0f]; fewer: [8.6])")
    # A capability the knowledge base gives CUDA 12.9 that nixpkgs' table lacks.
    answer["torch_capabilities"] = {
        "requested": [c for c in table if c != "12.1"],
        "kept": [c for c in agreeing if c != "12.1"],
    }
    (drift,) = compare(CHECKS, request, answer)
    assert drift.line().startswith(
        "cudaPackages: capability table (_cuda.db) on CUDA 12.9: knowledge base says it "
        "supports [12.1] too; nixpkgs says it supports ["
    )
    # torch does not evaluate for capabilities the knowledge base says it takes.
    answer["torch_capabilities"] = {"requested": table, "kept": None}
    (drift,) = compare(CHECKS, request, answer)
    assert drift.nixpkgs == "it does not evaluate for them"


def test_locked_github_nixpkgs(tmp_path: Path) -> None:
    lock = tmp_path / "flake.lock"
    lock.write_text((Path(__file__).parents[2] / "flake.lock").read_text())
    locked = locked_nixpkgs(lock)
    assert locked.rev == "1559d3daa3ecc813a650b79375ea61b6741b8746"
    assert locked.reference == (
        "github:NixOS/nixpkgs/1559d3daa3ecc813a650b79375ea61b6741b8746"
        "?narHash=sha256-LQy14TZp77TwbQf40gg1V3jo8FwJG0jGDkAH%2BzRHqg8%3D"
    )


def test_store_path_of_a_locked_source() -> None:
    # Nix 2.8's `nix flake metadata --json path:tests/nixpkgs` printed this pair.
    locked = LockedNixpkgs("x", None, "sha256-GhiOWI5JB4WVgjzHyt2pHGJq/G1AYL1s9XEdTT3aYgg=")
    assert locked.store_path() == "/nix/store/m2s3wjj46z23fzl95ya0hlg4gdmys8hn-source"
    assert LockedNixpkgs("x", "abc", None).store_path() is None


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        (None, InvalidInputError, "no flake.lock at"),
        ("{", DataError, "names no nixpkgs input"),
        ('{"nodes": {"root": {"inputs": {"nixpkgs": ["a", "b"]}}}}', DataError, "follows"),
        (
            '{"nodes": {"root": {"inputs": {"nixpkgs": "n"}}, "n": {"locked": {"type": "hg"}}}}',
            DataError,
            "type 'hg'",
        ),
    ],
)
def test_bad_flake_lock(
    tmp_path: Path, text: str | None, error: type[Exception], message: str
) -> None:
    lock = tmp_path / "flake.lock"
    if text is not None:
        lock.write_text(text)
    with pytest.raises(error, match=message):
        locked_nixpkgs(lock)


def test_a_flake_lock_that_is_no_file_is_refused_at_once(tmp_path: Path) -> None:
    # issue 41: a FIFO flake.lock would block a plain read forever; /dev/zero never ends.
    os.mkfifo(tmp_path / "flake.lock")
    with pytest.raises(DataError, match=r"cannot read .*flake\.lock: a FIFO \(named pipe\)"):
        locked_nixpkgs(tmp_path / "flake.lock")
    with pytest.raises(DataError, match="cannot read /dev/zero: a character device"):
        locked_nixpkgs(Path("/dev/zero"))


def test_nixpkgs_reference(tmp_path: Path) -> None:
    (tmp_path / "default.nix").write_text("{ }: { }")
    assert nixpkgs_reference(str(tmp_path)) == f"path:{tmp_path}"
    assert nixpkgs_reference("github:NixOS/nixpkgs/abc") == "github:NixOS/nixpkgs/abc"
    with pytest.raises(InvalidInputError, match=r"no default\.nix"):
        nixpkgs_reference(str(tmp_path.parent))
    with pytest.raises(InvalidInputError, match="not a folder"):
        nixpkgs_reference(str(tmp_path / "default.nix"))


def test_the_cuda_part_resolves_the_policy_as_the_planner_does() -> None:
    # capplan nixpkgs check hands the config's policy.cuda as written: torch is asked about
    # the policy's versions (12.6 here, a set the plan itself does not use), and a version
    # nixpkgs has no set for is the planner's exit 4.
    plan = plan_json(
        make_plan(KB, config_from_mapping({"fleet": {"gpus": ["RTX 4090"]},
                                           "packages": {"torch": {}}}, origin="test"))
    )  # fmt: skip
    default = nixpkgs_request(checks(None), plan)
    wanted = nixpkgs_request(checks(["12.6"]), plan)
    set_126 = "cudaPackages_12_6"
    assert set_126 in wanted["torch_cuda"]
    # A policy without 12.6: the plan's own versions and nixpkgs' default, not 12.6.
    assert set_126 not in nixpkgs_request(checks(["12.9"]), plan)["torch_cuda"]
    assert set(wanted["torch_cuda"]) <= set(default["torch_cuda"])  # none set: every set
    with pytest.raises(InvalidInputError, match=r"policy\.cuda"):
        checks(["99.9"])


# issue 41: --nixpkgs names that are no checkout get one line (exit 4) saying what they are.
@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: (p.mkdir(), os.mkfifo(p / "default.nix")),
         "its default.nix is a FIFO (named pipe), not a file"),
        (lambda p: (p.mkdir(), (p / "default.nix").symlink_to("/dev/null")),
         "its default.nix is a character device, not a file"),
        (lambda p: (p.mkdir(), (p / "default.nix").symlink_to("default.nix")),
         "cannot read its default.nix: Too many levels of symbolic links"),
        (lambda p: p.symlink_to("/dev/null"), "not a folder (a character device)"),
        (lambda p: p.symlink_to(p.name), "Too many levels of symbolic links"),
        (lambda p: p.write_text(""), "not a folder (a file)"),
        (None, "File name too long"),
    ],
    ids=["fifo", "device", "loop-inside", "device-folder", "loop", "file", "name_max"],
)  # fmt: skip
def test_a_nixpkgs_that_is_no_checkout_is_one_line(
    capplan_in: Any, tmp_path: Path, make: Any, says: str
) -> None:
    target = tmp_path / ("n" * 300 if make is None else "nixpkgs")
    if make is not None:
        make(target)
    result = capplan_in("nixpkgs", "check", "--nixpkgs", str(target))
    assert result.exit_code == 4, result.stderr
    err = result.stderr.strip()
    assert err.startswith("capplan: error: --nixpkgs ") and "\n" not in err, err
    assert says in err


def test_a_nixpkgs_in_a_folder_nobody_may_search(open_tmp: Path) -> None:
    closed = open_tmp / "closed"
    (closed / "nixpkgs").mkdir(parents=True)
    (closed / "nixpkgs" / "default.nix").write_text("{ ... }: { }\n")
    closed.chmod(0o600)
    run = Cli(open_tmp)
    run("nixpkgs", "check", "--nixpkgs", str(open_tmp / "none"))  # imports what it needs
    code, stderr = unprivileged(
        lambda: (lambda r: (r.exit_code, r.stderr))(
            run("nixpkgs", "check", "--nixpkgs", str(closed / "nixpkgs"))
        )
    )
    assert code == 4, stderr
    assert "Permission denied" in stderr and len(stderr.strip().splitlines()) == 1


def test_answers_of_the_wrong_type_are_one_drift_each() -> None:
    # issue 41: `gpuTargets = 5`, `cudaCapabilities = [ 86 ]` and odd types elsewhere are drifts
    # of their facts, never an exception (exit 1), exit 4, or "agrees".
    request = request_for(*MIXED, rocm_scope="stack")
    answer = agreeing_answer(request)
    answer["rocm"]["default_targets"] = 5
    answer["torch_capabilities"] = {"requested": ["8.6", "8.9"], "kept": [86]}
    answer["torch_broken"]["cudaPackages_12_9"] = "no"
    answer["arguments"]["llama-cpp"] = {"cpuArchDynamicDispatch": True}
    answer["rocm"]["scopes"]["gfx9"] = "gfx942"
    answer["rocm"]["scope_packages"]["gfx942.miopen"] = 1
    request["torch_capabilities"] = ["8.6", "8.9"]
    lines = [d.line() for d in compare(CHECKS, request, answer)]
    said = sorted(line.split("; nixpkgs says ", 1)[1] for line in lines)
    assert said == sorted(
        [
            "1 (a number, not what this fact is)",
            '{"cpuArchDynamicDispatch": true} (an attrset, not what this fact is)',
            '{"cpuArchDynamicDispatch": true} (an attrset, not what this fact is)',
            "5 (a number, not what this fact is)",
            '"gfx942" (a string, not what this fact is)',
            "[86] (a list, not what this fact is)",
            '"no" (a string, not what this fact is)',
        ]
    ), lines


@pytest.mark.parametrize(
    "fleet",
    [
        '[fleet]\ngpus = ["MI300X", "RTX 4090"]\ncpus = ["x86-64-v3", "sapphirerapids"]\n'
        "[packages.torch]\n[packages.gromacs]\n[packages.llama-cpp]\n[packages.openblas]\n"
        '[packages.magma]\n[policy]\nsystem = "x86_64-linux"\n',
        '[fleet]\ngpus = ["Radeon RX 7900 XTX", "MI300X"]\n[packages.torch]\n[packages.magma]\n'
        '[packages.llama-cpp]\n[policy]\nrocm_scope = "stack"\n',
    ],
    ids=["mixed-cpu", "rocm-stack"],
)
def test_every_argument_the_plan_sets_is_asked(tmp_path: Path, fleet: str) -> None:
    # issue 41: what plan.json makes the overlays pass to a recipe (a CPU level's override and
    # always arguments, a ROCm variant's target argument, a scope's library arguments) is asked
    # of the pinned nixpkgs, so a pin whose recipe lost one drifts instead of failing to build.
    from capplan.cli.planning import plan_with_settings

    (tmp_path / "capplan.toml").write_text(fleet)
    data = plan_json(plan_with_settings(tmp_path / "capplan.toml").plan)
    request = nixpkgs_request(CHECKS, data)
    asked = {(f["package"], f["argument"]) for f in request["arguments"]}
    sets: set[tuple[str, str]] = set()
    for variant in data["variants"].values():
        rocm, cpu = variant.get("rocm") or {}, variant.get("cpu") or {}
        for package in rocm.get("overrides") or {}:
            sets.add((package, (rocm.get("arguments") or {}).get(package, "gpuTargets")))
        for library, arguments in (rocm.get("scope_overrides") or {}).items():
            sets.update((library, argument) for argument in arguments)
        sets.update((variant["package"], argument) for argument in cpu.get("override") or {})
    assert sets, "the plan sets no recipe argument: the test would prove nothing"
    assert sets <= asked, sorted(sets - asked)
