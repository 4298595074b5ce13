"""capplan.adapters.binary_cache against real HTTP servers serving a binary cache Nix wrote.

The cache is made by Nix itself (nix-build of two tiny derivations, one referencing the other,
`nix copy --to file://...`, the second signed with a key from `nix key generate-secret`), then
served by tests/data/cache_server.py in a separate process. Faults are switched on through the
server's control endpoints; nothing here asserts wall-clock time.
"""

from __future__ import annotations

import base64
import email.utils
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from capplan.adapters.binary_cache import CacheResult, parse_retry_after, query_caches
from capplan.core.caches.narinfo import NarInfo, store_path_hash
from capplan.errors import InvalidInputError

SERVER = Path(__file__).resolve().parents[1] / "data" / "cache_server.py"
FEATURES = ["--extra-experimental-features", "nix-command"]
MISSING = "/nix/store/0000000000000000000000000000000a-capplan-not-built"

# Constant Nix code (no user data): b's output references a's.
DRV_EXPR = """
let
  a = derivation { name = "capplan-cachetest-a"; system = builtins.currentSystem;
                   builder = "/bin/sh"; args = [ "-c" "echo a > $out" ]; };
in derivation { name = "capplan-cachetest-b"; system = builtins.currentSystem;
                builder = "/bin/sh"; args = [ "-c" "echo ${a} > $out" ]; }
"""


@dataclass(frozen=True)
class NixCache:
    root: Path
    a: str  # unsigned, no references
    b: str  # signed by `key`, references a
    key: str  # NAME:base64 public key


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[str]

    def control(self, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method="POST" if data else "GET"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if path == "/_log" else None

    def faults(self, table: dict[str, dict[str, Any]]) -> None:
        self.control("/_faults", table)

    def log(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.control("/_log")
        return entries

    def requests_for(self, path: str) -> list[dict[str, Any]]:
        key = f"/{store_path_hash(path)}.narinfo"
        return [e for e in self.log() if e["path"].split("?")[0] == key]


def _run(args: list[str], **kwargs: Any) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        pytest.fail(f"{args[0]} failed: {proc.stderr.strip()[:500]}")
    return str(proc.stdout).strip()


@pytest.fixture(scope="module")
def nix_cache(tmp_path_factory: pytest.TempPathFactory) -> NixCache:
    nix, nix_build, nix_store = (shutil.which(n) for n in ("nix", "nix-build", "nix-store"))
    if not (nix and nix_build and nix_store):
        pytest.skip("nix not found on PATH (install Debian's nix-bin to run cache tests)")
    work = tmp_path_factory.mktemp("nixcache")
    secret = work / "secret.key"
    secret.write_text(_run([nix, *FEATURES, "key", "generate-secret", "--key-name", "capplan-t1"]))
    public = _run([nix, *FEATURES, "key", "convert-secret-to-public"], input=secret.read_text())
    b = _run([nix_build, "--no-out-link", "-E", DRV_EXPR])
    (a,) = _run([nix_store, "--query", "--references", b]).split()
    root = work / "cache"
    # a goes in unsigned first; copying b with secret-key= then signs only what it writes (b).
    _run([nix, *FEATURES, "copy", "--to", f"file://{root}", a])
    _run([nix, *FEATURES, "copy", "--to", f"file://{root}?secret-key={secret}", b])
    return NixCache(root=root, a=a, b=b, key=public)


def _start(root: Path, host: str) -> Server:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--root", str(root), "--host", host],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        pytest.fail(f"cache server did not start: {proc.communicate()[1][:500]}")
    return Server(url=f"http://{host}:{int(line)}", proc=proc)


@pytest.fixture(scope="module")
def servers(nix_cache: NixCache) -> Iterator[dict[str, Server]]:
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError:
        pytest.skip("cannot bind 127.0.0.2 (needed as a second host for redirect tests)")
    started = {
        "main": _start(nix_cache.root, "127.0.0.1"),
        "other_host": _start(nix_cache.root, "127.0.0.2"),
        "other_port": _start(nix_cache.root, "127.0.0.1"),
    }
    yield started
    for server in started.values():
        server.proc.terminate()
        server.proc.wait(timeout=10)


@pytest.fixture
def main(servers: dict[str, Server]) -> Server:
    for server in servers.values():
        server.control("/_reset", {})
    return servers["main"]


def query(paths: list[str], caches: list[str], **kwargs: Any) -> CacheResult:
    settings: dict[str, Any] = {
        "timeout": 2.0,
        "retries": 2,
        "backoff": 0.01,
        "concurrency": 8,
    }
    settings.update(kwargs)
    return query_caches(paths, caches, **settings)


# --- the real cache -------------------------------------------------------------------------


def test_the_cache_is_what_nix_wrote(nix_cache: NixCache) -> None:
    info = NarInfo.parse((nix_cache.root / f"{store_path_hash(nix_cache.b)}.narinfo").read_text())
    assert info.store_path == nix_cache.b
    assert info.reference_paths() == (nix_cache.a,)
    assert info.verify([nix_cache.key])  # Nix's own signature, checked by our code


def test_present_and_absent(nix_cache: NixCache, main: Server) -> None:
    result = query([nix_cache.a, nix_cache.b, MISSING, nix_cache.b], [main.url])
    assert result.present == {nix_cache.a: main.url, nix_cache.b: main.url}
    assert result.warnings == []  # a 404 is an answer, not a failure
    assert len(main.requests_for(nix_cache.b)) == 1  # duplicates are asked once


def test_trusted_key_requires_a_valid_signature(nix_cache: NixCache, main: Server) -> None:
    result = query([nix_cache.a, nix_cache.b], [main.url], trusted_keys=[nix_cache.key])
    assert result.present == {nix_cache.b: main.url}  # a is unsigned
    (warning,) = result.warnings
    assert main.url in warning and "signature" in warning and nix_cache.a in warning


def test_key_of_another_cache_trusts_nothing(nix_cache: NixCache, main: Server) -> None:
    other = "cache.nixos-cuda.org:74DUi4Ye579gUqzH4ziL9IyiJBlDpMRn9MBN8oNan9M="
    result = query([nix_cache.a, nix_cache.b], [main.url], trusted_keys=[other])
    assert result.present == {}


def test_bad_trusted_key_fails_before_any_request(nix_cache: NixCache, main: Server) -> None:
    with pytest.raises(InvalidInputError):
        query([nix_cache.b], [main.url], trusted_keys=["nonsense"])
    assert main.log() == []


def test_first_cache_in_order_wins(nix_cache: NixCache, servers: dict[str, Server]) -> None:
    main, other = servers["main"], servers["other_port"]
    for server in servers.values():
        server.control("/_reset", {})
    result = query([nix_cache.b], [other.url, main.url])
    assert result.present == {nix_cache.b: other.url}
    assert main.log() == []  # settled by the first cache


def test_progress_counts_each_path_once(nix_cache: NixCache, main: Server) -> None:
    seen: list[int] = []
    query(
        [nix_cache.a, nix_cache.b, MISSING],
        [main.url, main.url + "/"],
        on_progress=seen.append,
    )
    assert sum(seen) == 3


# --- faults: failures never count as hits ---------------------------------------------------


def test_5xx_is_retried_until_it_answers(nix_cache: NixCache, main: Server) -> None:
    main.faults({store_path_hash(nix_cache.b): {"mode": "status", "status": 503, "times": 2}})
    result = query([nix_cache.b], [main.url], retries=3)
    assert result.present == {nix_cache.b: main.url}
    assert result.warnings == []
    assert len(main.requests_for(nix_cache.b)) == 3


def test_persistent_5xx_is_a_warning_not_a_hit(nix_cache: NixCache, main: Server) -> None:
    main.faults({"*": {"mode": "status", "status": 500}})
    result = query([nix_cache.a, nix_cache.b], [main.url], retries=2)
    assert result.present == {}
    (warning,) = result.warnings
    assert main.url in warning and "HTTP 500" in warning and "2 of 2" in warning
    assert len(main.requests_for(nix_cache.b)) == 3  # first try + 2 retries


def test_429_retry_after_seconds_is_honoured(nix_cache: NixCache, main: Server) -> None:
    main.faults(
        {
            store_path_hash(nix_cache.b): {
                "mode": "status",
                "status": 429,
                "retry_after": 7,
                "times": 1,
            }
        }
    )
    slept: list[float] = []
    result = query([nix_cache.b], [main.url], sleep=slept.append)
    assert result.present == {nix_cache.b: main.url}
    assert slept and slept[0] >= 7.0  # waited as long as the server asked, not the 10 ms backoff


def test_429_retry_after_date_is_capped(nix_cache: NixCache, main: Server) -> None:
    in_an_hour = email.utils.formatdate(time.time() + 3600, usegmt=True)
    main.faults(
        {
            store_path_hash(nix_cache.b): {
                "mode": "status",
                "status": 429,
                "retry_after": in_an_hour,
                "times": 1,
            }
        }
    )
    slept: list[float] = []
    result = query([nix_cache.b], [main.url], sleep=slept.append, max_retry_after=3.0)
    assert result.present == {nix_cache.b: main.url}
    assert slept == [3.0]


def test_endless_429_is_a_warning(nix_cache: NixCache, main: Server) -> None:
    main.faults({"*": {"mode": "status", "status": 429, "retry_after": 0}})
    result = query([nix_cache.b], [main.url], retries=1)
    assert result.present == {}
    assert len(result.warnings) == 1 and "429" in result.warnings[0]


def test_stall_past_the_timeout(nix_cache: NixCache, main: Server) -> None:
    main.faults({store_path_hash(nix_cache.b): {"mode": "stall", "seconds": 1.5}})
    result = query([nix_cache.b, nix_cache.a], [main.url], timeout=0.3, retries=1)
    assert result.present == {nix_cache.a: main.url}
    (warning,) = result.warnings
    assert "timed out" in warning and nix_cache.b in warning


def test_one_stall_then_an_answer(nix_cache: NixCache, main: Server) -> None:
    main.faults({store_path_hash(nix_cache.b): {"mode": "stall", "seconds": 1.5, "times": 1}})
    result = query([nix_cache.b], [main.url], timeout=0.3, retries=1)
    assert result.present == {nix_cache.b: main.url}


def test_connection_reset(nix_cache: NixCache, main: Server) -> None:
    main.faults({store_path_hash(nix_cache.b): {"mode": "reset"}})
    result = query([nix_cache.b], [main.url], retries=1)
    assert result.present == {}
    assert "connection failed" in result.warnings[0]
    main.faults({store_path_hash(nix_cache.b): {"mode": "reset", "times": 1}})
    assert query([nix_cache.b], [main.url], retries=1).present == {nix_cache.b: main.url}


def test_truncated_body(nix_cache: NixCache, main: Server) -> None:
    main.faults({store_path_hash(nix_cache.b): {"mode": "truncate"}})
    result = query([nix_cache.b], [main.url], retries=1)
    assert result.present == {}
    (warning,) = result.warnings
    assert "truncated" in warning


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ({"mode": "wrong-storepath"}, "StorePath mismatch"),
        ({"mode": "garbage", "size": 500}, "invalid narinfo"),
        ({"mode": "bad-sig"}, "signature"),
        ({"mode": "status", "status": 401}, "HTTP 401"),
        ({"mode": "status", "status": 418}, "HTTP 418"),
    ],
)
def test_bad_answers_are_warnings_not_hits(
    nix_cache: NixCache, main: Server, fault: dict[str, Any], expected: str
) -> None:
    if fault["mode"] == "wrong-storepath":
        fault = {**fault, "store_path": nix_cache.a}
    main.faults({store_path_hash(nix_cache.b): fault})
    result = query([nix_cache.b, nix_cache.a], [main.url], trusted_keys=[nix_cache.key])
    assert nix_cache.b not in result.present
    (warning,) = result.warnings
    assert expected in warning and main.url in warning
    # None of these is worth retrying: the cache answered.
    assert len(main.requests_for(nix_cache.b)) == 1


def test_bad_signature_is_ignored_without_trusted_keys(nix_cache: NixCache, main: Server) -> None:
    main.faults({store_path_hash(nix_cache.b): {"mode": "bad-sig"}})
    assert query([nix_cache.b], [main.url]).present == {nix_cache.b: main.url}


def test_403_counts_as_absent_and_all_403_is_flagged(nix_cache: NixCache, main: Server) -> None:
    main.faults({"*": {"mode": "status", "status": 403}})
    result = query([nix_cache.a, nix_cache.b], [main.url])
    assert result.present == {}
    (warning,) = result.warnings
    assert "403" in warning


def test_dead_cache_warns_and_the_next_cache_still_answers(
    nix_cache: NixCache, main: Server
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    # The port is closed again: connections are refused.
    result = query([nix_cache.b, MISSING], [dead, main.url], retries=1)
    assert result.present == {nix_cache.b: main.url}
    (warning,) = result.warnings
    assert dead in warning and "connection failed" in warning


def test_a_failing_cache_is_given_up(nix_cache: NixCache, main: Server) -> None:
    main.faults({"*": {"mode": "status", "status": 502}})
    paths = [f"/nix/store/{i:032d}-p" for i in range(60)]
    result = query(paths, [main.url], retries=0, concurrency=2, give_up_after=4)
    assert result.present == {}
    (warning,) = result.warnings
    assert "skipped after repeated failures" in warning
    assert len(main.log()) < 60  # the rest were not asked


def test_many_lookups_concurrently(nix_cache: NixCache, main: Server) -> None:
    paths = [f"/nix/store/{i:032d}-p" for i in range(300)] + [nix_cache.a, nix_cache.b]
    result = query(paths, [main.url], concurrency=32)
    assert result.present == {nix_cache.a: main.url, nix_cache.b: main.url}
    assert result.warnings == []
    assert len(main.log()) == 302


# --- credentials ----------------------------------------------------------------------------


def test_cache_url_with_characters_to_quote_is_requested_quoted(
    nix_cache: NixCache, main: Server
) -> None:
    # Plain cache URLs skip requests' URL preparation; this one must still go through it.
    result = query([nix_cache.b], [f"{main.url}/sub dir"])
    assert result.present == {} and result.warnings == []
    assert [e["path"] for e in main.log()] == [f"/sub%20dir/{store_path_hash(nix_cache.b)}.narinfo"]


def _redirect_to(server: Server, path: str) -> dict[str, Any]:
    return {
        "mode": "redirect",
        "location": f"{server.url}/{store_path_hash(path)}.narinfo",
    }


def test_token_goes_to_the_cache(nix_cache: NixCache, main: Server) -> None:
    query([nix_cache.b, MISSING], [main.url], token="s3cret")
    log = main.log()
    assert len(log) == 2
    assert all(entry["authorization"] == "Bearer s3cret" for entry in log)


@pytest.mark.parametrize("target", ["other_host", "other_port"])
@pytest.mark.parametrize("status", [302, 307, 308])
def test_token_does_not_follow_a_redirect_to_another_origin(
    nix_cache: NixCache,
    servers: dict[str, Server],
    main: Server,
    target: str,
    status: int,
) -> None:
    other = servers[target]
    main.faults(
        {
            store_path_hash(nix_cache.b): {
                **_redirect_to(other, nix_cache.b),
                "status": status,
            }
        }
    )
    result = query([nix_cache.b], [main.url], token="s3cret")
    assert result.present == {nix_cache.b: main.url}  # the redirect target served it
    assert [e["authorization"] for e in main.requests_for(nix_cache.b)] == ["Bearer s3cret"]
    received = other.requests_for(nix_cache.b)
    assert len(received) == 1 and received[0]["authorization"] is None


def test_token_follows_a_redirect_on_the_same_origin(nix_cache: NixCache, main: Server) -> None:
    fault = {"mode": "redirect", "times": 1}
    fault["location"] = f"/{store_path_hash(nix_cache.b)}.narinfo?moved=1"
    main.faults({store_path_hash(nix_cache.b): fault})
    result = query([nix_cache.b], [main.url], token="s3cret")
    assert result.present == {nix_cache.b: main.url}
    seen = main.requests_for(nix_cache.b)
    assert [e["path"].endswith("?moved=1") for e in seen] == [False, True]
    assert all(e["authorization"] == "Bearer s3cret" for e in seen)


def test_redirect_loop_is_a_warning(nix_cache: NixCache, main: Server) -> None:
    main.faults({store_path_hash(nix_cache.b): _redirect_to(main, nix_cache.b)})
    result = query([nix_cache.b], [main.url])
    assert result.present == {}
    assert "too many redirects" in result.warnings[0]


def test_netrc_is_used_only_for_the_cache_host(
    nix_cache: NixCache, servers: dict[str, Server], main: Server, tmp_path: Path
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text(
        "machine 127.0.0.1 login alice password wonder\n"
        "machine 127.0.0.2 login mallory password leaked\n"
    )
    other = servers["other_host"]
    main.faults({store_path_hash(nix_cache.b): _redirect_to(other, nix_cache.b)})
    result = query([nix_cache.b, nix_cache.a], [main.url], netrc_file=netrc)
    assert result.present == {nix_cache.a: main.url, nix_cache.b: main.url}
    expected = "Basic " + base64.b64encode(b"alice:wonder").decode()
    assert {e["authorization"] for e in main.log()} == {expected}
    assert [e["authorization"] for e in other.log()] == [None]


def test_token_wins_over_netrc(nix_cache: NixCache, main: Server, tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login alice password wonder\n")
    query([nix_cache.b], [main.url], netrc_file=netrc, token="t0k")
    assert [e["authorization"] for e in main.log()] == ["Bearer t0k"]


# --- inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", ["ftp://x", "cache.nixos.org", "s3://bucket"])
def test_bad_cache_url(cache: str) -> None:
    with pytest.raises(InvalidInputError, match="cache URL"):
        query_caches([MISSING], [cache])


def test_bad_store_path() -> None:
    with pytest.raises(InvalidInputError, match="store path"):
        query_caches(["/usr/bin/sh"], ["http://127.0.0.1:9"])


def test_nothing_to_ask() -> None:
    assert query_caches([], ["http://127.0.0.1:9"]) == CacheResult()
    assert query_caches([MISSING], []) == CacheResult()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 3 ", 3.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past: retry now
        ("soon", None),
        (None, None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=time.time()) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 90, usegmt=True), now=now) == 90.0
