"""``capplan doctor`` reads PEP 825 ``variant.json`` of installed variant wheels (issue 35, item
4) and judges the variant against every GPU of the machine: installers pick by one GPU, so a
machine with two GPU models can get a wheel that misses one of them."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from capplan.core.binaries.variants import parse_variant_json

FLEET = """
[fleet]
gpus = ["RTX 3090", "A100", "H100", "RTX 4090", "GTX 1080 Ti", "MI300X"]
[packages.torch]
[policy]
system = "x86_64-linux"
"""


def exported(capplan_in: Any, tmp_path: Path, *flags: str) -> Path:
    """The variant.json files `capplan export wheel-variants` writes for the fleet."""
    (tmp_path / "capplan.toml").write_text(FLEET)
    out = tmp_path / "exported"
    result = capplan_in(
        "export",
        "wheel-variants",
        "--package",
        "torch",
        "--version",
        "2.9.0",
        "--output",
        str(out),
        *flags,
    )
    assert result.exit_code == 0, result.stderr
    return out / "variants"


def install(venv: Path, variant_json: bytes, dist: str = "torch-2.9.0") -> Path:
    info = venv / "lib" / "python3.12" / "site-packages" / f"{dist}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "variant.json").write_bytes(variant_json)
    (info / "RECORD").write_text(f"{dist}.dist-info/variant.json,,\n")
    return info / "variant.json"


def doctor(capplan_in: Any, path: Path, *devices: str) -> tuple[Any, dict[str, Any]]:
    args = [a for d in devices for a in ("--device", d)]
    result = capplan_in("doctor", str(path), *args, "--json")
    assert result.exit_code == 0, result.stderr
    return result, json.loads(result.stdout)["variants"]


def test_a_mixed_machine_gets_a_variant_that_misses_a_gpu(capplan_in: Any, tmp_path: Path) -> None:
    variants = exported(capplan_in, tmp_path)
    venv = tmp_path / "venv"
    install(venv, (variants / "cu129_sm90" / "variant.json").read_bytes())
    _, data = doctor(capplan_in, venv, "H100", "A100", "MI300X")
    (wheel,) = data["installed"]
    assert (wheel["package"], wheel["version"], wheel["label"]) == ("torch", "2.9.0", "cu129_sm90")
    h100, a100, mi300x = wheel["gpus"]
    assert h100["covered"] is True and "native" in h100["reason"]
    assert a100["covered"] is False and "90_real" in a100["reason"]
    assert mi300x["covered"] is None  # the wheel states nothing about AMD GPUs
    text = capplan_in("doctor", str(venv), "--device", "H100", "--device", "A100").stdout
    assert "does not cover NVIDIA A100" in " ".join(text.split())


def test_amd_variants_and_ptx(capplan_in: Any, tmp_path: Path) -> None:
    variants = exported(capplan_in, tmp_path)
    venv = tmp_path / "venv"
    install(venv, (variants / "rocm_gfx942" / "variant.json").read_bytes())
    _, data = doctor(capplan_in, venv, "MI300X", "Radeon RX 7900 XTX")
    assert [g["covered"] for g in data["installed"][0]["gpus"]] == [True, False]
    # 90_virtual is PTX for 9.0: it JIT-compiles on a later major (a B200, 10.0), not on 8.6.
    ptx = {
        "$schema": "https://variants-schema.wheelnext.dev/peps/825/v0.1.1.json",
        "default-priorities": {"namespace": ["nvidia"]},
        "variants": {"cu129_sm90p": {"nvidia": {"sm_arch": ["90_real", "90_virtual"]}}},
    }
    install(tmp_path / "v2", json.dumps(ptx).encode())
    _, data = doctor(capplan_in, tmp_path / "v2", "B200", "RTX 3090")
    b200, rtx3090 = data["installed"][0]["gpus"]
    assert b200["covered"] is True and "ptx-jit" in b200["reason"]
    assert rtx3090["covered"] is False


def test_a_variant_wheel_file_is_read(capplan_in: Any, tmp_path: Path) -> None:
    variants = exported(capplan_in, tmp_path)
    wheel = tmp_path / "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64-cu129_sm86.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch/__init__.py", "")
        archive.writestr(
            "torch-2.9.0.dist-info/variant.json",
            (variants / "cu129_sm86" / "variant.json").read_text(),
        )
    _, data = doctor(capplan_in, wheel, "RTX 3090", "RTX 4090", "A100")
    assert [g["covered"] for g in data["installed"][0]["gpus"]] == [True, True, False]


def test_a_malformed_variant_json_is_a_problem_line(capplan_in: Any, tmp_path: Path) -> None:
    path = install(tmp_path / "venv", b'{"variants": {"A": {}, "b": {}}}')
    _, data = doctor(capplan_in, tmp_path / "venv", "H100")
    assert data["installed"] == []
    (problem,) = data["problems"]
    assert str(path) in problem and "2 labels" in problem
    result = capplan_in("doctor", str(tmp_path / "venv"), "--device", "H100")
    assert result.exit_code == 0  # the libraries decide the exit code; none here
    assert "not a PEP 825 variant.json" in result.stderr


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ([], "no 'variants' object"),
        ({"variants": {}}, "0 labels"),
        ({"variants": {"Cu129": {}}}, "is not 1-16"),
        ({"variants": {"x" * 17: {}}}, "is not 1-16"),
        ({"variants": {"a": {"nvidia": {"sm_arch": []}}}}, "nvidia :: sm_arch is malformed"),
        ({"variants": {"a": {"nvidia": {"sm_arch": ["86 real"]}}}}, "is malformed"),
        ({"variants": {"a": {"NV": {}}}}, "namespace 'NV'"),
    ],
)
def test_parse_variant_json_refuses_what_pep_825_forbids(document: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_variant_json(document)


def test_parse_variant_json_reads_properties() -> None:
    label, properties = parse_variant_json(
        {"variants": {"cu129_sm86": {"nvidia": {"sm_arch": ["86_real", "80_virtual"]}}}}
    )
    assert label == "cu129_sm86"
    assert properties == {"nvidia": {"sm_arch": ("86_real", "80_virtual")}}
