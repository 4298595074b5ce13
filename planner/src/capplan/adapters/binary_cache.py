"""Ask Nix binary caches which store paths they hold (``GET <cache>/<hash>.narinfo``).

The rule that shapes everything here: a failure never counts as a hit (issue 6). A path is
present only when a cache answered 200 with a narinfo that parses the way Nix parses it, whose
StorePath is the path asked for, and (with trusted keys) that carries a valid ed25519 signature.
Every other answer - 5xx after retries, 429 after retries, timeouts, resets, truncated or
garbage bodies, a wrong StorePath, a bad signature - leaves the path "not cached" and adds to
one warning naming the cache. 404/410 mean absent, and so does 403, as Nix treats it, because
S3-backed caches answer 403 for keys that do not exist (nix: http-binary-cache-store.cc,
``fileExists``).

Credentials (a bearer token, or a netrc entry for the cache's host) go only to the cache's own
origin (scheme, host, port). Redirects are followed by hand so a redirect to another origin is
requested without them; requests' own netrc lookup is disabled so it cannot attach another
host's credentials either.
"""

from __future__ import annotations

import base64
import email.utils
import json
import netrc
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import requests
from requests.adapters import HTTPAdapter

from capplan.adapters.files import INT_DIGITS_MESSAGE, numbered_lines, open_regular
from capplan.core.caches.narinfo import NarInfo, parse_public_key, split_store_path
from capplan.errors import CapplanError, ConfigError, DataError, InvalidInputError

__all__ = [
    "MAX_NARINFO_BYTES",
    "CacheResult",
    "output_paths_from_jobs",
    "parse_retry_after",
    "query_caches",
]

# Real narinfos are well under 10 KiB even with thousands of references; anything bigger is not
# a narinfo and is not worth holding in memory.
MAX_NARINFO_BYTES = 1 << 20
# One nix-eval-jobs JSON line: a job with every output path is a few KB.
MAX_JOBS_LINE = 1 << 20
_MAX_REDIRECTS = 5
_ABSENT_STATUSES = frozenset({404, 410})
_PRESENT, _ABSENT, _FORBIDDEN = "present", "absent", "forbidden"
_Answer = str  # one of the three above


@dataclass
class CacheResult:
    """``present``: each cached store path -> the first cache (in the order given) holding it."""

    present: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date, RFC 9110 10.2.3)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True)
class _Failure:
    kind: str  # grouped in the warning, e.g. "HTTP 500"
    detail: str = ""  # shown with the first example


class _Retryable(Exception):
    def __init__(self, failure: _Failure, retry_after: float | None = None) -> None:
        super().__init__(failure.kind)
        self.failure = failure
        self.retry_after = retry_after


class _Fatal(Exception):
    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.kind)
        self.failure = failure


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


class _Cache:
    """One cache: its base URL, origin, credentials, and its give-up state shared by workers."""

    def __init__(self, url: str, auth_header: str | None, give_up_after: int) -> None:
        self.url = url
        self.origin = _origin(url)
        self.auth_header = auth_header
        # Whether requests leaves this cache's narinfo URLs exactly as written (plain ASCII,
        # nothing to quote or IDNA-encode): then lookups can skip its URL preparation.
        sample = f"{url}/{'0' * 32}.narinfo"
        probe = requests.PreparedRequest()
        probe.prepare_url(sample, None)
        self.plain_urls = probe.url == sample
        self._give_up_after = give_up_after
        self._lock = threading.Lock()
        self._consecutive_failures = 0
        self.gave_up = False

    def record(self, failed: bool) -> None:
        # A dead or stalling cache would otherwise cost timeout x retries for every one of
        # thousands of paths; after a run of failures the rest are skipped (and reported).
        with self._lock:
            self._consecutive_failures = self._consecutive_failures + 1 if failed else 0
            if self._consecutive_failures >= self._give_up_after:
                self.gave_up = True


def _normalise_cache_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(
            f"not an http(s) binary cache URL: {url!r}",
            hint="give a cache like https://cache.nixos-cuda.org",
        )
    # Nix store URLs may carry store settings as a query (?priority=40); they are not part of
    # the narinfo location.
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _basic(login: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode("ascii")


def _auth_header(url: str, token: str | None, netrc_file: Path | None) -> str | None:
    if token:
        return f"Bearer {token}"
    if netrc_file is not None:
        host = urlsplit(url).hostname or ""
        try:
            entry = netrc.netrc(str(netrc_file)).authenticators(host)
        except (OSError, netrc.NetrcParseError) as exc:
            raise ConfigError(
                f"cannot read netrc file {netrc_file}: {exc}", hint="fix or remove the netrc file"
            ) from exc
        return _basic(entry[0] or "", entry[2] or "") if entry else None
    # requests' own lookup ($NETRC, ~/.netrc, ~/_netrc), asked about the cache's URL only.
    found = requests.utils.get_netrc_auth(url)
    return _basic(found[0], found[1]) if found else None


class _NarinfoAdapter(HTTPAdapter):
    """requests' HTTPAdapter minus the cookie jar: a narinfo lookup never sends cookies, and
    parsing Set-Cookie into a jar for every response was a tenth of a lookup's CPU."""

    def build_response(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
        response = requests.Response()
        response.status_code = resp.status
        response.headers = requests.structures.CaseInsensitiveDict(resp.headers)
        response.raw = resp
        response.reason = resp.reason
        response.url = req.url or ""
        response.request = req
        response.connection = self
        return response


class _Client:
    """One pooled Session plus the lookup logic shared by all workers."""

    def __init__(
        self,
        *,
        concurrency: int,
        timeout: float,
        retries: int,
        backoff: float,
        max_retry_after: float,
        trusted_keys: Sequence[str],
        sleep: Callable[[float], None],
    ) -> None:
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.trusted_keys = tuple(trusted_keys)
        self.sleep = sleep
        self._lock = threading.Lock()
        self._env_settings: dict[tuple[str, str, int | None], dict[str, Any]] = {}
        # One Session shared by the workers, its adapter's pool sized to the concurrency so
        # every worker keeps its own keep-alive connection. Retries are ours (they must see
        # 429 and 5xx), so urllib3 must not retry underneath.
        self.session = requests.Session()
        self.session.trust_env = False
        adapter = _NarinfoAdapter(pool_connections=16, pool_maxsize=concurrency, max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self._headers = dict(requests.utils.default_headers())
        self._headers["User-Agent"] = "capplan"

    def close(self) -> None:
        self.session.close()

    def _env_for(self, url: str) -> dict[str, Any]:
        """Proxies and CA bundle the environment sets for ``url``'s origin (HTTPS_PROXY, ...)."""
        origin = _origin(url)
        settings = self._env_settings.get(origin)  # a dict read is atomic; writes take the lock
        if settings is None:
            with requests.Session() as probe:
                merged = probe.merge_environment_settings(url, {}, None, None, None)
            verify = merged["verify"]
            if verify == requests.utils.DEFAULT_CA_BUNDLE_PATH:
                verify = True  # the same bundle; a path would be stat()ed on every request
            settings = {"proxies": merged["proxies"], "verify": verify}
            with self._lock:
                self._env_settings[origin] = settings
        return settings

    def _get(self, cache: _Cache, url: str) -> tuple[int, bytes, str | None]:
        """GET following redirects by hand; credentials only for the cache's origin.

        Requests are prepared here and handed to the session's adapter: Session.request would
        merge cookies, hooks, auth and environment settings per call, none of which a narinfo
        lookup uses (auth and redirects are handled here, the environment once per origin),
        and that bookkeeping measured about a third of the CPU of a lookup (bench/).
        """
        current = url
        for _hop in range(_MAX_REDIRECTS + 1):
            headers = self._headers
            if cache.auth_header and _origin(current) == cache.origin:
                headers = {**headers, "Authorization": cache.auth_header}
            prepared = requests.PreparedRequest()
            prepared.prepare_method("GET")
            if current is url and cache.plain_urls:
                # Our own URL, which requests would leave as it is (checked once per cache):
                # skip its URL parsing and re-encoding, the largest single cost of a lookup.
                # Redirect targets and unusual cache URLs still go through it.
                prepared.url = url
            else:
                prepared.prepare_url(current, None)
            prepared.prepare_headers(headers)
            adapter = self.session.get_adapter(current)
            response = adapter.send(
                prepared, stream=True, timeout=self.timeout, **self._env_for(current)
            )
            with response:
                length = response.headers.get("Content-Length", "")
                if length.isdigit() and int(length) > MAX_NARINFO_BYTES:
                    raise _Fatal(_Failure("response too large", f"{length} bytes"))
                body = bytearray()
                for chunk in response.iter_content(chunk_size=65536):
                    body += chunk
                    if len(body) > MAX_NARINFO_BYTES:
                        raise _Fatal(_Failure("response too large", "over 1 MiB"))
                location = response.headers.get("Location")
                if response.is_redirect and location:
                    current = urljoin(current, location)
                    continue
                return response.status_code, bytes(body), response.headers.get("Retry-After")
        raise _Fatal(_Failure("too many redirects", f"more than {_MAX_REDIRECTS}"))

    def _attempt(self, cache: _Cache, path: str, url: str) -> _Answer:
        """One attempt: an _Answer, or raises _Retryable or _Fatal."""
        try:
            status, body, retry_after = self._get(cache, url)
        except requests.Timeout as exc:
            raise _Retryable(_Failure(f"timed out after {self.timeout:g} s")) from exc
        except requests.exceptions.ChunkedEncodingError as exc:
            raise _Retryable(_Failure("truncated response", _short(exc))) from exc
        except (requests.ConnectionError, requests.exceptions.ContentDecodingError) as exc:
            raise _Retryable(_Failure("connection failed", _short(exc))) from exc
        except requests.RequestException as exc:
            raise _Fatal(_Failure("request failed", _short(exc))) from exc
        if status in _ABSENT_STATUSES:
            return _ABSENT
        if status == 403:
            return _FORBIDDEN
        if status == 429 or status >= 500:
            wait_s = parse_retry_after(retry_after, now=time.time())
            kind = "HTTP 429 (rate limited)" if status == 429 else f"HTTP {status}"
            raise _Retryable(_Failure(kind), retry_after=wait_s)
        if status != 200:
            kind = (
                "HTTP 401 (check CAPPLAN_CACHE_TOKEN or netrc)"
                if status == 401
                else f"HTTP {status}"
            )
            raise _Fatal(_Failure(kind))
        try:
            info = NarInfo.parse(body, source=url)
        except DataError as exc:
            raise _Fatal(_Failure("invalid narinfo", exc.message)) from exc
        finally:
            del body
        if info.store_path != path:
            raise _Fatal(_Failure("StorePath mismatch", f"it describes {info.store_path}"))
        if self.trusted_keys and not info.verify(self.trusted_keys):
            raise _Fatal(
                _Failure(
                    "no valid signature by a trusted key",
                    "signed by " + ", ".join(sorted({s.partition(":")[0] for s in info.sigs}))
                    if info.sigs
                    else "unsigned",
                )
            )
        return _PRESENT

    def lookup(self, cache: _Cache, path: str, hash_part: str) -> _Answer | _Failure:
        """Present, absent, forbidden (absent to Nix), or why the cache could not say."""
        if cache.gave_up:
            return _Failure("skipped after repeated failures")
        url = f"{cache.url}/{hash_part}.narinfo"
        for attempt in range(self.retries + 1):
            try:
                found = self._attempt(cache, path, url)
            except _Retryable as exc:
                if attempt == self.retries:
                    cache.record(failed=True)
                    return exc.failure
                delay = self.backoff * (2**attempt) * random.uniform(0.5, 1.0)
                if exc.retry_after is not None:
                    delay = max(delay, min(exc.retry_after, self.max_retry_after))
                self.sleep(delay)
                if cache.gave_up:
                    return _Failure("skipped after repeated failures")
            except _Fatal as exc:
                cache.record(failed=False)
                return exc.failure
            else:
                cache.record(failed=False)
                return found
        raise AssertionError("unreachable")


@dataclass
class _CacheReport:
    lookups: int = 0
    forbidden: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)


def _warning(url: str, report: _CacheReport, retries: int) -> str | None:
    failed = sum(report.failures.values())
    if failed:
        parts = [f"{n} {kind}" for kind, n in sorted(report.failures.items())]
        first = sorted(report.failures)[0]
        return (
            f"cache {url}: {failed} of {report.lookups} lookups failed and count as not cached "
            f"({'; '.join(parts)}; up to {retries} retries each); e.g. {report.examples[first]}"
        )
    if report.forbidden and report.forbidden == report.lookups:
        return (
            f"cache {url}: every lookup answered 403 Forbidden, counted as absent; "
            "check CAPPLAN_CACHE_TOKEN or netrc if this cache needs credentials"
        )
    return None


_Settled = tuple[str, list[tuple[str, _Answer | _Failure]]]
_DONE = object()


def _run_workers(
    items: Sequence[str],
    task: Callable[[str], _Settled],
    settle: Callable[[_Settled], None],
    workers: int,
) -> None:
    """Run ``task`` over ``items`` on ``workers`` threads; ``settle`` each result on this thread.

    Each worker pulls the next item from a shared iterator, so at most ``workers`` lookups are
    in flight and nothing per item is queued up front (memory stays flat). Results come back
    over a queue so progress callbacks run on the caller's thread. (A window of futures with
    concurrent.futures.wait cost O(window) per completion and held the GIL the workers need.)
    """
    todo = iter(items)
    todo_lock = threading.Lock()
    stop = threading.Event()
    results: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def worker() -> None:
        try:
            while not stop.is_set():
                with todo_lock:
                    item = next(todo, None)
                if item is None:
                    break
                results.put(task(item))
        except BaseException as exc:  # re-raised on the caller's thread
            results.put(exc)
        finally:
            results.put(_DONE)

    error: BaseException | None = None
    threads = [
        threading.Thread(target=worker, name=f"narinfo-{i}", daemon=True) for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    try:
        finished = 0
        while finished < workers:
            got = results.get()
            if got is _DONE:
                finished += 1
            elif isinstance(got, BaseException):
                error = error or got
                stop.set()
            elif error is None:
                try:
                    settle(got)
                except BaseException as exc:
                    error = exc
                    stop.set()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if error is not None:
        raise error


def query_caches(
    paths: Sequence[str],
    caches: Sequence[str],
    *,
    trusted_keys: Sequence[str] = (),
    concurrency: int = 32,
    timeout: float = 5.0,
    retries: int = 3,
    token: str | None = None,
    netrc_file: Path | None = None,
    on_progress: Callable[[int], None] | None = None,
    backoff: float = 0.25,
    max_retry_after: float = 30.0,
    give_up_after: int = 16,
    sleep: Callable[[float], None] = time.sleep,
) -> CacheResult:
    """Which of ``paths`` the ``caches`` hold; see the module docstring for what counts.

    Each path is asked of the caches in order until one has it. ``on_progress(1)`` is called as
    each path is settled. ``backoff`` is the first retry delay (doubled each retry, with jitter);
    a 429/5xx Retry-After is honoured up to ``max_retry_after`` seconds. After ``give_up_after``
    consecutive failed lookups a cache is skipped for the rest of the run (warned about).
    """
    if concurrency < 1 or timeout <= 0 or retries < 0:
        raise InvalidInputError(
            f"bad cache query settings: concurrency={concurrency} timeout={timeout} "
            f"retries={retries}",
            hint="concurrency >= 1, timeout > 0, retries >= 0",
        )
    for key in trusted_keys:
        parse_public_key(key)  # a bad key is the user's error: fail before any request
    unique = sorted(set(paths))
    hashes = {p: split_store_path(p)[1] for p in unique}
    urls = [_normalise_cache_url(c) for c in caches]
    result = CacheResult()
    if not unique or not urls:
        if on_progress is not None and unique:
            on_progress(len(unique))
        return result
    cache_list = [_Cache(u, _auth_header(u, token, netrc_file), give_up_after) for u in urls]
    reports = {c.url: _CacheReport() for c in cache_list}
    client = _Client(
        concurrency=concurrency,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        max_retry_after=max_retry_after,
        trusted_keys=trusted_keys,
        sleep=sleep,
    )

    def task(path: str) -> _Settled:
        answers: list[tuple[str, _Answer | _Failure]] = []
        for cache in cache_list:
            answer = client.lookup(cache, path, hashes[path])
            answers.append((cache.url, answer))
            if answer == _PRESENT:
                break
        return path, answers

    def settle(settled: _Settled) -> None:
        path, answers = settled
        for url, answer in answers:
            report = reports[url]
            report.lookups += 1
            if answer == _PRESENT:
                result.present[path] = url
            elif answer == _FORBIDDEN:
                report.forbidden += 1
            elif isinstance(answer, _Failure):
                report.failures[answer.kind] += 1
                example = f"{path} ({answer.detail})" if answer.detail else path
                report.examples.setdefault(answer.kind, example)
        if on_progress is not None:
            on_progress(1)

    try:
        _run_workers(unique, task, settle, min(concurrency, len(unique)))
    finally:
        client.close()
    for cache in cache_list:
        message = _warning(cache.url, reports[cache.url], retries)
        if message:
            result.warnings.append(message)
    result.present = dict(sorted(result.present.items()))
    return result


def output_paths_from_jobs(path: Path) -> dict[str, list[str]]:
    """Read nix-eval-jobs JSON lines: ``{attr: [output store paths]}``.

    A line with ``error`` (an attribute that failed to evaluate) is an error here: it has no
    outputs, and treating it as "all outputs cached" would silently drop a job.
    """
    out: dict[str, list[str]] = {}
    try:
        handle = open_regular(path)
    except OSError as exc:
        raise DataError(
            f"cannot read jobs file {path}: {exc.strerror}", hint="check the path"
        ) from exc
    seen = False
    with handle:
        for number, line in numbered_lines(handle, MAX_JOBS_LINE):

            def bad(why: str, number: int = number) -> DataError:
                return DataError(
                    f"{path}:{number}: {why}",
                    hint="give the JSON lines nix-eval-jobs prints (fields attr and outputs)",
                )

            if line is None:
                raise bad(f"a line longer than {MAX_JOBS_LINE >> 20} MiB")
            if not line.strip():
                continue
            seen = True

            try:
                job = json.loads(line)
            except json.JSONDecodeError as exc:
                raise bad(f"not JSON ({exc.msg})") from exc
            except UnicodeDecodeError as exc:
                raise bad("not UTF-8") from exc
            except RecursionError:
                raise bad("nested too deeply to read") from None
            except ValueError:
                raise bad(f"not JSON capplan reads ({INT_DIGITS_MESSAGE})") from None
            if not isinstance(job, dict):
                raise bad("not a JSON object")
            attr = job.get("attr")
            if not isinstance(attr, str) or not attr:
                raise bad("missing or empty 'attr'")
            if "error" in job:
                first = str(job["error"]).strip().splitlines()[:1]
                raise bad(
                    f"job {attr} failed to evaluate: {first[0] if first else 'unknown error'}"
                )
            outputs = job.get("outputs")
            if not isinstance(outputs, dict) or not outputs:
                raise bad(f"job {attr} has no 'outputs' object")
            paths: list[str] = []
            for name, store_path in sorted(outputs.items()):
                if not isinstance(store_path, str):
                    raise bad(f"job {attr} output {name!r} has no store path (content-addressed?)")
                try:
                    split_store_path(store_path)
                except CapplanError as exc:
                    raise bad(
                        f"job {attr} output {name!r}: not a store path {store_path!r}"
                    ) from exc
                paths.append(store_path)
            if attr in out:
                raise bad(f"duplicate attr {attr!r}")
            out[attr] = paths
    if not seen:
        # An empty file is a step that went wrong (nix-eval-jobs failed, the wrong path), not
        # a plan without jobs: reading it as one would skip or keep every job without a word.
        raise DataError(
            f"jobs file {path} holds no jobs",
            hint="give the JSON lines nix-eval-jobs printed (fields attr and outputs)",
        )
    return out
