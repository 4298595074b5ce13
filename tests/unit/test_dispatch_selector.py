"""The dispatch selector (capplan/runtime/selector.py): sources, serving rules, fallbacks.

The selector is standalone (standard library only) and runs at every start of a dispatch
package, so every source is fed garbage here too: it must fall through to the next source and
finally to the documented fallback, never raise.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capplan.core.families.base import RunLevel
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.compat import how_runs
from capplan.runtime import selector

SELECTOR = Path(selector.__file__)

# PCI ids from the PCI ID repository: GA102 RTX 3090, GA100 A100 SXM4 40GB, AD104 L4, GH100 H100.
PCI = {"2204": "8.6", "20b0": "8.0", "27b8": "8.9", "2330": "9.0"}
NO_SOURCES = {"CAPPLAN_NVML": "0", "CAPPLAN_NVIDIA_SMI": "/nonexistent/nvidia-smi"}


def _table(*variants: tuple[str, list[str], list[str]], fallback: str = "error") -> dict[str, Any]:
    return {
        "version": 1,
        "package": "torch",
        "fallback": fallback,
        "variants": [{"name": n, "sass": s, "ptx": p, "path": ""} for n, s, p in variants],
        "pci": PCI,
        "jetson": ["7.2", "8.7", "10.1", "11.0"],
    }


SM80_SM86 = _table(("torch-sm80", ["8.0"], []), ("torch-sm86", ["8.6"], []))


def _gpu_dir(root: Path, bdf: str, vendor: str, device: str, klass: str) -> None:
    folder = root / "bus" / "pci" / "devices" / bdf
    folder.mkdir(parents=True)
    (folder / "vendor").write_text(vendor + "\n")
    (folder / "device").write_text(device + "\n")
    (folder / "class").write_text(klass + "\n")


def _env(root: Path, **extra: str) -> dict[str, str]:
    return {**NO_SOURCES, "CAPPLAN_SYSFS_ROOT": str(root), **extra}


def _choose(table: dict[str, Any], env: dict[str, str]) -> selector.Selection:
    return selector.choose(table, env)


# -- capabilities and rules -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "want"),
    [("8.6", (8, 6, "")), ("86", (8, 6, "")), ("sm_90a", (9, 0, "a")), ("12.0f", (12, 0, "f"))],
)
def test_parse_capability(text: str, want: tuple[int, int, str]) -> None:
    assert selector.parse_capability(text) == want


@pytest.mark.parametrize("text", ["", "garbage", "8", "8.6.1", "0.5", "sm_8x", "8.6b", "\x00"])
def test_parse_capability_rejects(text: str) -> None:
    assert selector.parse_capability(text) is None


_CAPS = st.builds(
    Capability,
    st.sampled_from([5, 6, 7, 8, 9, 10, 11, 12]),
    st.integers(0, 9),
    st.sampled_from(["", "a", "f"]),
)


@settings(max_examples=400, deadline=None)
@given(
    device=_CAPS.map(lambda c: c.base),
    sass=st.lists(_CAPS, max_size=3),
    ptx=st.lists(_CAPS, max_size=2),
    jetson=st.booleans(),
)
def test_rules_are_capplans_rules(
    device: Capability, sass: list[Capability], ptx: list[Capability], jetson: bool
) -> None:
    """The selector's copy of the serving rules answers as core/families/cuda/compat.py does, for any build."""
    variant = {"name": "v", "sass": [c.text for c in sass], "ptx": [c.text for c in ptx]}
    dev = (device.major, device.minor, "")
    got = selector.rank(variant, dev, jetson)
    want = how_runs(device, sass, ptx, jetson=jetson).level
    levels = {0: RunLevel.NATIVE, 1: RunLevel.COMPATIBLE, 2: RunLevel.PTX_JIT}
    assert (levels[got] if got is not None else RunLevel.CANNOT_RUN) is want


# -- selection ------------------------------------------------------------------------------------
def test_exact_variant_wins() -> None:
    chosen = _choose(SM80_SM86, {"CAPPLAN_CAPABILITY": "8.6"})
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm86"
    assert chosen.level == "native"


def test_l4_takes_the_compatible_sm86() -> None:
    chosen = _choose(SM80_SM86, {"CAPPLAN_CAPABILITY": "8.9"})
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm86"
    assert chosen.level == "compatible"


def test_single_variant_before_fat_build() -> None:
    table = _table(("torch-fat", ["8.0", "8.6", "9.0"], ["9.0"]), ("torch-sm86", ["8.6"], []))
    chosen = _choose(table, {"CAPPLAN_CAPABILITY": "8.6"})
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm86"


def test_ptx_is_the_last_resort() -> None:
    table = _table(("torch-sm80", ["8.0"], ["8.0"]), ("torch-sm75", ["7.5"], []))
    chosen = _choose(table, {"CAPPLAN_CAPABILITY": "9.0"})
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm80"
    assert chosen.level == "ptx-jit"


def test_jetson_gets_no_minor_compatibility() -> None:
    chosen = _choose(SM80_SM86, {"CAPPLAN_CAPABILITY": "8.7"})
    assert chosen.variant is None and chosen.exit_code == selector.EXIT_NO_VARIANT


def test_several_gpus_share_one_variant() -> None:
    chosen = _choose(SM80_SM86, {"CAPPLAN_CAPABILITY": "8.9,8.0"})
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm80"
    assert "every visible GPU" in chosen.reason


def test_several_gpus_without_a_common_variant_use_the_first_with_a_note() -> None:
    table = _table(("torch-sm61", ["6.1"], []), ("torch-sm120", ["12.0"], []))
    chosen = _choose(table, {"CAPPLAN_CAPABILITY": "12.0,6.1"})
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm120"
    assert any("no variant in common" in note for note in chosen.notes)


@pytest.mark.parametrize(
    ("fallback", "variant", "code"),
    [("error", None, selector.EXIT_NO_GPU), ("torch-sm80", "torch-sm80", 0)],
)
def test_no_gpu_follows_the_fallback(
    tmp_path: Path, fallback: str, variant: str | None, code: int
) -> None:
    table = {**SM80_SM86, "fallback": fallback}
    chosen = _choose(table, _env(tmp_path))
    assert (chosen.variant["name"] if chosen.variant else None) == variant
    assert chosen.exit_code == code
    if code:
        assert "no NVIDIA GPU found" in chosen.error and "CAPPLAN_CAPABILITY" in chosen.error


def test_unserved_gpu_follows_the_fallback() -> None:
    table = {**SM80_SM86, "fallback": "torch-sm86"}
    chosen = _choose(table, {"CAPPLAN_CAPABILITY": "7.5"})
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm86"
    assert chosen.level == "fallback"


@pytest.mark.parametrize("value", ["garbage", "", " ", "8.6,x", "9" * 500, "8.6;rm -rf /"])
def test_bad_capplan_capability_is_one_line_exit_4(value: str) -> None:
    chosen = _choose(SM80_SM86, {"CAPPLAN_CAPABILITY": value})
    assert chosen.exit_code == selector.EXIT_INVALID
    assert "CAPPLAN_CAPABILITY" in chosen.error and "\n" not in chosen.error
    assert len(chosen.error) < 240


@pytest.mark.parametrize(
    "table",
    [{}, {"variants": "nope"}, {"variants": [1, None, {"name": "x"}]}, {"pci": [], "jetson": 3}],
)
def test_garbage_tables_never_raise(table: dict[str, Any]) -> None:
    chosen = _choose(table, {"CAPPLAN_CAPABILITY": "8.6"})
    assert chosen.exit_code == selector.EXIT_NO_VARIANT


# -- sysfs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("device", "want"), [("0x2204", "torch-sm86"), ("0x20b0", "torch-sm80")])
def test_sysfs_one_gpu(tmp_path: Path, device: str, want: str) -> None:
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", device, "0x030000")
    chosen = _choose(SM80_SM86, _env(tmp_path))
    assert chosen.source == "sysfs"
    assert chosen.variant is not None and chosen.variant["name"] == want


def test_sysfs_ignores_other_vendors_and_audio_functions(tmp_path: Path) -> None:
    _gpu_dir(tmp_path, "0000:00:02.0", "0x8086", "0x46a6", "0x030000")  # Intel iGPU
    _gpu_dir(tmp_path, "0000:01:00.1", "0x10de", "0x1aef", "0x040300")  # NVIDIA HDMI audio
    chosen = _choose(SM80_SM86, _env(tmp_path))
    assert chosen.gpus == [] and chosen.exit_code == selector.EXIT_NO_GPU


def test_sysfs_3d_controller_and_bus_order(tmp_path: Path) -> None:
    _gpu_dir(tmp_path, "0000:81:00.0", "0x10de", "0x2204", "0x030000")
    _gpu_dir(tmp_path, "0000:06:00.0", "0x10de", "0x2330", "0x030200")  # as seen on a real H100
    chosen = _choose(SM80_SM86, _env(tmp_path))
    assert chosen.gpus == [(9, 0, ""), (8, 6, "")]


@pytest.mark.parametrize("content", ["", "not hex", "\xff\xfe", "0x10de0x10de" * 20])
def test_sysfs_garbage_files(tmp_path: Path, content: str) -> None:
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", "0x2204", "0x030000")
    (tmp_path / "bus/pci/devices/0000:01:00.0/device").write_text(content, errors="replace")
    chosen = _choose(SM80_SM86, _env(tmp_path))
    assert chosen.exit_code == selector.EXIT_NO_GPU
    assert chosen.variant is None


def test_sysfs_unreadable_entry_is_skipped(tmp_path: Path) -> None:
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", "0x2204", "0x030000")
    broken = tmp_path / "bus/pci/devices/0000:00:01.0"
    broken.mkdir()
    (broken / "vendor").mkdir()  # reading a directory fails with an OSError
    chosen = _choose(SM80_SM86, _env(tmp_path))
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm86"


def test_sysfs_unknown_device_is_a_note(tmp_path: Path) -> None:
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", "0xffff", "0x030000")
    chosen = _choose(SM80_SM86, _env(tmp_path))
    assert any("10de:ffff" in note for note in chosen.notes)
    assert chosen.exit_code == selector.EXIT_NO_GPU


@pytest.mark.parametrize(
    ("visible", "want"),
    [
        ("1", [(8, 6, "")]),
        ("1,0", [(8, 6, ""), (8, 0, "")]),
        ("-1", []),
        ("", []),
        ("0,7", [(8, 0, "")]),
    ],
)
def test_cuda_visible_devices_indices(
    tmp_path: Path, visible: str, want: list[tuple[int, int, str]]
) -> None:
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", "0x20b0", "0x030200")
    _gpu_dir(tmp_path, "0000:02:00.0", "0x10de", "0x2204", "0x030000")
    chosen = _choose(SM80_SM86, _env(tmp_path, CUDA_VISIBLE_DEVICES=visible))
    assert chosen.gpus == want


def test_cuda_visible_devices_uuid_without_uuids_is_a_note(tmp_path: Path) -> None:
    _gpu_dir(tmp_path, "0000:02:00.0", "0x10de", "0x2204", "0x030000")
    chosen = _choose(SM80_SM86, _env(tmp_path, CUDA_VISIBLE_DEVICES="GPU-1234"))
    assert chosen.gpus == [(8, 6, "")]
    assert any("cannot be matched" in note for note in chosen.notes)


# -- nvidia-smi -----------------------------------------------------------------------------------
def _fake_smi(tmp_path: Path, output: bytes, code: int = 0) -> str:
    data = tmp_path / "smi-output"
    data.write_bytes(output)
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat '{data}'\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_nvidia_smi_with_uuid_filter(tmp_path: Path) -> None:
    smi = _fake_smi(tmp_path, b"GPU-aaaa, 8.0\nGPU-bbbb, 8.6\n")
    env = _env(tmp_path / "nosys", CAPPLAN_NVIDIA_SMI=smi, CUDA_VISIBLE_DEVICES="GPU-bb")
    chosen = _choose(SM80_SM86, env)
    assert chosen.source == "nvidia-smi"
    assert chosen.variant is not None and chosen.variant["name"] == "torch-sm86"


@pytest.mark.parametrize(("output", "code"), [(b"\xff\x00\xfe garbage", 0), (b"GPU-a, 8.6\n", 9)])
def test_nvidia_smi_garbage_or_failure_falls_back(tmp_path: Path, output: bytes, code: int) -> None:
    smi = _fake_smi(tmp_path, output, code)
    chosen = _choose(SM80_SM86, _env(tmp_path / "nosys", CAPPLAN_NVIDIA_SMI=smi))
    assert chosen.exit_code == selector.EXIT_NO_GPU


# -- NVML through ctypes --------------------------------------------------------------------------
class _FakeNvml:
    """Answers like libnvidia-ml.so.1 for the calls the selector makes."""

    def __init__(self, caps: list[tuple[int, int]], init: int = 0) -> None:
        self.caps = caps
        self.init = init
        self.shut = False

    def nvmlInit_v2(self) -> int:
        return self.init

    def nvmlShutdown(self) -> int:
        self.shut = True
        return 0

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        count._obj.value = len(self.caps)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, handle: Any) -> int:
        handle._obj.value = index + 1
        return 0

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:
        major._obj.value, minor._obj.value = self.caps[handle.value - 1]
        return 0

    def nvmlDeviceGetUUID(self, handle: Any, buffer: Any, size: int) -> int:
        buffer.value = f"GPU-{handle.value:04d}".encode()
        return 0


def test_nvml_is_skipped_without_the_kernel_driver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(selector, "_driver_loaded", lambda: False)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: pytest.fail("NVML loaded without a driver"))
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", "0x2204", "0x030000")
    chosen = _choose(SM80_SM86, {"CAPPLAN_SYSFS_ROOT": str(tmp_path)})
    assert chosen.source == "sysfs"


def test_nvml_answers_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = _FakeNvml([(9, 0), (8, 6)])
    monkeypatch.setattr(selector, "_driver_loaded", lambda: True)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", "0x20b0", "0x030000")  # sysfs would say 8.0
    env = {
        "CAPPLAN_SYSFS_ROOT": str(tmp_path),
        "CUDA_VISIBLE_DEVICES": "GPU-0002",
        "CAPPLAN_DISPATCH_CACHE": "0",
    }
    chosen = _choose(SM80_SM86, env)
    assert chosen.source == "nvml" and chosen.gpus == [(8, 6, "")]
    assert fake.shut


def test_nvml_without_driver_falls_through(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(selector, "_driver_loaded", lambda: True)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml([], init=9))
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", "0x20b0", "0x030000")
    env = {"CAPPLAN_SYSFS_ROOT": str(tmp_path), "CAPPLAN_DISPATCH_CACHE": "0"}
    chosen = _choose(SM80_SM86, env)
    assert chosen.source == "sysfs" and chosen.gpus == [(8, 0, "")]


def test_nvml_broken_library_falls_through(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(selector, "_driver_loaded", lambda: True)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())  # no NVML functions at all
    _gpu_dir(tmp_path, "0000:01:00.0", "0x10de", "0x2204", "0x030000")
    env = {"CAPPLAN_SYSFS_ROOT": str(tmp_path), "CAPPLAN_DISPATCH_CACHE": "0"}
    chosen = _choose(SM80_SM86, env)
    assert chosen.source == "sysfs"
    assert any(note.startswith("nvml:") for note in chosen.notes)


# -- NVML's answer cached for the boot ------------------------------------------------------------
def _machine(root: Path, boot: str = "b1", driver: str = "580.159.04", nodes: int = 2) -> None:
    """A fake /proc and /dev: a boot id, a loaded driver, /dev/nvidia0..N-1."""
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(boot + "\n")
    (root / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
    (root / "proc/driver/nvidia/version").write_text(
        f"NVRM version: NVIDIA UNIX Kernel Module  {driver}\n"
    )
    dev = root / "dev"
    if dev.exists():
        shutil.rmtree(dev)
    dev.mkdir()
    for n in range(nodes):
        (dev / f"nvidia{n}").write_text("")
    (dev / "nvidiactl").write_text("")


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    _machine(tmp_path)
    monkeypatch.setattr(selector, "_PROC", str(tmp_path / "proc"))
    monkeypatch.setattr(selector, "_DEV", str(tmp_path / "dev"))
    return tmp_path


def test_nvml_inventory_is_cached_for_the_boot(
    monkeypatch: pytest.MonkeyPatch, machine: Path
) -> None:
    fake = _FakeNvml([(9, 0), (8, 6)])
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    env = {"XDG_RUNTIME_DIR": str(machine / "run"), "CUDA_VISIBLE_DEVICES": "GPU-0002"}
    (machine / "run").mkdir()
    first = _choose(SM80_SM86, env)
    assert first.source == "nvml" and first.gpus == [(8, 6, "")]
    folder = machine / "run" / "capplan"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    monkeypatch.setattr(ctypes, "CDLL", lambda name: pytest.fail("NVML asked again"))
    again = _choose(SM80_SM86, env)
    assert again.source == "nvml (cached for this boot)" and again.gpus == first.gpus
    # The UUID filter works from the cache too, and the choice is made anew at every start.
    assert _choose(SM80_SM86, {**env, "CUDA_VISIBLE_DEVICES": "0"}).gpus == [(9, 0, "")]


@pytest.mark.parametrize(
    "change",
    [{"boot": "b2"}, {"driver": "590.10"}, {"nodes": 1}],
    ids=["reboot", "new-driver", "other-gpus-visible"],
)
def test_nvml_cache_is_keyed_by_boot_driver_and_devices(
    monkeypatch: pytest.MonkeyPatch, machine: Path, change: dict[str, Any]
) -> None:
    env = {"XDG_RUNTIME_DIR": str(machine)}
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml([(9, 0)]))
    assert _choose(SM80_SM86, env).source == "nvml"
    _machine(machine, **change)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml([(8, 0)]))
    fresh = _choose(SM80_SM86, env)
    assert fresh.source == "nvml" and fresh.gpus == [(8, 0, "")]


@pytest.mark.parametrize("content", ["garbage\n", "", "\xff\xfe", "KEY\nGPU-1 notacap\n"])
def test_nvml_cache_garbage_or_foreign_is_ignored(
    monkeypatch: pytest.MonkeyPatch, machine: Path, content: str
) -> None:
    env = {"XDG_RUNTIME_DIR": str(machine)}
    folder = machine / "capplan"
    folder.mkdir(mode=0o700)
    (folder / "dispatch-nvml-inventory").write_text(content, errors="replace")
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml([(9, 0)]))
    assert _choose(SM80_SM86, env).source == "nvml"
    folder.chmod(0o755)  # a folder others can write is never trusted
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml([(8, 6)]))
    assert _choose(SM80_SM86, env).gpus == [(8, 6, "")]


def test_nvml_cache_off(monkeypatch: pytest.MonkeyPatch, machine: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(machine), "CAPPLAN_DISPATCH_CACHE": "0"}
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml([(9, 0)]))
    assert _choose(SM80_SM86, env).source == "nvml"
    assert not (machine / "capplan").exists()


# -- the standalone script ------------------------------------------------------------------------
def _variant_env(root: Path, name: str) -> str:
    """A stand-in for a variant's Python environment: bin/python3 says which one it is."""
    bin_dir = root / name / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "python3"
    script.write_text(f'#!/bin/sh\necho "{name} $CAPPLAN_DISPATCH_VARIANT $*"\n')
    script.chmod(0o755)
    return str(root / name)


def _standalone(tmp_path: Path) -> Path:
    """The selector copied alone, as the dispatch outputs hold it."""
    copy = tmp_path / "alone" / "selector.py"
    copy.parent.mkdir()
    shutil.copy(SELECTOR, copy)
    return copy


def _run(
    script: Path, table: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(script), str(table), "python3", *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def test_script_execs_the_chosen_environment(tmp_path: Path) -> None:
    table = {**SM80_SM86}
    table["variants"] = [
        {**v, "path": _variant_env(tmp_path / "envs", v["name"])} for v in SM80_SM86["variants"]
    ]
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    _gpu_dir(tmp_path / "sys", "0000:01:00.0", "0x10de", "0x2204", "0x030000")
    done = _run(_standalone(tmp_path), path, _env(tmp_path / "sys"), "-c", "pass")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["torch-sm86", "torch-sm86", "-c", "pass"]


def test_script_debug_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(SM80_SM86))
    script = _standalone(tmp_path)
    done = _run(script, path, _env(tmp_path, CAPPLAN_DISPATCH_DEBUG="1"))
    assert done.returncode == selector.EXIT_NO_GPU
    assert '"source": ""' in done.stderr and "no NVIDIA GPU found" in done.stderr
    bad = _run(script, path, {"CAPPLAN_CAPABILITY": "garbage"})
    assert bad.returncode == selector.EXIT_INVALID
    assert bad.stderr.count("\n") == 1 and "CAPPLAN_CAPABILITY" in bad.stderr
    (tmp_path / "broken.json").write_text("[1, 2")
    broken = _run(script, tmp_path / "broken.json", {"CAPPLAN_CAPABILITY": "8.6"})
    assert broken.returncode == selector.EXIT_CANNOT_START
    assert "Traceback" not in broken.stderr
