"""``capplan cache why`` / ``cache status`` against hostile answers (issue 49): a fake ``nix`` on
PATH (tests/data/fake_nix.py) prints graphs real nix never would (a 2,000-level chain, a cycle,
garbage), and the loopback cache server answers garbage or hangs. Each ends in one line and a
documented exit code."""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from capplan.adapters.derivations import nix_version
from capplan.cli.main import cli

DATA = Path(__file__).resolve().parents[1] / "data"
sys.path.insert(0, str(DATA))
sys.path.insert(0, str(DATA.parent / "nix"))
import fake_nix  # noqa: E402
from nixhelpers import serve_binary_cache  # noqa: E402

TORCH = "python3.13-torch-2.12.0"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder to run in, with the fake nix first on PATH; write graph.json to feed it."""
    graph = tmp_path / "graph.json"
    for key, value in fake_nix.install(tmp_path / "bin", graph).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("FAKE_NIX_LOG", str(tmp_path / "calls.log"))
    monkeypatch.chdir(tmp_path)
    nix_version.cache_clear()
    yield graph
    nix_version.cache_clear()


def _write(graph: Path, yours_top: str, planned_top: str, drvs: dict[str, object],
           version: str = "2.18.9") -> None:  # fmt: skip
    body = drvs[planned_top]
    assert isinstance(body, dict)
    outputs = [o["path"] for o in body["outputs"].values()]
    graph.write_text(json.dumps({
        "version": version, "drvs": drvs, "drvPath": yours_top,
        "variants": {"torch-sm86": {"drv": planned_top, "outputs": outputs}},
    }))  # fmt: skip


def _torch_over(chain_top: str, side: str, arch: str = "8.6") -> tuple[str, dict[str, object]]:
    return fake_nix.drv(TORCH, [chain_top], {"TORCH_CUDA_ARCH_LIST": arch}, side)


def _why(*args: str) -> Result:
    return CliRunner().invoke(
        cli, ["cache", "why", ".#torch", "--gpu", "RTX 3090", *args], catch_exceptions=False
    )


def _one_error_line(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("capplan: error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    return lines[0]


def _chains(graph: Path, depth: int, version: str = "2.18.9") -> None:
    yours, y_top = fake_nix.chain(depth, "yours")
    planned, p_top = fake_nix.chain(depth, "planned")
    ty, ty_body = _torch_over(y_top, "y")
    tp, tp_body = _torch_over(p_top, "p")
    _write(graph, ty, tp, {**yours, **planned, ty: ty_body, tp: tp_body}, version)


def test_a_2000_level_chain_is_one_line_and_exit_14(fake: Path) -> None:
    _chains(fake, 2000)
    line = _one_error_line(_why(), 14)
    assert "levels" in line and "stopped" in line


@pytest.mark.parametrize(("version", "verb"), [("2.8.0", ["show-derivation"]),
                                               ("2.18.9", ["derivation", "show"])])  # fmt: skip
def test_a_deep_difference_is_found_with_either_nix(
    fake: Path, version: str, verb: list[str]
) -> None:
    _chains(fake, 60, version)
    result = _why("--json")
    assert result.exit_code == 18, result.stderr
    [package] = json.loads(result.stdout)["packages"]
    [cause] = package["causes"]
    assert cause["derivation"] == "chain-59" and cause["attribute"] == "BOTTOM"
    assert cause["trail"][0] == TORCH and len(cause["trail"]) == 61
    calls = [json.loads(line) for line in (fake.parent / "calls.log").read_text().splitlines()]
    shows = [c for c in calls if verb[0] in c]
    assert shows and all(c[2 : 2 + len(verb)] == verb for c in shows)
    assert sum("-r" in c for c in shows) == 1  # the deep part read with one recursive call


def test_a_cycle_is_one_line_and_exit_14(fake: Path) -> None:
    def looped(side: str) -> tuple[str, dict[str, object]]:
        a = fake_nix.store_path("a" + side, "a-1.drv")
        b = fake_nix.store_path("b" + side, "b-1.drv")
        base = {"env": {}, "args": [], "builder": "/bin/sh", "system": "x86_64-linux",
                "inputSrcs": [], "outputs": {"out": {"path": fake_nix.store_path(side, "a-1")}}}  # fmt: skip
        top, top_body = _torch_over(a, side)
        return top, {top: top_body, a: {**base, "name": "a-1", "inputDrvs": {b: ["out"]}},
                     b: {**base, "name": "b-1", "inputDrvs": {a: ["out"]}}}  # fmt: skip

    ty, y = looped("y")
    tp, p = looped("p")
    _write(fake, ty, tp, {**y, **p})
    assert "cycle" in _one_error_line(_why(), 14)


def test_garbage_from_show_is_one_line_and_exit_14(fake: Path) -> None:
    ty, _ = fake_nix.drv(TORCH, [], {"TORCH_CUDA_ARCH_LIST": "8.9"}, "y")
    tp, tp_body = fake_nix.drv(TORCH, [], {"TORCH_CUDA_ARCH_LIST": "8.6"}, "p")
    _write(fake, ty, tp, {ty: {"env": ["not", "an", "object"]}, tp: tp_body})
    assert "cannot read" in _one_error_line(_why(), 14)


def test_an_installable_that_does_not_evaluate_is_exit_14(fake: Path) -> None:
    tp, tp_body = fake_nix.drv(TORCH, [], {}, "p")
    fake.write_text(json.dumps({"drvs": {tp: tp_body}, "drvPath": None, "variants": {}}))
    assert "attribute 'nothing' missing" in _one_error_line(_why(), 14)


def test_an_installable_that_is_no_attribute_is_exit_4(fake: Path) -> None:
    result = CliRunner().invoke(cli, ["cache", "why", "torch\x1b[2J", "--gpu", "RTX 3090"])
    assert "\x1b" not in _one_error_line(result, 4)


@pytest.fixture
def cache_server(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "empty-cache"
    root.mkdir()
    (root / "nix-cache-info").write_text("StoreDir: /nix/store\n")
    with serve_binary_cache(root) as url:
        yield url


def _fault(url: str, fault: dict[str, object]) -> None:
    request = urllib.request.Request(f"{url}/_faults", data=json.dumps({"*": fault}).encode())
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


@pytest.mark.parametrize(
    "fault", [{"mode": "garbage", "size": 4096}, {"mode": "stall", "seconds": 3}]
)
def test_a_cache_that_answers_garbage_or_hangs_counts_as_not_cached(
    fake: Path, cache_server: str, fault: dict[str, object]
) -> None:
    ty, ty_body = fake_nix.drv(TORCH, [], {"TORCH_CUDA_ARCH_LIST": "8.6"}, "same")
    _write(fake, ty, ty, {ty: ty_body})
    _fault(cache_server, fault)
    result = CliRunner().invoke(
        cli,
        ["cache", "status", "--gpu", "RTX 3090", "--cache", cache_server, "--timeout", "0.3",
         "--json"],
    )  # fmt: skip
    assert result.exit_code == 18, result.stderr
    [row] = [r for r in json.loads(result.stdout)["packages"] if r["package"] == "torch"]
    assert row["state"] == "build" and row["caches"] == {cache_server: False}
    assert cache_server in result.stderr  # the warning names the cache
