"""A fake ``nix`` for ``capplan cache why`` tests and bench/bench_cache_why.py: it answers from a
generated derivation graph instead of a store, so graphs nix would never print (a 2,000-level
chain, a cycle, 5,000 derivations) can be fed to capplan.

Install it as ``nix`` on PATH (see :func:`install`); it reads the JSON file named by
``FAKE_NIX_GRAPH``::

    {"version": "2.18.9",                  # what `nix --version` prints
     "drvs": {"/nix/store/...drv": {...}},  # `nix derivation show` bodies
     "drvPath": "/nix/store/...drv",       # what `nix eval INSTALLABLE.drvPath` answers
     "variants": {"torch-sm86": {"drv": ..., "outputs": [...]}}}  # the fleet flake's eval

``derivation show`` / ``show-derivation`` (with ``-r``: the closure) answer from ``drvs``;
``eval`` answers ``drvPath`` or, with ``--apply``, the variants CAPPLAN_NIX_PARAMS asks for;
``show-config`` / ``config show`` answer no substituters.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def install(folder: Path, graph: Path) -> dict[str, str]:
    """Write ``folder/nix`` and return the environment that puts it first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nix"
    script.write_text(
        f"#!{sys.executable} -S\nimport runpy\nrunpy.run_path({str(Path(__file__))!r}, run_name='__main__')\n"
    )
    script.chmod(0o755)
    return {
        "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_NIX_GRAPH": str(graph),
    }


_NIX32 = "0123456789abcdfghijklmnpqrsvwxyz"


def store_path(seed: str, name: str) -> str:
    """A well-formed store path whose hash part comes from ``seed``."""
    import hashlib

    digest = hashlib.sha256(seed.encode()).digest()
    return "/nix/store/" + "".join(_NIX32[b % 32] for b in digest[:32]) + "-" + name


def drv(
    name: str, inputs: list[str], env: dict[str, str], side: str
) -> tuple[str, dict[str, object]]:
    """One derivation body as `nix derivation show` (2.18) prints it, and its path; its hash
    follows from its name, inputs and env, as a real derivation's does."""
    seed = json.dumps([name, sorted(inputs), sorted(env.items())])
    out = store_path("out" + seed, name)
    body = {
        "args": ["-c", "true"],
        "builder": "/bin/sh",
        "env": {"name": name, "out": out, "system": "x86_64-linux", **env},
        "inputDrvs": {i: {"dynamicOutputs": {}, "outputs": ["out"]} for i in inputs},
        "inputSrcs": [],
        "name": name,
        "outputs": {"out": {"path": out}},
        "system": "x86_64-linux",
    }
    del side
    return store_path(seed, name + ".drv"), body


def chain(depth: int, bottom: str) -> tuple[dict[str, dict[str, object]], str]:
    """A chain of ``depth`` derivations (chain-0 at the top) whose bottom has env BOTTOM."""
    drvs: dict[str, dict[str, object]] = {}
    below: list[str] = []
    for level in reversed(range(depth)):
        env = {"BOTTOM": bottom} if level == depth - 1 else {}
        path, body = drv(f"chain-{level}", below, env, bottom)
        drvs[path] = body
        below = [path]
    return drvs, below[0]


def wide(count: int, bottom: str) -> tuple[dict[str, dict[str, object]], str]:
    """About ``count`` derivations in layers of 50, each needing every one below it in its
    column and the layer's first; the one difference is at the bottom of column 0."""
    drvs: dict[str, dict[str, object]] = {}
    width = 50
    layers = max(1, count // width)
    below: list[str] = []
    for layer in reversed(range(layers)):
        row: list[str] = []
        for col in range(width):
            env = {"BOTTOM": bottom} if (layer == layers - 1 and col == 0) else {"COL": str(col)}
            inputs = [below[col], below[0]] if below else []
            path, body = drv(f"pkg-{layer}-{col}", sorted(set(inputs)), env, bottom)
            drvs[path] = body
            row.append(path)
        below = row
    path, body = drv("python3.13-torch-2.12.0", below, {"TORCH_CUDA_ARCH_LIST": "8.6"}, bottom)
    drvs[path] = body
    return drvs, path


def _closure(drvs: dict[str, dict[str, object]], roots: list[str]) -> list[str]:
    seen = set(roots)
    todo = list(roots)
    while todo:
        body = drvs.get(todo.pop(), {})
        inputs = body.get("inputDrvs", {})
        for child in inputs if isinstance(inputs, dict) else ():
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return sorted(seen)


def main(argv: list[str]) -> int:
    graph = json.loads(Path(os.environ["FAKE_NIX_GRAPH"]).read_text())
    log = os.environ.get("FAKE_NIX_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps(argv) + "\n")
    args = [a for a in argv if a not in ("--extra-experimental-features", "nix-command flakes")]
    if args[:1] == ["--version"]:
        print(f"nix (Nix) {graph.get('version', '2.18.9')}")
        return 0
    if args[:1] in (["show-config"], ["config"]):
        print(json.dumps({"substituters": {"value": []}}))
        return 0
    if args[:1] == ["show-derivation"] or args[:2] == ["derivation", "show"]:
        rest = args[1:] if args[0] == "show-derivation" else args[2:]
        recursive = "-r" in rest
        paths = [a for a in rest if a.startswith("/")]
        drvs = graph["drvs"]
        wanted = _closure(drvs, paths) if recursive else paths
        missing = [p for p in wanted if p not in drvs]
        if missing:
            print(f"error: path '{missing[0]}' is not valid", file=sys.stderr)
            return 1
        sys.stdout.write(json.dumps({p: drvs[p] for p in wanted}))
        return 0
    if args[:1] == ["eval"]:
        if "--apply" in args:
            params = json.loads(os.environ["CAPPLAN_NIX_PARAMS"])
            # A variant the graph leaves out gets a derivation of its own name (no show answers).
            made = {
                a: {"drv": store_path(a, a + ".drv"), "outputs": [store_path("out" + a, a)]}
                for a in params["attrs"]
            }
            json.dump({a: graph["variants"].get(a, made[a]) for a in params["attrs"]}, sys.stdout)
            return 0
        if graph.get("drvPath") is None:
            print("error: attribute 'nothing' missing", file=sys.stderr)
            return 1
        json.dump(graph["drvPath"], sys.stdout)
        return 0
    print(f"error: fake nix does not know {' '.join(args[:2])}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
