"""``capplan detect`` and the dispatch selector read sysfs with one rule (issue 31).

The kernel writes a PCI function's ``vendor`` and ``device`` as ``0x%04x`` and its ``class`` as
``0x%06x`` (drivers/pci/pci-sysfs.c). Both readers must accept exactly that and skip anything
else, so what ``capplan detect`` says a machine has is what every ``<package>-dispatch`` wrapper
starts for. The end-to-end paths are compared here (``detect_gpus`` against ``selector.choose``),
on a hand-written list of spoiled trees and on generated ones; and neither may hang on a FIFO
under the sysfs root (the selector's blocking ``open()`` did).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capplan.adapters.detect.nvidia import detect_gpus
from capplan.adapters.kb import load_kb
from capplan.errors import NoGpuError
from capplan.runtime import selector

KB = load_kb()
SELECTOR = Path(selector.__file__)
# GA102 RTX 3090 (8.6) and GH100 H100 (9.0), as kb/pci.json maps them.
TABLE: dict[str, Any] = {
    "version": 1,
    "package": "torch",
    "fallback": "error",
    "variants": [
        {"name": "torch-sm86", "sass": ["8.6"], "ptx": [], "path": ""},
        {"name": "torch-sm90", "sass": ["9.0"], "ptx": [], "path": ""},
    ],
    "pci": {"2204": "8.6", "2330": "9.0"},
    "jetson": [],
}
GOOD = {"vendor": b"0x10de\n", "device": b"0x2204\n", "class": b"0x030000\n"}


def _write(root: Path, bus: str, files: dict[str, bytes | None]) -> Path:
    node = root / "bus" / "pci" / "devices" / bus
    node.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        if value is None:
            os.mkfifo(node / name)
        else:
            (node / name).write_bytes(value)
    return node


def _detect_caps(tmp_path: Path, root: Path) -> list[str]:
    env = {"PATH": str(tmp_path / "empty-bin"), "CAPPLAN_SYSFS_ROOT": str(root)}
    try:
        gpus = detect_gpus(env=env, proc_root=tmp_path / "no-proc", kb=KB)
    except NoGpuError:
        return []
    return [str(g.capability) for g in gpus]


def _selector_caps(root: Path) -> list[str]:
    env = {
        "CAPPLAN_NVML": "0",
        "CAPPLAN_NVIDIA_SMI": "/nonexistent/nvidia-smi",
        "CAPPLAN_SYSFS_ROOT": str(root),
    }
    chosen = selector.choose(TABLE, env)
    return [selector.fmt(c) for c in chosen.gpus]


# The 16 spoiled trees of the issue's report: one file of an RTX 3090's function changed.
SPOILED = [
    ("vendor", b"10de\n"),  # no 0x
    ("vendor", b"0x0x10de\n"),
    ("vendor", b"0x000010de\n"),  # over-long
    ("vendor", b"0X10DE\n"),  # upper case: still the kernel's number
    ("vendor", b"0x10dezz\n"),  # trailing garbage
    ("vendor", b"0x10de 0x10de\n"),
    ("device", b"2204\n"),
    ("device", b"0x02204\n"),
    ("device", b"0x2204\x00\n"),
    ("device", b"0x22\n"),
    ("class", b"0x0300\n"),  # 4-digit class
    ("class", b"0x03000000\n"),
    ("class", b"0x030000garbage\n"),
    ("class", b"030000\n"),
    ("class", b" 0x030000 \n"),  # blanks around: the value is still the kernel's
    ("class", b"0x030000"),  # no newline
]
ACCEPTED = {b"0X10DE\n", b" 0x030000 \n", b"0x030000"}


@pytest.mark.parametrize(("name", "value"), SPOILED)
def test_detect_and_selector_agree_on_spoiled_sysfs(
    tmp_path: Path, name: str, value: bytes
) -> None:
    root = tmp_path / "sys"
    _write(root, "0000:01:00.0", {**GOOD, name: value})
    want = ["8.6"] if value in ACCEPTED else []
    assert _detect_caps(tmp_path, root) == want
    assert _selector_caps(root) == want


def test_a_spoiled_function_is_named_by_both(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _write(root, "0000:01:00.0", {**GOOD, "class": b"0x0300\n"})
    _write(root, "0000:02:00.0", {**GOOD, "device": b"0x2330\n"})
    assert _detect_caps(tmp_path, root) == ["9.0"]
    chosen = selector.choose(TABLE, {"CAPPLAN_NVML": "0", "CAPPLAN_SYSFS_ROOT": str(root)})
    assert [selector.fmt(c) for c in chosen.gpus] == ["9.0"]
    assert any("0000:01:00.0: class: not hex ('0x0300'" in n for n in chosen.notes), chosen.notes


@pytest.mark.parametrize("name", ["vendor", "device", "class"])
def test_a_fifo_under_sysfs_hangs_no_dispatch_wrapper(tmp_path: Path, name: str) -> None:
    """The wrappers run ``selector.py TABLE PROGRAM``: with a FIFO (no writer) among a GPU's
    files the selector must answer at once (exit 10 here: no GPU), not block in open()."""
    root = tmp_path / "sys"
    _write(root, "0000:01:00.0", {**GOOD, name: None})
    table = tmp_path / "table.json"
    table.write_text(
        '{"version": 1, "package": "torch", "fallback": "error", "variants": [], "pci": {}}'
    )
    env = {
        "CAPPLAN_NVML": "0",
        "CAPPLAN_NVIDIA_SMI": "/nonexistent",
        "CAPPLAN_SYSFS_ROOT": str(root),
    }
    try:
        done = subprocess.run(
            [sys.executable, str(SELECTOR), str(table), "python3"],
            env={**env, "PATH": os.environ.get("PATH", "/usr/bin")},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the selector hung on a FIFO {name} under the sysfs root")
    assert done.returncode == selector.EXIT_NO_GPU, done.stderr
    # and with debugging on, the note says what the file is
    chosen = selector.choose(TABLE, env)
    assert any("FIFO" in note for note in chosen.notes), chosen.notes


def test_an_oversized_attribute_is_refused_unread(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _write(root, "0000:01:00.0", {**GOOD, "device": b"0x2204" + b" " * (1 << 20)})
    chosen = selector.choose(TABLE, {"CAPPLAN_NVML": "0", "CAPPLAN_SYSFS_ROOT": str(root)})
    assert chosen.gpus == []
    assert any("larger than 4096 bytes" in note for note in chosen.notes), chosen.notes


def test_a_wedged_attribute_is_given_up_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver stuck in its read handler blocks read() on a regular sysfs file, which no
    non-blocking open helps with: the scan is given up after its deadline, the PCI source is
    unusable with one note, and detect and the selector still answer (here: no GPU)."""
    import threading
    import time

    root = tmp_path / "sys"
    _write(root, "0000:01:00.0", GOOD)
    release = threading.Event()
    real = selector.pci_attribute

    def wedged(folder: str, name: str) -> int:
        if name == "device":
            release.wait(30)  # as long as the kernel would keep the reader
        return real(folder, name)

    monkeypatch.setattr(selector, "pci_attribute", wedged)
    try:
        started = time.monotonic()
        found, problems = selector.read_pci_gpus(str(root), timeout=0.2)
        assert time.monotonic() - started < 10  # given up, not waited for (30 s)
        assert found == []
        assert problems == [
            f"{root}/bus/pci/devices: no answer within 0.2 s (a sysfs file that never returns)"
        ]
        monkeypatch.setattr(selector, "SYSFS_TIMEOUT", 0.2)
        monkeypatch.setattr(selector.read_pci_gpus, "__defaults__", (0.2,))
        chosen = selector.choose(TABLE, {"CAPPLAN_NVML": "0", "CAPPLAN_SYSFS_ROOT": str(root)})
        assert chosen.gpus == []
        assert any("no answer within 0.2 s" in note for note in chosen.notes), chosen.notes
        assert _detect_caps(tmp_path, root) == []
    finally:
        release.set()
    # Released, the same tree reads as ever: the deadline changes nothing for a healthy sysfs.
    assert selector.read_pci_gpus(str(root)) == ([("0000:01:00.0", 0x2204)], [])


def test_a_scan_that_fails_raises_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(base: str) -> Any:
        raise RuntimeError("a bug in the scan")

    monkeypatch.setattr(selector, "_scan_pci", broken)
    with pytest.raises(RuntimeError, match="a bug in the scan"):
        selector.read_pci_gpus("/nonexistent")


# -- generated spoiled trees ---------------------------------------------------------------------
def _spoil(good: bytes) -> st.SearchStrategy[bytes | None]:
    text = good.strip()
    return st.one_of(
        st.just(good),
        st.just(None),  # a FIFO
        st.binary(max_size=12),
        st.sampled_from([text[2:], b"0x" + text, text + b"0", b"0x0" + text[2:], text.upper()]),
        st.builds(lambda tail: text + tail, st.binary(min_size=1, max_size=4)),
        st.builds(lambda n: b"0x" + b"0" * n + text[2:], st.integers(0, 3)),
    )


_FUNCTION = st.fixed_dictionaries(
    {
        "vendor": st.one_of(_spoil(b"0x10de\n"), st.just(b"0x8086\n")),
        "device": st.one_of(_spoil(b"0x2204\n"), _spoil(b"0x2330\n")),
        "class": st.one_of(_spoil(b"0x030000\n"), _spoil(b"0x030200\n"), st.just(b"0x040300\n")),
    }
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(functions=st.lists(_FUNCTION, min_size=1, max_size=3))
def test_generated_sysfs_trees_detect_and_selector_agree(
    tmp_path_factory: pytest.TempPathFactory, functions: list[dict[str, bytes | None]]
) -> None:
    tmp_path = tmp_path_factory.mktemp("sysfs")
    root = tmp_path / "sys"
    for index, files in enumerate(functions):
        _write(root, f"0000:{index + 1:02x}:00.0", files)
    assert _detect_caps(tmp_path, root) == _selector_caps(root)
