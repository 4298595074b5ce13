"""The benchmark's cache server answers the way the client needs (so bench figures stay real)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from capplan.adapters.binary_cache import query_caches

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_cache.py"
MISSING = "/nix/store/00000000000000000000000000000000-missing"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_cache", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_servers_serve_the_synthetic_cache(tmp_path: Path) -> None:
    bench = _bench()
    paths = bench.make_cache(tmp_path / "cache", 40)
    for kind in ("asyncio", "threaded"):
        proc, url = bench.start_server(tmp_path / "cache", 0.005, kind)
        try:
            result = query_caches([*paths, MISSING], [url], concurrency=8, timeout=5.0)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        assert result.warnings == [], kind
        assert sorted(result.present) == sorted(paths), kind  # every narinfo; 404 is absent
