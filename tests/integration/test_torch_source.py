"""Reading torch's cpp_extension.py from real places: HTTP servers on 127.0.0.1, wheels built
here, the real torch 2.13.0 CPU wheel, and (marked `network`) real wheels on PyPI."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import urljoin

import click
import pytest
import requests
from click.testing import CliRunner

from capplan.adapters.kb import kb_path
from capplan.adapters.torch_source import (
    MEMBER,
    SOURCE_URL_ENV,
    from_file,
    from_installed,
    from_version,
    from_wheel,
)
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.torch_limits import parse_torch_limits
from capplan.errors import (
    BinaryFormatError,
    ExitCode,
    InvalidInputError,
    NetworkError,
)

SOURCES = Path(__file__).resolve().parents[1] / "data" / "torch_sources"
KB_FILE = kb_path("torch.json")
CACHE = Path(tempfile.gettempdir()) / "capplan-test-cache" / "wheels"


# --- a small HTTP server with byte ranges ---------------------------------------------------


class _Files(BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}
    honour_ranges: ClassVar[bool] = True
    sent: ClassVar[int] = 0

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        header = self.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", header or "")
        if not self.honour_ranges or match is None:
            self._send(200, body, {})
            return
        first, last = match.groups()
        if first == "":
            start, end = max(0, len(body) - int(last)), len(body) - 1
        else:
            start, end = (
                int(first),
                min(int(last) if last else len(body) - 1, len(body) - 1),
            )
        self._send(
            206,
            body[start : end + 1],
            {"Content-Range": f"bytes {start}-{end}/{len(body)}"},
        )

    def _send(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        type(self).sent += len(payload)


@pytest.fixture()
def server() -> Iterator[tuple[str, type[_Files]]]:
    handler = type("Handler", (_Files,), {"files": {}, "honour_ranges": True, "sent": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _wheel(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
    return buffer.getvalue()


def _fixture(name: str) -> bytes:
    return (SOURCES / name).read_bytes()


# --- --version against a real local server --------------------------------------------------


def test_version_downloads_from_the_template_url(
    server: tuple[str, type[_Files]],
) -> None:
    base, handler = server
    handler.files["/v2.9.1/torch/utils/cpp_extension.py"] = _fixture("shape_2_9.py")
    env = {SOURCE_URL_ENV: base + "/v{version}/torch/utils/cpp_extension.py"}
    source = from_version("2.9.1", env=env, timeout=5)
    assert source.version == "2.9.1"
    limits = parse_torch_limits(source.text, version=source.version)
    assert str(limits.supported[4]) == "11.0"


def test_version_not_found_is_invalid_input(server: tuple[str, type[_Files]]) -> None:
    base, _ = server
    with pytest.raises(InvalidInputError, match="not found"):
        from_version("9.9.9", env={SOURCE_URL_ENV: base + "/v{version}.py"}, timeout=5)


def test_version_offline_is_one_network_line() -> None:
    env = {SOURCE_URL_ENV: f"http://127.0.0.1:{_dead_port()}/v{{version}}.py"}
    with pytest.raises(NetworkError) as caught:
        from_version("2.4.0", env=env, timeout=5)
    assert caught.value.exit_code == ExitCode.NETWORK
    assert "\n" not in caught.value.one_line()
    assert "unreachable" in caught.value.one_line()


@pytest.mark.parametrize("bad", ["2.4", "v2.4.0", "2.4.0/../x", "latest"])
def test_version_must_be_a_release_tag(bad: str) -> None:
    with pytest.raises(InvalidInputError, match="not a torch release tag") as caught:
        from_version(bad, env={})
    assert "X.Y.Z" in caught.value.one_line()


# --- wheels ---------------------------------------------------------------------------------


def test_local_wheel_reads_the_member(tmp_path: Path) -> None:
    path = tmp_path / "torch-2.0.1-cp311-none-macosx_11_0_arm64.whl"
    path.write_bytes(_wheel({"torch/__init__.py": b"", MEMBER: _fixture("shape_2_0.py")}))
    source = from_wheel(str(path))
    assert source.version == "2.0.1"
    assert parse_torch_limits(source.text).supported[-1] == Capability(9, 0, "a")


def test_wheel_without_the_member_is_a_bad_binary(tmp_path: Path) -> None:
    path = tmp_path / "numpy-2.0.0-py3-none-any.whl"
    path.write_bytes(_wheel({"numpy/__init__.py": b""}))
    with pytest.raises(BinaryFormatError, match=re.escape(MEMBER)):
        from_wheel(str(path))


def test_not_a_zip_is_a_bad_binary(tmp_path: Path) -> None:
    path = tmp_path / "torch-2.0.1-py3-none-any.whl"
    path.write_bytes(b"\x7fELF not a zip")
    with pytest.raises(BinaryFormatError, match="not a wheel"):
        from_wheel(str(path))


def test_remote_wheel_downloads_only_the_directory_and_the_member(
    server: tuple[str, type[_Files]],
) -> None:
    base, handler = server
    # 4 MiB of incompressible padding before the member: a full download would show.
    padding = os.urandom(4 << 20)
    blob = _wheel({"torch/lib/big.so": padding, MEMBER: _fixture("shape_2_11.py")})
    handler.files["/torch-2.11.0-cp311-none-macosx_11_0_arm64.whl"] = blob
    source = from_wheel(base + "/torch-2.11.0-cp311-none-macosx_11_0_arm64.whl", timeout=5)
    assert source.version == "2.11.0"
    assert "10.7a" in [str(c) for c in parse_torch_limits(source.text).supported]
    assert handler.sent < len(blob) // 4
    assert source.requests >= 2


def test_remote_wheel_on_a_server_without_ranges_is_refused(
    server: tuple[str, type[_Files]],
) -> None:
    base, handler = server
    handler.honour_ranges = False
    handler.files["/torch-2.0.1-py3-none-any.whl"] = _wheel({MEMBER: _fixture("shape_2_0.py")})
    with pytest.raises(NetworkError, match="byte ranges"):
        from_wheel(base + "/torch-2.0.1-py3-none-any.whl", timeout=5)


def test_remote_wheel_offline_is_a_network_error() -> None:
    url = f"http://127.0.0.1:{_dead_port()}/torch-2.0.1-py3-none-any.whl"
    with pytest.raises(NetworkError):
        from_wheel(url, timeout=5)


# --- files and installed trees --------------------------------------------------------------


def test_file_in_an_unpacked_tree_finds_its_release(tmp_path: Path) -> None:
    utils = tmp_path / "torch" / "utils"
    utils.mkdir(parents=True)
    (utils / "cpp_extension.py").write_bytes(_fixture("shape_1_13.py"))
    (tmp_path / "torch" / "version.py").write_text(
        "__version__ = '1.13.1+cu117'\ngit_version = 'x'\n", encoding="utf-8"
    )
    assert from_file(utils / "cpp_extension.py").version == "1.13.1"


def test_missing_file_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="no such file"):
        from_file(tmp_path / "nope.py")


def test_installed_is_found_without_importing(tmp_path: Path) -> None:
    """A fake torch on sys.path whose __init__ would fail if imported."""
    package = tmp_path / "site" / "torch"
    (package / "utils").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('imported!')\n", encoding="utf-8")
    (package / "utils" / "cpp_extension.py").write_bytes(_fixture("shape_2_0.py"))
    (package / "version.py").write_text("__version__ = '2.0.1'\n", encoding="utf-8")
    dist = tmp_path / "site" / "torch-2.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.0.1\n")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from capplan.adapters.torch_source import from_installed;"
        "s = from_installed(); print(s.version, 'torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "site")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.split() == ["2.0.1", "False"]


def test_installed_missing_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="no installed"):
        from_installed(distribution="capplan-no-such-distribution")


# --- the command, end to end ----------------------------------------------------------------


def _cli() -> click.Group:
    """The real `capplan` group (its error handling included)."""
    from capplan.cli.main import cli

    return cli


def test_cli_version_through_the_local_server(server: tuple[str, type[_Files]]) -> None:
    base, handler = server
    handler.files["/v2.0.1.py"] = _fixture("shape_2_0.py")
    result = CliRunner().invoke(
        _cli(),
        ["limits", "read", "torch", "--version", "2.0.1", "--json"],
        env={SOURCE_URL_ENV: base + "/v{version}.py"},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["supported"][-1] == "9.0a"


def test_cli_offline_exits_with_the_network_code() -> None:
    result = CliRunner().invoke(
        _cli(),
        ["limits", "read", "torch", "--version", "2.0.1", "--timeout", "5"],
        env={SOURCE_URL_ENV: f"http://127.0.0.1:{_dead_port()}/v{{version}}.py"},
    )
    assert result.exit_code == ExitCode.NETWORK
    assert "Traceback" not in result.output


def test_cli_wheel_without_member_exits_bad_binary(tmp_path: Path) -> None:
    path = tmp_path / "x-1.0-py3-none-any.whl"
    path.write_bytes(_wheel({"x/__init__.py": b""}))
    result = CliRunner().invoke(_cli(), ["limits", "read", "torch", "--wheel", str(path)])
    assert result.exit_code == ExitCode.BAD_BINARY


# --- the real torch 2.13.0 CPU wheel on this machine ----------------------------------------


@pytest.fixture(scope="session")
def torch_2_13_wheel() -> Path:
    found = sorted(CACHE.glob("torch-2.13.0*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "torch==2.13.0", "--no-deps"]
        try:
            subprocess.run(
                [*pip, "--only-binary=:all:", "-d", str(CACHE)],
                capture_output=True,
                check=True,
                timeout=600,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            pytest.skip(f"torch 2.13.0 wheel not obtainable with pip download: {exc}")
        found = sorted(CACHE.glob("torch-2.13.0*.whl"))
    if not found:
        pytest.skip(f"pip download left no torch 2.13.0 wheel in {CACHE}")
    return found[0]


def test_real_torch_2_13_wheel(torch_2_13_wheel: Path) -> None:
    source = from_wheel(str(torch_2_13_wheel))
    assert source.version == "2.13.0"
    limits = parse_torch_limits(source.text, version=source.version)
    caps = [str(c) for c in limits.supported]
    # Facts about the real 2.13 file: Thor under its CUDA 13 number, a-suffixes, no f-suffix.
    assert {"8.6", "9.0a", "10.0", "11.0", "12.1a"} <= set(caps)
    assert "10.1" not in caps and not any(c.endswith("f") for c in caps)
    assert limits.ptx_suffix is True
    assert "13.0" in limits.cuda_versions
    assert limits.named["Blackwell+Tegra"] == ("11.0",)


def test_kb_entry_for_2_13_matches_the_real_wheel(torch_2_13_wheel: Path) -> None:
    source = from_wheel(str(torch_2_13_wheel))
    limits = parse_torch_limits(source.text, version=source.version)
    releases = json.loads(KB_FILE.read_text(encoding="utf-8"))["releases"]
    [entry] = [r for r in releases if r["version"].startswith("2.13.")]
    assert entry["supported"] == [str(c) for c in limits.supported]
    assert entry["named"] == {k: list(v) for k, v in limits.named.items()}
    assert entry["ptx_suffix"] == limits.ptx_suffix


def test_cli_update_kb_from_the_real_wheel_changes_only_provenance(
    torch_2_13_wheel: Path, tmp_path: Path
) -> None:
    kb = tmp_path / "torch.json"
    shutil.copyfile(KB_FILE, kb)
    result = CliRunner().invoke(
        _cli(),
        [
            "limits",
            "read",
            "torch",
            "--wheel",
            str(torch_2_13_wheel),
            "--json",
            "--update-kb",
            "--kb",
            str(kb),
        ],
    )
    assert result.exit_code == 0, result.output
    # Only the provenance line may change (a CPU wheel instead of the macOS one).
    changed = [
        line
        for line in result.output.splitlines()
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    assert all('"source"' in line or '"version"' in line for line in changed), changed


# --- real wheels on PyPI, read with Range requests ------------------------------------------


def _pypi_macos_wheel(version: str) -> tuple[str, int]:
    try:
        index = requests.get("https://pypi.org/pypi/torch/json", timeout=20)
        index.raise_for_status()
    except requests.RequestException as exc:
        pytest.skip(f"PyPI unreachable: {exc}")
    files = [
        f
        for f in index.json()["releases"].get(version, [])
        if "macosx" in f["filename"] and "arm64" in f["filename"]
    ]
    if not files:
        pytest.skip(f"no macOS arm64 wheel of torch {version} on PyPI")
    smallest = min(files, key=lambda f: f["size"])
    return urljoin("https://pypi.org/pypi/torch/json", smallest["url"]), smallest["size"]


@pytest.mark.network
@pytest.mark.parametrize(
    ("version", "present", "absent"),
    [("2.4.1", "9.0a", "10.0"), ("2.8.0", "10.1a", "11.0")],
)
def test_pypi_wheels_through_range_requests(version: str, present: str, absent: str) -> None:
    url, size = _pypi_macos_wheel(version)
    try:
        source = from_wheel(url, timeout=60)
    except NetworkError as exc:
        pytest.skip(f"PyPI file host unreachable: {exc.one_line()}")
    assert source.version == version
    caps = [str(c) for c in parse_torch_limits(source.text, version=version).supported]
    assert present in caps and absent not in caps
    assert source.bytes_read < size // 10  # only the directory and one member travelled
