"""Malformed input never ends in exit 1 or a traceback (issue 10, item 20).

One run drives the CLI in-process (click's CliRunner) through at least 2,000 generated inputs:
capabilities and build targets, GPU names, CUDA versions, TOML documents (structured and raw,
deeply nested, not UTF-8), ``CAPPLAN_*`` environment variables, knowledge-base folders, jobs
files, torch sources, binaries and nvidia-smi output. Every one must end with exit 0 or a
documented code, and every failure with the one-line ``capplan: error:`` form.

The profile is derandomized (the same inputs every run, no example database), so the test is
reproducible and its runtime steady; the outcome counts are printed (``pytest -s``) and stated
in docs/testing.md.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from capplan.cli.main import cli
from capplan.errors import ExitCode

MIN_INPUTS = 2_000
EXAMPLES = 2_200
DOCUMENTED = {int(code) for code in ExitCode} - {int(ExitCode.FAILURE)}
REPO = Path(__file__).resolve().parents[2]

# -- strategies -----------------------------------------------------------------------------
_CAP_WORDS = ["8.6", "sm_86", "sm86", "86", "compute_86", "9.0a", "sm_90a", "10.0f", "120",
              "8.7", "99.9", "sm_86a", "compute_999", "1.0", "0.0", "8.6+PTX", "86+ptx", "+PTX",
              "sm_", "8.", ".6", "8..6", "sm_86f", "12.1a", "3.0", "11.0", "7.0", "6.1",
              "gfx942", "gfx1100", "gfx9999", "gfx90a:xnack-", "gfx942:xnack*", "gfx11-generic",
              "GFX1030", "gfx"]  # fmt: skip
_GPU_WORDS = ["A100", "RTX 3090", "NVIDIA H100 80GB HBM3", "Jetson Orin", "Jetson AGX Orin",
              "GTX 1080 Ti", "V100", "B200", "RTX 5090", "L4", "rtx", "nvidia", "Tesla", "",
              "NVIDIA GeForce", "[bold]x[/bold]", "a" * 300, "MI300X", "mi300y", "RX 7",
              "Radeon RX 7900 XTX", "Strix Halo", "gfx1151", "Radeon 680M"]  # fmt: skip
_CUDA_WORDS = ["12.9", "13.0", "12.8", "12.6", "11.8", "11.0", "99.9", "cu129", "12", "12.x",
               "cuda12.9", "12.9.1", "", "13", "0.0"]  # fmt: skip
_PACKAGES = ["torch", "cupy", "nccl", "magma", "onnxruntime", "cudnn", "torchvision", "trorch"]

text = st.text(max_size=24)
cap_text = st.one_of(st.sampled_from(_CAP_WORDS), text)
gpu_text = st.one_of(st.sampled_from(_GPU_WORDS), st.sampled_from(_CAP_WORDS), text)
cuda_text = st.one_of(st.sampled_from(_CUDA_WORDS), text)
targets_text = st.lists(cap_text, min_size=0, max_size=4).map(",".join)
scalar = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
anything = st.recursive(
    scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, anything)


config_doc = st.fixed_dictionaries(
    {},
    optional={
        "fleet": maybe(
            st.fixed_dictionaries(
                {"gpus": maybe(st.lists(gpu_text, max_size=4))},
                optional={"count": maybe(st.dictionaries(gpu_text, scalar, max_size=3))},
            )
        ),
        "packages": maybe(
            st.dictionaries(
                st.one_of(st.sampled_from(_PACKAGES), text),
                maybe(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "attr": maybe(st.sampled_from(["python3Packages.torch", "a b", "1x"])),
                            "cuda": maybe(cuda_text),
                            "exclude": maybe(st.lists(cap_text, max_size=3)),
                            "extra": maybe(st.lists(cap_text, max_size=2)),
                            "vendors": maybe(
                                st.lists(st.sampled_from(["nvidia", "amd", "intel"]), max_size=2)
                            ),
                        },
                    )
                ),
                max_size=3,
            )
        ),
        "policy": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "system": maybe(st.sampled_from(["x86_64-linux", "aarch64-linux"])),
                    "cuda": maybe(st.lists(cuda_text, max_size=3)),
                    "fat": maybe(st.sampled_from(["none", "fleet", "x"])),
                    "ptx": maybe(st.sampled_from(["none", "newest"])),
                    "share": maybe(st.sampled_from(["exact", "compatible"])),
                    "runners": maybe(st.integers(-2, 20_000)),
                    "rocm_scope": maybe(st.sampled_from(["package", "stack", "foo"])),
                },
            )
        ),
        "extra_key": anything,
    },
)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_doc(data: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in data.items())


deep = st.integers(min_value=100, max_value=50_000).map(lambda n: "a = " + "[" * n + "]" * n)
raw_bytes = st.one_of(
    st.binary(max_size=64),
    text.map(lambda t: t.encode("utf-16")),
    st.just(b"\x7fELF\x02\x01\x01" + b"\x00" * 57),
    text.map(lambda t: t.encode("utf-8", "surrogatepass")),
)
file_bytes = st.one_of(
    raw_bytes,
    config_doc.map(lambda d: toml_doc(d).encode("utf-8", "surrogatepass")),
    deep.map(str.encode),
)
env_names = st.sampled_from(
    [
        "CAPPLAN_GPUS",
        "CAPPLAN_CUDA",
        "CAPPLAN_SYSTEM",
        "CAPPLAN_FAT",
        "CAPPLAN_PTX",
        "CAPPLAN_SHARE",
        "CAPPLAN_RUNNERS",
        "CAPPLAN_TORCH_SOURCE_URL",
        "CAPPLAN_KB_DIR",
        "CAPPLAN_CONFIG",
        "CAPPLAN_BOGUS",
    ]
)
env_value = st.one_of(
    text.filter(lambda t: "\x00" not in t),
    st.sampled_from(["4", "٤", "true", "A100,RTX 3090", "http://[::1/{version}", "/proc", "/"]),
)


@st.composite
def inputs(draw: st.DrawFn) -> tuple[list[str], dict[str, str], bytes | None]:
    """(argv, environment, the bytes of the file called FILE in argv, if any)."""
    kind = draw(st.integers(min_value=0, max_value=11))
    env: dict[str, str] = {}
    content: bytes | None = None
    if kind == 0:
        argv = ["explain", draw(targets_text), "--device", draw(gpu_text)]
    elif kind == 1:
        argv = ["gpus", draw(gpu_text)]
    elif kind == 2:
        argv = ["caps", "--cuda", draw(cuda_text)]
    elif kind in (3, 4):
        content = toml_doc(draw(config_doc)).encode("utf-8", "surrogatepass")
        argv = ["plan", "--print-identifiers", "--config", "FILE"]
        if draw(st.booleans()):
            argv += ["--gpu", draw(gpu_text)]
        if draw(st.booleans()):
            argv += ["--cuda", draw(cuda_text)]
    elif kind == 5:
        content = draw(file_bytes)
        argv = [draw(st.sampled_from(["plan", "matrix", "generate"])), "--config", "FILE"]
        if argv[0] == "generate":
            argv += ["--check", "--output", "FILE.json"]
    elif kind == 6:
        env = draw(st.dictionaries(env_names, env_value, min_size=1, max_size=3))
        argv = [draw(st.sampled_from(["plan", "detect", "explain"]))]
        argv += ["8.6", "--device", "A100"] if argv[0] == "explain" else ["--json"]
        if "CAPPLAN_KB_DIR" in env and draw(st.booleans()):
            env["CAPPLAN_KB_DIR"] = "KBDIR"
            content = draw(file_bytes)
    elif kind == 7:
        argv = ["verify", "FILE", "--expect", draw(targets_text)]
        content = draw(raw_bytes)
        if draw(st.booleans()):
            argv += ["--device", draw(gpu_text)]
    elif kind == 8:
        argv = ["matrix", "--config", str(REPO / "capplan.toml")]
        argv += draw(
            st.sampled_from(
                [["--runners"], ["--max-jobs"], ["--format"], ["--gpu"], ["--share"], ["--jobs"]]
            )
        )
        argv.append(draw(st.one_of(text, st.sampled_from(["4", "٤", "0", "-1", "json"]))))
    elif kind == 9:
        content = draw(file_bytes)
        argv = [draw(st.sampled_from(["inspect", "limits"]))]
        argv += ["FILE"] if argv[0] == "inspect" else ["read", "torch", "--file", "FILE"]
    elif kind == 10:
        content = draw(raw_bytes)
        argv = ["detect", "--json"]
        env = {"CAPPLAN_NVIDIA_SMI": "SMI"}
    else:
        argv = draw(st.lists(st.one_of(text, st.sampled_from(["plan", "--json", "-h", ""])),
                             min_size=1, max_size=4))  # fmt: skip
    return argv, env, content


# -- the test ------------------------------------------------------------------------------------
def run_one(
    tmp: Path, argv: list[str], env: dict[str, str], content: bytes | None
) -> tuple[int, str]:
    file = tmp / "input.toml"
    kb_dir = tmp / "kb"
    smi = tmp / "nvidia-smi"
    if content is not None:
        file.write_bytes(content)
        if env.get("CAPPLAN_KB_DIR") == "KBDIR":
            kb_dir.mkdir(exist_ok=True)
            (kb_dir / "capabilities.json").write_bytes(content)
            env["CAPPLAN_KB_DIR"] = str(kb_dir)
        if env.get("CAPPLAN_NVIDIA_SMI") == "SMI":
            (tmp / "smi.out").write_bytes(content)
            smi.write_text(f"#!/bin/sh\ncat '{tmp / 'smi.out'}'\n")
            smi.chmod(0o755)
            env["CAPPLAN_NVIDIA_SMI"] = str(smi)
    argv = [str(file) if a == "FILE" else str(tmp / "out.json") if a == "FILE.json" else a
            for a in argv]  # fmt: skip
    env = {**env, "PATH": os.environ.get("PATH", "")}
    if "CAPPLAN_NVIDIA_SMI" not in env:
        env["PATH"] = str(tmp / "no-bin")  # detect never runs the machine's own nvidia-smi
    result = CliRunner().invoke(cli, argv, env=env)
    err = result.stderr
    detail = f"{argv!r} env={env!r}: exit {result.exit_code}\n{err[-2000:]}"
    assert result.exit_code in DOCUMENTED, detail
    assert "Traceback" not in err and "internal error" not in err, detail
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"{detail}\n{exc!r}"
    if result.exit_code != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("capplan: error: "), detail
        # a bad value is quoted in part (about 200 characters), so the line stays readable
        assert len(lines[-1]) <= 1_200, detail
    return result.exit_code, argv[0] if argv else ""


def test_malformed_inputs_never_exit_1(tmp_path: Path) -> None:
    outcomes: Counter[int] = Counter()
    numbers = itertools.count()

    # FUZZ_SEED=N explores other inputs (a local hunt); the default run is always the same.
    hunt = os.environ.get("FUZZ_SEED", "")

    @settings(
        max_examples=EXAMPLES,
        derandomize=not hunt,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(inputs())
    def check(case: tuple[list[str], dict[str, str], bytes | None]) -> None:
        argv, env, content = case
        folder = tmp_path / f"case{next(numbers)}"
        folder.mkdir()
        code, _ = run_one(folder, list(argv), dict(env), content)
        outcomes[code] += 1

    if hunt.isdigit():
        check = seed(int(hunt))(check)
    old = Path.cwd()
    os.chdir(tmp_path)  # outside the repository: the embedded default plan applies
    try:
        check()
    finally:
        os.chdir(old)
    total = sum(outcomes.values())
    print(f"\nfuzz: {total} inputs; outcomes by exit code: {dict(sorted(outcomes.items()))}")
    assert total >= MIN_INPUTS, outcomes
    assert len(outcomes) >= 5, outcomes  # the inputs reach many different outcomes
