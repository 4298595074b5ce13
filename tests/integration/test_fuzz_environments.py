"""Generated damaged environments and wheels through ``capplan doctor`` (issue 31's in-suite fuzz).

Each example is an environment folder (or a wheel holding the same members) of library-named
files cut from a real library, overwritten in its headers, empty, random bytes or a GNU ld
script, beside a shell script. Whatever is generated, doctor answers: no traceback, exit 0 or 16,
JSON that parses; every library-named file whose headers the loader refuses is listed as
unloadable (and only those), and exit 16 exactly when one is (none holds GPU code). The header
rule itself is checked against the real loader in test_doctor_loader.py; here the whole command
around it is.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.adapters.environment import loader_problem
from capplan.errors import ExitCode

ZLIB = Path("/lib/x86_64-linux-gnu/libz.so.1")
LD_SCRIPT = b"/* GNU ld script */\nGROUP ( /lib/libc.so.6 )\n"


def _whole() -> bytes:
    if not ZLIB.is_file():
        pytest.skip(f"{ZLIB} not on this machine")
    return ZLIB.read_bytes()


@st.composite
def _member(draw: st.DrawFn, whole: bytes) -> bytes:
    kind = draw(st.sampled_from(["whole", "cut", "header", "empty", "random", "script"]))
    if kind == "whole":
        return whole
    if kind == "cut":
        return whole[: draw(st.integers(0, len(whole) - 1))]
    if kind == "header":
        at = draw(st.integers(0, 0x100))
        junk = draw(st.binary(min_size=1, max_size=12))
        return whole[:at] + junk + whole[at + len(junk) :]
    if kind == "empty":
        return b""
    if kind == "random":
        return draw(st.binary(max_size=256))
    return LD_SCRIPT


_NAMES = st.lists(
    st.sampled_from(["liba.so", "libb.so.1", "libc.so", "sub/libd.so.2.0", "libe.so"]),
    min_size=1,
    max_size=4,
    unique=True,
)


def _expected(files: dict[str, bytes], folder: Path) -> set[str]:
    bad = set()
    for name, data in files.items():
        fd = os.open(folder / name, os.O_RDONLY)
        try:
            if data != LD_SCRIPT and loader_problem(fd, len(data)) is not None:
                bad.add(name)
        finally:
            os.close(fd)
    return bad


def _check(result: Any, wanted: set[str], shown: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    if result.exit_code == int(ExitCode.NOTHING_TO_DO):  # no GPU code, nothing damaged
        assert not wanted and "holds no GPU code" in result.stderr, result.stderr
        return
    assert result.exit_code in (0, int(ExitCode.WONT_RUN)), result.stderr
    data = json.loads(result.stdout)
    listed = {entry["path"].split(shown, 1)[1] for entry in data["unloadable"]}
    assert listed == wanted
    assert (result.exit_code == int(ExitCode.WONT_RUN)) == bool(wanted)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_generated_environments(
    capplan_in: Any, tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    whole = _whole()
    names = data.draw(_NAMES, label="names")
    files = {name: data.draw(_member(whole), label=name) for name in names}
    site = tmp_path_factory.mktemp("env") / "site-packages"
    for name, content in files.items():
        (site / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (site / "pkg" / name).write_bytes(content)
    script = site / "pkg" / "tool"
    script.write_text("#!/bin/sh\n# a helper script, long enough to be looked at by doctor\n")
    script.chmod(0o755)
    result = capplan_in(
        "doctor", str(site), "--device", "A100", "--driver", "580.65.06", "-j", "1", "--json"
    )
    _check(result, _expected(files, site / "pkg"), f"{site}/pkg/")


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_generated_wheels(
    capplan_in: Any, tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    whole = _whole()
    names = data.draw(_NAMES, label="names")
    files = {name: data.draw(_member(whole), label=name) for name in names}
    folder = tmp_path_factory.mktemp("wheel")
    wheel = folder / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(f"pkg/{name}", content)
        archive.writestr("pkg-1.0.dist-info/METADATA", "Name: pkg\nVersion: 1.0\n")
    unpacked = folder / "unpacked"
    for name, content in files.items():
        (unpacked / name).parent.mkdir(parents=True, exist_ok=True)
        (unpacked / name).write_bytes(content)
    result = capplan_in(
        "doctor", str(wheel), "--device", "A100", "--driver", "580.65.06", "-j", "1", "--json"
    )
    _check(result, _expected(files, unpacked), f"{wheel}!pkg/")
