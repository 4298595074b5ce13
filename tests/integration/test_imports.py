"""Commands that do not plan import only what they use (issue 20, item 4).

Each command runs in a fresh interpreter; at exit the wrapper prints the names in
``sys.modules``. This checks *what* is imported, never how long it takes (bench/bench_startup.py
measures that): the planner, its config models, networkx and requests stay out of the commands
that answer from the knowledge base or a binary, and ``--help``/``--version`` load no command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The wrapper: run the CLI as `capplan ARGS`, then print the imported module names on fd 3's
# stand-in (stderr's last line), whatever the exit status.
_WRAPPER = """
import atexit, json, sys
atexit.register(lambda: sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n"))
sys.argv = ["capplan", *sys.argv[1:]]
from capplan.cli.main import main
main()
"""

PLANNER = (
    "networkx",
    "requests",
    "capplan.adapters.config",
    "capplan.core.planning.config",
    "capplan.core.planning.planner",
    "capplan.core.planning.graph",
    "capplan.core.families.cuda.jobs",
    "capplan.core.planning.matrix",
    "capplan.core.planning.plan",
    "capplan.core.families.cuda.select",
    "rich.progress",
)
PYDANTIC = ("pydantic", "capplan.core.model.kb", "capplan.adapters.kb")


def imported(args: list[str], tmp_path: Path) -> tuple[int, set[str], str]:
    import capplan

    src = Path(capplan.__file__).resolve().parents[1]  # the capplan under test
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "100"}
    env.pop("CAPPLAN_CONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *args],
        cwd=tmp_path,  # no capplan.toml here or above /tmp: nothing invites a plan
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = next(
        (ln for ln in reversed(proc.stderr.splitlines()) if ln.startswith("MODULES ")), None
    )
    assert line is not None, proc.stderr
    return proc.returncode, set(json.loads(line[len("MODULES ") :])), proc.stderr


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules)


@pytest.mark.parametrize(
    "args",
    [
        ["caps"],
        ["caps", "--json"],
        ["gpus", "RTX 3090"],
        ["gpus", "--json"],
        ["explain", "8.6", "--device", "RTX 4090"],
        ["explain", "gfx1100", "--device", "RX 7900 XTX"],
        ["inspect", "/bin/true"],
        ["verify", "/bin/true", "--expect", "8.6"],
    ],
    ids=lambda a: " ".join(a),
)
def test_non_planning_commands_do_not_load_the_planner(args: list[str], tmp_path: Path) -> None:
    code, modules, err = imported(args, tmp_path)
    assert code != 1, err  # 1 is an internal error; verify of /bin/true fails with its own code
    assert _loaded(modules, PLANNER) == [], f"capplan {' '.join(args)}"


def test_detect_without_a_gpu_answers_before_loading_the_planner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No NVIDIA GPU (no NVML, no nvidia-smi on PATH), no AMD node, no fleet with CPU levels.
    monkeypatch.setenv("CAPPLAN_NVML", "0")
    monkeypatch.setenv("CAPPLAN_SYSFS_ROOT", str(tmp_path / "no-sysfs"))
    monkeypatch.setenv("PATH", str(tmp_path))
    code, modules, err = imported(["detect"], tmp_path)
    assert code != 1, err
    if "no NVIDIA GPU found" not in err:
        pytest.skip("/proc/driver/nvidia lists a GPU here: detect plans for it")
    # It reads the config file, unvalidated, to see whether its fleet lists CPU levels.
    assert _loaded(modules, PLANNER) == ["capplan.adapters.config"]
    # An answer that is an error draws nothing: rich stays unloaded.
    assert sorted(m for m in modules if m.split(".")[0] == "rich") == []


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["inspect", "/bin/true"]])
def test_commands_without_the_kb_load_no_models(args: list[str], tmp_path: Path) -> None:
    code, modules, err = imported(args, tmp_path)
    assert code != 1, err
    assert _loaded(modules, PLANNER + PYDANTIC) == []
    if args[0].startswith("--"):  # the summaries are data: --help imports no command module
        assert sorted(m for m in modules if m.startswith("capplan.cli.")) == [
            "capplan.cli.errors",
            "capplan.cli.main",
        ]


@pytest.mark.parametrize(
    "args",
    [
        ["caps"],
        ["gpus", "RTX 3090"],
        ["explain", "8.6", "--device", "RTX 4090"],
        ["explain", "gfx1100", "--device", "RX 7900 XTX"],
        ["detect"],
    ],
    ids=lambda a: " ".join(a),
)
def test_lookups_read_the_packaged_kb_without_pydantic(args: list[str], tmp_path: Path) -> None:
    # The packaged knowledge base is built without validation (the tests validate it), so the
    # commands that only look things up never load pydantic (~190 ms of imports and classes).
    env = {"CAPPLAN_NVML": "0", "CAPPLAN_SYSFS_ROOT": str(tmp_path / "no-sysfs")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        code, modules, err = imported(args, tmp_path)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert code != 1, err
    assert sorted(m for m in modules if m.split(".")[0] in ("pydantic", "pydantic_core")) == []


def test_planning_commands_do_load_it(tmp_path: Path) -> None:
    """The check above can fail: `capplan plan` is seen loading the planner and networkx."""
    code, modules, err = imported(["plan", "--json"], tmp_path)
    assert code == 0, err
    assert {"networkx", "capplan.core.planning.planner", "pydantic"} <= modules


@pytest.mark.parametrize(
    "args", [["caps"], ["caps", "--json"], ["verify", "/bin/true", "--expect", "8.6"]]
)
def test_capability_lookups_load_no_gpu_or_amd_data(args: list[str], tmp_path: Path) -> None:
    # caps and verify --expect answer from capabilities.json and cuda.json: the GPU tables and
    # the AMD side (its models and the code that reads its files) stay unloaded.
    code, modules, err = imported(args, tmp_path)
    assert code != 1, err
    # adapters/kb.py reads the AMD files too; the ROCm model it builds them with loads lazily.
    amd = ("capplan.core.families.rocm.kb", "capplan.core.families.cuda.gpus")
    assert _loaded(modules, amd) == []
    # The check can fail: `explain` by a GPU name loads both.
    if args == ["caps"]:
        _, explain_modules, _ = imported(["explain", "8.6", "--device", "RTX 4090"], tmp_path)
        assert _loaded(explain_modules, amd) == sorted(amd)


@pytest.mark.parametrize(
    ("query", "amd"), [("RTX 3090", False), ("--json", False), ("MI300X", True)]
)
def test_gpus_loads_the_amd_side_only_for_an_amd_query(
    query: str, amd: bool, tmp_path: Path
) -> None:
    # Issue 42: an NVIDIA answer reads no AMD file and builds no ROCm model (about 5 ms of
    # the start), and the KB reader finds value types without naming ROCm's gfx target; a name
    # no NVIDIA model matches is looked up among the AMD models.
    code, modules, err = imported(["gpus", query], tmp_path)
    assert code == 0, err
    rocm = ["capplan.core.families.rocm.kb", "capplan.core.families.rocm.target"]
    assert _loaded(modules, tuple(rocm)) == (rocm if amd else [])
    # Its table is drawn without rich where the output is no terminal (cli/plaintable.py).
    assert sorted(m for m in modules if m.split(".")[0] == "rich") == []


def test_inspect_draws_its_table_without_rich(tmp_path: Path, nvcc_bin: Path) -> None:
    # Issue 42: output that is no terminal gets inspect's table from cli/plaintable.py (rich's
    # bytes, tests/unit/test_plaintable.py), so rich's ~25 ms of imports stay out.
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float *x) { x[threadIdx.x] *= 2; }\n")
    library = tmp_path / "k.o"
    subprocess.run(
        [str(nvcc_bin), "-c", str(source), "-o", str(library), "-arch=sm_86"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    code, modules, err = imported(["inspect", str(library)], tmp_path)
    assert code == 0, err
    assert sorted(m for m in modules if m.split(".")[0] == "rich") == []
    # The check can fail: --entries' second table is drawn by rich.
    code, modules, err = imported(["inspect", str(library), "--entries"], tmp_path)
    assert code == 0, err
    assert "rich.table" in modules
