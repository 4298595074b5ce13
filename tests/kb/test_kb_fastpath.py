"""The packaged knowledge base is read without pydantic on every start (core/model/fromjson.py)
and validated with pydantic here: both ways must give equal records for every file, so the fast
path can never drift from the validated one; and a broken file in a user's folder is still one
DataError naming the entry."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from capplan.adapters.kb import amd_kb_files, kb_path, load_kb_file, nvidia_kb_files
from capplan.core.families.cuda.kb import nvidia
from capplan.core.model.fromjson import from_json
from capplan.core.model.kb_schema import validate_record
from capplan.errors import DataError

FILES: dict[str, type] = {**nvidia_kb_files(), **amd_kb_files()}


@pytest.mark.parametrize("name", sorted(FILES))
def test_fast_and_validated_reads_agree(name: str) -> None:
    data: Any = json.loads(kb_path(name).read_text())
    model = FILES[name]
    validated = validate_record(model, data)
    fast = from_json(model, data)
    assert fast == validated
    assert load_kb_file(name, model) == validated  # the loader takes the fast path


def test_the_fast_path_keeps_number_types() -> None:
    # pydantic turns an integer cost into a float; the fast path must too, or plan JSON
    # would print 60 where it printed 60.0.
    from capplan.core.families.cuda.kb import PackagesFile

    data: Any = json.loads(kb_path("packages.json").read_text())
    fast = from_json(PackagesFile, data)
    assert all(isinstance(p.cost.base_minutes, float) for p in fast.packages.values())


def test_commands_that_look_up_load_no_pydantic(tmp_path: Path) -> None:
    code = (
        "import sys; from capplan.adapters.kb import load_kb; load_kb(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("name", "change", "says"),
    [
        ("gpus.json", lambda d: d["gpus"][0].update(capability="99x"), "capability"),
        ("gpus.json", lambda d: d["gpus"][0].update(colour="green"), "colour"),
        ("gpus.json", lambda d: d["gpus"][1].pop("aliases"), r"gpus\[1\] \(name '.+'\): aliases: Field required"),
        ("pci.json", lambda d: d["devices"][0].update(id="10DE:2684"), "10de:dddd"),
        ("amd_packages.json", lambda d: d["stack_libraries"]["composable_kernel"].pop("fallback_why"),
         "go together"),
        ("amd_packages.json", lambda d: d["stack_libraries"]["miopen"].update(linked_for=["gfx942"]),
         "go together"),
    ],
)  # fmt: skip
def test_a_broken_user_file_is_one_data_error(
    tmp_path: Path, name: str, change: Any, says: str
) -> None:
    folder = tmp_path / "kb"
    shutil.copytree(kb_path(name).parent, folder)
    data = json.loads((folder / name).read_text())
    change(data)
    (folder / name).write_text(json.dumps(data))
    with pytest.raises(DataError, match=says) as info:
        load_kb_file(name, FILES[name], folder)
    assert "\n" not in info.value.one_line()


@pytest.mark.parametrize(
    ("name", "change", "says"),
    [
        ("gpus.json", lambda d: d["gpus"][0].update(colour="green"), "colour"),
        ("gpus.json", lambda d: d["gpus"][0].update(capability="99x"), "capability"),
        ("gpus.json", lambda d: d["gpus"][0].update(capability=["8.6"]), "capability"),
        ("gpus.json", lambda d: d["gpus"][0].pop("segment"), r"gpus\[0\] \(name '.+'\): segment: Field required"),
        ("gpus.json", lambda d: d.update(gpus={"a": 1}), "gpus"),
        ("pci.json", lambda d: d["devices"][0].update(id="10DE:2684"), "10de:dddd"),
        ("cuda.json", lambda d: d["releases"][0].update(version=12.9), "version"),
    ],
)  # fmt: skip
def test_a_broken_packaged_file_falls_back_to_naming_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, change: Any, says: str
) -> None:
    # The fast path trusts the packaged files; when one is broken anyway (a damaged
    # installation) building it fails and the validator names what is wrong.
    import capplan.adapters.kb as kb_module

    data = json.loads(kb_path(name).read_text())
    change(data)
    (tmp_path / name).write_text(json.dumps(data))
    monkeypatch.setattr(kb_module, "kb_path", lambda n, directory=None: (directory or tmp_path) / n)
    with pytest.raises(DataError, match=says) as info:
        load_kb_file(name, FILES[name])
    assert info.value.one_line().startswith(f"knowledge-base file kb/{name}")


# -- the capability-only knowledge base (caps, verify --expect) ------------------------------


def test_the_capability_kb_answers_as_the_whole_one() -> None:
    from capplan.adapters.kb import load_capability_kb, load_kb
    from capplan.core.families.cuda.capability import Target
    from capplan.errors import InvalidInputError

    loaded = load_capability_kb()
    whole, part = nvidia(load_kb()), nvidia(loaded)
    assert part.capabilities == whole.capabilities
    assert part.cuda_releases == whole.cuda_releases
    for release in whole.cuda_releases:
        version = release.version
        assert part.cuda_release(version) == whole.cuda_release(version)
        assert part.supported(version) == whole.supported(version)
        assert part.defaults(version) == whole.defaults(version)
    for info in whole.capabilities:
        target = (Target(info.capability, ptx=True),)
        assert part.check_targets(target) == whole.check_targets(target)
    unknown = (Target.parse("sm_19"),)
    for kb in (part, whole):
        with pytest.raises(InvalidInputError, match=r"unknown capability '1\.9'"):
            kb.check_targets(unknown)
    # Nothing else is in it: a command that names a GPU must load the whole one.
    assert (part.gpus, part.pci_devices, loaded.packages, tuple(loaded.parts)) == (
        (),
        (),
        {},
        (part,),
    )


def test_caps_and_verify_expect_read_only_the_two_files(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    for name in ("capabilities.json", "cuda.json"):
        shutil.copy(kb_path(name), folder / name)
    env = {"CAPPLAN_KB_DIR": str(folder), "COLUMNS": "200"}
    run = [sys.executable, "-m", "capplan"]
    caps = subprocess.run(
        [*run, "caps", "--cuda", "12.9", "--json"],
        capture_output=True, text=True, env={**_env(), **env}, check=False,
    )  # fmt: skip
    assert caps.returncode == 0, caps.stderr
    assert any(row["capability"] == "8.6" and row["default"] for row in json.loads(caps.stdout))
    verify = subprocess.run(
        [*run, "verify", "/bin/true", "--expect", "8.6"],
        capture_output=True, text=True, env={**_env(), **env}, check=False,
    )  # fmt: skip
    assert verify.returncode == 9, verify.stderr  # the planned code is missing: not a KB error
    assert "missing SASS sm_86" in verify.stderr
    gpus = subprocess.run(
        [*run, "gpus", "RTX 3090"], capture_output=True, text=True, env={**_env(), **env}
    )
    assert gpus.returncode != 0 and "gpus.json" in gpus.stderr  # it needs the whole one


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("CAPPLAN_")}
