#!/usr/bin/env python3
"""Regenerate ``capplan/kb/torch.json`` from the real torch releases on PyPI.

For every minor release from 1.13 to 2.14 (the newest patch of each):

- ``supported``, ``named``, ``ptx_suffix``: read by capplan's own reader from
  ``torch/utils/cpp_extension.py`` inside the release's smallest macOS arm64 wheel on PyPI
  (the file is the same in every wheel of a release; the macOS one is the smallest). Only the
  zip's central directory and that member are downloaded (HTTP Range requests).
- ``cuda``: the CUDA versions torch published wheels for. The wheel index
  (download.pytorch.org) is not reachable from every machine, so the list is the union of
  (a) the CUDA version of the PyPI Linux x86_64 wheel, read from its METADATA pins
  (``nvidia-cuda-runtime-cuXX==A.B.*`` or ``cuda-toolkit[...]==A.B.*``), always verified here,
  and (b) the wheel-index builds listed in ``_WHEEL_INDEX`` below with their citation. Each
  entry's ``source`` says which parts were verified and how.

Run: ``python planner/scripts/refresh_torch_kb.py [--check]`` (network: pypi.org only).
``--check`` exits 11 when the committed file differs from what PyPI gives now.
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests
from packaging.version import Version

from capplan.adapters.torch_source import HttpRangeFile, from_wheel
from capplan.core.families.cuda.torch_limits import parse_torch_limits

PYPI_JSON = "https://pypi.org/pypi/torch/json"
KB_FILE = Path(__file__).resolve().parents[1] / "src" / "capplan" / "kb" / "torch.json"
FIRST, LAST = Version("1.13"), Version("2.14")

# Wheel-index CUDA builds per minor release, where a public source lists them.
_RELEASE_MATRIX = (
    "pytorch/pytorch RELEASE.md 'Release Compatibility Matrix', CUDA column, matching the "
    "pytorch.org previous-versions install commands"
)
_WHEEL_INDEX: dict[str, tuple[tuple[str, ...], str]] = {
    "1.13": (("11.6", "11.7"), _RELEASE_MATRIX),
    "2.0": (("11.7", "11.8"), _RELEASE_MATRIX),
    "2.1": (("11.8", "12.1"), _RELEASE_MATRIX),
    "2.2": (("11.8", "12.1"), _RELEASE_MATRIX),
    "2.3": (("11.8", "12.1"), _RELEASE_MATRIX),
    "2.4": (("11.8", "12.1", "12.4"), _RELEASE_MATRIX),
    "2.5": (("11.8", "12.1", "12.4"), _RELEASE_MATRIX),
    "2.6": (("11.8", "12.4", "12.6"), _RELEASE_MATRIX),
    "2.7": (
        ("11.8", "12.6", "12.8"),
        "pytorch/pytorch .github/scripts/generate_binary_build_matrix.py CUDA_ARCHES "
        "(2.7 cycle, CUDA_STABLE 12.6)",
    ),
    "2.9": (("12.8", "13.0"), "PyTorch 2.9 release install commands (cu128, cu130 indexes)"),
}

_CUDA_PIN = re.compile(
    r"^Requires-Dist: (?:nvidia-cuda-runtime-cu\d+|cuda-toolkit\[[^\]]*\])\s*\(?==\s*"
    r"(?P<major>\d+)\.(?P<minor>\d+)"
)


def _minor(version: str) -> str:
    v = Version(version)
    return f"{v.major}.{v.minor}"


def _releases(index: dict[str, Any]) -> dict[str, str]:
    """Newest final patch per minor in range, with files."""
    newest: dict[str, Version] = {}
    for text, files in index["releases"].items():
        v = Version(text)
        if v.is_prerelease or v.is_devrelease or not files:
            continue
        if not FIRST <= Version(f"{v.major}.{v.minor}") <= LAST:
            continue
        key = f"{v.major}.{v.minor}"
        if key not in newest or v > newest[key]:
            newest[key] = v
    return {k: str(v) for k, v in sorted(newest.items(), key=lambda kv: Version(kv[0]))}


def _smallest(files: list[dict[str, Any]], *needles: str) -> dict[str, Any]:
    chosen = [f for f in files if all(n in f["filename"] for n in needles)]
    if not chosen:
        raise SystemExit(f"no wheel matching {needles} in {[f['filename'] for f in files]}")
    return min(chosen, key=lambda f: (f["size"], f["filename"]))


def _pypi_cuda(url: str, session: requests.Session) -> str:
    with HttpRangeFile(url, session=session) as raw:
        wheel = zipfile.ZipFile(io.BufferedReader(raw, buffer_size=256 * 1024))
        metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        for line in wheel.read(metadata).decode("utf-8").splitlines():
            match = _CUDA_PIN.match(line)
            if match:
                return f"{match['major']}.{match['minor']}"
    raise SystemExit(f"{url}: no CUDA runtime pin in METADATA")


def build(session: requests.Session) -> dict[str, Any]:
    index = session.get(PYPI_JSON, timeout=60).json()
    out: list[dict[str, Any]] = []
    for minor, version in _releases(index).items():
        files = index["releases"][version]
        mac = _smallest(files, "macosx", "arm64")
        linux = _smallest(files, "manylinux", "x86_64")
        source = from_wheel(urljoin(PYPI_JSON, mac["url"]), session=session)
        limits = parse_torch_limits(source.text, version=version)
        pypi_cuda = _pypi_cuda(urljoin(PYPI_JSON, linux["url"]), session)
        listed, citation = _WHEEL_INDEX.get(minor, ((), ""))
        cuda = sorted({pypi_cuda, *listed}, key=lambda c: tuple(int(x) for x in c.split(".")))
        cuda_note = f"CUDA {pypi_cuda} verified from the PyPI wheel {linux['filename']} METADATA"
        if listed:
            cuda_note += f"; wheel-index builds {', '.join(listed)} per {citation}"
        else:
            cuda_note += (
                "; other wheel-index builds not verified (download.pytorch.org unreachable)"
            )
        out.append(
            limits.kb_entry(
                version,
                cuda,
                f"pytorch/pytorch v{version} torch/utils/cpp_extension.py read by "
                f"capplan from PyPI {mac['filename']}; {cuda_note}",
            )
        )
        print(f"{version}: {len(limits.supported)} arches, cuda {cuda}", file=sys.stderr)
    return {
        "source": "Generated by planner/scripts/refresh_torch_kb.py from the torch releases on "
        "PyPI (cpp_extension.py parsed with capplan.core.families.cuda.torch_limits); "
        "capabilities keep the file's order; `capplan limits read torch --update-kb` refreshes "
        "one entry.",
        "releases": out,
    }


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 11 if stale")
    args = parser.parse_args()
    with requests.Session() as session:
        text = render(build(session))
    old = KB_FILE.read_text(encoding="utf-8") if KB_FILE.exists() else ""
    if args.check:
        diff = list(difflib.unified_diff(old.splitlines(True), text.splitlines(True)))
        sys.stdout.writelines(diff)
        return 11 if diff else 0
    from capplan.adapters.files import atomic_write_text

    atomic_write_text(KB_FILE, text)
    print(f"wrote {KB_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
