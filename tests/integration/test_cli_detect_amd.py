"""`capplan detect` on machines with AMD GPUs (fake KFD trees, a fake rocminfo), mixed with
an NVIDIA GPU found through sysfs."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from capplan.errors import ExitCode


def _kfd(root: Path, node: str, content: str) -> None:
    path = root / "class" / "kfd" / "kfd" / "topology" / "nodes" / node
    path.mkdir(parents=True, exist_ok=True)
    (path / "properties").write_text(content)


def _amd_fleet(root: Path) -> Path:
    _kfd(root, "0", "cpu_cores_count 16\ngfx_target_version 0\nvendor_id 0\n")
    _kfd(root, "1", "gfx_target_version 90402\nvendor_id 4098\ndevice_id 29857\n")  # MI300X
    _kfd(root, "2", "gfx_target_version 110000\nvendor_id 4098\ndevice_id 29772\n")  # 7900 XTX
    return root


def _nvidia(root: Path, device: str = "2204") -> None:
    node = root / "bus" / "pci" / "devices" / "0000:01:00.0"
    node.mkdir(parents=True)
    (node / "vendor").write_text("0x10de\n")
    (node / "device").write_text(f"0x{device}\n")
    (node / "class").write_text("0x030000\n")


def _env(tmp_path: Path, root: Path) -> dict[str, str]:
    return {"PATH": str(tmp_path / "empty-bin"), "CAPPLAN_SYSFS_ROOT": str(root),
            "CAPPLAN_NVML": "0"}  # fmt: skip


def test_detect_mixed_nvidia_and_amd(capplan_cli: object, tmp_path: Path) -> None:
    root = _amd_fleet(tmp_path / "sys")
    _nvidia(root)  # RTX 3090
    result = capplan_cli("detect", "--json", env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    nvidia, mi300x, xtx = data["gpus"]
    assert (nvidia["vendor"], nvidia["capability"], nvidia["target"]) == ("nvidia", "8.6", None)
    assert nvidia["variants"]["torch"] == "torch-sm86"
    assert set(mi300x) == set(nvidia)  # the same shape
    for gpu, target, pci in ((mi300x, "gfx942", "1002:74a1"), (xtx, "gfx1100", "1002:744c")):
        assert (gpu["vendor"], gpu["target"], gpu["capability"], gpu["source"]) == (
            "amd",
            target,
            None,
            "kfd",
        )
        assert gpu["pci_id"] == pci
        assert gpu["overlay"] == f'gpuTargets = [ "{target}" ];'
        assert set(gpu["variants"]) == set(nvidia["variants"])
        assert all(v is None for v in gpu["variants"].values())
        how = gpu["how"]["torch"]
        assert how["level"] == "not-planned" and how["command"] is None
        assert "no AMD variants are planned yet (ROCm planning is not implemented)" in how["reason"]
        assert target in how["reason"]
    assert data["notes"] == []


def test_detect_amd_only_does_not_exit_no_gpu(capplan_cli: object, tmp_path: Path) -> None:
    root = _amd_fleet(tmp_path / "sys")
    _kfd(root, "3", "gfx_target_version 999999\nvendor_id 4098\n")
    result = capplan_cli("detect", env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "AMD target gfx942, from kfd, PCI id 1002:74a1" in out
    assert "AMD target gfx1100" in out
    assert "no AMD variants are planned yet (ROCm planning is not implemented)" in out
    assert 'gpuTargets = [ "gfx1100" ];' in out
    assert "note: KFD node 3: gfx_target_version 999999 is not" in out and "skipped" in out
    assert "Traceback" not in result.stderr


def test_detect_amd_from_rocminfo(capplan_cli: object, tmp_path: Path) -> None:
    fake = tmp_path / "rocminfo"
    fake.write_text(
        "#!/bin/sh\necho '*******'\necho 'Agent 1'\necho '  Name:   gfx1151'\n"
        "echo '  Marketing Name:   AMD Radeon 8060S'\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = _env(tmp_path, tmp_path / "sys") | {"CAPPLAN_ROCMINFO": str(fake)}
    result = capplan_cli("detect", "--json", env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    assert (gpu["name"], gpu["target"], gpu["source"]) == (
        "AMD Radeon 8060S",
        "gfx1151",
        "rocminfo",
    )


def test_detect_garbage_kfd_and_no_gpu_is_one_line(capplan_cli: object, tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _kfd(root, "1", "gfx_target_version \x00\x01\x02\n")
    result = capplan_cli("detect", env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == int(ExitCode.NO_GPU), result.stderr
    err = result.stderr.strip()
    assert err.startswith("capplan: error: no NVIDIA GPU found") and "\n" not in err
    assert "no AMD GPU found either (KFD node 1: properties not text; skipped)" in err
