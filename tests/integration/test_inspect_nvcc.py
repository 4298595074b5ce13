"""The inspector and `capplan inspect` / `capplan verify` on binaries nvcc 13 really built.

Artifacts come from tests/data/build_fatbins.py (one tiny kernel, a few nvcc runs, built once
per session). Each artifact's expectation is what its nvcc flags asked for.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner

from capplan.adapters.fatbin import FileReport, inspect_paths
from capplan.core.families.cuda import fatbin
from capplan.core.families.cuda.binary import BinaryLimits, CudaCode, cuda_code
from capplan.core.families.cuda.binary import binary_limits as limits_of
from capplan.core.families.cuda.capability import Capability
from capplan.core.families.cuda.kb import nvidia
from capplan.errors import BinaryFormatError, CapplanError, ExitCode, InvalidInputError

DATA = Path(__file__).resolve().parents[1] / "data"


def _load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_fatbins", DATA / "build_fatbins.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_fatbins"] = module
    spec.loader.exec_module(module)
    return module


builder = _load_builder()


pytestmark = pytest.mark.nvcc


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory, nvcc_bin: Path) -> dict[str, Path]:
    # nvcc_bin (tests/conftest.py) skips the module with the reason when nvcc is absent.
    return dict(builder.build_all(tmp_path_factory.mktemp("fatbins"), nvcc_bin))


def cuda(report: FileReport) -> CudaCode:
    """The CUDA reader's part of a report."""
    (code,) = cuda_code([report])
    return code


def binary_limits(path: Path, candidates: list[Capability]) -> BinaryLimits:
    """What ``capplan limits --binary`` answers for ``path``."""
    return limits_of(str(path), inspect_paths([path]), candidates)


def _only(paths: list[Path]) -> FileReport:
    (report,) = inspect_paths(paths)
    return report


def _names(report: FileReport) -> dict[str, list[str]]:
    data = report.to_json()
    return {key: data[key] for key in ("sass", "ptx", "lto")}


def _sorted_names(items: tuple[str, ...], prefix: str) -> list[str]:
    caps = sorted(Capability.parse(i.removeprefix("lto_")) for i in items)
    return [f"{prefix}{c.cmake}" for c in caps]


@pytest.mark.parametrize("artifact", builder.ARTIFACTS, ids=lambda a: a.name)
def test_reports_exactly_what_nvcc_was_asked(built: dict[str, Path], artifact: Any) -> None:
    report = _only([built[artifact.name]])
    assert _names(report) == {
        "sass": _sorted_names(artifact.sass, "sm_"),
        "ptx": _sorted_names(artifact.ptx, "compute_"),
        "lto": _sorted_names(artifact.lto, "lto_"),
    }
    assert set(cuda(report).sections) == set(artifact.sections)
    if artifact.compression:
        assert set(artifact.compression) <= set(cuda(report).compression)
    assert not report.partial and report.problems == ()
    assert report.path == str(built[artifact.name])


def test_shared_library_stub_containers_do_not_duplicate_archs(
    built: dict[str, Path],
) -> None:
    report = _only([built["libscale.so"]])
    # nvcc's link step adds a container of stub cubins: two containers, one set of archs.
    assert cuda(report).containers == 2
    assert cuda(report).sections == {".nv_fatbin": 2}
    assert [c.sm for c in cuda(report).sass] == ["sm_86", "sm_120a"]


def test_empty_container_of_a_ptx_only_library_is_valid(built: dict[str, Path]) -> None:
    # nvcc 13's PTX-only shared library: an empty container (16-byte header, size 0) precedes
    # the real one in .nv_fatbin. Nothing is missing, so nothing is partial.
    data = built["libptx.so"].read_bytes()
    empty = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 0)
    assert empty in data
    report = _only([built["libptx.so"]])
    assert not report.partial and report.problems == ()
    assert [c.compute for c in cuda(report).ptx] == ["compute_80"]
    code, _, err = _run(["inspect", str(built["libptx.so"])])
    assert code == 0, err


def test_static_archive_members_are_walked_in_place(built: dict[str, Path]) -> None:
    if "libscale.a" not in built:
        pytest.skip("ar not found")
    reports = inspect_paths([built["libscale.a"]])
    archive = str(built["libscale.a"])
    assert [r.path for r in reports] == [f"{archive}!multi.o", f"{archive}!rdc.o"]
    assert _names(reports[0])["sass"] == ["sm_86", "sm_90"]
    assert cuda(reports[1]).sections == {"__nv_relfatbin": 1}


def test_entries_detail_matches_summary(built: dict[str, Path]) -> None:
    report = _only([built["suffix.o"]])
    rows = report.to_json(entries=True)["entries"]
    assert {r["arch"] for r in rows if r["kind"] == "sass"} == {
        "sm_90a",
        "sm_100f",
        "sm_120f",
    }
    assert {r["arch"] for r in rows if r["kind"] == "ptx"} == {"compute_120f"}
    data = built["suffix.o"].read_bytes()
    for row in rows:
        # Each listed offset holds an entry header of the listed kind.
        kind = struct.unpack_from("<H", data, row["offset"])[0]
        assert kind == {"sass": 2, "ptx": 1, "lto": 8}[row["kind"]]
        assert row["section"] == ".nv_fatbin"


def test_cuobjdump_agrees_when_installed(built: dict[str, Path]) -> None:
    """NVIDIA's own tool, where installed (PyPI nvidia-cuda-cuobjdump), as a second oracle."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        candidates = [Path(p) / "nvidia/cu13/bin/cuobjdump" for p in sys.path if p]
        tool = next((str(c) for c in candidates if c.is_file()), None)
    if tool is None:
        pytest.skip("cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
    for name in ("multi.o", "suffix.o", "libscale.so", "speed.o"):
        out = subprocess.run(
            [tool, "--list-elf", "--list-ptx", str(built[name])],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        theirs_sass = {line.rsplit(".", 2)[-2] for line in out.splitlines() if "ELF file" in line}
        theirs_ptx = {line.rsplit(".", 2)[-2] for line in out.splitlines() if "PTX file" in line}
        report = _only([built[name]])
        # cuobjdump drops the `f` suffix on SASS names and names PTX sm_XY: compare bases.
        assert {Capability.parse(s).base for s in theirs_sass} == {
            c.base for c in cuda(report).sass
        }
        assert {Capability.parse(s).base for s in theirs_ptx} == {c.base for c in cuda(report).ptx}


# --- truncated and corrupted copies ------------------------------------------------------------


def _container_offset(data: bytes) -> int:
    offset = data.find(fatbin.MAGIC_BYTES)
    assert offset >= 0
    return offset


def _allowed(artifact_name: str) -> set[str]:
    artifact = next(a for a in builder.ARTIFACTS if a.name == artifact_name)
    return {*artifact.sass, *artifact.ptx, *artifact.lto}


def _listed(report: FileReport) -> set[str]:
    data = report.to_json()
    return {*data["sass"], *data["ptx"], *data["lto"]}


@pytest.mark.parametrize("name", ["multi.o", "suffix.o", "libscale.so"])
def test_truncated_copies_are_partial_never_invented(
    built: dict[str, Path], tmp_path: Path, name: str
) -> None:
    data = built[name].read_bytes()
    start = _container_offset(data)
    (size,) = struct.unpack_from("<Q", data, start + 8)
    cuts = sorted({start + 20, start + 16 + 70, *range(start + 16, start + 16 + size, 97)})
    for cut in cuts:
        copy = tmp_path / f"cut{cut}"
        copy.write_bytes(data[:cut])
        report = _only([copy])
        assert report.partial, f"cut at {cut:#x} not marked partial"
        assert report.problems
        assert _listed(report) <= _allowed(name)


@pytest.mark.parametrize(
    ("what", "delta"),
    [("magic", 0), ("version", 4), ("size-up", 8), ("size-down", 8), ("kind", 16)],
)
def test_corrupted_copies_are_flagged(
    built: dict[str, Path], tmp_path: Path, what: str, delta: int
) -> None:
    data = bytearray(built["multi.o"].read_bytes())
    at = _container_offset(bytes(data)) + delta
    if what == "size-up":
        struct.pack_into("<Q", data, at, struct.unpack_from("<Q", data, at)[0] + 4096)
    elif what == "size-down":
        struct.pack_into("<Q", data, at, struct.unpack_from("<Q", data, at)[0] - 200)
    else:
        data[at] ^= 0xFF
    copy = tmp_path / "corrupt.o"
    copy.write_bytes(bytes(data))
    report = _only([copy])
    assert report.partial and report.problems
    assert _listed(report) <= _allowed("multi.o")


def test_random_corruption_never_crashes(built: dict[str, Path], tmp_path: Path) -> None:
    data = built["suffix.o"].read_bytes()
    start = _container_offset(data)
    rng = random.Random(7)
    copy = tmp_path / "mutant.o"
    for _ in range(150):
        mutant = bytearray(data)
        for _ in range(rng.randrange(1, 6)):
            mutant[rng.randrange(start, start + 400)] = rng.randrange(256)
        copy.write_bytes(bytes(mutant))
        # Either a report or one of capplan's own errors: never an unexpected exception.
        with contextlib.suppress(CapplanError):
            inspect_paths([copy])


def test_headers_read_with_pread_or_through_the_mapping_agree(
    built: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files are walked with pread where the system has it, through the mapping where it has
    not: both give the same reports, entries and problems included, on every artifact and on
    cut and corrupted copies (where the adjacent-container shortcut and the searches meet)."""
    data = built["suffix.o"].read_bytes()
    start = _container_offset(data)
    rng = random.Random(11)
    copies = []
    for i in range(40):
        mutant = bytearray(data[: rng.randrange(start + 16, len(data) + 1)])
        for _ in range(rng.randrange(0, 4)):
            at = rng.randrange(start, min(start + 400, len(mutant)))
            mutant[at] = rng.randrange(256)
        copy = tmp_path / f"mutant{i}.o"
        copy.write_bytes(bytes(mutant))
        copies.append(copy)
    paths = [*(built[a.name] for a in builder.ARTIFACTS), *copies]

    def reports() -> list[Any]:
        out = []
        for path in paths:
            try:
                out.append([r.to_json(entries=True) for r in inspect_paths([path])])
            except CapplanError as error:
                out.append(error.one_line())
        return out

    with_pread = reports()
    monkeypatch.delattr(os, "pread")
    assert reports() == with_pread


# --- wheels, directories, bad input -------------------------------------------------------------


def test_wheel_members_are_read_in_memory(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("demo/__init__.py", "")
        zf.write(built["libscale.so"], "demo/lib/libscale.so")
        zf.write(built["ptxonly.o"], "demo/lib/kernels.o")
        zf.writestr("demo-1.0.dist-info/METADATA", "Name: demo\nVersion: 1.0\n")
    before = set(tmp_path.iterdir())
    reports = inspect_paths([wheel])
    assert set(tmp_path.iterdir()) == before  # nothing extracted
    assert [r.path for r in reports] == [
        f"{wheel}!demo/lib/kernels.o",
        f"{wheel}!demo/lib/libscale.so",
    ]
    assert _names(reports[1])["sass"] == ["sm_86", "sm_120a"]
    assert _names(reports[0])["ptx"] == ["compute_75"]


def test_directory_walk_is_deterministic_and_survives_links(
    built: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store-path"
    (root / "lib" / "nested").mkdir(parents=True)
    (root / "share").mkdir()
    shutil.copy(built["libscale.so"], root / "lib" / "libscale.so.1")
    os.symlink("libscale.so.1", root / "lib" / "libscale.so")  # a second name: listed once
    shutil.copy(built["rdc.o"], root / "lib" / "nested" / "rdc.o")
    os.symlink("../..", root / "lib" / "nested" / "loop")  # a symlink loop
    (root / "share" / "README").write_text("not a binary\n")
    shutil.copy(built["multi.o"], root / "share" / "zz.o")
    with zipfile.ZipFile(root / "share" / "demo.whl", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(built["ptxonly.o"], "demo/k.o")
    (root / "share" / "broken.a").write_bytes(b"!<arch>\nnot a member header at all" + bytes(60))
    monkeypatch.chdir(tmp_path)
    reports = inspect_paths([Path("store-path")])
    assert [r.path for r in reports] == [
        "store-path/lib/libscale.so.1",
        "store-path/lib/nested/rdc.o",
        "store-path/share/broken.a",
        "store-path/share/demo.whl!demo/k.o",
        "store-path/share/zz.o",
    ]
    # A corrupt archive is reported as such; it does not stop the walk.
    assert reports[2].partial and "archive" in reports[2].problems[0]
    assert not any(r.partial for r in reports[:2] + reports[3:])
    assert reports == inspect_paths([Path("store-path")])


def _run(args: list[str]) -> tuple[int, str, str]:
    """Invoke through the real `capplan` group (its one-line errors and exit codes)."""
    from capplan.cli.main import cli

    # A wide fixed width: rich wraps table cells to the terminal width otherwise.
    result = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"}).invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


def test_cli_json_keeps_paths_as_given(
    built: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(built["multi.o"].parent)
    code, out, _ = _run(["inspect", "--json", "multi.o", "libscale.so"])
    assert code == 0
    files = json.loads(out)["files"]
    assert [f["path"] for f in files] == ["multi.o", "libscale.so"]
    assert files[0]["sass"] == ["sm_86", "sm_90"] and files[0]["ptx"] == ["compute_90"]
    assert files[1]["containers"] == 2 and files[1]["sections"] == {".nv_fatbin": 2}
    assert "entries" not in files[0]
    code, out, _ = _run(["inspect", "--json", "--entries", "multi.o"])
    assert code == 0 and len(json.loads(out)["files"][0]["entries"]) == 3


def test_cli_table(built: dict[str, Path]) -> None:
    code, out, _ = _run(["inspect", str(built["suffix.o"])])
    assert code == 0
    assert "sm_100f" in out and "compute_120f" in out


def test_cli_non_elf_is_one_line_exit_12(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    code, _, err = _run(["inspect", str(text)])
    assert code == ExitCode.BAD_BINARY
    assert "not an ELF" in err and str(text) in err and len(err.strip().splitlines()) == 1
    with pytest.raises(BinaryFormatError):
        inspect_paths([text])
    with pytest.raises(InvalidInputError):
        inspect_paths([tmp_path / "missing.so"])


def test_cli_partial_prints_then_exits_12(built: dict[str, Path], tmp_path: Path) -> None:
    data = built["multi.o"].read_bytes()
    cut = tmp_path / "cut.o"
    cut.write_bytes(data[: _container_offset(data) + 200])
    code, out, err = _run(["inspect", "--json", str(cut)])
    assert code == ExitCode.BAD_BINARY
    assert json.loads(out)["files"][0]["partial"] is True
    assert "truncated or corrupt" in err


# --- verify ------------------------------------------------------------------------------------


def test_verify_passes_on_exact_targets(built: dict[str, Path]) -> None:
    code, out, _ = _run(["verify", str(built["multi.o"]), "--expect", "8.6,9.0+PTX"])
    assert code == 0, out
    code, _, _ = _run(["verify", str(built["suffix.o"]), "--expect", "9.0a,10.0f,12.0f+PTX"])
    assert code == 0


def test_verify_prints_a_path_holding_brackets_as_it_is(
    built: dict[str, Path], tmp_path: Path
) -> None:
    """verify's CUDA lines are plain text: rich markup read "[bold]" in a path as a tag and
    dropped it (issue 41)."""
    folder = tmp_path / "[bold]x"
    folder.mkdir()
    copy = folder / "[red]multi.o"
    copy.write_bytes(built["multi.o"].read_bytes())
    code, out, err = _run(["verify", str(copy), "--expect", "8.6,9.0+PTX"])
    assert code == 0, err
    assert f"ok: {copy} holds exactly" in out


def test_verify_lists_missing_and_extra(built: dict[str, Path]) -> None:
    code, out, err = _run(["verify", str(built["multi.o"]), "--expect", "8.6,8.9,9.0", "--json"])
    assert code == ExitCode.VERIFY_FAILED
    data = json.loads(out)
    assert data["missing_sass"] == ["sm_89"]
    assert data["extra_ptx"] == ["compute_90"]
    assert data["ok"] is False
    assert "missing SASS sm_89" in err and "extra PTX compute_90" in err


def test_verify_suffix_dropped_is_a_failure(built: dict[str, Path]) -> None:
    code, _, err = _run(["verify", str(built["multi.o"]), "--expect", "8.6,9.0a+PTX"])
    assert code == 9
    assert "missing SASS sm_90a" in err and "extra SASS sm_90" in err


@pytest.mark.parametrize(
    ("device", "code", "word"),
    [
        ("8.6", 0, "native"),
        ("8.9", 0, "compatible"),
        ("12.0", 0, "ptx-jit"),
        ("7.5", 9, "cannot"),
    ],
)
def test_verify_device(built: dict[str, Path], device: str, code: int, word: str) -> None:
    got, out, err = _run(
        ["verify", str(built["multi.o"]), "--expect", "8.6,9.0+PTX", "--device", device]
    )
    assert got == code
    assert word in out + err


def test_verify_directory_aggregates(built: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "out"
    (root / "lib").mkdir(parents=True)
    shutil.copy(built["libscale.so"], root / "lib")
    shutil.copy(built["rdc.o"], root / "lib")
    code, _, _ = _run(["verify", str(root), "--expect", "8.6,8.9,12.0a"])
    assert code == 0


def test_verify_partial_binary_fails(built: dict[str, Path], tmp_path: Path) -> None:
    data = built["multi.o"].read_bytes()
    cut = tmp_path / "cut.o"
    cut.write_bytes(data[: _container_offset(data) + 200])
    code, _, err = _run(["verify", str(cut), "--expect", "8.6"])
    assert code == 9 and "partial" in err


def test_binary_limits(built: dict[str, Path]) -> None:
    candidates = [Capability.parse(c) for c in ("7.5", "8.6", "8.9", "9.0", "10.0", "12.0")]
    limits = binary_limits(built["multi.o"], candidates)
    # SASS 8.6 covers 8.6/8.9, SASS 9.0 covers 9.0, PTX 9.0 JITs to anything newer.
    assert [str(c) for c in limits.supported] == ["8.6", "8.9", "9.0", "10.0", "12.0"]
    levels = {row["capability"]: row["runs"] for row in limits.to_json()["levels"]}
    assert levels["7.5"] == "cannot-run" and levels["8.9"] == "compatible"
    # Suffixed candidates stand for their device: 9.0a is the 9.0 device, listed once.
    with_suffix = binary_limits(built["multi.o"], [Capability.parse("9.0a"), *candidates])
    assert [str(c) for c in with_suffix.supported] == ["8.6", "8.9", "9.0", "10.0", "12.0"]
    with pytest.raises(BinaryFormatError):
        binary_limits(built["lto.o"], candidates)


def test_verify_variant_from_the_plan(
    built: dict[str, Path], repo_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo_root)  # the embedded capplan.toml
    from capplan.cli.planning import variant_targets  # the embedded plan has torch-sm86

    targets = variant_targets("torch-sm86", None)
    assert [str(t) for t in targets] == ["8.6"]
    # size.o holds SASS sm_80 only: the sm86 variant's check must fail and name both sides.
    code, _, err = _run(["verify", str(built["size.o"]), "--variant", "torch-sm86"])
    assert code == ExitCode.VERIFY_FAILED
    assert "missing SASS sm_86" in err and "extra SASS sm_80" in err


def test_verify_device_by_gpu_name(built: dict[str, Path]) -> None:
    # The GPU table ships with capplan: a name that does not resolve is a failure, not a skip
    # (an ImportError here once skipped this test in silence when the helper moved).
    from capplan.adapters.kb import load_kb
    from capplan.core.families.cuda.gpus import resolve_device

    h100, _model = resolve_device("H100", nvidia(load_kb()).gpus)
    assert str(h100) == "9.0"
    code, out, _ = _run(
        ["verify", str(built["multi.o"]), "--expect", "8.6,9.0+PTX", "--device", "H100"]
    )
    assert code == 0 and "native" in out


def test_a_folder_read_by_a_pool_of_workers_reports_as_one_process(
    built: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The folder of real nvcc outputs is small, so the pool's size threshold is lowered to make
    # two forked workers read it; the reports (order included) must not change.
    import capplan.adapters.pool as pool

    folder = next(iter(built.values())).parent
    serial = [r.to_json() for r in inspect_paths([folder], jobs=1)]
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pool, "default_jobs", lambda: 2)
    parallel = [r.to_json() for r in inspect_paths([folder])]
    assert parallel == serial and len(serial) >= 5


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
@pytest.mark.parametrize("spill", [False, True], ids=["in memory", "temporary file"])
def test_a_wheel_reports_its_members_as_the_files_themselves(
    built: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    compression: int,
    spill: bool,
) -> None:
    # Stored members are inspected in place in a mapping of the wheel; deflated ones in memory
    # or, past the size limit (lowered here), through a temporary file: the same reports.
    import capplan.adapters.fatbin as adapter

    if spill:
        monkeypatch.setattr(adapter, "_IN_MEMORY_MEMBER", 0)
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    names = sorted(built)
    with zipfile.ZipFile(wheel, "w", compression=compression) as archive:
        archive.writestr("demo/README.txt", "not a binary\n")
        for name in names:
            archive.write(built[name], f"demo/lib/{built[name].name}")
    from_wheel = {r.path.split("!", 1)[1]: _names(r) for r in inspect_paths([wheel])}
    direct = {
        "demo/lib/" + r.path[len(str(built[n].parent)) + 1 :]: _names(r)
        for n in names
        for r in inspect_paths([built[n]])
    }
    assert from_wheel == {k: v for k, v in direct.items() if any(v.values())}
    assert len(from_wheel) >= 5
