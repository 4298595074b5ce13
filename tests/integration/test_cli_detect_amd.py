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


def _rocminfo_env(tmp_path: Path, name: str, marketing: str) -> dict[str, str]:
    """The environment of a machine without KFD whose rocminfo lists one GPU agent."""
    fake = tmp_path / "rocminfo"
    fake.write_text(
        f"#!/bin/sh\necho '*******'\necho 'Agent 1'\necho '  Name:   {name}'\n"
        f"echo '  Marketing Name:   {marketing}'\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return _env(tmp_path, tmp_path / "sys") | {"CAPPLAN_ROCMINFO": str(fake)}


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
        # The embedded plan's fleet has both: their own variants, as for the NVIDIA GPU.
        how = gpu["how"]["torch"]
        assert gpu["variants"]["torch"] == how["variant"] == f"torch-{target}"
        assert (how["level"], how["command"]) == ("native", f"nix build .#torch-{target}")
        assert gpu["variants"]["nccl"] is None
        assert gpu["how"]["nccl"]["reason"] == "nccl is CUDA-only: nixpkgs has no ROCm build of it"
    assert data["notes"] == []


def test_detect_amd_only_does_not_exit_no_gpu(capplan_cli: object, tmp_path: Path) -> None:
    root = _amd_fleet(tmp_path / "sys")
    _kfd(root, "3", "gfx_target_version 999999\nvendor_id 4098\n")
    result = capplan_cli("detect", env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "AMD target gfx942, from kfd, PCI id 1002:74a1" in out
    assert "AMD target gfx1100" in out
    assert "nix build .#torch-gfx942" in out and "nix build .#torch-gfx1100" in out
    assert 'gpuTargets = [ "gfx1100" ];' in out
    assert "note: KFD node 3: gfx_target_version 999999 is not" in out and "skipped" in out
    assert "Traceback" not in result.stderr


def test_detect_amd_from_rocminfo(capplan_cli: object, tmp_path: Path) -> None:
    env = _rocminfo_env(tmp_path, "gfx1151", "AMD Radeon 8060S")
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


MIXED = """
[fleet]
gpus = ["A100", "MI300X", "Radeon RX 7900 XTX", "Strix Halo"]
[packages.torch]
[packages.magma]
[packages.nccl]
[packages.onnxruntime]
vendors = ["nvidia"]
[policy]
cuda = ["12.9"]
"""


def _config(tmp_path: Path, text: str = MIXED) -> str:
    path = tmp_path / "capplan.toml"
    path.write_text(text)
    return str(path)


def test_detect_recommends_planned_amd_variants(capplan_cli: object, tmp_path: Path) -> None:
    root = _amd_fleet(tmp_path / "sys")
    _nvidia(root, "20b0")  # A100
    args = ("detect", "--json", "--config", _config(tmp_path))
    result = capplan_cli(*args, env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    nvidia, mi300x, xtx = json.loads(result.stdout)["gpus"]
    assert nvidia["variants"]["torch"] == "torch-sm80"
    for gpu, variant in ((mi300x, "torch-gfx942"), (xtx, "torch-gfx1100")):
        assert set(gpu) == set(nvidia) and set(gpu["how"]) == set(nvidia["how"])
        assert gpu["variants"]["torch"] == variant
        assert gpu["how"]["torch"] == {
            "level": "native",
            "reason": f"code object for {gpu['target']}",
            "command": f"nix build .#{variant}",
            "driver_ok": None,
            "needs_driver": None,
            "variant": variant,
        }
        # magma-hip's own list (VALID_GFXS) lacks both: this GPU's own reason, no command.
        magma = gpu["how"]["magma"]
        assert (gpu["variants"]["magma"], magma["level"], magma["command"]) == (
            None,
            "cannot-run",
            None,
        )
        assert f"magma-hip's own target list excludes {gpu['target']}" in magma["reason"]
        nccl = gpu["how"]["nccl"]
        assert (nccl["level"], nccl["reason"]) == (
            "cannot-run",
            "nccl is CUDA-only: nixpkgs has no ROCm build of it",
        )
        assert gpu["how"]["onnxruntime"]["reason"].startswith(
            "packages.onnxruntime.vendors = ['nvidia'] leaves out amd"
        )


def test_detect_amd_text_table(capplan_cli: object, tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _kfd(root, "1", "gfx_target_version 110000\nvendor_id 4098\n")
    _kfd(root, "2", "gfx_target_version 120001\nvendor_id 4098\n")  # RX 9070: not in the fleet
    args = ("detect", "--config", _config(tmp_path))
    result = capplan_cli(*args, env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "AMD target gfx1100, from kfd" in out
    assert "torch-gfx1100" in out and "nix build .#torch-gfx1100" in out
    assert "native: code object for gfx1100" in out
    assert 'add "gfx1201" to fleet.gpus' in out.replace("│ ", "").replace(" │", "")
    assert 'torchWithRocm.override { gpuTargets = [ "gfx1100" ]; }' in out


def test_detect_gfx1031_runs_gfx1030_code(capplan_cli: object, tmp_path: Path) -> None:
    """An RX 6700 XT (gfx1031) where the plan builds only gfx1030 (an RX 6800): compatible,
    through nixpkgs' ISA-compatibility patches; never HSA_OVERRIDE_GFX_VERSION."""
    root = tmp_path / "sys"
    _kfd(root, "1", "gfx_target_version 100301\nvendor_id 4098\n")
    config = _config(tmp_path, '[fleet]\ngpus = ["RX 6800"]\n[packages.torch]\n')
    result = capplan_cli("detect", "--json", "--config", config, env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    assert (gpu["target"], gpu["variants"]["torch"]) == ("gfx1031", "torch-gfx1030")
    how = gpu["how"]["torch"]
    assert (how["level"], how["command"]) == ("compatible", "nix build .#torch-gfx1030")
    assert "gfx1030 code loads on gfx1031" in how["reason"]
    assert "ISA compatibility" in how["reason"] and "HSA_OVERRIDE" not in result.stdout


def test_detect_generic_target_build(capplan_cli: object, tmp_path: Path) -> None:
    """share = "compatible": one gfx11-generic build serves an RX 7800 XT (gfx1101)."""
    root = tmp_path / "sys"
    _kfd(root, "1", "gfx_target_version 110001\nvendor_id 4098\n")
    config = _config(
        tmp_path,
        '[fleet]\ngpus = ["RX 7900 XTX", "RX 7800 XT"]\n[packages.torch]\n'
        '[policy]\nshare = "compatible"\n',
    )
    result = capplan_cli("detect", "--json", "--config", config, env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    how = json.loads(result.stdout)["gpus"][0]["how"]["torch"]
    assert (how["variant"], how["level"]) == ("torch-gfx11-generic", "compatible")
    assert how["reason"].startswith("generic code object gfx11-generic runs on its member gfx1101")


def test_detect_amd_features_from_rocminfo(capplan_cli: object, tmp_path: Path) -> None:
    """rocminfo names the target with its features; the planned build has none ("any")."""
    env = _rocminfo_env(tmp_path, "gfx90a:sramecc+:xnack-", "AMD Instinct MI250X")
    config = _config(tmp_path, '[fleet]\ngpus = ["MI250X"]\n[packages.torch]\n')
    result = capplan_cli("detect", "--json", "--config", config, env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    assert gpu["target"] == "gfx90a:sramecc+:xnack-"
    assert (gpu["variants"]["torch"], gpu["how"]["torch"]["level"]) == ("torch-gfx90a", "native")


def test_detect_amd_variant_for_another_system(capplan_cli: object, tmp_path: Path) -> None:
    """The plan builds ROCm on x86_64-linux; on an aarch64 machine nothing runs, and the
    answer says why instead of asking to add a GPU the fleet already has."""
    root = tmp_path / "sys"
    _kfd(root, "1", "gfx_target_version 90402\nvendor_id 4098\n")
    env = _env(tmp_path, root) | {"CAPPLAN_SYSTEM": "aarch64-linux"}
    result = capplan_cli("detect", "--json", "--config", _config(tmp_path), env=env)  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    (gpu,) = json.loads(result.stdout)["gpus"]
    how = gpu["how"]["torch"]
    assert (gpu["system"], gpu["variants"]["torch"], how["level"]) == (
        "aarch64-linux",
        None,
        "cannot-run",
    )
    assert how["reason"].startswith(
        "torch-gfx942 is built for x86_64-linux and this machine is aarch64-linux"
    )


def test_detect_amd_garbage_beside_a_gpu_is_a_note(capplan_cli: object, tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _kfd(root, "1", "gfx_target_version ninety\nvendor_id 4098\n")
    _kfd(root, "2", "gfx_target_version 90402\nvendor_id 4098\n")
    args = ("detect", "--json", "--config", _config(tmp_path))
    result = capplan_cli(*args, env=_env(tmp_path, root))  # type: ignore[operator]
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [g["variants"]["torch"] for g in data["gpus"]] == ["torch-gfx942"]
    assert data["notes"] == ["KFD node 1: properties gfx_target_version is not a number "
                             "('ninety'); skipped"]  # fmt: skip
