"""Find the text of ``torch/utils/cpp_extension.py`` without importing torch.

Four places it can come from:

- a file path;
- the torch installed in this Python, located through ``importlib`` metadata (finding a spec
  does not run the package, so a broken or CUDA-less torch is still readable);
- a wheel, local or remote: only that one zip member is read. For a URL the zip is read through
  HTTP ``Range`` requests, so only the central directory and the member travel (about 1 MB of a
  60-140 MB torch wheel);
- a release tag (``--version 2.4.0``): the file at that tag on GitHub, or wherever the
  ``CAPPLAN_TORCH_SOURCE_URL`` template (``{version}`` placeholder) points.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import io
import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import unquote, urlsplit

import requests
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from capplan.adapters.files import (
    MAX_INPUT_BYTES,
    open_regular,
    read_bounded,
    read_input_bytes,
)
from capplan.adapters.zipmembers import ZIP_ERRORS, open_member
from capplan.errors import BinaryFormatError, InvalidInputError, NetworkError

__all__ = [
    "DEFAULT_TIMEOUT",
    "MEMBER",
    "SOURCE_URL_ENV",
    "SOURCE_URL_TEMPLATE",
    "HttpRangeFile",
    "TorchSource",
    "from_file",
    "from_installed",
    "from_version",
    "from_wheel",
]

MEMBER = "torch/utils/cpp_extension.py"
SOURCE_URL_ENV = "CAPPLAN_TORCH_SOURCE_URL"
SOURCE_URL_TEMPLATE = (
    "https://raw.githubusercontent.com/pytorch/pytorch/v{version}/torch/utils/cpp_extension.py"
)
DEFAULT_TIMEOUT = 30.0
# A release tag is digits and dots only: it is pasted into a URL.
_RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
# zipfile reads the end-of-central-directory record, then the directory, then the member, each
# with small reads; a read-ahead of this size turns them into a handful of requests.
_READ_AHEAD = 256 * 1024


@dataclass(frozen=True)
class TorchSource:
    """The file's text, where it came from, and the torch release when it is known."""

    text: str
    origin: str
    version: str | None
    bytes_read: int
    requests: int = 0


def from_file(path: Path, *, version: str | None = None) -> TorchSource:
    """Read a cpp_extension.py on disk. The release is taken from ``version`` or, in an unpacked
    torch tree, from the sibling ``torch/version.py``."""
    data = read_input_bytes(path, hint="give the path of torch/utils/cpp_extension.py")
    found = version or _version_from_tree(path)
    return TorchSource(_decode(data, str(path)), f"file {path}", found, len(data))


def from_installed(*, distribution: str = "torch") -> TorchSource:
    """Read the file of the torch installed in this interpreter, without importing it."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    path: Path | None = None
    if dist is not None:
        located = Path(str(dist.locate_file(MEMBER)))
        if located.is_file():
            path = located
    if path is None:
        # An editable or vendored torch has no usable RECORD layout: ask the import system
        # where the package lives. find_spec on a top-level name runs none of its code.
        spec = importlib.util.find_spec(distribution)
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                candidate = Path(location) / "utils" / "cpp_extension.py"
                if candidate.is_file():
                    path = candidate
                    break
    if path is None:
        raise InvalidInputError(
            f"no installed {distribution} found in this Python",
            hint="install torch, or use --wheel, --file or --version",
        )
    version = _public(dist.version) if dist is not None else _version_from_tree(path)
    try:
        data = read_bounded(path)
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return TorchSource(_decode(data, str(path)), f"installed {path}", version, len(data))


def _bounded_body(response: requests.Response, url: str) -> bytes:
    """A response body of at most MAX_INPUT_BYTES (a source file is about 120 KB): a server
    that sends more, or says it will, is refused rather than read to the end."""
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > MAX_INPUT_BYTES:
        raise NetworkError(
            f"{url} sends {length} bytes, more than the {MAX_INPUT_BYTES} capplan reads for a "
            "source file",
            hint="check the URL; it should name torch/utils/cpp_extension.py",
        )
    body = bytearray()
    for chunk in response.iter_content(chunk_size=65536):
        body += chunk
        if len(body) > MAX_INPUT_BYTES:
            raise NetworkError(
                f"{url} sends more than the {MAX_INPUT_BYTES} bytes capplan reads for a "
                "source file",
                hint="check the URL; it should name torch/utils/cpp_extension.py",
            )
    return bytes(body)


def from_wheel(
    location: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    session: requests.Session | None = None,
) -> TorchSource:
    """Read the one member from a wheel on disk or at an http(s) URL."""
    version = _wheel_version(location)
    if _is_url(location):
        with HttpRangeFile(location, timeout=timeout, session=session) as raw:
            buffered = io.BufferedReader(raw, buffer_size=_READ_AHEAD)
            data = _read_member(buffered, location)
            return TorchSource(
                _decode(data, location),
                f"wheel {location}",
                version,
                raw.bytes_read,
                raw.requests,
            )
    path = Path(location)
    try:
        handle = open_regular(path)
    except FileNotFoundError:
        raise InvalidInputError(f"no such wheel: {path}", hint="give a .whl path or URL") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        data = _read_member(handle, str(path))
    return TorchSource(_decode(data, str(path)), f"wheel {path}", version, len(data))


def from_version(
    version: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    env: Mapping[str, str] | None = None,
    session: requests.Session | None = None,
) -> TorchSource:
    """Download the file of release ``version`` (``X.Y.Z``)."""
    if not _RELEASE.fullmatch(version):
        raise InvalidInputError(
            f"not a torch release tag: {version!r}", hint="write it as X.Y.Z, e.g. 2.4.0"
        )
    template = (env if env is not None else os.environ).get(SOURCE_URL_ENV) or SOURCE_URL_TEMPLATE
    if "{version}" not in template:
        raise InvalidInputError(
            f"{SOURCE_URL_ENV} has no {{version}} placeholder: {template!r}",
            hint="e.g. http://127.0.0.1:8000/v{version}/torch/utils/cpp_extension.py",
        )
    url = template.replace("{version}", version)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise InvalidInputError(
            f"{SOURCE_URL_ENV} is not a valid URL: {template[:200]!r} ({exc})",
            hint="e.g. http://127.0.0.1:8000/v{version}/torch/utils/cpp_extension.py",
        ) from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInputError(
            f"{SOURCE_URL_ENV} is not an http(s) URL: {template[:200]!r}",
            hint="e.g. http://127.0.0.1:8000/v{version}/torch/utils/cpp_extension.py",
        )
    http = session or requests.Session()
    try:
        with http.get(url, timeout=timeout, stream=True) as response:
            data = _bounded_body(response, url) if response.status_code == 200 else b""
    except requests.RequestException as exc:
        raise _network_error(url, exc) from None
    except ValueError as exc:  # urllib3/idna reject some hosts only when connecting
        raise InvalidInputError(
            f"{SOURCE_URL_ENV} is not a valid URL: {template[:200]!r} ({exc})",
            hint="e.g. http://127.0.0.1:8000/v{version}/torch/utils/cpp_extension.py",
        ) from None
    finally:
        if session is None:
            http.close()
    if response.status_code == 404:
        raise InvalidInputError(
            f"torch release {version} not found at {url} (HTTP 404)",
            hint="check the release number, e.g. 2.4.0",
        )
    if response.status_code != 200:
        raise NetworkError(
            f"downloading {url} failed: HTTP {response.status_code}",
            hint="try again later, or use --wheel/--file with a local copy",
        )
    origin = f"GitHub tag v{version}" if template == SOURCE_URL_TEMPLATE else f"url {url}"
    return TorchSource(_decode(data, url), origin, version, len(data), 1)


class HttpRangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP ``Range`` requests (RFC 9110 section 14).

    Enough for :mod:`zipfile`, which seeks to the end for the central directory and then to
    the member it wants. A server that ignores ``Range`` is refused rather than followed into
    downloading the whole file.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
    ) -> None:
        super().__init__()
        self.url = url
        self.timeout = timeout
        self._own_session = session is None
        self._session = session or requests.Session()
        self._pos = 0
        self.bytes_read = 0
        self.requests = 0
        # The last byte tells the size through Content-Range and works where HEAD is refused.
        response, _ = self._get("bytes=-1", 1)
        content_range = response.headers.get("Content-Range", "")
        total = content_range.rpartition("/")[2]
        if response.status_code != 206 or not total.isdigit():
            self.close()
            raise NetworkError(
                f"{url} does not serve byte ranges (HTTP {response.status_code})",
                hint="download the wheel and pass its path to --wheel",
            )
        self.size = int(total)
        # Redirects (PyPI's file host answers through a CDN) are resolved once.
        self.url = response.url or url

    def _get(self, byte_range: str, limit: int) -> tuple[requests.Response, bytes]:
        """One range request and at most ``limit`` bytes of its body: a server that ignores
        the range and sends the whole file is never read to the end."""
        body = bytearray()
        try:
            with self._session.get(
                self.url, headers={"Range": byte_range}, timeout=self.timeout, stream=True
            ) as response:
                if response.status_code in (200, 206):
                    for chunk in response.iter_content(chunk_size=min(limit, 1 << 20)):
                        body += chunk
                        if len(body) >= limit:
                            break
        except requests.RequestException as exc:
            raise _network_error(self.url, exc) from None
        self.requests += 1
        if response.status_code == 404:
            raise InvalidInputError(f"no such wheel: {self.url} (HTTP 404)")
        if response.status_code not in (200, 206):
            raise NetworkError(
                f"reading {self.url} failed: HTTP {response.status_code}",
                hint="try again later, or download the wheel and pass its path",
            )
        return response, bytes(body[:limit])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        position = base + offset
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._pos = position
        return position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        wanted = min(len(buffer), self.size - self._pos)
        if wanted <= 0:
            return 0
        response, data = self._get(f"bytes={self._pos}-{self._pos + wanted - 1}", wanted)
        if response.status_code != 206:
            raise NetworkError(
                f"{self.url} ignored a byte range request (HTTP {response.status_code})",
                hint="download the wheel and pass its path to --wheel",
            )
        view = memoryview(buffer)
        view[: len(data)] = data
        self._pos += len(data)
        self.bytes_read += len(data)
        return len(data)

    def close(self) -> None:
        if self._own_session and not self.closed:
            self._session.close()
        super().close()


def _read_member(handle: IO[bytes], label: str) -> bytes:
    try:
        with zipfile.ZipFile(handle) as wheel:
            try:
                with open_member(wheel, wheel.getinfo(MEMBER)) as member:
                    return member.read()
            except KeyError:
                raise BinaryFormatError(
                    f"wheel {label} has no {MEMBER}", hint="pass a torch wheel"
                ) from None
    except ZIP_ERRORS as exc:
        raise BinaryFormatError(
            f"{label} is not a wheel (zip): {exc}", hint="pass a torch .whl file"
        ) from None


def _wheel_version(location: str) -> str | None:
    name = unquote(urlsplit(location).path if _is_url(location) else location)
    filename = name.rsplit("/", 1)[-1]
    try:
        _, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    # "2.13.0+cpu" is release 2.13.0: the local tag names the build, not the source.
    return version.public


def _version_from_tree(path: Path) -> str | None:
    """``torch/version.py`` next to ``torch/utils/``: ``__version__ = '2.4.0+cu121'``."""
    candidate = path.parent.parent / "version.py"
    try:
        tree = ast.parse(candidate.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(t, ast.Name) and t.id == "__version__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return _public(node.value.value)
    return None


def _public(text: str) -> str | None:
    try:
        return Version(text).public
    except InvalidVersion:
        return None


def _decode(data: bytes, label: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(
            f"{label} is not UTF-8 text", hint="pass torch/utils/cpp_extension.py itself"
        ) from None


def _is_url(location: str) -> bool:
    return urlsplit(location).scheme in ("http", "https")


def _network_error(url: str, exc: requests.RequestException) -> NetworkError:
    kind = "timed out" if isinstance(exc, requests.Timeout) else "unreachable"
    host = urlsplit(url).netloc or url
    return NetworkError(
        f"cannot download {url}: {host} {kind}",
        hint="check the network, or use --wheel/--file with a local copy",
    )
