"""The pure part of ``capplan cache why`` / ``cache status`` (issue 49): reading derivation JSON,
comparing derivations without their store hashes, the bounded walk, the causes in words, the
status bottom line."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.core.caches.causes import name_causes
from capplan.core.caches.drvgraph import (
    LAZY_LEVELS,
    MAX_DEPTH,
    Drv,
    diff_drvs,
    drv_stem,
    find_named,
    parse_show,
    walk,
)
from capplan.core.caches.status import StatusRow, bottom_line, cache_label, minutes_here
from capplan.core.planning.failures import Failure
from capplan.errors import CapplanError, InvalidInputError, NixError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
import fake_nix

H1 = "1rl458h0y1x5kq24q52pqj98zjxmppsg"
H2 = "hkka2pprdvs5pnidrvfnvb3lyymq14q3"


class Graph:
    """An in-memory fetch that records what it was asked."""

    def __init__(self, drvs: Mapping[str, Mapping[str, object]]) -> None:
        self.drvs = parse_show(dict(drvs))
        self.asked: list[tuple[tuple[str, ...], bool]] = []

    def __call__(self, paths: Sequence[str], recursive: bool) -> dict[str, Drv]:
        self.asked.append((tuple(paths), recursive))
        if not recursive:
            return {p: self.drvs[p] for p in paths if p in self.drvs}
        seen, todo = set(paths), list(paths)
        while todo:
            for child in self.drvs[todo.pop()].inputs:
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return {p: self.drvs[p] for p in seen}


def _pair(
    yours_env: dict[str, str], planned_env: dict[str, str], name: str = "python3.13-torch-2.12.0"
) -> tuple[Graph, str, str]:
    dep_y, dep_y_body = fake_nix.drv("python3.13-numpy-2.3.2", [], {}, "y")
    a, a_body = fake_nix.drv(name, [dep_y], yours_env, "y")
    b, b_body = fake_nix.drv(name, [dep_y], planned_env, "p")
    return Graph({dep_y: dep_y_body, a: a_body, b: b_body}), a, b


def test_both_json_shapes_read_alike() -> None:
    path = f"/nix/store/{H1}-magma-2.9.0.drv"
    dep = f"/nix/store/{H2}-cuda12.9-cuda_cudart-12.9.drv"
    old = {path: {"env": {"name": "magma-2.9.0"}, "inputDrvs": {dep: ["out"]}, "inputSrcs": [],
                  "args": [], "builder": "/bin/sh", "system": "x86_64-linux",
                  "outputs": {"out": {"path": f"/nix/store/{H2}-magma-2.9.0"}}}}  # fmt: skip
    new = {path.removeprefix("/nix/store/"): {**old[path], "name": "magma-2.9.0",
           "inputDrvs": {dep.removeprefix("/nix/store/"): {"dynamicOutputs": {}, "outputs": ["out"]}}}}  # fmt: skip
    assert parse_show(old) == parse_show(new)
    drv = parse_show(old)[path]
    assert drv.inputs == (dep,) and drv.name == "magma-2.9.0"
    assert drv.outputs == (f"/nix/store/{H2}-magma-2.9.0",)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_garbage_from_nix_is_a_nix_error_or_read(data: object) -> None:
    try:
        parse_show(data)
    except NixError as error:
        assert "\n" not in error.one_line()


def test_store_hashes_alone_are_no_difference() -> None:
    graph, a, b = _pair({"X": f"/nix/store/{H1}-dep"}, {"X": f"/nix/store/{H2}-dep"})
    assert diff_drvs(graph.drvs[a], graph.drvs[b]) == []


def test_json_attributes_are_compared_key_by_key() -> None:
    yours = json.dumps({"cuda": "12.8", "same": [1], "dep": f"/nix/store/{H1}-x"})
    planned = json.dumps({"cuda": "12.9", "same": [1], "dep": f"/nix/store/{H2}-x"})
    graph, a, b = _pair({"record": yours}, {"record": planned})
    [change] = diff_drvs(graph.drvs[a], graph.drvs[b])
    assert (change.attribute, change.yours, change.planned) == ("record.cuda", "12.8", "12.9")


def test_the_walk_stops_at_the_first_difference_and_never_reads_shared_inputs() -> None:
    shared, shared_body = fake_nix.drv("shared-1.0", [], {}, "s")
    low_y, low_y_body = fake_nix.drv("low-1.0", [shared], {"FLAG": "a"}, "y")
    low_p, low_p_body = fake_nix.drv("low-1.0", [shared], {"FLAG": "b"}, "p")
    below_y, below_y_body = fake_nix.drv("below-1.0", [low_y], {}, "y")
    below_p, below_p_body = fake_nix.drv("below-1.0", [low_p], {}, "p")
    top_y, top_y_body = fake_nix.drv("top-1.0", [below_y, shared], {}, "y")
    top_p, top_p_body = fake_nix.drv("top-1.0", [below_p, shared], {}, "p")
    graph = Graph({shared: shared_body, low_y: low_y_body, low_p: low_p_body, below_y: below_y_body,
                   below_p: below_p_body, top_y: top_y_body, top_p: top_p_body})  # fmt: skip
    done = walk(top_y, top_p, graph)
    [finding] = done.findings
    assert finding.trail == ("top-1.0", "below-1.0", "low-1.0")
    assert [c.attribute for c in finding.changes] == ["FLAG"]
    assert all(shared not in paths for paths, _ in graph.asked)
    assert done.calls == 3 and done.read == 3


@pytest.mark.parametrize("depth", [LAZY_LEVELS + 40, MAX_DEPTH - 5])
def test_a_deep_chain_is_read_with_one_recursive_call(depth: int) -> None:
    yours, top_y = fake_nix.chain(depth, "yours")
    planned, top_p = fake_nix.chain(depth, "planned")
    graph = Graph({**yours, **planned})
    done = walk(top_y, top_p, graph)
    [finding] = done.findings
    assert finding.yours.name == f"chain-{depth - 1}" and len(finding.trail) == depth
    assert [r for _, r in graph.asked].count(True) == 1
    assert done.calls == LAZY_LEVELS + 1


def test_a_chain_deeper_than_the_limit_is_one_nix_error() -> None:
    yours, top_y = fake_nix.chain(2000, "yours")
    planned, top_p = fake_nix.chain(2000, "planned")
    with pytest.raises(NixError, match=f"after {MAX_DEPTH} levels"):
        walk(top_y, top_p, Graph({**yours, **planned}))


def test_a_cycle_is_one_nix_error() -> None:
    def looped(side: str) -> dict[str, dict[str, object]]:
        a = f"/nix/store/{H1 if side == 'y' else H2}-a-1.drv"
        b = f"/nix/store/{(H1 if side == 'y' else H2)[::-1]}-b-1.drv"
        body = {
            "env": {},
            "args": [],
            "builder": "/bin/sh",
            "system": "x86_64-linux",
            "inputSrcs": [],
        }
        return {a: {**body, "name": "a-1", "inputDrvs": {b: ["out"]}},
                b: {**body, "name": "b-1", "inputDrvs": {a: ["out"]}}}  # fmt: skip

    y, p = looped("y"), looped("p")
    with pytest.raises(NixError, match="cycle"):
        walk(next(iter(y)), next(iter(p)), Graph({**y, **p}))


def test_inputs_pair_by_name_without_version() -> None:
    dep_y, dep_y_body = fake_nix.drv("python3.13-numpy-2.3.3", [], {"version": "2.3.3"}, "y")
    dep_p, dep_p_body = fake_nix.drv("python3.13-numpy-2.3.2", [], {"version": "2.3.2"}, "p")
    top_y, top_y_body = fake_nix.drv("torch-2.12.0", [dep_y], {}, "y")
    top_p, top_p_body = fake_nix.drv("torch-2.12.0", [dep_p], {}, "p")
    graph = Graph({dep_y: dep_y_body, dep_p: dep_p_body, top_y: top_y_body, top_p: top_p_body})
    [cause] = name_causes(walk(top_y, top_p, graph).findings)
    assert cause.kind == "nixpkgs-revision" and cause.drv == "python3.13-numpy-2.3.3"
    assert drv_stem("cuda12.9-cuda_cudart-12.9") == drv_stem("cuda12.8-cuda_cudart-12.8")


@pytest.mark.parametrize(
    ("yours", "planned", "kind", "attribute"),
    [
        ({"TORCH_CUDA_ARCH_LIST": "8.6;8.9"}, {"TORCH_CUDA_ARCH_LIST": "8.6"}, "capabilities", "TORCH_CUDA_ARCH_LIST"),
        ({"CMAKE_CUDA_ARCHITECTURES": "86;compute_86"}, {"CMAKE_CUDA_ARCHITECTURES": "86"}, "forward-compat", "CMAKE_CUDA_ARCHITECTURES"),
        ({"TORCH_CUDA_ARCH_LIST": "8.6+PTX"}, {"TORCH_CUDA_ARCH_LIST": "8.6"}, "forward-compat", "TORCH_CUDA_ARCH_LIST"),
        ({"record": '{"cudaForwardCompat": true}'}, {"record": '{"cudaForwardCompat": false}'}, "forward-compat", "record.cudaForwardCompat"),
        ({"record": '{"cuda": "12.8", "cudaCapabilities": ["8.6"]}'}, {"record": '{"cuda": "12.9", "cudaCapabilities": ["8.9"]}'}, "cuda-release", "record.cuda"),
        ({"patches": "fix.patch"}, {}, "overlay", "patches"),
        ({"record": '{"cudaSupport": false}'}, {"record": '{"cudaSupport": true}'}, "config-flag", "record.cudaSupport"),
        ({"src": "/nix/store/x-src-2"}, {"src": "/nix/store/x-src-1"}, "nixpkgs-revision", "src"),
    ],
)  # fmt: skip
def test_each_cause_is_named(
    yours: dict[str, str], planned: dict[str, str], kind: str, attribute: str
) -> None:
    graph, a, b = _pair(yours, planned)
    [cause] = name_causes(walk(a, b, graph).findings)
    assert (cause.kind, cause.attribute, cause.drv) == (kind, attribute, "python3.13-torch-2.12.0")
    assert cause.yours is not None and cause.yours in cause.words


def test_a_system_difference_comes_first() -> None:
    graph, a, b = _pair({"TORCH_CUDA_ARCH_LIST": "8.7"}, {"TORCH_CUDA_ARCH_LIST": "8.6"})
    drv = graph.drvs[a]
    graph.drvs[a] = Drv(drv.path, drv.name, "aarch64-linux", drv.builder, drv.args, drv.env,
                        drv.inputs, drv.srcs)  # fmt: skip
    [cause] = name_causes(walk(a, b, graph).findings)
    assert cause.kind == "system" and "aarch64-linux" in cause.words


def test_another_cuda_set_among_the_inputs() -> None:
    dep_y, dep_y_body = fake_nix.drv("cuda12.8-cuda_cudart-12.8", [], {}, "y")
    dep_p, dep_p_body = fake_nix.drv("cuda12.9-cuda_cudart-12.9", [], {}, "p")
    top_y, top_y_body = fake_nix.drv("magma-2.9.0", [dep_y], {}, "y")
    top_p, top_p_body = fake_nix.drv("magma-2.9.0", [dep_p], {}, "p")
    graph = Graph({dep_y: dep_y_body, dep_p: dep_p_body, top_y: top_y_body, top_p: top_p_body})
    [cause] = name_causes(walk(top_y, top_p, graph).findings)
    assert cause.kind == "cuda-release" and cause.drv == "cuda12.8-cuda_cudart-12.8"


def test_find_named_stops_at_the_first_planned_package() -> None:
    drvs, top = fake_nix.wide(200, "x")
    graph = Graph(drvs)
    found = find_named(top, graph, lambda d: d.name.startswith("pkg-1-"))
    assert len(found) == 50 and all(d.name.startswith("pkg-1-") for d in found)
    assert not any(
        p.startswith("/nix/store/") and "pkg-3-" in p for ps, _ in graph.asked for p in ps
    )


def test_bottom_line_and_minutes() -> None:
    fail = Failure(f"/nix/store/{H1}-nccl.drv", "nccl-sm86", "x86_64-linux",
                   "2026-11-24T20:27:42Z", "2026-11-25T10:00:00Z", 2, ("error: nvcc died",))  # fmt: skip
    rows = [
        StatusRow("torch", "RTX 3090", "torch-sm86", present={"https://lab-cache.cachix.org": True}),
        StatusRow("torchvision", "RTX 3090", "torchvision-sm86", present={"https://lab-cache.cachix.org": True}),
        StatusRow("magma", "RTX 3090", "magma-sm86", present={"https://lab-cache.cachix.org": False}, minutes=40),
        StatusRow("nccl", "RTX 3090", "nccl-sm86", minutes=12.4, failure=fail),
    ]  # fmt: skip
    assert bottom_line(rows) == (
        "torch, torchvision: from lab-cache; magma: will build, about 40 min; "
        "nccl: will build, about 12 min (failed on 2026-11-25)"
    )
    assert rows[3].to_json()["failure"] == {"last": "2026-11-25T10:00:00Z", "count": 2,
                                            "log_line": "error: nvcc died"}  # fmt: skip
    assert minutes_here(60, compiled=True, cores=4) == 240
    assert minutes_here(60, compiled=True, cores=32) == 30
    assert minutes_here(3, compiled=False, cores=4) == 3
    assert cache_label("http://127.0.0.1:8080") == "127.0.0.1:8080"


def test_package_of_reads_a_word_of_the_name() -> None:
    from capplan.core.caches.drvgraph import package_of

    spellings = {"torch": ("torch",), "torchvision": ("torchvision",), "cublas": ("libcublas",)}
    assert package_of("python3.13-torchvision-0.27.0", spellings) == "torchvision"
    assert package_of("python3.13-torch-2.12.0", spellings) == "torch"
    assert package_of("cuda12.9-libcublas-12.9", spellings) == "cublas"
    assert package_of("hello-2.12", spellings) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200).filter(lambda t: "#" not in t))
def test_an_installable_that_is_no_flake_attribute_or_drv_is_exit_4(text: str) -> None:
    from capplan.adapters.derivations import installable_drv

    try:
        got = installable_drv(text, {})
    except InvalidInputError as error:
        assert "\n" not in error.one_line()
    except CapplanError as error:  # pragma: no cover - no other refusal exists
        raise AssertionError(error) from error
    else:
        assert got == text and got.endswith(".drv")


def test_the_nixpkgs_revision_a_flake_lock_pins(tmp_path: Path) -> None:
    from capplan.adapters.derivations import locked_nixpkgs

    lock = {"nodes": {"root": {"inputs": {"nixpkgs": "nixpkgs_2"}},
                      "nixpkgs_2": {"locked": {"rev": "1559d3daa3ecc813a650b79375ea61b6741b8746"}}},
            "root": "root", "version": 7}  # fmt: skip
    (tmp_path / "flake.lock").write_text(json.dumps(lock))
    assert locked_nixpkgs(f"{tmp_path}#nixosConfigurations.host.pkgs.python3Packages.torch") == (
        "1559d3daa3ecc813a650b79375ea61b6741b8746"
    )
    assert locked_nixpkgs(f"path:{tmp_path}") == "1559d3daa3ecc813a650b79375ea61b6741b8746"
    assert locked_nixpkgs("github:NixOS/nixpkgs#hello") is None  # not a local flake
    (tmp_path / "flake.lock").write_text("{not json")
    assert locked_nixpkgs(str(tmp_path)) is None
