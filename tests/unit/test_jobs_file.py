"""output_paths_from_jobs: nix-eval-jobs JSON lines -> {attr: [output paths]}."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capplan.adapters.binary_cache import output_paths_from_jobs
from capplan.errors import DataError

OUT = "/nix/store/cscsg19i06vaawdfxrafd62pf8jyz668-python3.12-torch-2.9.0"
LIB = "/nix/store/c523hyxg5mziagg6bpr2xd1ajyvzlxg1-python3.12-torch-2.9.0-lib"


def _job(attr: str, outputs: object, **extra: object) -> str:
    # The fields nix-eval-jobs prints (NIXPKGS.md section 8).
    job = {
        "attr": attr,
        "attrPath": attr.split("."),
        "name": "torch-2.9.0",
        "system": "x86_64-linux",
        "drvPath": "/nix/store/gnlw7i8yxsf7grqlh7l3msw1jkqijm11-torch-2.9.0.drv",
        "outputs": outputs,
        **extra,
    }
    return json.dumps(job)


def _write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_reads_outputs(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        _job("torch-sm86", {"out": OUT, "lib": LIB}, cacheStatus="notBuilt"),
        "",
        _job("torch-sm90", {"out": OUT.replace("torch", "torcx")}),
    )
    assert output_paths_from_jobs(path) == {
        "torch-sm86": [LIB, OUT],  # by output name
        "torch-sm90": [OUT.replace("torch", "torcx")],
    }


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], "jobs.jsonl:1: not JSON"),
        ([_job("a", {"out": OUT}), "[1, 2]"], "jobs.jsonl:2: not a JSON object"),
        ([json.dumps({"outputs": {"out": OUT}})], ":1: missing or empty 'attr'"),
        ([_job("a", {})], "job a has no 'outputs'"),
        ([_job("a", {"out": "/usr/lib/x"})], "not a store path"),
        ([_job("a", {"out": None})], "has no store path"),
        ([_job("a", {"out": OUT}), _job("a", {"out": OUT})], ":2: duplicate attr"),
        (
            [json.dumps({"attr": "broken", "error": "error: attribute 'x' missing\n at ..."})],
            "job broken failed to evaluate: error: attribute 'x' missing",
        ),
    ],
)
def test_bad_lines_name_the_line(tmp_path: Path, lines: list[str], message: str) -> None:
    with pytest.raises(DataError) as info:
        output_paths_from_jobs(_write(tmp_path, *lines))
    assert message in info.value.message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_bytes(b'{"attr": "\xff"}\n')
    with pytest.raises(DataError, match=":1: not UTF-8"):
        output_paths_from_jobs(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read jobs file"):
        output_paths_from_jobs(tmp_path / "nope.jsonl")
