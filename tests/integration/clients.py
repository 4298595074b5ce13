"""The real clients `capplan export` writes for (issue 39): stand-in wheels that carry our
``variant.json`` on a PEP 503 index served by a real HTTP server on 127.0.0.1, and uv asked to
install from it. Shared by tests/integration/test_export_clients.py."""

from __future__ import annotations

import base64
import hashlib
import html
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DIST = "capplan_standin"  # the stand-in distribution's name: never one on PyPI's real index


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def stand_in_wheel(folder: Path, version: str, label: str, variant_json: bytes) -> str:
    """A minimal valid wheel (binary distribution format: METADATA, WHEEL, RECORD) whose
    ``.dist-info/variant.json`` is the exported file byte for byte, and whose module says its
    label; the wheel is named ``{DIST}-{version}-py3-none-any-{label}.whl`` (PEP 825)."""
    dist_info = f"{DIST}-{version}.dist-info"
    files = {
        f"{DIST}/__init__.py": f"LABEL = {label!r}\n".encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {version}\n".encode()
        ),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: capplan-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
        f"{dist_info}/variant.json": variant_json,
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    name = f"{DIST}-{version}-py3-none-any-{label}.whl"
    with zipfile.ZipFile(folder / name, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return name


def build_index(export_dir: Path, root: Path, index_name: str, version: str) -> list[str]:
    """A PEP 503 simple index under ``root``: one stand-in wheel per exported ``variant.json``
    and the exported index file renamed for the stand-in distribution. Returns the labels."""
    project = root / "simple" / DIST.replace("_", "-")
    project.mkdir(parents=True)
    links = []
    labels = []
    for path in sorted((export_dir / "variants").glob("*/variant.json")):
        labels.append(path.parent.name)
        links.append(stand_in_wheel(project, version, path.parent.name, path.read_bytes()))
    variants = f"{DIST}-{version}-variants.json"
    (project / variants).write_bytes((export_dir / index_name).read_bytes())
    links.append(variants)
    anchors = "".join(f'<a href="{html.escape(n)}">{html.escape(n)}</a>\n' for n in links)
    (project / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{anchors}</body></html>\n")
    (root / "simple" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="{DIST.replace("_", "-")}/">{DIST}</a></body></html>\n'
    )
    return labels


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def served(root: Path) -> Iterator[str]:
    """``root`` served over HTTP on 127.0.0.1 (a free port) while the block runs: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def uv_bin() -> str:
    uv = pytest.importorskip("uv", reason="uv (dev extra) is not installed")
    return str(uv.find_uv_bin())


def uv_install(
    uv: str, url: str, target: Path, cache: Path, env: dict[str, str] | None = None
) -> str:
    """``uv pip install`` of the stand-in from ``url`` alone (no other index, no uv.toml, so it
    never reaches the internet), into ``target``: the label of the wheel it chose."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "NV_VARIANT_"))}
    command = [
        uv,
        "pip",
        "install",
        "--no-config",
        "--preview-features",
        "wheel-variants",
        "--python",
        sys.executable,
        "--target",
        str(target),
        "--index-url",
        url,
        "--cache-dir",
        str(cache),
        "--reinstall",
        "--quiet",
        DIST,
    ]
    proc = subprocess.run(
        command,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    text = (target / DIST / "__init__.py").read_text()
    return text.split("'")[1]
